package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// TestStateMatchesStore: after random command sequences, every object the
// state machine holds in memory encodes to exactly the value its store
// holds, and so does the same object as Open reads it back. Everything
// hashed is the store's bytes, so an object that drifted in memory without
// being written, or that Open restores only in part, would make a broker
// that restarted write other bytes than one that did not: a fork.
func TestStateMatchesStore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 60 {
		prog := make([]byte, 400)
		for i := range prog {
			prog[i] = byte(rng.UintN(256))
			if rng.UintN(12) == 0 {
				prog[i] = 0xff
			}
		}
		blocks := (&cmdProgram{b: prog}).blocks(t)
		dir := t.TempDir()
		f := open(t, dir)
		applyAll(t, f, blocks)
		check := func(who string, f *FSM) {
			t.Helper()
			checkTableLeaves(t, f, fmt.Sprintf("run %d, %s", run, who))
			for name, g := range f.GroupsByName {
				if v, ok, _ := f.Store.Get(groups.GroupKey(name)); !ok || !bytes.Equal(v, groups.EncodeGroup(g)) {
					t.Fatalf("run %d, %s: group %q in memory encodes to %x, the store holds %x", run, who, name, groups.EncodeGroup(g), v)
				}
			}
			for id, x := range f.Txns {
				if v, ok, _ := f.Store.Get(producers.TxnKey(id)); !ok || !bytes.Equal(v, producers.EncodeTxn(x)) {
					t.Fatalf("run %d, %s: transaction %q in memory encodes to %x, the store holds %x", run, who, id, producers.EncodeTxn(x), v)
				}
			}
			for _, tp := range f.ByName {
				if v, ok, _ := f.Store.Get(core.TopicKey(tp.Name)); !ok || !bytes.Equal(v, topics.EncodeTopic(tp)) {
					t.Fatalf("run %d, %s: topic %q in memory encodes to %x, the store holds %x", run, who, tp.Name, topics.EncodeTopic(tp), v)
				}
				for _, p := range tp.Partitions {
					for pid, s := range p.ProducerStates {
						if v, ok, _ := f.Store.Get(topics.ProducerKey(p.Topic, p.Index, pid)); !ok || !bytes.Equal(v, topics.EncodeProducer(s)) {
							t.Fatalf("run %d, %s: producer %d of %s-%d in memory encodes to %x, the store holds %x", run, who, pid, p.Topic, p.Index, topics.EncodeProducer(s), v)
						}
					}
				}
			}
		}
		check("after applying", f)
		f.Close()
		g := open(t, dir)
		check("after reopening", g)
		g.Close()
	}
}

// TestDecodedStateOwnsItsBytes: what the state keeps from a decoded value
// or command (a member's protocol metadata and assignment, a producer key)
// must not alias the buffer it was decoded from. A store iterator reuses
// its value's memory and the data plane may reuse a batch's: a group read
// at start aliased them once, and a restarted broker wrote other member
// metadata than its peers (found by the chaos suite once the group's bytes
// were hashed).
func TestDecodedStateOwnsItsBytes(t *testing.T) {
	scribble := func(b []byte) {
		for i := range b {
			b[i] = 0xee
		}
	}
	g := groups.NewGroup("g", 0)
	g.Members["m"] = &groups.Member{ID: "m", Protocols: []groups.GroupProtocol{{Name: "range", Metadata: []byte{0, 3, 1, 2, 3}}}, Assignment: []byte{9, 8, 7}}
	g.Regexes["ev-.*"], g.Regexes["none"] = []string{"ev-1", "ev-2"}, []string{}
	want := groups.EncodeGroup(g)
	v := bytes.Clone(want)
	got, err := groups.DecodeGroup("g", v)
	if err != nil {
		t.Fatal(err)
	}
	scribble(v)
	if enc := groups.EncodeGroup(got); !bytes.Equal(enc, want) {
		t.Fatalf("a decoded group changed when its buffer was reused:\n%x\n%x", enc, want)
	}
	signer := newSigner("alice", 3)
	for _, c := range []core.Command{
		groups.JoinGroup{Group: "g", ProtocolType: "consumer", Protocols: []groups.GroupProtocol{{Name: "range", Metadata: []byte{0, 3, 1}}}},
		groups.SyncGroup{Group: "g", MemberID: "m", Assignments: []groups.MemberAssignment{{MemberID: "m", Assignment: []byte{4, 5, 6}}}},
		signer.register(nil),
	} {
		raw := EncodeTx(core.Tx{Commands: []core.Command{c}})
		want := bytes.Clone(raw)
		tx, err := DecodeTx(raw)
		if err != nil {
			t.Fatal(err)
		}
		scribble(raw)
		if again := EncodeTx(tx); !bytes.Equal(again, want) {
			t.Fatalf("%s: the decoded command changed when its buffer was reused", KindName(c.Kind()))
		}
	}
}
