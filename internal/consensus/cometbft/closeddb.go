package cometbft

import (
	"sync/atomic"

	dbm "github.com/cometbft/cometbft-db"
)

// stoppedDB wraps a CometBFT database so that reads after Close find
// nothing instead of failing. Some of CometBFT's goroutines outlive
// Node.Stop and Wait: the consensus reactor's queryMaj23Routine sleeps up
// to peer_query_maj23_sleep_duration between its checks of whether the
// node still runs, then loads a commit from the block store, which panics
// the whole process on any error ("leveldb: closed"). A stopped node has
// nothing to answer, so an empty read is the right outcome.
type stoppedDB struct {
	dbm.DB
	closed atomic.Bool
}

func (d *stoppedDB) Close() error {
	d.closed.Store(true)
	return d.DB.Close()
}

func (d *stoppedDB) Get(key []byte) ([]byte, error) {
	v, err := d.DB.Get(key)
	if err != nil && d.closed.Load() {
		return nil, nil
	}
	return v, err
}

func (d *stoppedDB) Has(key []byte) (bool, error) {
	ok, err := d.DB.Has(key)
	if err != nil && d.closed.Load() {
		return false, nil
	}
	return ok, err
}

func (d *stoppedDB) Iterator(start, end []byte) (dbm.Iterator, error) {
	it, err := d.DB.Iterator(start, end)
	if err != nil && d.closed.Load() {
		return emptyIterator{start, end}, nil
	}
	return it, err
}

func (d *stoppedDB) ReverseIterator(start, end []byte) (dbm.Iterator, error) {
	it, err := d.DB.ReverseIterator(start, end)
	if err != nil && d.closed.Load() {
		return emptyIterator{start, end}, nil
	}
	return it, err
}

// emptyIterator iterates over nothing.
type emptyIterator struct{ start, end []byte }

func (it emptyIterator) Domain() ([]byte, []byte) { return it.start, it.end }
func (emptyIterator) Valid() bool                 { return false }
func (emptyIterator) Next()                       { panic("stele/consensus/cometbft: Next on an empty iterator") }
func (emptyIterator) Key() []byte                 { panic("stele/consensus/cometbft: Key on an empty iterator") }
func (emptyIterator) Value() []byte               { panic("stele/consensus/cometbft: Value on an empty iterator") }
func (emptyIterator) Error() error                { return nil }
func (emptyIterator) Close() error                { return nil }
