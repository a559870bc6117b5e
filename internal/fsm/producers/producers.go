// Package producers is the state machine's producers module, Kafka's
// transaction coordinator: producer ids (InitProducerId, KIP-98) and
// transactions (KIP-98's AddPartitionsToTxn, AddOffsetsToTxn,
// TxnOffsetCommit, EndTxn; txns.go), their timeouts and the expiry of
// transactional ids. The sequences each partition remembers per producer,
// the markers and the last stable offset are the topics module's, as
// Kafka's ProducerStateManager is its log's.
//
// It uses the topics module (a transaction's end writes its markers) and
// the groups module (its offsets are committed to the group), imports no
// module above it, and works on TxnCoordinator, its part of a state
// machine, which the application (package fsm) makes with
// NewTxnCoordinator and hands over through its ProducersModule method
// (producersOf).
package producers

import (
	"encoding/binary"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// Idempotent producers (KIP-98): InitProducerId hands out producer ids;
// the sequences each partition remembers per producer are its log's
// (the topics module's partition_producers.go), and transactional ids
// are txns.go's.

// KindInitProducerID allocates a producer id.
const KindInitProducerID core.Kind = 16

// InitProducerID asks for a producer id: a new one for an idempotent
// producer, or, with a transactional id, that id's producer at its next
// epoch (txns.go).
type InitProducerID struct {
	TransactionalID string
	TimeoutMs       int32 // transaction.timeout.ms, with a transactional id
}

func (InitProducerID) Kind() core.Kind { return KindInitProducerID }

// RegisterProducers is the producers module's registration function
// (buildRegistry, registry.go): its files' registrations.
func RegisterProducers(r *core.Registry, h *topics.TopicHooks) {
	registerInitProducerID(r, h) // producers.go
	registerNextProducerID(r, h) // producers.go
	registerTxnCommands(r, h)    // txns.go
	registerTxnSteps(r, h)       // txns.go
}

// registerInitProducerID registers InitProducerID (RegisterProducers
// calls it).
func registerInitProducerID(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleCommand(r, producersOf, KindInitProducerID, "InitProducerID", ModProducers,
		func(r *core.Reader) InitProducerID {
			return InitProducerID{TransactionalID: r.Str(), TimeoutMs: r.I32()}
		},
		checkTxnCommand,
		func(f *TxnCoordinator, c InitProducerID, _ core.CmdAt) core.Result { return f.initProducerID(c) })
}

func (c InitProducerID) Encode(w *core.Writer) {
	w.Str(c.TransactionalID)
	w.I32(c.TimeoutMs)
}

// initProducerID hands out the next producer id.
func (f *TxnCoordinator) initProducerID(c InitProducerID) core.Result {
	if c.TransactionalID != "" {
		return f.initTxnProducer(c)
	}
	id := f.nextProducerID
	f.nextProducerID++
	f.MetaChanged = true
	return core.Result{ProducerID: id}
}

// registerNextProducerID registers the next producer id's step
// (RegisterProducers calls it).
func registerNextProducerID(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleStep(r, producersOf, core.ModuleStep[*TxnCoordinator]{Rank: 10, Name: "next producer id", Module: ModProducers,
		Load: loadProducerID,
		Stage: func(f *TxnCoordinator, b *core.StateBatch) error {
			if f.nextProducerID != f.stagedProducerID {
				b.Set(core.KeyProducerID, binary.BigEndian.AppendUint64(nil, uint64(f.nextProducerID)))
				f.stagedProducerID = f.nextProducerID
			}
			return nil
		}})
}
