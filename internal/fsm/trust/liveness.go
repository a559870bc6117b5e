package trust

import (
	"bytes"
	"encoding/hex"
	"sort"

	"github.com/stele-io/stele/internal/fsm/core"
)

// Signer is what the chain says about one broker's liveness: the last
// height whose block its validator signed and that block's successor's
// time, or, for a replica, the height its last statement that it is
// caught up named and the time of the block that ordered it
// (RecordAlive).
type Signer struct {
	Address    []byte
	LastHeight int64
	LastTimeMs int64
}

// recordSigners notes that the block's signers signed the previous height.
// Liveness is derived from the chain alone, so every broker computes the
// same; it is not part of the app hash (the signatures themselves are in
// the block headers).
func (f *Trust) recordSigners(signers [][]byte) {
	if len(signers) == 0 {
		return
	}
	if f.signers == nil {
		f.signers = map[string]*Signer{}
	}
	for _, a := range signers {
		k := hex.EncodeToString(a)
		s := f.signers[k]
		if s == nil {
			s = &Signer{Address: append([]byte(nil), a...)}
			f.signers[k] = s
		}
		s.LastHeight, s.LastTimeMs = f.Height-1, f.BlockTime
	}
	f.signersChanged = true
}

// RecordAlive notes a replica's statement, ordered in this block, that it
// applied the chain up to height (the cluster module's alive.go): it
// counts as signing at this block's time, as a commit signature does.
func (f *Trust) RecordAlive(addr [20]byte, height int64) {
	if f.signers == nil {
		f.signers = map[string]*Signer{}
	}
	k := hex.EncodeToString(addr[:])
	s := f.signers[k]
	if s == nil {
		s = &Signer{Address: append([]byte(nil), addr[:]...)}
		f.signers[k] = s
	}
	s.LastHeight, s.LastTimeMs = height, f.BlockTime
	f.signersChanged = true
}

// sortedSigners returns a copy of the signers ordered by address.
func (f *Trust) sortedSigners() []Signer {
	out := make([]Signer, 0, len(f.signers))
	for _, s := range f.signers {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Address, out[j].Address) < 0 })
	return out
}

// Liveness returns, as of the last Commit, every validator seen signing and
// the block time of that commit (ms). A validator is alive for the front-end
// when it signed within a window of that time.
func (f *Trust) Liveness() (signers []Signer, blockTimeMs int64) {
	f.committedSigners.Lock()
	defer f.committedSigners.Unlock()
	return f.committedSigners.signers, f.committedSigners.blockTime
}

var keySigners = []byte("m/signers")

func encodeSigners(ss []Signer) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.Count(len(ss))
	for _, s := range ss {
		w.Bytes(s.Address)
		w.I64(s.LastHeight)
		w.I64(s.LastTimeMs)
	}
	return w.B
}

func DecodeSigners(b []byte) (map[string]*Signer, error) {
	r := &core.Reader{B: b}
	if v := r.U8(); r.E == nil && v != core.PersistVersion {
		r.Fail("signers format %d", v)
	}
	out := map[string]*Signer{}
	for i, n := 0, r.Count(17); i < n; i++ {
		s := &Signer{Address: append([]byte(nil), r.Bytes()...), LastHeight: r.I64(), LastTimeMs: r.I64()}
		out[hex.EncodeToString(s.Address)] = s
	}
	return out, r.Done()
}
