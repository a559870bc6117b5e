package dataplane

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

// payload returns a well-formed transaction producing n records.
func payload(t testing.TB, n int) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), Value: bytes.Repeat([]byte{byte(i)}, 100)}
	}
	b, err := record.Build(record.Header{FirstTimestamp: 1, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	var nonce fsm.Nonce
	nonce[0] = byte(n)
	return fsm.EncodeTx(fsm.Tx{Nonce: nonce, Commands: []fsm.Command{fsm.Produce{Topic: "t", Records: b}}})
}

type node struct {
	plane  *Plane
	store  *Store
	srv    *httptest.Server
	height atomic.Int64
	// bound: the certificates it makes and signs name testChain.
	bound atomic.Bool
	// wrap, when set, serves instead of the plane's handler.
	wrap atomic.Pointer[http.Handler]
}

// testChain is the chain id of the planes cluster starts.
const testChain = "dataplane-test"

// cluster starts n planes, each with its own store and HTTP server.
func cluster(t *testing.T, n int) []*node {
	t.Helper()
	var vals []fsm.Validator
	var keys []ed25519.PrivateKey
	for i := range n {
		seed := sha256.Sum256([]byte(fmt.Sprintf("key-%d", i)))
		k := ed25519.NewKeyFromSeed(seed[:])
		var a [20]byte
		copy(a[:], addressOf(k.Public().(ed25519.PublicKey)))
		vals = append(vals, fsm.Validator{Address: a, PubKey: k.Public().(ed25519.PublicKey), Power: 1})
		keys = append(keys, k)
	}
	vs, err := fsm.NewValidatorSet(vals)
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*node, n)
	for i := range nodes {
		nd := &node{}
		nd.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h := nd.wrap.Load(); h != nil {
				(*h).ServeHTTP(w, r)
				return
			}
			nd.plane.Handler().ServeHTTP(w, r)
		}))
		t.Cleanup(nd.srv.Close)
		if nd.store, err = OpenStore(t.TempDir(), StoreOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.store.Close() })
		nodes[i] = nd
	}
	for i, nd := range nodes {
		var peers []Peer
		for j, other := range nodes {
			if j != i {
				peers = append(peers, Peer{Validator: vals[j].Address, URL: other.srv.URL})
			}
		}
		nd.plane, err = New(Options{Store: nd.store, Key: keys[i], Validators: vs, Peers: peers,
			Height: nd.height.Load, ChainID: testChain, Bound: nd.bound.Load, PushTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nd.plane.Close)
	}
	return nodes
}

func TestCertifyAlone(t *testing.T) {
	nd := cluster(t, 1)[0]
	p := payload(t, 3)
	c, err := nd.plane.Certify(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.plane.opts.Validators.Verify(c); err != nil {
		t.Fatalf("a single validator's certificate: %v", err)
	}
	got, err := nd.plane.Batch(c)
	if err != nil || !bytes.Equal(got, p) {
		t.Fatalf("Batch: %v", err)
	}
	if hits := testutil.ToFloat64(nd.plane.opts.Metrics.recentHits); hits != 1 {
		t.Errorf("the batch just certified was read back from disk (%v hits in memory)", hits)
	}
	// Taken once from memory; a second read comes from the store.
	if got, err := nd.plane.Batch(c); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("Batch again: %v", err)
	}
}

func TestCertifySpreadsToEveryPeer(t *testing.T) {
	nodes := cluster(t, 4)
	p := payload(t, 5)
	c, err := nodes[0].plane.Certify(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].plane.opts.Validators.Verify(c); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, nd := range nodes {
		for !nd.store.Has(c.Digest) {
			if time.Now().After(deadline) {
				t.Fatal("the batch did not reach every peer")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestCertifyWithPeersDown: with one of four down a certificate still
// forms; with three of four down none can, and Certify says so.
func TestCertifyWithPeersDown(t *testing.T) {
	nodes := cluster(t, 4)
	nodes[3].srv.Close()
	if _, err := nodes[0].plane.Certify(context.Background(), payload(t, 1)); err != nil {
		t.Fatalf("one of four down: %v", err)
	}
	nodes[1].srv.Close()
	nodes[2].srv.Close()
	if _, err := nodes[0].plane.Certify(context.Background(), payload(t, 2)); !errors.Is(err, ErrNotCertified) {
		t.Fatalf("three of four down: %v, want ErrNotCertified", err)
	}
}

// TestLyingPeersAreNotCounted: a peer that answers a signature that does
// not verify, or another validator's, adds nothing to a certificate.
func TestLyingPeersAreNotCounted(t *testing.T) {
	nodes := cluster(t, 4)
	var liar http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(make([]byte, 84))
	})
	for _, nd := range nodes[1:] {
		nd.wrap.Store(&liar)
	}
	if _, err := nodes[0].plane.Certify(context.Background(), payload(t, 1)); !errors.Is(err, ErrNotCertified) {
		t.Fatalf("every peer lying: %v, want ErrNotCertified", err)
	}
}

// TestBatchFetchesFromAnHonestSigner: a broker missing a batch fetches it
// from a signer; a signer serving other bytes is passed over.
func TestBatchFetchesFromAnHonestSigner(t *testing.T) {
	nodes := cluster(t, 4)
	var down http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	})
	nodes[3].wrap.Store(&down)
	p := payload(t, 7)
	c, err := nodes[0].plane.Certify(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the background pushes to settle, then make every signer
	// but one corrupt what it serves.
	deadline := time.Now().Add(10 * time.Second)
	for !nodes[1].store.Has(c.Digest) || !nodes[2].store.Has(c.Digest) {
		if time.Now().After(deadline) {
			t.Fatal("pushes did not arrive")
		}
		time.Sleep(5 * time.Millisecond)
	}
	nodes[3].wrap.Store(nil)
	if nodes[3].store.Has(c.Digest) {
		t.Fatal("node 3 holds the batch although it refused the push")
	}
	c.Sigs = nil
	for _, i := range []int{0, 1, 2} {
		c.Sigs = append(c.Sigs, nodes[i].plane.sign(c))
	}
	var corrupt http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := append([]byte(nil), p...)
		b[10] ^= 1
		w.Write(b)
	})
	nodes[0].wrap.Store(&corrupt)
	nodes[1].wrap.Store(&corrupt)
	got, err := nodes[3].plane.Batch(c)
	if err != nil || !bytes.Equal(got, p) {
		t.Fatalf("Batch: %v", err)
	}
	if !nodes[3].store.Has(c.Digest) {
		t.Error("a fetched batch was not stored")
	}
	// Closing the plane ends a fetch nobody can answer.
	nodes[2].wrap.Store(&corrupt)
	missing := fsm.Certificate{Digest: sha256.Sum256([]byte("nothing")), Size: 7, Sigs: c.Sigs}
	done := make(chan error, 1)
	go func() { _, err := nodes[3].plane.Batch(missing); done <- err }()
	time.Sleep(100 * time.Millisecond)
	nodes[3].plane.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Batch after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Batch did not return after Close")
	}
}

func TestHandlerRefusesBadInput(t *testing.T) {
	nd := cluster(t, 1)[0]
	nd.height.Store(1000)
	good := payload(t, 1)
	dg := func(b []byte) string { return fmt.Sprintf("&digest=%x", sha256.Sum256(b)) }
	stranger := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	const (
		signed = iota
		unsigned
		byStranger
		forged // signed, then the query changed
	)
	for _, c := range []struct {
		name, method, path string
		body               []byte
		auth               int
		want               int
	}{
		{"unsigned push", "POST", batchesPath + "?height=1000" + dg(good), good, unsigned, http.StatusUnauthorized},
		{"unsigned fetch", "GET", fmt.Sprintf("%s/%x", batchesPath, sha256.Sum256(good)), nil, unsigned, http.StatusUnauthorized},
		{"push signed by a stranger", "POST", batchesPath + "?height=1000" + dg(good), good, byStranger, http.StatusUnauthorized},
		{"push whose query changed after signing", "POST", batchesPath + "?height=1000" + dg(good), good, forged, http.StatusUnauthorized},
		{"no digest", "POST", batchesPath + "?height=1000", good, signed, http.StatusBadRequest},
		{"another batch's digest", "POST", batchesPath + "?height=1000" + dg([]byte("x")), good, signed, http.StatusBadRequest},
		{"no height", "POST", batchesPath + "?" + dg(good)[1:], good, signed, http.StatusBadRequest},
		{"height far ahead", "POST", batchesPath + "?height=5000" + dg(good), good, signed, http.StatusConflict},
		{"height long past", "POST", batchesPath + "?height=10" + dg(good), good, signed, http.StatusConflict},
		{"empty", "POST", batchesPath + "?height=1000" + dg(nil), nil, signed, http.StatusBadRequest},
		{"not a transaction", "POST", batchesPath + "?height=1000" + dg([]byte("hello")), []byte("hello"), signed, http.StatusBadRequest},
		{"too large", "POST", batchesPath + "?height=1000" + dg(good), make([]byte, 17<<20), signed, http.StatusRequestEntityTooLarge},
		{"bad digest", "GET", batchesPath + "/xyz", nil, signed, http.StatusBadRequest},
		{"unknown digest", "GET", batchesPath + "/" + strings.Repeat("ab", 32), nil, signed, http.StatusNotFound},
		{"unsigned certificates", "GET", certificatesPath + "?from=1&count=1", nil, unsigned, http.StatusUnauthorized},
		{"certificates from 0", "GET", certificatesPath + "?from=0&count=1", nil, signed, http.StatusBadRequest},
		{"certificates, no count", "GET", certificatesPath + "?from=5", nil, signed, http.StatusBadRequest},
		{"certificates, too many", "GET", fmt.Sprintf("%s?from=5&count=%d", certificatesPath, aheadHeights+1), nil, signed, http.StatusBadRequest},
		{"certificates not held", "GET", certificatesPath + "?from=5&count=2", nil, signed, http.StatusNotFound},
		{"good", "POST", batchesPath + "?height=1000" + dg(good), good, signed, http.StatusOK},
		{"fetch good", "GET", fmt.Sprintf("%s/%x", batchesPath, sha256.Sum256(good)), nil, signed, http.StatusOK},
	} {
		req, _ := http.NewRequest(c.method, nd.srv.URL+c.path, bytes.NewReader(c.body))
		switch c.auth {
		case signed:
			nd.plane.authenticate(req)
		case byStranger:
			sig := ed25519.Sign(stranger, authMessage(nd.plane.opts.ChainID, req.Method, req.URL.RequestURI()))
			req.Header.Set(NodeAuthHeader, fmt.Sprintf("%x:%s", nd.plane.Self(), base64.RawURLEncoding.EncodeToString(sig)))
		case forged:
			nd.plane.authenticate(req)
			req.URL.RawQuery = strings.Replace(req.URL.RawQuery, "height=1000", "height=1001", 1)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	// Only the good batch is stored (the mislabelled push of the same
	// bytes stored it first, unsigned; the store is by digest).
	if st := nd.store.Stats(); st.Batches != 1 {
		t.Errorf("%d batches stored, want only the good one", st.Batches)
	}
	if got := testutil.ToFloat64(nd.plane.opts.Metrics.unauthenticated); got != 5 {
		t.Errorf("stele_dataplane_unauthenticated_requests_total %v, want 5", got)
	}
}

// TestBatchFetchesFromNonSigners: when no signer can serve a batch (one is
// down, one lies), a broker that was pushed it without signing serves it.
func TestBatchFetchesFromNonSigners(t *testing.T) {
	nodes := cluster(t, 4)
	p := payload(t, 9)
	// Node 2 holds the batch but did not sign it; nodes 0 and 1 signed.
	if _, err := nodes[2].store.Put(p, 0); err != nil {
		t.Fatal(err)
	}
	c := fsm.Certificate{Digest: sha256.Sum256(p), Size: uint32(len(p))}
	c.Sigs = []fsm.CertSig{nodes[0].plane.sign(c), nodes[1].plane.sign(c)}
	var corrupt http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := append([]byte(nil), p...)
		b[3] ^= 1
		w.Write(b)
	})
	nodes[0].srv.Close()
	nodes[1].wrap.Store(&corrupt)
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() { b, err := nodes[3].plane.Batch(c); done <- result{b, err} }()
	select {
	case r := <-done:
		if r.err != nil || !bytes.Equal(r.b, p) {
			t.Fatalf("Batch: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Batch did not get the batch from the broker that holds it without signing")
	}
}

// TestPruneKeepsWhatACertificateMayName: a batch stays while a certificate
// made at its height may still be applied (CertWindow) or a lagging peer
// may still fetch it (RetainHeights), and goes after.
func TestPruneKeepsWhatACertificateMayName(t *testing.T) {
	nd := cluster(t, 1)[0]
	store, err := OpenStore(t.TempDir(), StoreOptions{SegmentBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	nd.plane.opts.Store, nd.plane.opts.RetainHeights = store, 10
	old := payload(t, 1)
	d, err := store.Put(old, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(payload(t, 2), 3000); err != nil { // rolls: the old segment is not active
		t.Fatal(err)
	}
	nd.plane.Prune(5 + fsm.CertWindow + 10)
	if !store.Has(d) {
		t.Fatal("pruned a batch a lagging peer may still fetch")
	}
	nd.plane.Prune(5 + fsm.CertWindow + 11)
	if store.Has(d) {
		t.Fatal("kept a batch no certificate can name any more")
	}
}

// TestReadBodyFollowsWhatArrives: a push announcing 16 MiB (Content-Length)
// and sending 10 bytes costs at most the first MiB, not the announced size
// (test/chaos's malformed-traffic test: 32 such requests made a broker
// allocate 522 MiB); a whole body is read exactly, and what runs past the
// announced length is kept for the limits to see.
func TestReadBodyFollowsWhatArrives(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 20 {
		if _, err := readBody(bytes.NewReader(make([]byte, 10)), 16<<20, 16<<20); err == nil {
			t.Fatal("a body shorter than announced was accepted")
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 24<<20 {
		t.Fatalf("20 bodies announcing 16 MiB with 10 bytes each allocated %d MiB", grew>>20)
	}
	body := bytes.Repeat([]byte("batch"), 500_000) // 2.5 MB: past the first MiB
	if got, err := readBody(bytes.NewReader(body), int64(len(body)), 16<<20); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("a whole body: %d bytes, %v", len(got), err)
	}
	if got, _ := readBody(bytes.NewReader(body), 100, 16<<20); len(got) != len(body) {
		t.Fatalf("a body longer than announced: read %d of %d bytes", len(got), len(body))
	}
}

// TestBatchRefetchesACorruptLocalCopy: a batch whose stored copy fails its
// checks when read (bit rot in a segment opened from its index) is
// fetched from a peer like a missing one, and the store takes the good
// copy in its place.
func TestBatchRefetchesACorruptLocalCopy(t *testing.T) {
	nodes := cluster(t, 2)
	p := payload(t, 4)
	c, err := nodes[0].plane.Certify(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if !nodes[1].store.Has(c.Digest) {
			return errors.New("the batch did not reach node1")
		}
		return nil
	})
	nd := nodes[1]
	if got, err := nd.plane.Batch(c); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("Batch: %v", err)
	}
	nd.store.mu.RLock()
	loc := nd.store.mu.index[c.Digest]
	nd.store.mu.RUnlock()
	flipByte(t, loc.seg.path, loc.off+storeHeaderSize+10)

	if got, err := nd.plane.Batch(c); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("Batch of a corrupt local copy: %v", err)
	}
	if n := testutil.ToFloat64(nd.plane.opts.Metrics.fetched); n != 1 {
		t.Fatalf("%v batches fetched, want the corrupt one", n)
	}
	mustGet(t, nd.store, c.Digest, p)
}

// TestCertifyBindsTheChain: once certificates are bound (app version 2),
// a certificate names the chain and every signature in it is over the
// chain-bound statement; a broker refuses to sign for another chain, and
// to sign a statement that names none; before, nothing names a chain.
func TestCertifyBindsTheChain(t *testing.T) {
	nodes := cluster(t, 4)
	ctx := context.Background()
	c, err := nodes[0].plane.Certify(ctx, payload(t, 1))
	if err != nil || c.Chain != "" {
		t.Fatalf("unbound: %+v, %v", c, err)
	}
	for _, nd := range nodes {
		nd.bound.Store(true)
	}
	c, err = nodes[0].plane.Certify(ctx, payload(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	if c.Chain != testChain || len(c.Sigs) < 2 {
		t.Fatalf("bound: chain %q, %d signatures", c.Chain, len(c.Sigs))
	}
	if err := nodes[0].plane.opts.Validators.Verify(c); err != nil {
		t.Fatalf("a bound certificate does not verify: %v", err)
	}
	unbound := c
	unbound.Chain = ""
	if err := nodes[0].plane.opts.Validators.Verify(unbound); err == nil {
		t.Fatal("a bound certificate's signatures verify with no chain named")
	}

	good := payload(t, 3)
	for _, tc := range []struct {
		name, query string
		want        int
	}{
		{"another chain", "?height=0&chain=staging", http.StatusBadRequest},
		{"no chain while bound", "?height=0", http.StatusConflict},
		{"this chain", "?height=0&chain=" + testChain, http.StatusOK},
	} {
		req, _ := http.NewRequest("POST", nodes[1].srv.URL+batchesPath+tc.query+fmt.Sprintf("&digest=%x", sha256.Sum256(good)), bytes.NewReader(good))
		nodes[0].plane.authenticate(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.want)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			continue
		}
		s := fsm.CertSig{}
		copy(s.Validator[:], body)
		copy(s.Signature[:], body[20:])
		v, _ := nodes[0].plane.opts.Validators.Lookup(s.Validator)
		if !ed25519.Verify(v.PubKey, fsm.Statement(testChain, sha256.Sum256(good), uint32(len(good)), 0), s.Signature[:]) {
			t.Errorf("%s: the signature is not over the chain-bound statement", tc.name)
		}
	}
	// Brokers a block behind (not yet bound) sign a push bound to their
	// own chain: signing for it is always safe.
	for _, nd := range nodes[1:] {
		nd.bound.Store(false)
	}
	if c, err = nodes[0].plane.Certify(ctx, payload(t, 4)); err != nil || c.Chain != testChain {
		t.Fatalf("with the others a block behind: %+v, %v", c, err)
	}
	if err := nodes[0].plane.opts.Validators.Verify(c); err != nil {
		t.Fatalf("signed by brokers a block behind: %v", err)
	}
}

// TestRemovedValidator: once the chain has removed a validator (Current
// no longer lists it), its signature is not put in certificates, the
// others refuse to sign what it pushes, and it certifies nothing itself;
// the three left certify among themselves.
func TestRemovedValidator(t *testing.T) {
	nodes := cluster(t, 4)
	var left []fsm.Validator
	for _, v := range nodes[0].plane.opts.Validators.Validators() {
		if v.Address != nodes[3].plane.Self() {
			left = append(left, v)
		}
	}
	cur, err := fsm.NewValidatorSet(left)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		nd.plane.opts.Current = func() *fsm.ValidatorSet { return cur }
	}
	if _, err := nodes[3].plane.Certify(context.Background(), payload(t, 1)); !errors.Is(err, ErrNotCertified) {
		t.Fatalf("the removed validator certified: %v", err)
	}
	// Its pushes are refused even when it goes around its own Certify.
	c := fsm.Certificate{Chain: "", Digest: sha256.Sum256(payload(t, 2)), Size: uint32(len(payload(t, 2))), Height: 0}
	if _, err := nodes[3].plane.push(nodes[3].plane.opts.Peers[0], c, payload(t, 2)); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a push by the removed validator: %v, want 403 Forbidden", err)
	}
	for range 5 {
		c, err := nodes[0].plane.Certify(context.Background(), payload(t, 3))
		if err != nil {
			t.Fatal(err)
		}
		if err := cur.Verify(c); err != nil {
			t.Fatalf("a certificate made after the removal does not verify against the set left: %v", err)
		}
	}
}

// TestReplicaCertifies: a broker outside the validator set that the chain
// did not take out (a replica: added, or demoted) has its batches signed
// by the validators, and its certificate carries their signatures only;
// one the chain took out (Options.Excluded) certifies nothing and its
// pushes are refused.
func TestReplicaCertifies(t *testing.T) {
	nodes := cluster(t, 4)
	replica := nodes[3].plane.Self()
	var left []fsm.Validator
	for _, v := range nodes[0].plane.opts.Validators.Validators() {
		if v.Address != replica {
			left = append(left, v)
		}
	}
	cur, err := fsm.NewValidatorSet(left)
	if err != nil {
		t.Fatal(err)
	}
	// Read by pushes still running in the background after a Certify.
	var out atomic.Bool
	for _, nd := range nodes {
		nd.plane.opts.Current = func() *fsm.ValidatorSet { return cur }
		nd.plane.opts.Excluded = func(a [20]byte) bool { return out.Load() && a == replica }
	}
	c, err := nodes[3].plane.Certify(context.Background(), payload(t, 1))
	if err != nil {
		t.Fatalf("the replica's batch: %v", err)
	}
	if err := cur.Verify(c); err != nil {
		t.Fatalf("the replica's certificate does not verify against the validators: %v", err)
	}
	for _, s := range c.Sigs {
		if s.Validator == replica {
			t.Fatal("the replica signed its own certificate")
		}
	}
	out.Store(true)
	if _, err := nodes[3].plane.Certify(context.Background(), payload(t, 2)); !errors.Is(err, ErrNotCertified) {
		t.Fatalf("a broker taken out certified: %v", err)
	}
	p := payload(t, 3)
	if _, err := nodes[3].plane.push(nodes[3].plane.opts.Peers[0], fsm.Certificate{Digest: sha256.Sum256(p), Size: uint32(len(p))}, p); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a push by a broker taken out: %v, want 403 Forbidden", err)
	}
}

// TestRotatedKey: once the chain rotated a broker's key (its directory
// entry names the new key, the set holds the new key with the old one's
// power, the old key is taken out), the broker signs with the new key
// (SetKey): the others authenticate its pushes by the directory, count
// its signature, and refuse the old key's pushes; its own certificates
// verify against the new set.
func TestRotatedKey(t *testing.T) {
	nodes := cluster(t, 4)
	old := nodes[3].plane.Self()
	seed := sha256.Sum256([]byte("node 3, second key"))
	next := ed25519.NewKeyFromSeed(seed[:])
	nextAddr := [20]byte(addressOf(next.Public().(ed25519.PublicKey)))
	var vals []fsm.Validator
	for _, v := range nodes[0].plane.opts.Validators.Validators() {
		if v.Address == old {
			v = fsm.Validator{Address: nextAddr, PubKey: next.Public().(ed25519.PublicKey), Power: v.Power}
		}
		vals = append(vals, v)
	}
	cur, err := fsm.NewValidatorSet(vals)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		var dir []Peer
		for _, q := range nd.plane.opts.Peers {
			if q.Validator == old {
				q = Peer{Validator: nextAddr, URL: q.URL, PubKey: next.Public().(ed25519.PublicKey)}
			}
			dir = append(dir, q)
		}
		nd.plane.opts.Current = func() *fsm.ValidatorSet { return cur }
		nd.plane.opts.Directory = func() []Peer { return dir }
		nd.plane.opts.Excluded = func(a [20]byte) bool { return a == old }
	}
	// Before it switches, the broker is taken out as far as the others
	// know.
	if _, err := nodes[3].plane.Certify(context.Background(), payload(t, 1)); !errors.Is(err, ErrNotCertified) {
		t.Fatalf("certified with the rotated-out key: %v", err)
	}
	nodes[3].plane.SetKey(next)
	if nodes[3].plane.Self() != nextAddr {
		t.Fatal("SetKey did not change the broker's address")
	}
	c, err := nodes[3].plane.Certify(context.Background(), payload(t, 2))
	if err != nil {
		t.Fatalf("certifying with the new key: %v", err)
	}
	if err := cur.Verify(c); err != nil {
		t.Fatalf("a certificate made with the new key: %v", err)
	}
	// Its signature counts in another broker's certificate: with two of
	// the others down, only its signature and node 0's make one.
	nodes[1].srv.Close()
	nodes[2].srv.Close()
	c, err = nodes[0].plane.Certify(context.Background(), payload(t, 3))
	if err != nil {
		t.Fatalf("certifying with the rotated broker's help: %v", err)
	}
	if !slices.ContainsFunc(c.Sigs, func(s fsm.CertSig) bool { return s.Validator == nextAddr }) {
		t.Fatal("the rotated broker's new key did not sign")
	}
	if err := cur.Verify(c); err != nil {
		t.Fatal(err)
	}
}
