package core

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/pokt-network/smt"

	"github.com/stele-io/stele/pkg/proof"
)

// hashParts are what the committed app hash is made of: the height whose
// block made it (its header is the next height's) and its three parts.
type hashParts struct {
	height                        int64
	digest, stateRoot, leavesRoot []byte
}

// ErrStateMoved is returned by ProveState when the state kept changing
// under three attempts in a row; asking again is safe.
var ErrStateMoved = errors.New("stele/fsm: the state changed while it was being proven")

// ProveState returns the proof of keys (values, or their absence) in the
// committed state, without the signed header (the caller adds the header of
// Height+1). Safe for concurrent use with the applier: it reads a trie of
// its own at the committed root from the store, and checks every value it
// read against the proof, trying again when a commit moved the state on in
// between.
func (f *Machine) ProveState(keys ...[]byte) (*proof.StateProof, error) {
	if len(keys) == 0 || len(keys) > proof.MaxStateProofKeys {
		return nil, fmt.Errorf("stele/fsm: %d keys to prove, want 1 to %d", len(keys), proof.MaxStateProofKeys)
	}
	for _, k := range keys {
		if !Authenticated(k) {
			return nil, fmt.Errorf("%w: key %q is not in the authenticated state", ErrNoProof, k)
		}
	}
	var last error
	for range 3 {
		p, err := f.proveStateOnce(keys)
		if err == nil || !errors.Is(err, ErrStateMoved) {
			return p, err
		}
		last = err
	}
	return nil, last
}

func (f *Machine) proveStateOnce(keys [][]byte) (*proof.StateProof, error) {
	f.committed.Lock()
	hp, store := f.committed.hash, f.Store
	f.committed.Unlock()
	if hp.height == 0 {
		return nil, fmt.Errorf("%w: no block has changed the state yet", ErrNoProof)
	}
	trie := smt.ImportSparseMerkleTrie(&trieNodes{store: store}, sha256.New(), bytes.Clone(hp.stateRoot))
	spec := trie.Spec()
	out := &proof.StateProof{Height: hp.height, Digest: hp.digest, StateRoot: hp.stateRoot, LeavesRoot: hp.leavesRoot}
	for _, k := range keys {
		sp, err := proveKey(trie, k)
		if err != nil { // a node the next commit orphaned, most likely
			return nil, fmt.Errorf("%w: %w", ErrStateMoved, err)
		}
		v, ok, err := store.Get(k)
		if err != nil {
			return nil, err
		}
		var leaf []byte // nil: absent
		switch {
		case !ok:
			v = nil
		case v == nil:
			v = []byte{}
		}
		if v != nil {
			leaf = proof.TrieValue(v)
		}
		if valid, _ := smt.VerifyProof(sp, hp.stateRoot, k, leaf, spec); !valid {
			return nil, fmt.Errorf("%w: key %q", ErrStateMoved, k)
		}
		out.Entries = append(out.Entries, proof.StateEntry{Key: bytes.Clone(k), Value: v, SideNodes: sp.SideNodes, NonMembershipLeafData: sp.NonMembershipLeafData})
	}
	return out, nil
}

func proveKey(t *smt.SMT, key []byte) (p *smt.SparseMerkleProof, err error) {
	defer recoverTrie(&err)
	return t.Prove(key)
}
