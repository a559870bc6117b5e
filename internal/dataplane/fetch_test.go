package dataplane

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stele-io/stele/internal/fsm"
)

// Tests of fetching the batches a broker lacks (fetch.go), over real
// planes serving HTTP on 127.0.0.1.

// certified stores p at the holders and returns its certificate, signed by
// the signers (who need not hold it: a lying signer does not).
func certified(t *testing.T, nodes []*node, p []byte, signers []int, holders ...int) fsm.Certificate {
	t.Helper()
	for _, i := range holders {
		if _, err := nodes[i].store.Put(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	c := fsm.Certificate{Digest: sha256.Sum256(p), Size: uint32(len(p))}
	for _, i := range signers {
		c.Sigs = append(c.Sigs, nodes[i].plane.sign(c))
	}
	return c
}

// hangingPeer is a TCP listener on 127.0.0.1 that accepts connections and
// never reads from or answers them, as a stalled or malicious broker
// would. It counts the connections it accepted.
type hangingPeer struct {
	ln       net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
	done     chan struct{}
}

func newHangingPeer(t *testing.T) *hangingPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hangingPeer{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-h.done
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range h.conns {
			c.Close()
		}
	})
	return h
}

func (h *hangingPeer) URL() string { return "http://" + h.ln.Addr().String() }

// replacePeer makes nd reach the validator's data plane at url.
func replacePeer(nd *node, validator [20]byte, url string) {
	for i := range nd.plane.opts.Peers {
		if nd.plane.opts.Peers[i].Validator == validator {
			nd.plane.opts.Peers[i].URL = url
		}
	}
}

// batchResult runs Batch in a goroutine.
func batchResult(p *Plane, c fsm.Certificate) <-chan result {
	done := make(chan result, 1)
	go func() { b, err := p.Batch(c); done <- result{b, err} }()
	return done
}

type result struct {
	b   []byte
	err error
}

// TestFetchPastAHangingSigner: the only signer accepts the request and
// never answers; the fetch gives up on it at its deadline and gets the
// batch from a broker that holds it without signing, well within a few
// deadlines.
func TestFetchPastAHangingSigner(t *testing.T) {
	nodes := cluster(t, 4)
	const deadline = 250 * time.Millisecond
	fetcher := nodes[3]
	fetcher.plane.opts.FetchTimeout = deadline
	hang := newHangingPeer(t)
	replacePeer(fetcher, nodes[0].plane.Self(), hang.URL())
	p := payload(t, 4)
	// Signed by node 0 (hanging) and by the fetcher itself, which lost
	// it; held by node 1.
	c := certified(t, nodes, p, []int{0, 3}, 1)

	start := time.Now()
	select {
	case r := <-batchResult(fetcher.plane, c):
		if r.err != nil || !bytes.Equal(r.b, p) {
			t.Fatalf("Batch: %v", r.err)
		}
	case <-time.After(20 * deadline):
		t.Fatalf("Batch did not return within %v while a signer hung", 20*deadline)
	}
	took := time.Since(start)
	if hang.accepted.Load() == 0 {
		t.Fatal("the hanging signer was never asked: the test did not test a hang")
	}
	if took > 8*deadline {
		t.Errorf("Batch took %v with a per-attempt deadline of %v", took, deadline)
	}
	m := fetcher.plane.opts.Metrics
	if got := testutil.ToFloat64(m.fetchErrors); got < 1 {
		t.Errorf("fetch_errors_total = %v, want the timed-out attempt counted", got)
	}
	if got := testutil.ToFloat64(m.fetched); got != 1 {
		t.Errorf("fetched_total = %v, want 1", got)
	}
	if !fetcher.store.Has(c.Digest) {
		t.Error("the fetched batch was not stored")
	}
}

// TestFetchSkipsALyingPeer: a signer that serves other bytes is refused,
// counted, and not asked again for that batch while the honest signer
// fails a few rounds before it answers.
func TestFetchSkipsALyingPeer(t *testing.T) {
	nodes := cluster(t, 4)
	p := payload(t, 6)
	c := certified(t, nodes, p, []int{1, 2}, 2)
	var lies atomic.Int64
	var liar http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lies.Add(1)
		b := append([]byte(nil), p...)
		b[len(b)/2] ^= 1
		w.Write(b)
	})
	nodes[1].wrap.Store(&liar)
	var refusals atomic.Int64
	var flaky http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refusals.Add(1) <= 3 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		nodes[2].plane.Handler().ServeHTTP(w, r)
	})
	nodes[2].wrap.Store(&flaky)

	select {
	case r := <-batchResult(nodes[3].plane, c):
		if r.err != nil || !bytes.Equal(r.b, p) {
			t.Fatalf("Batch: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Batch did not return")
	}
	if n := lies.Load(); n != 1 {
		t.Errorf("the lying signer was asked %d times, want once", n)
	}
	if n := refusals.Load(); n != 4 {
		t.Errorf("the honest signer was asked %d times, want 4 (3 refusals, then the batch)", n)
	}
	m := nodes[3].plane.opts.Metrics
	if got := testutil.ToFloat64(m.fetchMismatches); got != 1 {
		t.Errorf("fetch_mismatches_total = %v, want 1", got)
	}
	if got, want := testutil.ToFloat64(m.fetchAttempts), testutil.ToFloat64(m.fetchErrors)+1; got != want {
		t.Errorf("fetch_attempts_total = %v, want the failures plus the success (%v)", got, want)
	}
}

// TestFetchStopsAtClose: a fetch stuck on peers that never answer (with a
// deadline per attempt far longer than the test) returns promptly when the
// plane closes, with an error that says the batch is unavailable because
// the plane closed, and leaves no goroutine of the plane behind: whether
// Batch fetched itself or waited for a fetch Prefetch started.
func TestFetchStopsAtClose(t *testing.T) {
	for _, prefetch := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefetch=%v", prefetch), func(t *testing.T) {
			nodes := cluster(t, 4)
			fetcher := nodes[3]
			fetcher.plane.opts.FetchTimeout = time.Minute
			var hangs []*hangingPeer
			for _, nd := range nodes[:3] {
				h := newHangingPeer(t)
				hangs = append(hangs, h)
				replacePeer(fetcher, nd.plane.Self(), h.URL())
			}
			c := certified(t, nodes, payload(t, 2), []int{0, 1})
			if prefetch {
				release := fetcher.plane.Prefetch([][]byte{fsm.EncodeCertifiedTx(c)})
				defer release()
			}
			done := batchResult(fetcher.plane, c)
			eventually(t, 5*time.Second, func() error {
				var n int64
				for _, h := range hangs {
					n += h.accepted.Load()
				}
				if n == 0 {
					return errors.New("no peer asked yet")
				}
				return nil
			})
			if got := testutil.ToFloat64(fetcher.plane.opts.Metrics.fetchPending); got != 1 {
				t.Errorf("fetch_pending = %v while a fetch is stuck, want 1", got)
			}
			start := time.Now()
			fetcher.plane.Close()
			select {
			case r := <-done:
				if !errors.Is(r.err, fsm.ErrBatchUnavailable) || !errors.Is(r.err, ErrClosed) {
					t.Fatalf("Batch after Close: %v, want ErrBatchUnavailable and ErrClosed", r.err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Batch did not return after Close")
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("Close and Batch took %v to return", took)
			}
			if got := testutil.ToFloat64(fetcher.plane.opts.Metrics.fetchPending); got != 0 {
				t.Errorf("fetch_pending = %v after Close, want 0", got)
			}
			noGoroutines(t, "dataplane.(*Plane)")
		})
	}
}

// TestPrefetchFetchesInParallel: a block naming five batches this broker
// lacks, each answered by its peer after 200 ms, has them fetched several
// at once (a handler counts the requests in flight together), at most
// FetchParallel at once in the background and one by Batch, each once;
// Batch takes what Prefetch fetched, and a batch held here is not fetched
// at all.
func TestPrefetchFetchesInParallel(t *testing.T) {
	nodes := cluster(t, 4)
	fetcher := nodes[3]
	var (
		mu                    sync.Mutex
		inFlight, most, total int
	)
	slow := func(nd *node) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				mu.Lock()
				inFlight++
				total++
				most = max(most, inFlight)
				mu.Unlock()
				defer func() {
					mu.Lock()
					inFlight--
					mu.Unlock()
				}()
				select {
				case <-time.After(200 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
			}
			nd.plane.Handler().ServeHTTP(w, r)
		})
	}
	for _, nd := range nodes[:3] {
		h := slow(nd)
		nd.wrap.Store(&h)
	}
	var txs [][]byte
	var certs []fsm.Certificate
	var payloads [][]byte
	for i := range 5 {
		p := payload(t, 10+i)
		c := certified(t, nodes, p, []int{0, 1}, 0, 1)
		certs, payloads = append(certs, c), append(payloads, p)
		txs = append(txs, fsm.EncodeCertifiedTx(c))
	}
	held := payload(t, 20)
	heldCert := certified(t, nodes, held, []int{0, 1}, 0, 1, 3)
	txs = append(txs[:2], append([][]byte{fsm.EncodeCertifiedTx(heldCert)}, txs[2:]...)...)

	release := fetcher.plane.Prefetch(txs)
	for i, c := range certs {
		b, err := fetcher.plane.Batch(c)
		if err != nil || !bytes.Equal(b, payloads[i]) {
			t.Fatalf("Batch %d: %v", i, err)
		}
	}
	if b, err := fetcher.plane.Batch(heldCert); err != nil || !bytes.Equal(b, held) {
		t.Fatalf("Batch of the held batch: %v", err)
	}
	release()
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Errorf("at most %d fetch in flight at once: the batches were fetched one after another", most)
	}
	if limit := fetcher.plane.opts.FetchParallel; most > limit+1 {
		t.Errorf("%d fetches in flight at once, more than FetchParallel (%d) and Batch's own", most, limit)
	}
	if total != len(certs) {
		t.Errorf("%d requests for %d missing batches: want each fetched once, the held one never", total, len(certs))
	}
}

// TestPrefetchReleaseEndsUnclaimed: a batch Prefetch started fetching
// that the block never asked for (the state machine refused its
// certificate) stops being fetched when the block is released, though no
// peer can deliver it.
func TestPrefetchReleaseEndsUnclaimed(t *testing.T) {
	nodes := cluster(t, 4)
	fetcher := nodes[3]
	fetcher.plane.opts.FetchTimeout = time.Minute
	hang := newHangingPeer(t)
	for _, nd := range nodes[:3] {
		replacePeer(fetcher, nd.plane.Self(), hang.URL())
	}
	c := certified(t, nodes, payload(t, 3), []int{0, 1})
	release := fetcher.plane.Prefetch([][]byte{fsm.EncodeCertifiedTx(c)})
	eventually(t, 5*time.Second, func() error {
		if hang.accepted.Load() == 0 {
			return errors.New("no peer asked yet")
		}
		return nil
	})
	release()
	noGoroutines(t, "dataplane.(*Plane)")
	if got := testutil.ToFloat64(fetcher.plane.opts.Metrics.fetchPending); got != 0 {
		t.Errorf("fetch_pending = %v after release, want 0", got)
	}
}

// TestBatchTakesOverAQueuedFetch: with one background fetch at a time, a
// block whose first batch no peer can deliver (a certificate a lying hint
// named, ahead.go) does not hold up its second: Batch fetches that one
// itself instead of waiting behind the first, which goes on until the
// block is released.
func TestBatchTakesOverAQueuedFetch(t *testing.T) {
	nodes := cluster(t, 4)
	fetcher := nodes[3]
	fetcher.plane.opts.FetchParallel = 1
	nobody := certified(t, nodes, payload(t, 5), []int{0, 1}) // held by no one
	p := payload(t, 6)
	real := certified(t, nodes, p, []int{0, 1}, 0, 1)
	release := fetcher.plane.Prefetch([][]byte{fsm.EncodeCertifiedTx(nobody), fsm.EncodeCertifiedTx(real)})
	select {
	case r := <-batchResult(fetcher.plane, real):
		if r.err != nil || !bytes.Equal(r.b, p) {
			t.Fatalf("Batch: %v", r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Batch waited behind a fetch that cannot end")
	}
	release()
	noGoroutines(t, "dataplane.(*Plane)")
}

// noGoroutines waits until no goroutine runs a function whose name
// contains fn.
func noGoroutines(t *testing.T, fn string) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, fn) && !strings.Contains(g, "dataplane.noGoroutines") {
				return fmt.Errorf("a goroutine still runs %s:\n%s", fn, g)
			}
		}
		return nil
	})
}

// eventually polls f until it returns nil or the time runs out.
func eventually(t *testing.T, within time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
