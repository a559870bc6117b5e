package cometbft

// The broker's validator signer: CometBFT's file private validator (its key
// file and data/priv_validator_state.json, in CometBFT's JSON formats, so
// CometBFT's tools and older Stele binaries read them) with the sign state
// saved in place instead of through a new file and a rename.
//
// The sign state is the double-sign guard: the height, round and step
// (proposal 1, prevote 2, precommit 3) last signed, with the bytes signed
// and the signature. A request below it is refused; one for the same step
// gets the same signature again, or, if only the timestamp differs (a
// broker that crashed after signing and before its write-ahead log kept
// the vote asks again with a new time), the old signature with the old
// timestamp; anything else for that step is refused as conflicting. A
// signature leaves signVote and signProposal only once the state naming
// it is on disk, so a crash at any point never lets the restarted broker
// sign a second, different message for a step it signed.
//
// CometBFT's own FilePV saves the state with a synced new file renamed
// over the old (three times a height: proposal, prevote, precommit). On
// ext4 the new file and the rename are metadata, so each save waits for a
// journal commit, and with it for whatever else the machine writes: next
// to a tenant producing at its quota the consensus goroutine was seen
// blocked 34-48 ms in that rename (docs/benchmarks.md, "Noisy
// neighbour"). Here the file keeps a fixed length (signStateSize: the
// JSON padded with spaces, which JSON readers skip) and each save
// overwrites it at offset 0 and fdatasyncs: no metadata changes, no
// journal commit to wait for. A file of another length (CometBFT's, or
// one written by `stele cluster rotate-key`) is rewritten once, through a
// synced temporary file and a rename, when it is loaded.
//
// A crash in the middle of an overwrite can leave the file part old, part
// new, if the disk tears a 4 KiB write. Height, round and step are in the
// first 100 bytes, one sector: they are wholly old (the new signature was
// not released, so signing that step again is safe) or wholly new (the
// step is then refused or answered with the stored signature, which does
// not verify if torn: the broker skips that step). A file that no longer
// parses is refused at start, with a message naming it.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cometbft/cometbft/crypto"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	"github.com/cometbft/cometbft/libs/protoio"
	"github.com/cometbft/cometbft/privval"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/types"
)

// signStateSize is the length of a sign-state file this signer writes in
// place: one file system block. CometBFT's state JSON is about 600 bytes
// (a chain id is at most 50).
const signStateSize = 4096

// Steps of the double-sign guard, in the order a round signs them.
const (
	stepPropose   int8 = 1
	stepPrevote   int8 = 2
	stepPrecommit int8 = 3
)

// filePV is a validator key and its sign state.
type filePV struct {
	key       privval.FilePVKey
	state     privval.FilePVLastSignState
	statePath string
}

// loadPV reads a validator key file and its sign-state file, rewriting the
// state to signStateSize if it has another length.
func loadPV(keyPath, statePath string) (*filePV, error) {
	key, err := readPrivValKey(keyPath)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(statePath)
	if err != nil {
		return nil, fmt.Errorf("stele/consensus/cometbft: validator state: %w", err)
	}
	st, err := decodeSignState(data)
	if err != nil {
		return nil, fmt.Errorf("stele/consensus/cometbft: validator state %s (damaged; restore it from a backup, never recreate it: signing again from height 0 could equivocate): %w", statePath, err)
	}
	pv := &filePV{key: key, state: st, statePath: statePath}
	if len(data) != signStateSize {
		padded, err := encodeSignState(st)
		if err != nil {
			return nil, err
		}
		if err := writeFileAtomic(statePath, padded, 0o600); err != nil {
			return nil, err
		}
	}
	return pv, nil
}

// decodeSignState parses a sign-state file and checks what the guard
// relies on.
func decodeSignState(data []byte) (privval.FilePVLastSignState, error) {
	var st privval.FilePVLastSignState
	if err := cmtjson.Unmarshal(data, &st); err != nil {
		return st, err
	}
	switch {
	case st.Height < 0 || st.Round < 0:
		return st, fmt.Errorf("negative height %d or round %d", st.Height, st.Round)
	case st.Step < 0 || st.Step > stepPrecommit:
		return st, fmt.Errorf("step %d is none of 0-3", st.Step)
	case st.SignBytes != nil && st.Signature == nil:
		return st, errors.New("sign bytes without their signature")
	}
	return st, nil
}

// encodeSignState is st as CometBFT writes it, padded with spaces to
// signStateSize (or, were it ever longer, unpadded: it is then written
// whole through a new file, as CometBFT does).
func encodeSignState(st privval.FilePVLastSignState) ([]byte, error) {
	data, err := cmtjson.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("stele/consensus/cometbft: validator state: %w", err)
	}
	if len(data) >= signStateSize {
		return data, nil
	}
	padded := bytes.Repeat([]byte{' '}, signStateSize)
	copy(padded, data)
	padded[signStateSize-1] = '\n'
	return padded, nil
}

// save makes st the sign state on disk, then in memory.
func (pv *filePV) save(st privval.FilePVLastSignState) error {
	data, err := encodeSignState(st)
	if err != nil {
		return err
	}
	if len(data) != signStateSize {
		if err := writeFileAtomic(pv.statePath, data, 0o600); err != nil {
			return err
		}
	} else if err := overwriteSynced(pv.statePath, data); err != nil {
		return fmt.Errorf("stele/consensus/cometbft: saving the validator state %s: %w", pv.statePath, err)
	}
	pv.state = st
	return nil
}

// overwriteSynced writes data over the start of the existing file path,
// which is len(data) long, and waits until it is on disk.
func overwriteSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = syncData(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// sign is the double-sign guard around a signature of signBytes at
// height h, round r and step. It returns the signature, and the timestamp
// to put back into the message when an earlier signature of the same step
// is reused (sameButTime reports whether two sign bytes differ in their
// timestamp alone, and the older one's).
func (pv *filePV) sign(h int64, r int32, step int8, signBytes []byte, sameButTime func(last, next []byte) (time.Time, bool)) (sig []byte, reusedAt *time.Time, err error) {
	last := pv.state
	switch {
	case h < last.Height:
		return nil, nil, fmt.Errorf("height regression: asked to sign height %d, last signed %d", h, last.Height)
	case h == last.Height && r < last.Round:
		return nil, nil, fmt.Errorf("round regression at height %d: asked to sign round %d, last signed %d", h, r, last.Round)
	case h == last.Height && r == last.Round && step < last.Step:
		return nil, nil, fmt.Errorf("step regression at height %d round %d: asked to sign step %d, last signed %d", h, r, step, last.Step)
	case h == last.Height && r == last.Round && step == last.Step:
		// Signed before: only the same message again.
		switch {
		case last.SignBytes == nil:
			return nil, nil, fmt.Errorf("height %d round %d step %d was signed but its sign bytes are not stored", h, r, step)
		case bytes.Equal(signBytes, last.SignBytes):
			return last.Signature, nil, nil
		}
		if t, ok := sameButTime(last.SignBytes, signBytes); ok {
			return last.Signature, &t, nil
		}
		return nil, nil, fmt.Errorf("conflicting data: height %d round %d step %d was signed for another message", h, r, step)
	}
	sig, err = pv.key.PrivKey.Sign(signBytes)
	if err != nil {
		return nil, nil, err
	}
	next := privval.FilePVLastSignState{Height: h, Round: r, Step: step, Signature: sig, SignBytes: signBytes}
	if err := pv.save(next); err != nil {
		return nil, nil, err
	}
	return sig, nil, nil
}

// GetPubKey is the validator's public key.
func (pv *filePV) GetPubKey() (crypto.PubKey, error) { return pv.key.PubKey, nil }

// SignVote signs a prevote or precommit, and the vote extension of a
// precommit for a block (re-signed every time: an extension may differ
// between runs and is not guarded).
func (pv *filePV) SignVote(chainID string, vote *cmtproto.Vote) error {
	var step int8
	switch vote.Type {
	case cmtproto.PrevoteType:
		step = stepPrevote
	case cmtproto.PrecommitType:
		step = stepPrecommit
	default:
		return fmt.Errorf("stele/consensus/cometbft: asked to sign a vote of type %v", vote.Type)
	}
	var extSig []byte
	if vote.Type == cmtproto.PrecommitType && !types.ProtoBlockIDIsNil(&vote.BlockID) {
		var err error
		if extSig, err = pv.key.PrivKey.Sign(types.VoteExtensionSignBytes(chainID, vote)); err != nil {
			return err
		}
	} else if len(vote.Extension) > 0 {
		return errors.New("stele/consensus/cometbft: a vote extension outside a precommit for a block")
	}
	sig, at, err := pv.sign(vote.Height, vote.Round, step, types.VoteSignBytes(chainID, vote), votesDifferInTime)
	if err != nil {
		return err
	}
	if at != nil {
		vote.Timestamp = *at
	}
	vote.Signature, vote.ExtensionSignature = sig, extSig
	return nil
}

// SignProposal signs a block proposal.
func (pv *filePV) SignProposal(chainID string, p *cmtproto.Proposal) error {
	sig, at, err := pv.sign(p.Height, p.Round, stepPropose, types.ProposalSignBytes(chainID, p), proposalsDifferInTime)
	if err != nil {
		return err
	}
	if at != nil {
		p.Timestamp = *at
	}
	p.Signature = sig
	return nil
}

// votesDifferInTime reports whether two canonical votes' sign bytes are
// equal but for their timestamps, and the first one's.
func votesDifferInTime(last, next []byte) (time.Time, bool) {
	var a, b cmtproto.CanonicalVote
	if protoio.UnmarshalDelimited(last, &a) != nil || protoio.UnmarshalDelimited(next, &b) != nil {
		return time.Time{}, false
	}
	at := a.Timestamp
	a.Timestamp, b.Timestamp = time.Time{}, time.Time{}
	return at, equalMarshalled(&a, &b)
}

// proposalsDifferInTime is votesDifferInTime for proposals.
func proposalsDifferInTime(last, next []byte) (time.Time, bool) {
	var a, b cmtproto.CanonicalProposal
	if protoio.UnmarshalDelimited(last, &a) != nil || protoio.UnmarshalDelimited(next, &b) != nil {
		return time.Time{}, false
	}
	at := a.Timestamp
	a.Timestamp, b.Timestamp = time.Time{}, time.Time{}
	return at, equalMarshalled(&a, &b)
}

// equalMarshalled compares two messages by their (deterministic) encodings.
func equalMarshalled(a, b interface{ Marshal() ([]byte, error) }) bool {
	x, err1 := a.Marshal()
	y, err2 := b.Marshal()
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

var _ types.PrivValidator = (*filePV)(nil)
