package cometbft

import (
	"bytes"
	stded25519 "crypto/ed25519"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cometbft/cometbft/crypto"
	"github.com/cometbft/cometbft/privval"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/types"
)

// TestRotatingSigner: the broker signs with its key until the chain names
// the next key (written while it runs), hands the data plane the next key as soon as the chain
// names it, signs with it from two heights after the change, and replaces
// its key files with the next key's then, so a restart loads the new key;
// a key the chain names that the broker lacks changes nothing.
func TestRotatingSigner(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{"config", "data"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	privval.GenFilePV(filepath.Join(home, privValKeyFile), filepath.Join(home, privValState)).Save()
	cur, err := loadFilePV(home)
	if err != nil {
		t.Fatal(err)
	}
	var next stded25519.PublicKey
	var named atomic.Pointer[[2]int64] // [0]: 0 the old key, 1 the next, 2 a stranger's; [1]: changed at
	named.Store(&[2]int64{0, 0})
	var nextAddr [20]byte
	stranger := [20]byte(bytes.Repeat([]byte{7}, 20))
	chainKey := func() ([20]byte, int64) {
		n := named.Load()
		switch n[0] {
		case 1:
			return nextAddr, n[1]
		case 2:
			return stranger, n[1]
		}
		return [20]byte(cur.key.Address), n[1]
	}
	var height atomic.Int64
	var handed []stded25519.PrivateKey
	s, err := newRotatingSigner(home, cur, chainKey, height.Load, func(k stded25519.PrivateKey) { handed = append(handed, k) }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	signsWith := func(h int64, want crypto.PubKey) {
		t.Helper()
		height.Store(h - 1)
		pk, err := s.GetPubKey()
		if err != nil || !pk.Equals(want) {
			t.Fatalf("height %d: key %v (%v), want %v", h, pk, err, want)
		}
		v := &cmtproto.Vote{Type: cmtproto.PrevoteType, Height: h, Timestamp: time.Unix(h, 0)}
		if err := s.SignVote("chain", v); err != nil {
			t.Fatalf("height %d: %v", h, err)
		}
		if !want.VerifySignature(types.VoteSignBytes("chain", v), v.Signature) {
			t.Fatalf("height %d: the vote is not signed by %v", h, want)
		}
	}
	oldKey, nextKey := cur.key.PubKey, crypto.PubKey(nil)
	signsWith(5, oldKey)
	// The next key is written while the broker runs.
	if next, err = WriteNextKey(home); err != nil {
		t.Fatal(err)
	}
	if again, err := WriteNextKey(home); err != nil || !bytes.Equal(again, next) {
		t.Fatalf("WriteNextKey again: %v, a different key: %t", err, !bytes.Equal(again, next))
	}
	nextAddr = [20]byte(crypto.AddressHash(next))
	named.Store(&[2]int64{2, 6})
	signsWith(7, oldKey)
	if len(handed) != 0 {
		t.Fatal("a key the broker lacks was handed on")
	}
	named.Store(&[2]int64{1, 10})
	signsWith(11, oldKey)
	if len(handed) != 1 || !bytes.Equal(handed[0].Public().(stded25519.PublicKey), next) {
		t.Fatalf("handed %d keys on, want the next key once", len(handed))
	}
	if _, err := os.Stat(filepath.Join(home, NextKeyFile)); err != nil {
		t.Fatal("the next key's file is gone before it signs")
	}
	key, err := readPrivValKey(filepath.Join(home, NextKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	nextKey = key.PubKey
	signsWith(12, nextKey)
	signsWith(13, nextKey)
	if len(handed) != 1 {
		t.Fatalf("handed %d keys on", len(handed))
	}
	if _, err := os.Stat(filepath.Join(home, NextKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("the next key file after the switch: %v", err)
	}
	// Restarted, the broker loads the new key; the chain names it.
	pv, err := loadFilePV(home)
	if err != nil || !pv.key.PubKey.Equals(nextKey) {
		t.Fatalf("the key file after the switch: %v", err)
	}
	if pv.state.Height != 13 {
		t.Fatalf("the new key's signing state is at height %d, want 13", pv.state.Height)
	}
	s2, err := newRotatingSigner(home, pv, chainKey, height.Load, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s = s2
	signsWith(14, nextKey)
	// The next key's double-sign guard holds across the switch.
	v := &cmtproto.Vote{Type: cmtproto.PrevoteType, Height: 12, Timestamp: time.Unix(99, 0)}
	if err := s.SignVote("chain", v); err == nil {
		t.Fatal("the new key signed a height below its last")
	}
}
