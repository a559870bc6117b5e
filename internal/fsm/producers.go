package fsm

import "encoding/binary"
import "github.com/stele-io/stele/internal/fsm/core"

// Idempotent producers (KIP-98): InitProducerId hands out producer ids;
// the sequences each partition remembers per producer are its log's
// (partition_producers.go), and transactional ids are txns.go's.

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

// registerProducers is the producers module's registration function
// (buildRegistry, registry.go): its files' registrations.
func registerProducers(r *registry) {
	registerInitProducerID(r) // producers.go
	registerNextProducerID(r) // producers.go
	registerTxnCommands(r)    // txns.go
	registerTxnSteps(r)       // txns.go
}

// registerInitProducerID registers InitProducerID (registerProducers
// calls it).
func registerInitProducerID(r *registry) {
	register(r, KindInitProducerID, "InitProducerID", modProducers,
		func(r *core.Reader) InitProducerID {
			return InitProducerID{TransactionalID: r.Str(), TimeoutMs: r.I32()}
		},
		checkTxnCommand,
		func(f *FSM, c InitProducerID, _ core.CmdAt) core.Result { return f.initProducerID(c) })
}

func (c InitProducerID) Encode(w *core.Writer) {
	w.Str(c.TransactionalID)
	w.I32(c.TimeoutMs)
}

// initProducerID hands out the next producer id.
func (f *FSM) initProducerID(c InitProducerID) core.Result {
	if c.TransactionalID != "" {
		return f.initTxnProducer(c)
	}
	id := f.nextProducerID
	f.nextProducerID++
	f.MetaChanged = true
	return core.Result{ProducerID: id}
}

// registerNextProducerID registers the next producer id's step
// (registerProducers calls it).
func registerNextProducerID(r *registry) {
	r.registerStep(moduleStep{rank: 10, name: "next producer id", module: modProducers,
		load: loadProducerID,
		stage: func(f *FSM, b *core.StateBatch) error {
			if f.nextProducerID != f.stagedProducerID {
				b.Set(core.KeyProducerID, binary.BigEndian.AppendUint64(nil, uint64(f.nextProducerID)))
				f.stagedProducerID = f.nextProducerID
			}
			return nil
		}})
}
