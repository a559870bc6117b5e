//go:build !stelebyzantine

package broker

// byzantineAppHash returns hash unchanged: Byzantine behaviours exist only
// in the test-only `stelebyzantine` build (byzantine_on.go).
func byzantineAppHash(hash []byte, _ int64) []byte { return hash }
