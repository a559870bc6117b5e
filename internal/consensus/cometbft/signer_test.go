package cometbft

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cometbft/cometbft/crypto/tmhash"
	"github.com/cometbft/cometbft/privval"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/types"
)

const testChain = "stele-signer"

// newTestPVs writes a CometBFT validator key and state (CometBFT's own
// files, unpadded) and returns their paths.
func newTestPVs(t *testing.T) (keyPath, statePath string) {
	t.Helper()
	dir := t.TempDir()
	keyPath, statePath = filepath.Join(dir, "key.json"), filepath.Join(dir, "state.json")
	privval.GenFilePV(keyPath, statePath).Save()
	return keyPath, statePath
}

func testBlockID(b byte) cmtproto.BlockID {
	h := bytes.Repeat([]byte{b}, tmhash.Size)
	return cmtproto.BlockID{Hash: h, PartSetHeader: cmtproto.PartSetHeader{Total: 1, Hash: h}}
}

func testVote(typ cmtproto.SignedMsgType, h int64, r int32, block byte, at time.Time) *cmtproto.Vote {
	v := &cmtproto.Vote{Type: typ, Height: h, Round: r, Timestamp: at, ValidatorAddress: make([]byte, 20)}
	if block != 0 {
		v.BlockID = testBlockID(block)
	}
	return v
}

func testProposal(h int64, r int32, block byte, at time.Time) *cmtproto.Proposal {
	return &cmtproto.Proposal{Type: cmtproto.ProposalType, Height: h, Round: r, PolRound: -1, BlockID: testBlockID(block), Timestamp: at}
}

// TestSignerMatchesCometBFT signs one sequence of proposals and votes with
// this signer and with CometBFT's FilePV on the same key: the same
// signatures, the same timestamps and the same sign state, which
// CometBFT's loader reads from this signer's file.
func TestSignerMatchesCometBFT(t *testing.T) {
	keyPath, statePath := newTestPVs(t)
	theirState := filepath.Join(t.TempDir(), "theirs.json")
	if err := os.WriteFile(theirState, mustRead(t, statePath), 0o600); err != nil {
		t.Fatal(err)
	}
	ours, err := loadPV(keyPath, statePath)
	if err != nil {
		t.Fatal(err)
	}
	theirs := privval.LoadFilePV(keyPath, theirState)
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	for h := int64(1); h <= 4; h++ {
		for r := int32(0); r < 2; r++ {
			at := t0.Add(time.Duration(h*10+int64(r)) * time.Second)
			p1, p2 := testProposal(h, r, byte(h), at), testProposal(h, r, byte(h), at)
			if err := ours.SignProposal(testChain, p1); err != nil {
				t.Fatal(err)
			}
			if err := theirs.SignProposal(testChain, p2); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p1.Signature, p2.Signature) {
				t.Fatalf("h%d r%d: proposal signatures differ", h, r)
			}
			for _, typ := range []cmtproto.SignedMsgType{cmtproto.PrevoteType, cmtproto.PrecommitType} {
				v1, v2 := testVote(typ, h, r, byte(h), at), testVote(typ, h, r, byte(h), at)
				if err := ours.SignVote(testChain, v1); err != nil {
					t.Fatal(err)
				}
				if err := theirs.SignVote(testChain, v2); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(v1.Signature, v2.Signature) || !bytes.Equal(v1.ExtensionSignature, v2.ExtensionSignature) {
					t.Fatalf("h%d r%d %v: vote signatures differ", h, r, typ)
				}
				// Asked again with a new time (a crash before the WAL kept
				// the vote): the old signature and the old time.
				v1b, v2b := testVote(typ, h, r, byte(h), at.Add(time.Second)), testVote(typ, h, r, byte(h), at.Add(time.Second))
				if err := ours.SignVote(testChain, v1b); err != nil {
					t.Fatal(err)
				}
				if err := theirs.SignVote(testChain, v2b); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(v1b.Signature, v1.Signature) || !v1b.Timestamp.Equal(at) || !bytes.Equal(v1b.Signature, v2b.Signature) || !v1b.Timestamp.Equal(v2b.Timestamp) {
					t.Fatalf("h%d r%d %v: a vote asked again with a new time got another answer", h, r, typ)
				}
				// The signature verifies and the file names it.
				pub, _ := ours.GetPubKey()
				if !pub.VerifySignature(types.VoteSignBytes(testChain, v1b), v1b.Signature) {
					t.Fatal("the vote's signature does not verify")
				}
				onDisk := privval.LoadFilePV(keyPath, statePath).LastSignState
				if onDisk.Height != h || onDisk.Round != r || !bytes.Equal(onDisk.Signature, v1.Signature) {
					t.Fatalf("h%d r%d %v: the file holds h%d r%d s%d", h, r, typ, onDisk.Height, onDisk.Round, onDisk.Step)
				}
			}
		}
	}
	if info, err := os.Stat(statePath); err != nil || info.Size() != signStateSize {
		t.Fatalf("state file: %v, %v; want %d bytes", info, err, signStateSize)
	}
	a, b := privval.LoadFilePV(keyPath, statePath).LastSignState, theirs.LastSignState
	if a.Height != b.Height || a.Round != b.Round || a.Step != b.Step || !bytes.Equal(a.Signature, b.Signature) || !bytes.Equal(a.SignBytes, b.SignBytes) {
		t.Fatalf("sign states differ: ours %+v, CometBFT's %+v", a, b)
	}
}

// TestSignerGuard: regressions and a second, different message for a
// signed step are refused, and nothing is signed then.
func TestSignerGuard(t *testing.T) {
	keyPath, statePath := newTestPVs(t)
	pv, err := loadPV(keyPath, statePath)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	if err := pv.SignVote(testChain, testVote(cmtproto.PrecommitType, 10, 2, 1, at)); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]*cmtproto.Vote{
		"lower height":           testVote(cmtproto.PrecommitType, 9, 5, 1, at),
		"lower round":            testVote(cmtproto.PrecommitType, 10, 1, 1, at),
		"lower step":             testVote(cmtproto.PrevoteType, 10, 2, 1, at),
		"another block":          testVote(cmtproto.PrecommitType, 10, 2, 2, at),
		"nil instead of a block": testVote(cmtproto.PrecommitType, 10, 2, 0, at),
	} {
		if err := pv.SignVote(testChain, v); err == nil || v.Signature != nil {
			t.Errorf("%s: signed (%v)", name, err)
		}
	}
	if err := pv.SignProposal(testChain, testProposal(10, 2, 1, at)); err == nil {
		t.Error("a proposal after a precommit of the same round was signed")
	}
	if err := pv.SignVote(testChain, &cmtproto.Vote{Type: cmtproto.ProposalType, Height: 11}); err == nil {
		t.Error("a vote of the proposal type was signed")
	}
	prevote := testVote(cmtproto.PrevoteType, 11, 0, 1, at)
	prevote.Extension = []byte("x")
	if err := pv.SignVote(testChain, prevote); err == nil {
		t.Error("a prevote with an extension was signed")
	}
	// Reloaded from disk, the guard holds the same.
	again, err := loadPV(keyPath, statePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.SignVote(testChain, testVote(cmtproto.PrecommitType, 10, 2, 2, at)); err == nil {
		t.Error("after a restart, another block was signed for a signed step")
	}
	if err := again.SignVote(testChain, testVote(cmtproto.PrevoteType, 10, 3, 2, at)); err != nil {
		t.Errorf("a later round: %v", err)
	}
}

// TestSignerReleasesNothingUnsaved: when the state cannot be saved, no
// signature leaves the signer and its state in memory stays as it was.
func TestSignerReleasesNothingUnsaved(t *testing.T) {
	keyPath, statePath := newTestPVs(t)
	pv, err := loadPV(keyPath, statePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(statePath); err != nil {
		t.Fatal(err)
	}
	v := testVote(cmtproto.PrevoteType, 3, 0, 1, time.Unix(1, 0))
	if err := pv.SignVote(testChain, v); err == nil || v.Signature != nil {
		t.Fatalf("signed without saving: %v", err)
	}
	if pv.state.Height != 0 {
		t.Fatalf("state in memory moved to height %d", pv.state.Height)
	}
}

// TestSignStateFileChecked: a state file that is not CometBFT's JSON, or
// holds what the guard cannot rely on, is refused with its name.
func TestSignStateFileChecked(t *testing.T) {
	for name, content := range map[string]string{
		"torn":                `{"height": "12", "rou`,
		"negative height":     `{"height": "-1", "round": 0, "step": 0}`,
		"step 4":              `{"height": "1", "round": 0, "step": 4}`,
		"bytes, no signature": `{"height": "1", "round": 0, "step": 2, "signbytes": "AB"}`,
	} {
		keyPath, statePath := newTestPVs(t)
		if err := os.WriteFile(statePath, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadPV(keyPath, statePath); err == nil || !strings.Contains(err.Error(), statePath) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
