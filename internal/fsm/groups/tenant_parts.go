package groups

import "github.com/stele-io/stele/internal/fsm/core"

// What the groups module keeps of a tenant (issue 18, docs/tenants.md),
// for the tenants module: the groups whose ids read as the tenant's
// (tenant~group, core/names.go), with their members and offsets.

// GroupsReadingAs returns the groups whose ids read as tenant's, sorted.
func (f *Coordinator) GroupsReadingAs(tenant string) []string {
	var out []string
	for _, name := range core.SortedKeys(f.GroupsByName) {
		if t, _ := core.SplitTenant(name); t == tenant {
			out = append(out, name)
		}
	}
	return out
}

// FirstGroupReadingAs returns the first, by name, of the groups whose ids
// read as tenant's, or "": one pass, without sorting every group.
func (f *Coordinator) FirstGroupReadingAs(tenant string) string {
	first := ""
	for name := range f.GroupsByName {
		if t, _ := core.SplitTenant(name); t == tenant && (first == "" || name < first) {
			first = name
		}
	}
	return first
}

// RemoveTenantGroups removes the tenant's groups, members and committed
// offsets included, as DeleteGroup removes an empty one; a member of a
// removed group learns it at its next request (UNKNOWN_MEMBER_ID), as
// after a group's expiry. It returns how many groups it removed.
func (f *Coordinator) RemoveTenantGroups(tenant string) int {
	names := f.GroupsReadingAs(tenant)
	for _, name := range names {
		f.dropGroup(f.GroupsByName[name])
	}
	return len(names)
}
