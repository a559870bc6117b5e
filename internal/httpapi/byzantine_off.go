//go:build !stelebyzantine

package httpapi

import "github.com/stele-io/stele/pkg/proof"

// byzantineTable does nothing outside the stelebyzantine build
// (byzantine_on.go).
func byzantineTable(*proof.TableProof) {}
