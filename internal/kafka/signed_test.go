package kafka

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/pkg/proof"
	"github.com/stele-io/stele/pkg/stele"
)

// TestSignedThroughKafka: franz-go producing with pkg/stele's Signer (the
// idempotent producer, batches of several records) to a topic that takes
// alice's signed records only: written; the same records altered after
// signing, or unsigned, fail with INVALID_RECORD; a consumer reads the
// signatures back and verifies them against alice's registered key.
func TestSignedThroughKafka(t *testing.T) {
	tb := startTestBroker(t, nil)
	cl := client(t, tb.addr, kgo.DefaultProduceTopic("ledger"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 1, -1, map[string]*string{"stele.signed.by": kadm.StringPtr("alice")}, "ledger"); err != nil {
		t.Fatal(err)
	}
	priv := ed25519.NewKeyFromSeed(make([]byte, 32))
	pub := priv.Public().(ed25519.PublicKey)
	msg := proof.RegistrationMessage("alice", pub)
	if r, err := tb.b.SubmitOne(context.Background(), fsm.RegisterProducerKey{Principal: "alice", PublicKey: pub, Proof: ed25519.Sign(priv, msg)}); err != nil || r.Code != 0 {
		t.Fatalf("register: %+v %v", r, err)
	}
	chain, err := stele.SignatureChain(ctx(t), cl)
	if err != nil || chain != "stele-test" {
		t.Fatalf("SignatureChain: %q, %v; want the chain id, stele-test", chain, err)
	}
	s := &stele.Signer{Principal: "alice", Key: priv, ChainID: chain}
	var recs []*kgo.Record
	for _, v := range []string{"one", "two", "three"} {
		r := &kgo.Record{Topic: "ledger", Key: []byte("k"), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}
		s.Sign(r)
		recs = append(recs, r)
	}
	if err := cl.ProduceSync(ctx(t), recs...).FirstErr(); err != nil {
		t.Fatalf("signed records: %v", err)
	}
	forged := &kgo.Record{Topic: "ledger", Key: []byte("k"), Value: []byte("four")}
	s.Sign(forged)
	forged.Value = []byte("forged")
	if err := cl.ProduceSync(ctx(t), forged).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
		t.Errorf("a record altered after signing: %v, want INVALID_RECORD", err)
	}
	if err := cl.ProduceSync(ctx(t), &kgo.Record{Topic: "ledger", Value: []byte("plain")}).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
		t.Errorf("an unsigned record: %v, want INVALID_RECORD", err)
	}
	for name, other := range map[string]*stele.Signer{
		"v1, naming no chain": {Principal: "alice", Key: priv},
		"for another chain":   {Principal: "alice", Key: priv, ChainID: "staging"},
	} {
		r := &kgo.Record{Topic: "ledger", Key: []byte("k"), Value: []byte("five")}
		other.Sign(r)
		if err := cl.ProduceSync(ctx(t), r).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
			t.Errorf("a record signed %s: %v, want INVALID_RECORD", name, err)
		}
	}

	consumer := client(t, tb.addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"ledger": {0: kgo.NewOffset().AtStart()}}))
	var got []string
	for len(got) < 3 {
		fs := consumer.PollFetches(ctx(t))
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var hs []proof.RecordHeader
			var sig []byte
			for _, h := range r.Headers {
				hs = append(hs, proof.RecordHeader{Key: h.Key, Value: h.Value})
				if h.Key == proof.SignatureHeader {
					sig = h.Value
				}
			}
			ps, err := proof.ParseSignature(sig)
			if err != nil {
				t.Fatalf("record %d: %v", r.Offset, err)
			}
			if err := proof.VerifyRecordOn(pub, chain, ps, r.Topic, r.Key, r.Value, hs); err != nil {
				t.Fatalf("record %d does not verify for its reader: %v", r.Offset, err)
			}
			got = append(got, string(r.Value))
		})
	}
	if len(got) != 3 || got[0] != "one" || got[2] != "three" {
		t.Errorf("read %v", got)
	}
}
