package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// latChain drives a state machine the way the orderer does from app
// version 2: each block with transactions opens with ProposalOpening at
// the proposer's clock.
type latChain struct {
	t      *testing.T
	dir    string
	f      *FSM
	nonce  int
	blocks []core.Block
}

func newLATChain(t *testing.T, genesis uint32) *latChain {
	c := &latChain{t: t, dir: t.TempDir()}
	c.open(genesis)
	t.Cleanup(func() { c.f.Close() })
	c.block(t0, t0, topics.CreateTopic{Name: "lat", Partitions: 1, ReplicationFactor: -1,
		Configs: []topics.ConfigEntry{{Name: "message.timestamp.type", Value: "LogAppendTime"}}})
	return c
}

func (c *latChain) open(genesis uint32) {
	c.t.Helper()
	f, err := Open(Options{Dir: c.dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: genesis})
	if err != nil {
		c.t.Fatal(err)
	}
	c.f = f
}

// block applies and commits a block of block time timeMs, proposed when
// the proposer's clock read nowMs, and returns the commands' results
// (the opening's left out).
func (c *latChain) block(timeMs, nowMs int64, cmds ...core.Command) []core.Result {
	c.t.Helper()
	h, _ := c.f.Info()
	var txs [][]byte
	for _, cmd := range cmds {
		c.nonce++
		txs = append(txs, tx(c.nonce, cmd))
	}
	if len(txs) > 0 {
		txs = append(c.f.ProposalOpening(h+1, nowMs), txs...)
	}
	if err := c.f.CheckProposal(h+1, nowMs, txs); err != nil {
		c.t.Fatalf("the proposal of height %d is refused by its own proposer: %v", h+1, err)
	}
	b := core.Block{Height: h + 1, TimeMs: timeMs, Txs: txs}
	out, err := c.f.ApplyBlock(b)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.f.Commit(); err != nil {
		c.t.Fatal(err)
	}
	c.blocks = append(c.blocks, b)
	var rs []core.Result
	for _, o := range out.Txs[len(txs)-len(cmds):] {
		if o.Code != 0 {
			c.t.Fatalf("height %d: transaction refused: %s", h+1, o.Log)
		}
		rs = append(rs, o.Results...)
	}
	return rs
}

func (c *latChain) produce(timeMs, nowMs int64) core.Result {
	c.t.Helper()
	r := c.block(timeMs, nowMs, topics.Produce{Topic: "lat", Partition: 0, Records: batch(c.t, 1, record.CodecNone, "k", 2)})[0]
	if r.Code != 0 {
		c.t.Fatalf("produce: %d %s", r.Code, r.Message)
	}
	return r
}

// found requires that a lookup by ts finds the batch r stored.
func (c *latChain) found(r core.Result, ts int64) {
	c.t.Helper()
	off, got, ok, err := c.f.View().Partition("lat", 0).OffsetForTimestamp(ts)
	if err != nil || !ok || off != r.BaseOffset || got != r.LogAppendTime {
		c.t.Fatalf("OffsetForTimestamp(%d) = %d, %d, %v, %v; want offset %d stamped %d", ts, off, got, ok, err, r.BaseOffset, r.LogAppendTime)
	}
}

// TestLogAppendTimeIsTheProposersClock (issue 27; Kafka stamps
// LogAppendTime at append, LogValidator): from app version 2 a
// LogAppendTime topic is stamped with the proposer's clock when it built
// the block, not with the block time, which CometBFT fixes from the votes
// on the block before. A client that read its clock before producing
// finds its record by that time. The clock never goes back: not for a
// proposer whose clock is slow, not for a block without an opening, not
// across a restart.
func TestLogAppendTimeIsTheProposersClock(t *testing.T) {
	c := newLATChain(t, 2)
	if v := c.f.AppVersion(); v != 2 {
		t.Fatalf("a chain whose genesis says version 2 runs version %d", v)
	}
	sent := t0 + 1500 // the client's clock as it produced, after the block time
	r := c.produce(t0+1000, sent+40)
	if r.LogAppendTime != sent+40 {
		t.Fatalf("stamped %d, want the proposer's clock %d (the block time is %d)", r.LogAppendTime, sent+40, t0+1000)
	}
	c.found(r, sent)

	// A proposer whose clock is behind the block time: the block time.
	if r2 := c.produce(t0+2000, t0+1900); r2.LogAppendTime != t0+2000 {
		t.Fatalf("a slow proposer: stamped %d, want the block time %d", r2.LogAppendTime, t0+2000)
	}
	r3 := c.produce(t0+3000, t0+3400)
	if r3.LogAppendTime != t0+3400 {
		t.Fatalf("stamped %d, want %d", r3.LogAppendTime, t0+3400)
	}
	if r4 := c.produce(t0+3100, t0+3200); r4.LogAppendTime != t0+3400 {
		t.Fatalf("a clock behind the last block's: stamped %d, want the last clock %d", r4.LogAppendTime, t0+3400)
	}

	// After a restart the clock is where the last block left it.
	c.f.Close()
	c.open(2)
	if r5 := c.produce(t0+3200, t0+3300); r5.LogAppendTime != t0+3400 {
		t.Fatalf("after a restart: stamped %d, want %d", r5.LogAppendTime, t0+3400)
	}
	// Transaction markers take the same clock.
	pid := c.block(t0+3300, t0+3500, producers.InitProducerID{TransactionalID: "x", TimeoutMs: 60_000})[0]
	c.block(t0+3400, t0+3600, producers.AddPartitionsToTxn{TransactionalID: "x", ProducerID: pid.ProducerID, Epoch: pid.ProducerEpoch, Topic: "lat", Partition: 0})
	end := c.f.View().Partition("lat", 0).HighWatermark()
	c.block(t0+3500, t0+3700, producers.EndTxn{TransactionalID: "x", ProducerID: pid.ProducerID, Epoch: pid.ProducerEpoch, Commit: true})
	if off, ts, ok, err := c.f.View().Partition("lat", 0).OffsetForTimestamp(t0 + 3700); err != nil || !ok || off != end || ts != t0+3700 {
		t.Fatalf("the commit marker: OffsetForTimestamp = %d, %d, %v, %v; want offset %d stamped %d", off, ts, ok, err, end, t0+3700)
	}

	// The same blocks on another state machine: the same app hashes.
	other := &latChain{t: t, dir: t.TempDir()}
	other.open(2)
	defer other.f.Close()
	for _, b := range c.blocks {
		if _, err := other.f.ApplyBlock(b); err != nil {
			t.Fatal(err)
		}
		if _, err := other.f.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	_, a := c.f.Info()
	_, b := other.f.Info()
	if !bytes.Equal(a, b) {
		t.Fatalf("the same blocks give app hash %x and %x", a, b)
	}
}

// TestLogAppendTimeVersion1 keeps the block time: a chain started before
// version 2 (no genesis version) opens no proposal and hashes as before.
func TestLogAppendTimeVersion1(t *testing.T) {
	c := newLATChain(t, 0)
	if v := c.f.AppVersion(); v != 1 {
		t.Fatalf("a chain without a genesis version runs version %d", v)
	}
	if o := c.f.ProposalOpening(5, t0); o != nil {
		t.Fatalf("version 1 opens its proposals with %d transactions", len(o))
	}
	if r := c.produce(t0+1000, t0+1400); r.LogAppendTime != t0+1000 {
		t.Fatalf("version 1 stamped %d, want the block time %d", r.LogAppendTime, t0+1000)
	}
	if _, ok, err := c.f.Store.Get(topics.KeyAppendClock); err != nil || ok {
		t.Fatalf("version 1 wrote the append clock's leaf (%v, %v)", ok, err)
	}
}

// TestCheckProposal: what a validator refuses of a proposal, by version.
func TestCheckProposal(t *testing.T) {
	c := newLATChain(t, 2)
	h, _ := c.f.Info()
	h++
	now := t0 + 10_000
	open := c.f.ProposalOpening(h, now)
	if len(open) != 1 {
		t.Fatalf("ProposalOpening: %d transactions, want 1", len(open))
	}
	other := tx(1, Tick{})
	ahead := c.f.ProposalOpening(h, now+cluster.MaxAppendTimeAheadMs+1)[0]
	atBound := c.f.ProposalOpening(h, now+cluster.MaxAppendTimeAheadMs)[0]
	for _, tc := range []struct {
		name string
		txs  [][]byte
		ok   bool
	}{
		{"empty", nil, true},
		{"opened", [][]byte{open[0], other}, true},
		{"at the bound", [][]byte{atBound, other}, true},
		{"no opening", [][]byte{other}, false},
		{"opening second", [][]byte{other, open[0]}, false},
		{"opening twice", [][]byte{open[0], open[0], other}, false},
		{"opening alone", [][]byte{open[0]}, false},
		{"ahead of the validator", [][]byte{ahead, other}, false},
	} {
		err := c.f.CheckProposal(h, now, tc.txs)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, cluster.ErrProposal)) {
			t.Errorf("%s: CheckProposal = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	// Only a proposer makes one: the mempool refuses it; as a proposal's
	// transaction it is valid.
	if err := Precheck(open[0]); err == nil {
		t.Error("the mempool admits an append time")
	}
	if _, err := Validate(open[0]); err != nil {
		t.Errorf("Validate refuses a proposer's append time: %v", err)
	}

	v1 := newLATChain(t, 0)
	h1, _ := v1.f.Info()
	if err := v1.f.CheckProposal(h1+1, now, [][]byte{open[0], other}); !errors.Is(err, cluster.ErrProposal) {
		t.Errorf("version 1: a proposal with an append time: %v, want refused", err)
	}
	if err := v1.f.CheckProposal(h1+1, now, [][]byte{other}); err != nil {
		t.Errorf("version 1: a proposal without one: %v", err)
	}
}

// TestAppendTimeFromTheUpgradeHeight: a chain that upgrades from version
// 1 to 2 opens its proposals from the upgrade's height on, not before, and
// stamps with the proposer's clock from there; an AppendTime applied
// under version 1 is refused and changes nothing.
func TestAppendTimeFromTheUpgradeHeight(t *testing.T) {
	c := newUpgradeChain(t, 2)
	c.block(topics.CreateTopic{Name: "lat", Partitions: 1, ReplicationFactor: -1,
		Configs: []topics.ConfigEntry{{Name: "message.timestamp.type", Value: "LogAppendTime"}}})
	wantUpgradeCode(t, "append time under version 1", c.block(cluster.AppendTime{TimeMs: t0 + 1_000_000})[0], kerr.InvalidRequest.Code)
	up := cluster.UpgradePlan{Height: c.height() + 1 + cluster.MinUpgradeDelay, Version: 2, Name: "append-time"}
	wantUpgradeCode(t, "upgrade", c.block(upgradeVote(up, c.keys[0], c.keys[1], c.keys[2]))[0], 0)
	c.to(up.Height - 2)
	if o := c.f.ProposalOpening(up.Height-1, t0); o != nil {
		t.Fatalf("height %d, before the upgrade, is opened", up.Height-1)
	}
	if o := c.f.ProposalOpening(up.Height, t0); len(o) != 1 {
		t.Fatalf("height %d, the upgrade's, is not opened", up.Height)
	}
	c.to(up.Height - 1)
	h := c.height() + 1
	now := t0 + 1_000_000 // far ahead of the chain's block times
	txs := append(c.f.ProposalOpening(h, now), tx(99, topics.Produce{Topic: "lat", Partition: 0, Records: batch(t, 1, record.CodecNone, "k", 1)}))
	if err := c.f.CheckProposal(h, now, txs); err != nil {
		t.Fatal(err)
	}
	out, err := c.f.ApplyBlock(core.Block{Height: h, TimeMs: t0, Txs: txs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.f.Commit(); err != nil {
		t.Fatal(err)
	}
	if r := out.Txs[1].Results[0]; r.Code != 0 || r.LogAppendTime != now {
		t.Fatalf("at the upgrade's height: code %d, stamped %d, want %d", r.Code, r.LogAppendTime, now)
	}
}
