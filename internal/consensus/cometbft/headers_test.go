package cometbft

import (
	"bytes"
	"testing"

	"github.com/cometbft/cometbft/crypto/ed25519"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/types"

	"github.com/stele-io/stele/internal/consensus"
)

// TestArchivedValidatorSets: each validator set the application commits
// is archived once under its hash, in the form a light client decodes,
// and hashes as CometBFT's set of the same keys and powers does; a set
// never seen is not found.
func TestArchivedValidatorSets(t *testing.T) {
	h, err := openHeaderArchive(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	var vals []consensus.ValidatorUpdate
	var tv []*types.Validator
	for i := range 4 {
		k := ed25519.GenPrivKeyFromSecret([]byte{byte(i)}).PubKey()
		vals = append(vals, consensus.ValidatorUpdate{PubKey: k.Bytes(), Power: 10})
		tv = append(tv, types.NewValidator(k, 10))
	}
	four, three := types.NewValidatorSet(tv), types.NewValidatorSet(tv[1:])
	for _, set := range [][]consensus.ValidatorUpdate{vals, vals, vals[1:], vals[1:]} {
		if err := h.archiveSet(set); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []*types.ValidatorSet{four, three} {
		b, err := h.getSet(want.Hash())
		if err != nil || b == nil {
			t.Fatalf("set %X not archived: %v", want.Hash(), err)
		}
		var pb cmtproto.ValidatorSet
		if err := pb.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		got, err := types.ValidatorSetFromProto(&pb)
		if err != nil || !bytes.Equal(got.Hash(), want.Hash()) {
			t.Fatalf("archived set decodes to %v (%v), want hash %X", got, err, want.Hash())
		}
	}
	if b, err := h.getSet(types.NewValidatorSet(tv[2:]).Hash()); err != nil || b != nil {
		t.Fatalf("a set never archived: %d bytes, %v", len(b), err)
	}
}
