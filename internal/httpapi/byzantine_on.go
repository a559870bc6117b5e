//go:build stelebyzantine

package httpapi

import (
	"os"
	"slices"
	"strings"

	"github.com/stele-io/stele/pkg/proof"
)

// byzantineTable is the table lie of the test-only `stelebyzantine` build:
// with STELE_BYZANTINE=alter-tables, GET /v1/tables/{topic}/{key}/proof
// serves another value than the one it proves (a value's byte flipped, or
// a value for a key without one). Production builds compile
// byzantine_off.go instead.
func byzantineTable(tp *proof.TableProof) {
	if !slices.Contains(strings.Split(os.Getenv("STELE_BYZANTINE"), ","), "alter-tables") {
		return
	}
	if len(tp.Value) == 0 {
		tp.Value = []byte("forged")
		return
	}
	tp.Value = slices.Clone(tp.Value)
	tp.Value[0] ^= 0x01
}
