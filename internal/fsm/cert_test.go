package fsm

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
	"github.com/stele-io/stele/internal/record"
)

// testValidators makes n validators with deterministic keys.
func testValidators(t testing.TB, n int) (*trust.ValidatorSet, []ed25519.PrivateKey) {
	t.Helper()
	var vals []trust.Validator
	var keys []ed25519.PrivateKey
	for i := range n {
		seed := sha256.Sum256([]byte(fmt.Sprintf("validator-%d", i)))
		k := ed25519.NewKeyFromSeed(seed[:])
		var addr [20]byte
		h := sha256.Sum256(k.Public().(ed25519.PublicKey))
		copy(addr[:], h[:20])
		vals = append(vals, trust.Validator{Address: addr, PubKey: k.Public().(ed25519.PublicKey), Power: 10})
		keys = append(keys, k)
	}
	vs, err := trust.NewValidatorSet(vals)
	if err != nil {
		t.Fatal(err)
	}
	return vs, keys
}

// certify makes a certificate of payload signed by the given keys, that
// names no chain.
func certify(payload []byte, height int64, keys ...ed25519.PrivateKey) trust.Certificate {
	return certifyFor("", payload, height, keys...)
}

// certifyFor makes a certificate of payload bound to chain.
func certifyFor(chain string, payload []byte, height int64, keys ...ed25519.PrivateKey) trust.Certificate {
	c := trust.Certificate{Chain: chain, Digest: sha256.Sum256(payload), Size: uint32(len(payload)), Height: height}
	for _, k := range keys {
		var s trust.CertSig
		h := sha256.Sum256(k.Public().(ed25519.PublicKey))
		copy(s.Validator[:], h[:20])
		copy(s.Signature[:], ed25519.Sign(k, c.Statement()))
		c.Sigs = append(c.Sigs, s)
	}
	return c
}

// mapBatches is a BatchSource over a map; a missing digest is an error.
type mapBatches map[core.Digest][]byte

func (m mapBatches) Batch(c trust.Certificate) ([]byte, error) {
	if b, ok := m[c.Digest]; ok {
		return b, nil
	}
	return nil, errors.New("no such batch")
}

func openCertified(t testing.TB, dir string, vs *trust.ValidatorSet, src trust.BatchSource) *FSM {
	t.Helper()
	f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, Validators: vs, Batches: src})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCertifiedTxRoundTrip(t *testing.T) {
	_, keys := testValidators(t, 4)
	c := certify([]byte("payload"), 7, keys[0], keys[2])
	raw := trust.EncodeCertifiedTx(c)
	if !trust.IsCertifiedTx(raw) || trust.IsCertifiedTx(tx(1, topics.DeleteTopic{Name: "x"})) {
		t.Fatal("IsCertifiedTx misclassifies")
	}
	got, err := trust.DecodeCertifiedTx(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(trust.EncodeCertifiedTx(got), raw) {
		t.Fatal("round trip changed the certificate")
	}
	for i := range len(raw) {
		if _, err := trust.DecodeCertifiedTx(raw[:i]); err == nil {
			t.Fatalf("a certificate cut to %d bytes decoded", i)
		}
	}
	if _, err := trust.DecodeCertifiedTx(append(raw, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

func TestCertificateVerify(t *testing.T) {
	vs, keys := testValidators(t, 4)
	other, okeys := testValidators(t, 5)
	_ = other
	p := []byte("some batch")
	good := certify(p, 3, keys[1], keys[3])
	if err := vs.Verify(good); err != nil {
		t.Fatalf("two of four validators: %v", err)
	}
	twice := certify(p, 3, keys[1], keys[1])
	forged := certify(p, 3, keys[1], keys[2])
	forged.Sigs[1].Signature[0] ^= 1
	stranger := certify(p, 3, keys[0], okeys[4])
	moved := good
	moved.Height++
	for name, c := range map[string]trust.Certificate{
		"one of four":         certify(p, 3, keys[0]),
		"same signer twice":   twice,
		"forged signature":    forged,
		"not a validator":     stranger,
		"statement changed":   moved,
		"no validator at all": {Digest: good.Digest, Size: good.Size, Height: 3},
	} {
		if err := vs.Verify(c); !errors.Is(err, trust.ErrCertificate) {
			t.Errorf("%s: Verify = %v, want ErrCertificate", name, err)
		}
	}
	single, skeys := testValidators(t, 1)
	if err := single.Verify(certify(p, 1, skeys[0])); err != nil {
		t.Errorf("a single validator certifies alone: %v", err)
	}
	var none *trust.ValidatorSet
	if err := none.Verify(good); !errors.Is(err, trust.ErrNoValidators) {
		t.Errorf("nil set: %v", err)
	}
}

// TestCertifiedEqualsInline applies the scenario inline on one state
// machine and by certificate on another: the partition logs are identical
// byte for byte and every command has the same result (DESIGN.md §4:
// "fsm.Apply gives the same result for both").
func TestCertifiedEqualsInline(t *testing.T) {
	vs, keys := testValidators(t, 4)
	blocks := scenario(t)
	src := mapBatches{}
	var certified []block
	for i, b := range blocks {
		cb := block{time: b.time}
		for _, raw := range b.txs {
			src[sha256.Sum256(raw)] = raw
			cb.txs = append(cb.txs, trust.EncodeCertifiedTx(certify(raw, int64(i), keys[0], keys[3])))
		}
		certified = append(certified, cb)
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := open(t, dirA), openCertified(t, dirB, vs, src)
	defer a.Close()
	defer b.Close()
	for i := range blocks {
		oa, err := a.ApplyBlock(core.Block{Height: int64(i + 1), TimeMs: blocks[i].time, Txs: blocks[i].txs})
		if err != nil {
			t.Fatal(err)
		}
		ob, err := b.ApplyBlock(core.Block{Height: int64(i + 1), TimeMs: certified[i].time, Txs: certified[i].txs})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(oa.AppHash, ob.AppHash) {
			t.Fatalf("height %d: app hash inline %x, certified %x", i+1, oa.AppHash, ob.AppHash)
		}
		for j := range oa.Txs {
			if oa.Txs[j].Nonce != ob.Txs[j].Nonce || !bytes.Equal(oa.Txs[j].Data, ob.Txs[j].Data) || ob.Txs[j].Code != oa.Txs[j].Code {
				t.Fatalf("height %d tx %d: inline %+v, certified %+v", i+1, j, oa.Txs[j], ob.Txs[j])
			}
			if ob.Txs[j].Batch != sha256.Sum256(blocks[i].txs[j]) {
				t.Fatalf("height %d tx %d: outcome names batch %x", i+1, j, ob.Txs[j].Batch)
			}
		}
		for _, f := range []*FSM{a, b} {
			if _, err := f.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	settle(t, a)
	settle(t, b)
	fa, fb := logFiles(t, dirA), logFiles(t, dirB)
	if len(fa) == 0 || len(fa) != len(fb) {
		t.Fatalf("log file sets differ: %d vs %d files", len(fa), len(fb))
	}
	for n := range fa {
		if !bytes.Equal(fa[n], fb[n]) {
			t.Errorf("%s differs between inline and certified application", n)
		}
	}
}

// TestCertificateRules: a certificate applies once, only inside its
// window, only with valid signatures; the memory of applied certificates
// survives a restart and is dropped once the window has passed; a batch
// nobody can supply stops the block instead of being skipped.
func TestCertificateRules(t *testing.T) {
	vs, keys := testValidators(t, 4)
	src := mapBatches{}
	dir := t.TempDir()
	f := openCertified(t, dir, vs, src)
	height := int64(0)
	apply := func(txs ...[]byte) core.BlockOutcome {
		t.Helper()
		height++
		out, err := f.ApplyBlock(core.Block{Height: height, TimeMs: t0 + height, Txs: txs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	put := func(n int, cmds ...core.Command) []byte {
		raw := tx(n, cmds...)
		src[sha256.Sum256(raw)] = raw
		return raw
	}
	create := put(1, topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: 1})
	if out := apply(trust.EncodeCertifiedTx(certify(create, 0, keys[0], keys[1]))); out.Txs[0].Code != 0 || out.Txs[0].Results[0].Code != 0 {
		t.Fatalf("create by certificate: %+v", out.Txs[0])
	}
	prod := put(2, topics.Produce{Topic: "t", Records: batch(t, t0, record.CodecNone, "k", 3)})
	c := trust.EncodeCertifiedTx(certify(prod, 1, keys[2], keys[3]))
	again := trust.EncodeCertifiedTx(certify(prod, 1, keys[0], keys[3])) // same batch, other signers
	out := apply(c, again)
	if out.Txs[0].Code != 0 || out.Txs[1].Code == 0 || !strings.Contains(out.Txs[1].Log, "already applied") {
		t.Fatalf("a batch certified twice in one block: %+v / %+v", out.Txs[0], out.Txs[1])
	}
	if hwm := f.View().Partition("t", 0).HighWatermark(); hwm != 3 {
		t.Fatalf("high watermark %d after one batch of 3, want 3", hwm)
	}
	// Restarted, the state machine still refuses the batch.
	f.Close()
	f = openCertified(t, dir, vs, src)
	defer func() { f.Close() }()
	if out := apply(c); out.Txs[0].Code == 0 {
		t.Fatal("after a restart the batch applied again")
	}
	future := put(3, topics.DeleteRecords{Topic: "t", Offset: 1})
	for _, c := range []struct {
		name string
		raw  func() []byte
	}{
		{"from the future", func() []byte { return trust.EncodeCertifiedTx(certify(future, height+1, keys[0], keys[1])) }},
		{"too few signers", func() []byte { return trust.EncodeCertifiedTx(certify(future, height, keys[0])) }},
		{"made too long ago", func() []byte {
			return trust.EncodeCertifiedTx(certify(future, height-trust.CertWindow, keys[0], keys[1]))
		}},
		{"trailing garbage", func() []byte { return append(trust.EncodeCertifiedTx(certify(future, height, keys[0], keys[1])), 1) }},
	} {
		if out := apply(c.raw()); out.Txs[0].Code == 0 {
			t.Errorf("%s: applied", c.name)
		}
	}
	if err := f.ValidateTx(trust.EncodeCertifiedTx(certify(future, height, keys[0]))); err == nil {
		t.Error("ValidateTx accepted a certificate with too few signers")
	}
	if err := f.CheckTx(trust.EncodeCertifiedTx(certify(future, height, keys[0], keys[1]))); err != nil {
		t.Errorf("CheckTx refused a good certificate: %v", err)
	}
	// The window passes: the remembered certificates are dropped.
	for height < trust.CertWindow+70 {
		apply()
	}
	if n := len(f.Certs); n != 0 {
		t.Errorf("%d certificates remembered after their window", n)
	}
	var keysLeft int
	if err := f.Store.Scan([]byte("c/"), func(k, v []byte) error { keysLeft++; return nil }); err != nil {
		t.Fatal(err)
	}
	if keysLeft != 0 {
		t.Errorf("%d certificate keys left in the store after their window", keysLeft)
	}
	// A batch nobody holds: the block is not applied.
	missing := tx(9, topics.DeleteTopic{Name: "t"})
	_, err := f.ApplyBlock(core.Block{Height: height + 1, TimeMs: t0 + height + 1, Txs: [][]byte{trust.EncodeCertifiedTx(certify(missing, height, keys[0], keys[1]))}})
	if !errors.Is(err, trust.ErrBatchUnavailable) {
		t.Fatalf("ApplyBlock with an unavailable batch: %v, want ErrBatchUnavailable", err)
	}
}

// TestCertifiedRefusedWithoutValidators: a broker that runs inline only
// refuses certificates everywhere.
func TestCertifiedRefusedWithoutValidators(t *testing.T) {
	_, keys := testValidators(t, 1)
	f := open(t, t.TempDir())
	defer f.Close()
	raw := trust.EncodeCertifiedTx(certify([]byte("x"), 0, keys[0]))
	if f.CheckTx(raw) == nil || f.ValidateTx(raw) == nil {
		t.Fatal("a certificate passed without a validator set")
	}
	out, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{raw}})
	if err != nil || out.Txs[0].Code == 0 {
		t.Fatalf("ApplyBlock: %v %+v", err, out.Txs[0])
	}
}

func FuzzDecodeCertifiedTx(f *testing.F) {
	_, keys := testValidators(f, 2)
	f.Add(trust.EncodeCertifiedTx(certify([]byte("p"), 1, keys[0], keys[1])))
	f.Add([]byte("STL\x02"))
	f.Add(trust.EncodeCertifiedTx(certifyFor(testChainID, []byte("p"), 1, keys[0], keys[1])))
	f.Add([]byte("STL\x03\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := trust.DecodeCertifiedTx(b)
		if err != nil {
			return
		}
		if !bytes.Equal(trust.EncodeCertifiedTx(c), b) {
			t.Fatalf("decoded certificate re-encodes differently")
		}
	})
}

// TestVerifiedCertificatesAreRemembered: a certificate verified once is
// not verified again, and a certificate differing in any byte (a forged
// signature) is verified on its own.
func TestVerifiedCertificatesAreRemembered(t *testing.T) {
	vs, keys := testValidators(t, 4)
	f := openCertified(t, t.TempDir(), vs, mapBatches{})
	defer f.Close()
	good := certify([]byte("batch"), 0, keys[0], keys[1])
	if err := f.CheckTx(trust.EncodeCertifiedTx(good)); err != nil {
		t.Fatal(err)
	}
	forged := good
	forged.Sigs = append([]trust.CertSig(nil), good.Sigs...)
	forged.Sigs[1].Signature[5] ^= 1
	if err := f.ValidateTx(trust.EncodeCertifiedTx(forged)); !errors.Is(err, trust.ErrCertificate) {
		t.Fatalf("a forged copy of a verified certificate: %v", err)
	}
	if !f.Verified.Has(vs.VerifiedKey(trust.EncodeCertifiedTx(good))) {
		t.Fatal("the verified certificate was not remembered")
	}
	// The set is bounded: it forgets the oldest.
	var v trust.VerifiedCerts
	for i := range trust.VerifiedCertsMax + 10 {
		v.Add(sha256.Sum256([]byte(fmt.Sprint(i))))
	}
	if len(v.Set) != trust.VerifiedCertsMax || v.Has(sha256.Sum256([]byte("0"))) || !v.Has(sha256.Sum256([]byte(fmt.Sprint(trust.VerifiedCertsMax+9)))) {
		t.Fatalf("bounded set: %d entries", len(v.Set))
	}
}

// TestChainBoundCertificates: under app version 1 only certificates that
// name no chain apply, and one bound to the chain is refused everywhere
// and hashed as a broker that could not decode it hashed it; from the
// height of the upgrade to version 2 only bound ones apply, one that names
// none is refused with CodeResubmit (its producer certifies it again) and
// one bound to another chain is refused, also after a restart.
func TestChainBoundCertificates(t *testing.T) {
	c := newUpgradeChain(t, 2)
	keys := c.keys
	wantUpgradeCode(t, "create", c.block(topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: 1})[0], 0)
	n := 100
	payload := func() []byte {
		n++
		raw := tx(n, topics.Produce{Topic: "t", Records: batch(t, t0, record.CodecNone, "k", 1)})
		c.src[sha256.Sum256(raw)] = raw
		return raw
	}
	apply := func(txs ...[]byte) core.BlockOutcome {
		t.Helper()
		h := c.height() + 1
		out, err := c.f.ApplyBlock(core.Block{Height: h, TimeMs: 1000 * h, Txs: txs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.f.Commit(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	hwm := func() int64 { return c.f.View().Partition("t", 0).HighWatermark() }

	// Version 1.
	if c.f.CertificatesBound() {
		t.Fatal("version 1 binds certificates")
	}
	bound := trust.EncodeCertifiedTx(certifyFor(testChainID, payload(), c.height(), keys[0], keys[1]))
	if c.f.CheckTx(bound) == nil || c.f.ValidateTx(bound) == nil {
		t.Fatal("version 1 admits a chain-bound certificate")
	}
	out := apply(bound, trust.EncodeCertifiedTx(certify(payload(), c.height(), keys[0], keys[1])))
	if o := out.Txs[0]; o.Code != 1 || o.Batch != (core.Digest{}) {
		t.Fatalf("a bound certificate under version 1: code %d, batch %x (want 1, hashed as its bytes)", o.Code, o.Batch[:4])
	}
	if o := out.Txs[1]; o.Code != 0 || o.Results[0].Code != 0 || hwm() != 1 {
		t.Fatalf("an unbound certificate under version 1: %+v, high watermark %d", o, hwm())
	}

	// The upgrade: from its height on.
	up := cluster.UpgradePlan{Height: c.height() + 1 + cluster.MinUpgradeDelay, Version: 2, Name: "bound-certs"}
	wantUpgradeCode(t, "upgrade", c.block(upgradeVote(up, keys[0], keys[1], keys[2]))[0], 0)
	c.to(up.Height - 2)
	if c.f.CertificatesBound() {
		t.Fatal("bound two blocks before the upgrade")
	}
	c.to(up.Height - 1)
	if !c.f.CertificatesBound() {
		t.Fatal("not bound for the upgrade's block")
	}
	unbound := trust.EncodeCertifiedTx(certify(payload(), c.height(), keys[0], keys[1]))
	bound = trust.EncodeCertifiedTx(certifyFor(testChainID, payload(), c.height(), keys[2], keys[3]))
	other := trust.EncodeCertifiedTx(certifyFor("staging", payload(), c.height(), keys[0], keys[1]))
	for name, raw := range map[string][]byte{"bound": bound, "unbound": unbound} {
		if err := c.f.CheckTx(raw); err != nil {
			t.Errorf("CheckTx of the %s certificate: %v", name, err)
		}
		if err := c.f.ValidateTx(raw); err != nil {
			t.Errorf("ValidateTx of the %s certificate: %v", name, err)
		}
	}
	if c.f.CheckTx(other) == nil || c.f.ValidateTx(other) == nil {
		t.Error("a certificate of another chain is admitted")
	}
	out = apply(unbound, bound, other)
	if o := out.Txs[0]; o.Code != core.CodeResubmit {
		t.Errorf("an unbound certificate at the upgrade: code %d (%s), want CodeResubmit", o.Code, o.Log)
	}
	if o := out.Txs[1]; o.Code != 0 || o.Results[0].Code != 0 {
		t.Errorf("a bound certificate at the upgrade: %+v", o)
	}
	if o := out.Txs[2]; o.Code != 1 || !strings.Contains(o.Log, "staging") {
		t.Errorf("another chain's certificate: code %d (%s)", o.Code, o.Log)
	}
	if got := hwm(); got != 2 {
		t.Fatalf("high watermark %d, want 2: only the bound certificate applies", got)
	}

	// Restarted, the state machine still binds.
	c.restart(2)
	if !c.f.CertificatesBound() {
		t.Fatal("not bound after a restart")
	}
	unbound = trust.EncodeCertifiedTx(certify(payload(), c.height(), keys[0], keys[1]))
	bound = trust.EncodeCertifiedTx(certifyFor(testChainID, payload(), c.height(), keys[0], keys[1]))
	out = apply(unbound, bound)
	if out.Txs[0].Code != core.CodeResubmit || out.Txs[1].Code != 0 || hwm() != 3 {
		t.Fatalf("after a restart: codes %d and %d, high watermark %d", out.Txs[0].Code, out.Txs[1].Code, hwm())
	}
}
