package fsm

import (
	"crypto/ed25519"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
)

// signer is a test producer key.
type signer struct {
	name string
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
}

func newSigner(name string, seed byte) signer {
	priv := ed25519.NewKeyFromSeed(append(make([]byte, 31), seed))
	return signer{name, priv.Public().(ed25519.PublicKey), priv}
}

func (s signer) register(endorser *signer) trust.RegisterProducerKey {
	msg := proof.RegistrationMessage(s.name, s.pub)
	c := trust.RegisterProducerKey{Principal: s.name, PublicKey: s.pub, Proof: ed25519.Sign(s.priv, msg)}
	if endorser != nil {
		c.Endorsement = ed25519.Sign(endorser.priv, msg)
	}
	return c
}

// signedRec is a record to sign: value, the signer (nil: unsigned), the
// sequence, and an edit applied after signing (a broker's tampering).
type signedRec struct {
	value string
	by    *signer
	seq   uint64
	edit  func(*record.Record)
}

func signedBatch(t *testing.T, topic string, pid int64, seq int32, recs ...signedRec) []byte {
	t.Helper()
	return signedBatchFor(t, "", topic, pid, seq, recs...)
}

// signedBatchFor is signedBatch with v2 signatures for chain ("": v1).
func signedBatchFor(t *testing.T, chain, topic string, pid int64, seq int32, recs ...signedRec) []byte {
	t.Helper()
	out := make([]record.Record, len(recs))
	for i, r := range recs {
		rec := record.Record{OffsetDelta: int32(i), Key: []byte("k"), Value: []byte(r.value),
			Headers: []record.RecordHeader{{Key: "h", Value: []byte("x")}}}
		if r.by != nil {
			hs := []proof.RecordHeader{{Key: "h", Value: []byte("x")}}
			sig := proof.SignRecordFor(r.by.priv, chain, r.by.name, r.seq, topic, rec.Key, rec.Value, hs)
			rec.Headers = append(rec.Headers, record.RecordHeader{Key: proof.SignatureHeader, Value: []byte(sig)})
		}
		if r.edit != nil {
			r.edit(&rec)
		}
		out[i] = rec
	}
	h := record.Header{FirstTimestamp: t0, ProducerID: pid, ProducerEpoch: 0, BaseSequence: seq}
	if pid < 0 {
		h.ProducerEpoch, h.BaseSequence = -1, -1
	}
	b, err := record.Build(h, out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSignedProducers: a registered principal's signed records are
// written; one altered after signing (value, key, a header, the
// signature's sequence), signed by an unregistered principal or with
// another key, or replaying a sequence is refused whole with
// INVALID_RECORD naming why; a topic with stele.signed.by takes only its
// principals' signed records; a key rotates only with the current key's
// endorsement; an idempotent retry of a signed batch is a retry, not a
// replay; all of it survives a restart.
func TestSignedProducers(t *testing.T) {
	dir := t.TempDir()
	d := &groupDriver{t: t, f: openGroups(t, dir), now: t0}
	alice, bob, mallory := newSigner("alice", 1), newSigner("bob", 2), newSigner("mallory", 3)
	d.block(0, topics.CreateTopic{Name: "open", Partitions: 1, ReplicationFactor: -1},
		topics.CreateTopic{Name: "ledger", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.signed.by", Value: "alice"}}})
	wantCode(t, "register alice", d.block(10, alice.register(nil))[0], 0)
	wantCode(t, "register bob", d.block(10, bob.register(nil))[0], 0)
	if r := CheckCommand(trust.RegisterProducerKey{Principal: "eve", PublicKey: mallory.pub, Proof: ed25519.Sign(alice.priv, []byte("x"))}); r.Code == 0 {
		t.Error("a registration whose key did not sign it passed CheckCommand")
	}

	produce := func(topic string, recs ...signedRec) core.Result {
		return d.block(10, topics.Produce{Topic: topic, Partition: 0, Records: signedBatch(t, topic, -1, -1, recs...)})[0]
	}
	refused := func(what string, r core.Result, why string) {
		t.Helper()
		wantCode(t, what, r, kerr.InvalidRecord.Code)
		if !strings.Contains(r.Message, why) {
			t.Errorf("%s: message %q does not say %q", what, r.Message, why)
		}
	}
	wantCode(t, "alice signs two records", produce("open", signedRec{"a1", &alice, 1, nil}, signedRec{"a2", &alice, 2, nil}), 0)
	wantCode(t, "unsigned, to an open topic", produce("open", signedRec{"plain", nil, 0, nil}), 0)
	refused("value altered after signing", produce("open", signedRec{"a3", &alice, 3, func(r *record.Record) { r.Value = []byte("forged") }}), "does not match")
	refused("key altered", produce("open", signedRec{"a3", &alice, 3, func(r *record.Record) { r.Key = []byte("other") }}), "does not match")
	refused("a header altered", produce("open", signedRec{"a3", &alice, 3, func(r *record.Record) { r.Headers[0].Value = []byte("y") }}), "does not match")
	refused("the sequence altered", produce("open", signedRec{"a3", &alice, 3, func(r *record.Record) {
		r.Headers[1].Value = []byte(strings.Replace(string(r.Headers[1].Value), ":3:", ":4:", 1))
	}}), "does not match")
	refused("signed for another topic", d.block(10, topics.Produce{Topic: "open", Partition: 0,
		Records: signedBatch(t, "ledger", -1, -1, signedRec{"a3", &alice, 3, nil})})[0], "does not match")
	refused("a replayed sequence", produce("open", signedRec{"again", &alice, 1, nil}), "used before")
	refused("a sequence twice in one batch", produce("open", signedRec{"x", &alice, 5, nil}, signedRec{"y", &alice, 5, nil}), "used before")
	refused("an unregistered principal", produce("open", signedRec{"m", &mallory, 1, nil}), "no producer key")
	impostor := mallory
	impostor.name = "alice"
	refused("another key claiming alice", produce("open", signedRec{"m", &impostor, 9, nil}), "does not match")
	refused("a malformed signature", produce("open", signedRec{"a", nil, 0, func(r *record.Record) {
		r.Headers = append(r.Headers, record.RecordHeader{Key: proof.SignatureHeader, Value: []byte("v1:alice:1:short")})
	}}), "signature")
	// Nothing of a refused batch is written, its sequences stay free.
	wantCode(t, "a refused batch's sequence", produce("open", signedRec{"a5", &alice, 5, nil}), 0)

	// stele.signed.by: alice's records only.
	wantCode(t, "alice to the ledger", produce("ledger", signedRec{"l1", &alice, 10, nil}), 0)
	refused("unsigned to the ledger", produce("ledger", signedRec{"l2", nil, 0, nil}), "not signed")
	refused("bob to the ledger", produce("ledger", signedRec{"l3", &bob, 1, nil}), "signed by bob")
	refused("one unsigned record among signed ones", produce("ledger", signedRec{"l4", &alice, 11, nil}, signedRec{"l5", nil, 0, nil}), "not signed")

	// Rotation: only with the current key's endorsement.
	alice2 := newSigner("alice", 4)
	wantCode(t, "alice's new key without endorsement", d.block(10, alice2.register(nil))[0], kerr.InvalidRequest.Code)
	wantCode(t, "alice's new key endorsed by bob", d.block(10, alice2.register(&bob))[0], kerr.InvalidRequest.Code)
	wantCode(t, "alice's new key endorsed by alice", d.block(10, alice2.register(&alice))[0], 0)
	refused("alice's old key after rotation", produce("open", signedRec{"old", &alice, 20, nil}), "does not match")
	wantCode(t, "alice's new key", produce("open", signedRec{"new", &alice2, 21, nil}), 0)

	// An idempotent producer's retry of a signed batch is a retry.
	pid := d.block(10, producers.InitProducerID{})[0].ProducerID
	b := signedBatch(t, "open", pid, 0, signedRec{"idem", &alice2, 30, nil})
	first := d.block(10, topics.Produce{Topic: "open", Partition: 0, Records: b})[0]
	retry := d.block(10, topics.Produce{Topic: "open", Partition: 0, Records: b})[0]
	wantCode(t, "a signed idempotent batch", first, 0)
	if retry.Code != 0 || retry.BaseOffset != first.BaseOffset {
		t.Errorf("its retry: code %d (%s) offset %d, want offset %d", retry.Code, retry.Message, retry.BaseOffset, first.BaseOffset)
	}

	// After a restart: keys and used sequences are state.
	if err := d.f.Close(); err != nil {
		t.Fatal(err)
	}
	d.f = openGroups(t, dir)
	refused("a replay after a restart", produce("open", signedRec{"again", &alice2, 21, nil}), "used before")
	refused("the old key after a restart", produce("open", signedRec{"old", &alice, 22, nil}), "does not match")
	if k, err := d.f.ProducerKey("alice"); err != nil || !alice2.pub.Equal(ed25519.PublicKey(k)) {
		t.Errorf("ProducerKey(alice): %x %v, want the rotated key", k, err)
	}
	wantCode(t, "a bad stele.signed.by", d.block(10, topics.AlterConfigs{Topic: "open", Incremental: true,
		Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "stele.signed.by", Value: "alice,b:ad"}}})[0], kerr.InvalidConfig.Code)
}

// TestSignedInScenario: the scenario (which TestDeterminism and the
// snapshot tests replay) registers a key and writes a signed record; both
// are in the state after it, on a restored snapshot too.
func TestSignedInScenario(t *testing.T) {
	f := open(t, t.TempDir())
	applyAll(t, f, scenario(t))
	check := func(f *FSM, when string) {
		t.Helper()
		if _, err := f.ProducerKey("alice"); err != nil {
			t.Errorf("%s: alice's key: %v", when, err)
		}
		if _, used, err := f.Store.Get(trust.SeqKey("alice", 1)); err != nil || !used {
			t.Errorf("%s: alice's sequence 1 is not used: the signed record was refused (%v)", when, err)
		}
	}
	check(f, "after the scenario")
	restored := open(t, t.TempDir())
	restoreInto(t, restored, takeSnapshot(t, f, filepath.Join(t.TempDir(), "snap"), nil))
	check(restored, "restored from a snapshot")
}

// TestSignedRecordsBoundToTheChain: under app version 1 a chain takes v1
// record signatures only (a v2 one is refused with INVALID_RECORD, as a
// broker that could not parse one refused it); from the upgrade to
// version 2 only v2 signatures made for this chain: a v1 one, or one made
// for another chain whose registry holds the same key, is refused.
func TestSignedRecordsBoundToTheChain(t *testing.T) {
	c := newUpgradeChain(t, 2)
	alice := newSigner("alice", 1)
	wantUpgradeCode(t, "create", c.block(topics.CreateTopic{Name: "s", Partitions: 1, ReplicationFactor: 1})[0], 0)
	wantUpgradeCode(t, "register", c.block(alice.register(nil))[0], 0)
	seq := uint64(0)
	produce := func(what string, chain string, want int16) {
		t.Helper()
		seq++
		b := signedBatchFor(t, chain, "s", -1, -1, signedRec{value: what, by: &alice, seq: seq})
		wantUpgradeCode(t, what, c.block(topics.Produce{Topic: "s", Records: b})[0], want)
	}
	produce("v2 under version 1", testChainID, kerr.InvalidRecord.Code)
	produce("v1 under version 1", "", 0)

	up := cluster.UpgradePlan{Height: c.height() + 1 + cluster.MinUpgradeDelay, Version: 2, Name: "bound"}
	wantUpgradeCode(t, "upgrade", c.block(upgradeVote(up, c.keys[0], c.keys[1], c.keys[2]))[0], 0)
	c.to(up.Height - 1)
	produce("v1 at the upgrade", "", kerr.InvalidRecord.Code)
	produce("v2 for another chain", "staging", kerr.InvalidRecord.Code)
	produce("v2 for this chain", testChainID, 0)
	seq-- // the same sequence again: a replay
	produce("v2 replayed", testChainID, kerr.InvalidRecord.Code)
	c.restart(2)
	produce("v1 after a restart", "", kerr.InvalidRecord.Code)
	produce("v2 after a restart", testChainID, 0)
	if hwm := c.f.View().Partition("s", 0).HighWatermark(); hwm != 3 {
		t.Fatalf("high watermark %d, want the 3 records taken", hwm)
	}
}
