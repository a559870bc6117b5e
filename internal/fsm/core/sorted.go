package core

import "sort"

// SortedKeys returns the keys of m in ascending order: what the state
// machine ranges over instead of the map itself.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
