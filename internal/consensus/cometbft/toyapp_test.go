package cometbft

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/stele-io/stele/internal/consensus"
)

// errToyRefused is the toy application's CheckTx refusal.
var errToyRefused = errors.New("toy: refused")

// diskApp is a toy consensus.Application: a hash chain over the committed
// transactions (the hash changes only on blocks with transactions), saved
// to a JSON file on the Commits that persist(height) allows. A new diskApp
// on the same file starts from what was saved, like a real application
// that persists lazily.
//
// CheckTx refuses transactions starting with "refuse"; ValidateTx rejects
// those starting with "invalid" (and FinalizeBlock fails if one gets in).
type diskApp struct {
	path    string
	persist func(height int64) bool

	mu        sync.Mutex
	st        diskState
	next      *diskState // after FinalizeBlock, before Commit
	finalized []int64    // heights FinalizeBlock was called for, in order
	waiters   map[string]chan int64
}

type diskState struct {
	Height int64       `json:"height"`
	Hash   []byte      `json:"hash"`
	Txs    [][]byte    `json:"txs"`
	Times  []time.Time `json:"times"` // one per committed block
}

func openDiskApp(path string, persist func(int64) bool) (*diskApp, error) {
	a := &diskApp{path: path, persist: persist, waiters: map[string]chan int64{}}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(data, &a.st); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *diskApp) Info() (int64, []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Height, append([]byte(nil), a.st.Hash...)
}

func (a *diskApp) CheckTx(tx []byte) error {
	if bytes.HasPrefix(tx, []byte("refuse")) {
		return errToyRefused
	}
	return nil
}

func (a *diskApp) ValidateTx(tx []byte) error {
	if bytes.HasPrefix(tx, []byte("invalid")) {
		return errors.New("toy: invalid")
	}
	return nil
}

func (a *diskApp) FinalizeBlock(b consensus.Block) ([]consensus.TxResult, []byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.finalized = append(a.finalized, b.Height)
	if b.Height != a.st.Height+1 {
		return nil, nil, fmt.Errorf("toy: block %d after %d", b.Height, a.st.Height)
	}
	next := diskState{
		Height: b.Height,
		Hash:   a.st.Hash,
		Txs:    append([][]byte(nil), a.st.Txs...),
		Times:  append(append([]time.Time(nil), a.st.Times...), b.Time),
	}
	res := make([]consensus.TxResult, len(b.Txs))
	if len(b.Txs) > 0 {
		h := sha256.New()
		h.Write(a.st.Hash)
		for i, tx := range b.Txs {
			if err := a.ValidateTx(tx); err != nil {
				return nil, nil, err
			}
			h.Write(tx)
			next.Txs = append(next.Txs, append([]byte(nil), tx...))
			res[i] = consensus.TxResult{Data: []byte{byte(i)}, Log: "ok"}
		}
		next.Hash = h.Sum(nil)
	}
	a.next = &next
	return res, next.Hash, nil
}

func (a *diskApp) Commit() (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next == nil {
		return 0, errors.New("toy: Commit without FinalizeBlock")
	}
	newTxs := a.next.Txs[len(a.st.Txs):]
	a.st, a.next = *a.next, nil
	if a.persist(a.st.Height) {
		data, err := json.Marshal(a.st)
		if err != nil {
			return 0, err
		}
		if err := os.WriteFile(a.path, data, 0o600); err != nil {
			return 0, err
		}
	}
	for _, tx := range newTxs {
		if ch, ok := a.waiters[string(tx)]; ok {
			ch <- a.st.Height
			delete(a.waiters, string(tx))
		}
	}
	return 0, nil
}

// waitFor returns a channel that receives the height tx is committed at.
func (a *diskApp) waitFor(tx []byte) <-chan int64 {
	ch := make(chan int64, 1)
	a.mu.Lock()
	a.waiters[string(tx)] = ch
	a.mu.Unlock()
	return ch
}

func (a *diskApp) state() diskState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

func (a *diskApp) finalizedHeights() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int64(nil), a.finalized...)
}

func always(int64) bool { return true }
