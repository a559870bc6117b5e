package producers

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// The producers module's state as Open reads it back: the next producer id
// (m/producer-id) and the transactions (x/, loadTxns in txns.go), and the
// decoders of those values that are not beside their encoders. Its steps
// (registered in producers.go and txns.go) run these loads in rank order:
// the producer id first (10), the transactions (110) after the topics'
// load (60). What a partition's log keeps of its producers (their
// sequences, s/, and the aborted transactions, a/) is the topics module's
// and loads in its steps at 100 and 115 (partition_producers.go,
// partition_txns.go).

// producersState is the producers module's part of the state machine
// (embedded in FSM).
// modProducers is the producers module's name.
const ModProducers core.Module = "producers"

// TxnCoordinator is the producers module of a state machine (Kafka's
// transaction coordinator): the core's machine it runs on, the topics and
// groups modules below it, and its state.
type TxnCoordinator struct {
	*core.Machine
	*topics.Topics
	*groups.Coordinator
	producersState
}

// NewTxnCoordinator is the producers module of the machine m, above the
// topics module t and the groups module g.
func NewTxnCoordinator(m *core.Machine, t *topics.Topics, g *groups.Coordinator) *TxnCoordinator {
	return &TxnCoordinator{Machine: m, Topics: t, Coordinator: g}
}

// producersOf is the producers module of the machine m.
func producersOf(m *core.Machine) *TxnCoordinator {
	return m.App.(interface{ ProducersModule() *TxnCoordinator }).ProducersModule()
}

type producersState struct {
	nextProducerID   int64
	stagedProducerID int64 // nextProducerID as last staged
	Txns             map[string]*Txn
	txnByPID         map[int64]string
	dirtyTxns        map[string]bool
	txnsDue          int64 // block time at which a transaction may time out

	// Published at Commit.
	txnView atomic.Pointer[[]TxnInfo]
}

// loadProducerID reads the next producer id; absent, it is 0.
func loadProducerID(f *TxnCoordinator) error {
	f.nextProducerID = 0
	if v, ok, err := f.Store.Get(core.KeyProducerID); err != nil {
		return err
	} else if ok {
		if f.nextProducerID, err = DecodeProducerID(v); err != nil {
			return err
		}
	}
	f.stagedProducerID = f.nextProducerID
	return nil
}

// DecodeProducerID reads m/producer-id: a u64.
func DecodeProducerID(v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("stele/fsm: bad %s value %x", core.KeyProducerID, v)
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// loadTxnState reads the transactions afresh (their view is published
// whole at the next publish).
func loadTxnState(f *TxnCoordinator) error {
	f.Txns, f.txnByPID, f.txnsDue = map[string]*Txn{}, map[int64]string{}, 0
	f.txnView.Store(nil)
	return f.loadTxns()
}
