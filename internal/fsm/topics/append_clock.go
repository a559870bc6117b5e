package topics

import (
	"encoding/binary"
	"fmt"

	"github.com/stele-io/stele/internal/fsm/core"
)

// The topics module's log append clock: the time a LogAppendTime topic
// stamps on the batches a block appends (and every partition on its
// transaction markers), Kafka's broker clock at append.
//
// Under app version 1 it is the block time: CometBFT's BFT time, the
// median of the validators' vote timestamps for the previous block, which
// is fixed before the block's transactions are even proposed. A record is
// then stamped up to a block interval before its producer sent it, and a
// client that reads its clock, produces, and looks the record up by that
// time (ListOffsets) can find nothing, where Kafka, stamping at append,
// always finds it (docs/kafka-api.md, "Read after an acknowledged write").
//
// From app version 2 each proposal opens with the proposer's clock, read
// when it builds the block (the cluster module's AppendTime command,
// cluster/proposals.go; validators refuse a proposal whose clock is ahead of
// theirs), and the clock is raised to it. The clock never goes back: it is
// the largest of the block time, the clock of the last block that set it
// (m/append-time, below) and the block's own proposed time, so a
// proposer with a slow clock stamps no earlier than version 1 did, and
// stamps in a partition only grow, as Kafka's do on one leader.
//
// State, authenticated: m/append-time, the clock as the last block that
// carried an AppendTime left it (i64 ms), absent until one did; so a chain
// that runs version 1 holds no such key and hashes as before.

// KeyAppendClock is the log append clock's leaf in the state trie.
var KeyAppendClock = []byte("m/append-time")

// logAppendClock is the topics module's log append clock.
type logAppendClock struct {
	cur   int64 // the clock for the block being applied (ms)
	last  int64 // the clock the last AppendTime left (m/append-time)
	dirty bool  // an AppendTime raised it in this block: staged at its end
}

// registerAppendClock registers the clock's block-begin step and its leaf
// (RegisterTopics calls it).
func registerAppendClock(r *core.Registry) {
	// After the block time is taken: the clock starts each block at the
	// later of it and the last clock set.
	core.RegisterModuleBlockBegin(r, topicsOf, core.ModuleBlockBegin[*Topics]{Rank: 30, Name: "log append clock", Module: ModTopics,
		Run: func(f *Topics, _ core.Block) { f.appendClock.cur = max(f.BlockTime, f.appendClock.last) }})
	core.RegisterModuleStep(r, topicsOf, core.ModuleStep[*Topics]{Rank: 56, Name: "log append clock", Module: ModTopics,
		Load: func(f *Topics) error {
			f.appendClock = logAppendClock{}
			if err := core.LoadLeaf(f.Machine, KeyAppendClock, DecodeAppendClock, &f.appendClock.last); err != nil {
				return fmt.Errorf("stele/fsm: reading the log append clock: %w", err)
			}
			f.appendClock.cur = max(f.BlockTime, f.appendClock.last)
			return nil
		},
		Stage: func(f *Topics, b *core.StateBatch) error {
			core.StageLeaf(b, KeyAppendClock, &f.appendClock.dirty, f.appendClock.last, false, EncodeAppendClock)
			return nil
		}})
}

// logAppendTime is the time a batch appended now is stamped with on a
// LogAppendTime topic (and a transaction marker with on any topic).
func (f *Topics) logAppendTime() int64 { return f.appendClock.cur }

// RaiseLogAppendClock sets the clock to ms for the rest of the block, if
// that is later, and keeps it for the blocks after.
func (f *Topics) RaiseLogAppendClock(ms int64) {
	f.appendClock.cur = max(f.appendClock.cur, ms)
	f.appendClock.last = f.appendClock.cur
	f.appendClock.dirty = true
}

func EncodeAppendClock(ms int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(ms)) }

func DecodeAppendClock(v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("stele/fsm: log append clock of %d bytes, want 8", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}
