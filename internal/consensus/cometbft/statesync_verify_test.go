package cometbft

import (
	"crypto/sha256"
	"log/slog"
	"strings"
	"testing"
	"time"

	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	cmtversion "github.com/cometbft/cometbft/proto/tendermint/version"
	sm "github.com/cometbft/cometbft/state"
	"github.com/cometbft/cometbft/types"
	"github.com/cometbft/cometbft/version"
)

// lightBlock is a header at height h naming set, committed by signers
// (members of set).
func lightBlock(t *testing.T, chainID string, h int64, set *types.ValidatorSet, signers []types.PrivValidator) *types.LightBlock {
	t.Helper()
	hash := func(s string) []byte { d := sha256.Sum256([]byte(s)); return d[:] }
	hdr := types.Header{Version: cmtversion.Consensus{Block: version.BlockProtocol}, ChainID: chainID, Height: h, Time: time.Unix(1e9, 0).UTC(),
		LastBlockID:    types.BlockID{Hash: hash("last"), PartSetHeader: types.PartSetHeader{Total: 1, Hash: hash("last parts")}},
		ValidatorsHash: set.Hash(), NextValidatorsHash: set.Hash(), ConsensusHash: hash("params"), AppHash: hash("app"),
		ProposerAddress: set.Validators[0].Address}
	id := types.BlockID{Hash: hdr.Hash(), PartSetHeader: types.PartSetHeader{Total: 1, Hash: hash("parts")}}
	votes := types.NewVoteSet(chainID, h, 0, cmtproto.PrecommitType, set)
	for _, pv := range signers {
		pub, err := pv.GetPubKey()
		if err != nil {
			t.Fatal(err)
		}
		idx, _ := set.GetByAddress(pub.Address())
		v := &types.Vote{Type: cmtproto.PrecommitType, Height: h, BlockID: id, Timestamp: hdr.Time, ValidatorAddress: pub.Address(), ValidatorIndex: idx}
		if _, err := types.SignAndCheckVote(v, pv, chainID, false); err != nil {
			t.Fatal(err)
		}
		if _, err := votes.AddVote(v); err != nil {
			t.Fatal(err)
		}
	}
	commit := votes.MakeExtendedCommit(types.ABCIParams{}).ToCommit()
	return &types.LightBlock{SignedHeader: &types.SignedHeader{Header: &hdr, Commit: commit}, ValidatorSet: set}
}

// TestStateSyncVerifiesAcrossSetChanges: state sync accepts a header of a
// validator set that is no longer the genesis one when more than two
// thirds of that set and genesis validators with more than a third of the
// genesis power signed it (CometBFT's light-client skipping rule from the
// genesis), and refuses one the genesis validators do not vouch for, or
// whose set does not hash to the header's.
func TestStateSyncVerifiesAcrossSetChanges(t *testing.T) {
	const chain = "skip-test"
	var pvs []types.PrivValidator
	var vals []*types.Validator
	for range 8 {
		pv := types.NewMockPV()
		pub, _ := pv.GetPubKey()
		pvs = append(pvs, pv)
		vals = append(vals, types.NewValidator(pub, 10))
	}
	set := func(idx ...int) (*types.ValidatorSet, []types.PrivValidator) {
		var vs []*types.Validator
		var ps []types.PrivValidator
		for _, i := range idx {
			vs = append(vs, vals[i].Copy())
			ps = append(ps, pvs[i])
		}
		return types.NewValidatorSet(vs), ps
	}
	genesis, genesisPVs := set(0, 1, 2, 3)
	st := sm.State{ChainID: chain, Validators: genesis}
	p := &genesisStateProvider{genesis: st, logger: slog.New(slog.DiscardHandler)}

	if err := p.verify(lightBlock(t, chain, 5, genesis, genesisPVs), 5); err != nil {
		t.Fatalf("a genesis header: %v", err)
	}
	grown, grownPVs := set(0, 1, 2, 3, 4, 5, 6) // 4 -> 7
	if err := p.verify(lightBlock(t, chain, 9, grown, grownPVs), 9); err != nil {
		t.Fatalf("a header of a set grown to 7: %v", err)
	}
	// Two genesis validators (20 of 40) among the signers of a set of 5.
	replaced, replacedPVs := set(0, 1, 4, 5, 6)
	if err := p.verify(lightBlock(t, chain, 9, replaced, replacedPVs), 9); err != nil {
		t.Fatalf("a header signed by half the genesis power: %v", err)
	}
	// One genesis validator (10 of 40) left: not enough to skip to.
	gone, gonePVs := set(0, 4, 5, 6)
	if err := p.verify(lightBlock(t, chain, 9, gone, gonePVs), 9); err == nil || !strings.Contains(err.Error(), "genesis validators signing") {
		t.Fatalf("a header of a set the genesis validators do not vouch for: %v", err)
	}
	// Signed by the set it names, but not by enough of it.
	few := lightBlock(t, chain, 9, grown, grownPVs)
	for i := 4; i < 7; i++ {
		few.Commit.Signatures[i] = types.NewCommitSigAbsent()
	}
	if err := p.verify(few, 9); err == nil {
		t.Fatal("a header signed by 4 of 7 verified")
	}
	// A set that does not hash to the header's.
	lb := lightBlock(t, chain, 9, grown, grownPVs)
	lb.ValidatorSet, _ = set(0, 1, 2, 3, 7)
	if err := p.verify(lb, 9); err == nil {
		t.Fatal("a header with another set verified")
	}
	if err := p.verify(lightBlock(t, "other-chain", 9, grown, grownPVs), 9); err == nil {
		t.Fatal("another chain's header verified")
	}
}
