package cometbft

// Key rotation (docs/cluster.md, "Rotating a broker's key"): `stele cluster
// rotate-key` writes the broker's next validator key beside its key
// (NextKeyFile, NextStateFile) and submits the membership change that
// makes the chain name it (internal/fsm/cluster's directory.go). The
// change takes effect in the state machine at once, and in CometBFT's
// validator set two heights later, when the validator updates of a block
// apply. The rotatingSigner signs with the old key until then and with
// the new one from that height: consensus asks it for its key after every
// commit (CometBFT re-reads the private validator's key then), and a vote
// or proposal says its height. When the new key takes over, its files
// replace the old ones (key first, then the state: a crash between leaves
// the new key with the old key's last-signed height, which is below every
// height the new key signs), so the broker restarts with it. The old key
// is deleted: the chain never counts it again.

import (
	stded25519 "crypto/ed25519"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/cometbft/cometbft/crypto"
	"github.com/cometbft/cometbft/crypto/ed25519"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	"github.com/cometbft/cometbft/privval"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/types"
)

// NextKeyFile and NextStateFile, under the CometBFT home's config and data
// directories, hold a broker's next validator key and its signing state
// until the chain names it.
const (
	NextKeyFile   = "config/priv_validator_key.next.json"
	NextStateFile = "data/priv_validator_state.next.json"
)

// validatorUpdateDelay is how many heights after the block that returns a
// validator update CometBFT's set applies it.
const validatorUpdateDelay = 2

// KeyRotation tells the orderer which validator key the chain names for
// this broker (internal/fsm/cluster's directory), and the height of the
// change that named it (0: the genesis's, or none known yet).
type KeyRotation func() (validator [20]byte, changedAt int64)

// WriteNextKey writes a new validator key to home's NextKeyFile (with a
// fresh signing state) unless one is there, and returns its public key.
func WriteNextKey(home string) (stded25519.PublicKey, error) {
	keyPath, statePath := filepath.Join(home, NextKeyFile), filepath.Join(home, NextStateFile)
	if exists(keyPath) {
		key, err := readPrivValKey(keyPath)
		if err != nil {
			return nil, err
		}
		return stded25519.PublicKey(key.PubKey.Bytes()), nil
	}
	if err := os.MkdirAll(filepath.Dir(statePath), 0o700); err != nil {
		return nil, fmt.Errorf("stele/consensus/cometbft: %w", err)
	}
	priv := ed25519.GenPrivKey()
	pub := priv.PubKey()
	key, err := cmtjson.MarshalIndent(privval.FilePVKey{Address: pub.Address(), PubKey: pub, PrivKey: priv}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("stele/consensus/cometbft: validator key: %w", err)
	}
	state, err := encodeSignState(privval.FilePVLastSignState{})
	if err != nil {
		return nil, err
	}
	// The state first: a key file without its state is refused.
	if err := writeFileAtomic(statePath, state, 0o600); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(keyPath, key, 0o600); err != nil {
		return nil, err
	}
	return stded25519.PublicKey(pub.Bytes()), nil
}

// rotatingSigner is the broker's private validator: its key, and its next
// key once one is written and the chain names it.
type rotatingSigner struct {
	home     string
	chainKey KeyRotation
	height   func() int64 // the application's last committed height
	onKey    func(stded25519.PrivateKey)
	logger   *slog.Logger

	mu       sync.Mutex
	cur      *filePV
	next     *filePV  // nil: no next key read
	switchAt int64    // the height the next key signs from (0: not named yet)
	read     int64    // the committed height the next key's files were last read at (-1: never)
	warned   [20]byte // a key the chain names that this broker lacks, reported once
}

func newRotatingSigner(home string, cur *filePV, chainKey KeyRotation, height func() int64, onKey func(stded25519.PrivateKey), logger *slog.Logger) (*rotatingSigner, error) {
	s := &rotatingSigner{home: home, cur: cur, chainKey: chainKey, height: height, onKey: onKey, logger: logger, read: -1}
	if _, err := s.readNext(); err != nil {
		return nil, err
	}
	return s, nil
}

// readNext loads the next key's files, when there are: `stele cluster
// rotate-key` writes them while the broker runs.
func (s *rotatingSigner) readNext() (*filePV, error) {
	keyPath, statePath := filepath.Join(s.home, NextKeyFile), filepath.Join(s.home, NextStateFile)
	if !exists(keyPath) {
		return nil, nil
	}
	if !exists(statePath) {
		return nil, fmt.Errorf("stele/consensus/cometbft: the next validator key %s has no state file %s", keyPath, statePath)
	}
	next, err := loadPV(keyPath, statePath)
	if err != nil {
		return nil, err
	}
	s.next = next
	return next, nil
}

// follow reads which key the chain names for this broker: the next key
// (from its change's height plus CometBFT's delay), or one this broker
// lacks (reported once). Called with mu held.
func (s *rotatingSigner) follow() {
	if s.chainKey == nil {
		return
	}
	want, at := s.chainKey()
	if at == 0 || want == [20]byte(s.cur.key.Address) {
		return
	}
	if h := s.height(); (s.next == nil || want != [20]byte(s.next.key.Address)) && s.read != h {
		// Written since the last look (at most one look per height).
		s.read = h
		if _, err := s.readNext(); err != nil {
			s.logger.Error("reading the next validator key", "err", err)
		}
	}
	if s.next != nil && want == [20]byte(s.next.key.Address) {
		if s.switchAt == 0 {
			s.switchAt = at + validatorUpdateDelay
			s.logger.Warn("the chain names this broker's next validator key", "validator", fmt.Sprintf("%X", want),
				"changed_at", at, "signs_from", s.switchAt)
			if s.onKey != nil {
				s.onKey(stded25519.PrivateKey(s.next.key.PrivKey.Bytes()))
			}
		}
		return
	}
	if s.warned != want {
		s.warned = want
		s.logger.Error("the chain names a validator key this broker does not hold: it signs nothing until started with that key",
			"validator", fmt.Sprintf("%X", want), "changed_at", at, "next_key_file", filepath.Join(s.home, NextKeyFile))
	}
}

// signer is the key that signs at height h. Called with mu held.
func (s *rotatingSigner) signer(h int64) *filePV {
	s.follow()
	if s.next != nil && s.switchAt > 0 && h >= s.switchAt {
		if err := s.promote(); err != nil {
			// The files stay as they were: this run signs with the new
			// key, and a restart finds the rotation again (follow).
			s.logger.Error("replacing the validator key files with the next key's", "err", err)
			cur := s.next
			s.cur, s.next = cur, nil
		}
	}
	return s.cur
}

// promote makes the next key this broker's key, on disk and here.
func (s *rotatingSigner) promote() error {
	keyPath, statePath := filepath.Join(s.home, privValKeyFile), filepath.Join(s.home, privValState)
	if err := os.Rename(filepath.Join(s.home, NextKeyFile), keyPath); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(s.home, NextStateFile), statePath); err != nil {
		return err
	}
	// Loaded again from where its state is now saved.
	pv, err := loadFilePV(s.home)
	if err != nil {
		return err
	}
	s.logger.Warn("this broker signs with its new validator key", "validator", fmt.Sprintf("%X", pv.key.Address), "from_height", s.switchAt)
	s.cur, s.next, s.switchAt = pv, nil, 0
	return nil
}

// GetPubKey is the key for the next height: consensus calls it after each
// commit.
func (s *rotatingSigner) GetPubKey() (crypto.PubKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signer(s.height() + 1).GetPubKey()
}

func (s *rotatingSigner) SignVote(chainID string, vote *cmtproto.Vote) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signer(vote.Height).SignVote(chainID, vote)
}

func (s *rotatingSigner) SignProposal(chainID string, p *cmtproto.Proposal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signer(p.Height).SignProposal(chainID, p)
}

var _ types.PrivValidator = (*rotatingSigner)(nil)
