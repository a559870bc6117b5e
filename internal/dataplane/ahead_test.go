package dataplane

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stele-io/stele/internal/fsm"
)

// Tests of fetching the next blocks' batches ahead while catching up
// (ahead.go), over real planes serving HTTP on 127.0.0.1.

// chainOf is a chain of blocks the test's peers serve (Options.Blocks).
type chainOf struct {
	mu     sync.Mutex
	blocks map[int64][][]byte
}

func (c *chainOf) get(h int64) ([][]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	txs, ok := c.blocks[h]
	return txs, ok
}

// aheadCluster is a cluster of 4 planes whose first three hold blocks 11 to
// 14, each ordering two batches they hold (and an ordinary transaction the
// answer must leave out), and serve them; the fourth holds nothing. It
// returns the certificates and payloads per height, and counts the
// certificates requests the peers answer.
func aheadCluster(t *testing.T) (nodes []*node, certs map[int64][]fsm.Certificate, payloads map[int64][][]byte, asked func() int) {
	t.Helper()
	nodes = cluster(t, 4)
	chain := &chainOf{blocks: map[int64][][]byte{}}
	certs, payloads = map[int64][]fsm.Certificate{}, map[int64][][]byte{}
	for h := int64(11); h <= 14; h++ {
		txs := [][]byte{payload(t, 1)} // not a certificate: left out
		for i := range 2 {
			p := payload(t, int(h)*10+i)
			c := certified(t, nodes, p, nil, 0, 1, 2)
			c.Height = h - 1
			for _, i := range []int{0, 1} {
				c.Sigs = append(c.Sigs, nodes[i].plane.sign(c))
			}
			certs[h] = append(certs[h], c)
			payloads[h] = append(payloads[h], p)
			txs = append(txs, fsm.EncodeCertifiedTx(c))
		}
		chain.blocks[h] = txs
	}
	for _, nd := range nodes[:3] {
		nd.plane.opts.Blocks = chain.get
	}
	return nodes, certs, payloads, answerAhead(nodes[:3], nil)
}

// answerAhead has peers answer every certificates request with answer (nil:
// from their blocks, as the plane does) and returns a count of the
// requests they answered.
func answerAhead(peers []*node, answer []byte) (asked func() int) {
	var mu sync.Mutex
	n := 0
	for _, nd := range peers {
		h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == certificatesPath {
				mu.Lock()
				n++
				mu.Unlock()
				if answer != nil {
					w.Write(answer)
					return
				}
			}
			nd.plane.Handler().ServeHTTP(w, r)
		}))
		nd.wrap.Store(&h)
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// asking reports whether p has a certificates request under way.
func asking(p *Plane) bool {
	p.ahead.Lock()
	defer p.ahead.Unlock()
	return p.ahead.asking
}

// TestAheadFetchesTheNextBlocks: a broker that is not catching up asks
// nothing ahead. One catching up, about to apply block 10, learns blocks 11
// to 14 from a peer (all it holds of the 8 asked for) and fetches their
// batches before it applies them; Batch then takes them without asking a
// peer again. About to apply 11, it asks for 15 on (fewer than half of the
// 8 blocks ahead are under way), which no peer holds. Every fetch ends
// once the blocks are applied.
func TestAheadFetchesTheNextBlocks(t *testing.T) {
	nodes, certs, payloads, asked := aheadCluster(t)
	fetcher := nodes[3].plane
	fetcher.Ahead(10, false)
	if asking(fetcher) {
		t.Fatal("a broker that is not catching up asked a peer ahead")
	}
	fetcher.Ahead(10, true)
	eventually(t, 10*time.Second, func() error {
		for h := int64(11); h <= 14; h++ {
			for _, c := range certs[h] {
				if !fetcher.holds(c.Digest) {
					return fmt.Errorf("batch of block %d not fetched yet", h)
				}
			}
		}
		return nil
	})
	if got := testutil.ToFloat64(fetcher.opts.Metrics.aheadBlocks); got != 4 {
		t.Errorf("stele_dataplane_ahead_blocks_total %v, want 4", got)
	}
	if n := asked(); n != 1 {
		t.Errorf("%d certificates requests, want 1", n)
	}
	fetched := testutil.ToFloat64(fetcher.opts.Metrics.fetched)
	if fetched != 8 {
		t.Errorf("%v batches fetched, want the 8 of blocks 11 to 14", fetched)
	}

	fetcher.Ahead(11, true)
	eventually(t, 10*time.Second, func() error {
		if asking(fetcher) {
			return errors.New("still asking for 15 on")
		}
		return nil
	})
	if n := asked(); n != 4 {
		t.Errorf("%d certificates requests, want 4: the first, then each of the 3 peers for 15 on", n)
	}
	for h := int64(11); h <= 14; h++ {
		fetcher.Ahead(h, false)
		for i, c := range certs[h] {
			b, err := fetcher.Batch(c)
			if err != nil || !bytes.Equal(b, payloads[h][i]) {
				t.Fatalf("Batch of block %d: %v", h, err)
			}
		}
	}
	fetcher.Ahead(15, false)
	if got := testutil.ToFloat64(fetcher.opts.Metrics.fetched); got != fetched {
		t.Errorf("Batch fetched %v more batches: want every one taken from what was fetched ahead", got-fetched)
	}
	fetcher.ahead.Lock()
	left := len(fetcher.ahead.releases)
	fetcher.ahead.Unlock()
	if left != 0 {
		t.Errorf("%d blocks' fetches not released after they were applied", left)
	}
	noGoroutines(t, "dataplane.(*Plane)")
}

// TestAheadDropsALyingAnswer: peers that answer a block naming a batch the
// state machine could not apply at that height (made at the block's own
// height) are not believed: nothing is fetched, and after asking each peer
// once the broker waits for the next block to ask again.
func TestAheadDropsALyingAnswer(t *testing.T) {
	nodes, _, _, _ := aheadCluster(t)
	c := certified(t, nodes, payload(t, 3), []int{0, 1}, 0, 1)
	c.Height = 11
	lie := encodeAhead(nil, 11, [][]byte{fsm.EncodeCertifiedTx(c)})
	lies := answerAhead(nodes[:3], lie)
	fetcher := nodes[3].plane
	fetcher.Ahead(10, true)
	eventually(t, 10*time.Second, func() error {
		if asking(fetcher) {
			return errors.New("still asking")
		}
		return nil
	})
	if got := testutil.ToFloat64(fetcher.opts.Metrics.aheadBlocks); got != 0 {
		t.Errorf("stele_dataplane_ahead_blocks_total %v, want 0", got)
	}
	if got := testutil.ToFloat64(fetcher.opts.Metrics.fetchAttempts); got != 0 {
		t.Errorf("%v fetch attempts for a lying answer's batch, want none", got)
	}
	if n := lies(); n != 3 {
		t.Errorf("%d lying answers, want one from each of the 3 peers", n)
	}
	fetcher.ahead.Lock()
	next := fetcher.ahead.next
	fetcher.ahead.Unlock()
	if next > 11 {
		t.Errorf("after lying answers the next height to ask for is %d, want 11 still", next)
	}
}

// TestAheadSkipsUnverifiedCertificates: of the certificates a peer's
// answer names, one whose signatures are not the validators' (a stranger's
// key) is not fetched ahead, though its batch exists; the one the
// validators signed is.
func TestAheadSkipsUnverifiedCertificates(t *testing.T) {
	nodes := cluster(t, 4)
	good := payload(t, 7)
	gc := certified(t, nodes, good, nil, 0, 1, 2)
	gc.Height = 10
	for _, i := range []int{0, 1} {
		gc.Sigs = append(gc.Sigs, nodes[i].plane.sign(gc))
	}
	forged := payload(t, 8)
	fc := certified(t, nodes, forged, nil, 0, 1, 2)
	fc.Height = 10
	seed := sha256.Sum256([]byte("stranger"))
	stranger := ed25519.NewKeyFromSeed(seed[:])
	var addr [20]byte
	copy(addr[:], addressOf(stranger.Public().(ed25519.PublicKey)))
	for range 3 {
		s := fsm.CertSig{Validator: addr}
		copy(s.Signature[:], ed25519.Sign(stranger, fc.Statement()))
		fc.Sigs = append(fc.Sigs, s)
	}
	answer := encodeAhead(nil, 11, [][]byte{fsm.EncodeCertifiedTx(fc), fsm.EncodeCertifiedTx(gc)})
	answerAhead(nodes[:3], answer)
	fetcher := nodes[3].plane
	fetcher.Ahead(10, true)
	eventually(t, 10*time.Second, func() error {
		if !fetcher.holds(gc.Digest) {
			return errors.New("the validators' certificate's batch not fetched yet")
		}
		return nil
	})
	fetcher.Ahead(12, false)
	noGoroutines(t, "dataplane.(*Plane)")
	if fetcher.holds(fc.Digest) {
		t.Error("the batch of a certificate no validator signed was fetched ahead")
	}
	if got := testutil.ToFloat64(fetcher.opts.Metrics.fetchAttempts); got != 1 {
		t.Errorf("%v fetch attempts, want 1: the validators' certificate's batch only", got)
	}
}

// TestDecodeAhead: answers that are not what was asked for are refused
// whole.
func TestDecodeAhead(t *testing.T) {
	cert := func(h int64) []byte {
		return fsm.EncodeCertifiedTx(fsm.Certificate{Height: h, Size: 1, Sigs: []fsm.CertSig{{}}})
	}
	two := encodeAhead(encodeAhead(nil, 5, [][]byte{cert(4)}), 6, [][]byte{cert(4), cert(5)})
	got, err := decodeAhead(two, 5, 2)
	if err != nil || len(got) != 2 || got[0].height != 5 || len(got[1].txs) != 2 || !bytes.Equal(got[1].txs[1], cert(5)) {
		t.Fatalf("decodeAhead of two blocks: %v, %v", got, err)
	}
	if got, err := decodeAhead(encodeAhead(nil, 5, nil), 5, 1); err != nil || len(got) != 1 || len(got[0].txs) != 0 {
		t.Errorf("a block with no certificate: %v, %v", got, err)
	}
	for _, c := range []struct {
		name  string
		body  []byte
		from  int64
		count int
	}{
		{"empty", nil, 5, 2},
		{"more blocks than asked", two, 5, 1},
		{"another first height", two, 4, 2},
		{"heights not consecutive", encodeAhead(encodeAhead(nil, 5, nil), 7, nil), 5, 2},
		{"cut short", two[:len(two)-1], 5, 2},
		{"header cut short", two[:7], 5, 2},
		{"not a certificate", encodeAhead(nil, 5, [][]byte{[]byte("hello")}), 5, 1},
		{"a batch made at the block's height", encodeAhead(nil, 5, [][]byte{cert(5)}), 5, 1},
		{"a batch older than the window", encodeAhead(nil, 5+fsm.CertWindow, [][]byte{cert(4)}), 5 + fsm.CertWindow, 1},
		{"a huge transaction count", slices.Concat(encodeAhead(nil, 5, nil)[:8], []byte{0xff, 0xff, 0xff, 0xff}), 5, 1},
	} {
		if got, err := decodeAhead(c.body, c.from, c.count); !errors.Is(err, errAheadBody) {
			t.Errorf("%s: %v, %v; want errAheadBody", c.name, got, err)
		}
	}
}

// FuzzDecodeAhead: decodeAhead of any bytes neither panics nor accepts
// what does not encode back to the same bytes, or more blocks than asked.
//
//	go test -run '^$' -fuzz FuzzDecodeAhead -fuzztime 30s ./internal/dataplane/
func FuzzDecodeAhead(f *testing.F) {
	c := fsm.EncodeCertifiedTx(fsm.Certificate{Height: 3, Size: 1, Sigs: []fsm.CertSig{{}}})
	f.Add(encodeAhead(encodeAhead(nil, 5, [][]byte{c}), 6, nil), int64(5), uint8(2))
	f.Add(encodeAhead(nil, 5, nil), int64(5), uint8(1))
	f.Add([]byte{}, int64(1), uint8(8))
	f.Fuzz(func(t *testing.T, b []byte, from int64, count uint8) {
		got, err := decodeAhead(b, from, int(count))
		if err != nil {
			return
		}
		if len(got) == 0 || len(got) > int(count) {
			t.Fatalf("%d blocks for %d asked", len(got), count)
		}
		var again []byte
		for i, blk := range got {
			if blk.height != from+int64(i) {
				t.Fatalf("block %d has height %d, from %d", i, blk.height, from)
			}
			again = encodeAhead(again, blk.height, blk.txs)
		}
		if !bytes.Equal(again, b) {
			t.Fatal("accepted bytes that do not encode back the same")
		}
	})
}
