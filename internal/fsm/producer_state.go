package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The producers module's state as Open reads it back: the next producer id
// (m/producer-id), the producer states (s/, loadProducers in producers.go)
// and the transactions and aborted transactions (x/ and a/, loadTxns in
// txns.go), and the decoders of those values that are not beside their
// encoders. Its steps (registered in producers.go and txns.go) run these
// loads in rank order: the producer id first (10), then, after the topics'
// load (60) has made the partitions they refer to, the producer states
// (100) and the transactions (110), after which every partition's
// producers and transaction state are published.

// loadProducerID reads the next producer id; absent, it is 0.
func loadProducerID(f *FSM) error {
	f.nextProducerID = 0
	if v, ok, err := f.store.Get(keyProducerID); err != nil {
		return err
	} else if ok {
		if f.nextProducerID, err = decodeProducerID(v); err != nil {
			return err
		}
	}
	f.stagedProducerID = f.nextProducerID
	return nil
}

// decodeProducerID reads m/producer-id: a u64.
func decodeProducerID(v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("stele/fsm: bad %s value %x", keyProducerID, v)
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// loadTxnState reads the transactions and the partitions' aborted
// transactions afresh (their view is published whole at the next
// publish), then publishes every partition's producer and transaction
// state, now that both are loaded.
func loadTxnState(f *FSM) error {
	f.txns, f.txnByPID, f.txnsDue = map[string]*Txn{}, map[int64]string{}, 0
	f.txnView.Store(nil)
	if err := f.loadTxns(); err != nil {
		return err
	}
	for _, name := range sortedNames(f.topics) {
		for _, p := range f.topics[name].Partitions {
			p.publishProducers()
			p.publishTxnState()
		}
	}
	return nil
}

// decodeAborted reads an a/ entry (abortedKey): the aborted transaction's
// topic and partition, and the transaction.
//
//	key   a/<topic>\x00<partition u32><last offset u64><pid u64>
//	value u64 first offset
func decodeAborted(k, v []byte) (string, int32, AbortedTxn, error) {
	rest, ok := bytes.CutPrefix(k, []byte("a/"))
	if !ok || len(rest) < 1+4+16 || rest[len(rest)-21] != 0 || len(v) != 8 {
		return "", 0, AbortedTxn{}, fmt.Errorf("stele/fsm: bad aborted-transaction key %q", k)
	}
	n := len(rest)
	a := AbortedTxn{LastOffset: int64(binary.BigEndian.Uint64(rest[n-16:])),
		ProducerID: int64(binary.BigEndian.Uint64(rest[n-8:])), FirstOffset: int64(binary.BigEndian.Uint64(v))}
	return string(rest[:n-21]), int32(binary.BigEndian.Uint32(rest[n-20:])), a, nil
}
