package dataplane

// Fetching ahead while catching up.
//
// A broker applying blocks it fetched from its peers (CometBFT's block sync)
// applies one block after another, and each block's missing batches are
// fetched only when it is about to be applied (Prefetch): every block pays
// a round trip to a peer on top of block sync's own work. CometBFT's block
// sync holds the next blocks in memory but hands the application none
// before it is applied, so the broker asks a peer for them itself:
//
//	GET /v1/internal/certificates?from=H&count=N
//
// answers the certified transactions of the blocks from H on, as many of
// the N as the peer holds (aheadMaxBody bytes at most), in this encoding
// (integers big-endian):
//
//	per block:  height u64 | transaction count u32 | per transaction: length u32 | bytes
//
// with consecutive heights from H; 404 if the peer holds no block H. Only
// validators and replicas of the cluster may ask (NodeAuthHeader). The
// answer is a hint, not trusted: each transaction must decode as a
// certificate whose batch height lies in the window the state machine would
// accept at that block (fsm.CertWindow), or the whole answer is dropped;
// a certificate whose signatures do not verify against the validator set
// this broker knows (more than a third of its power, so at least one honest
// signer holds the batch) is not fetched ahead; and the batches fetched are
// checked against their digests like any others. So a lying peer can make
// a broker fetch ahead only batches that exist (named at other heights
// than their own, at worst), and a certificate skipped here is fetched when
// its block is applied. A block's batches are fetched FetchParallel at a
// time, as Prefetch does, and Batch takes over a fetch that has not started
// (fetch.go), so no fetch ahead holds up applying a block.
//
// Ahead is called before each block is applied. While the broker is
// catching up, it keeps the batches of up to aheadHeights blocks past the
// one being applied fetched or under way, asking a peer for more once
// fewer than half of them are left; each block's fetches end when the next
// block is applied, as Prefetch's do.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/stele-io/stele/internal/fsm"
)

const (
	certificatesPath = "/v1/internal/certificates"
	// aheadHeights is how many blocks past the one being applied have
	// their batches fetched ahead while catching up.
	aheadHeights = 8
	// aheadMaxBody bounds one answer; a peer stops before the block that
	// would pass it (but sends the first block whole, whatever its size,
	// which the asker then refuses).
	aheadMaxBody = 4 << 20
)

// aheadBlock is one block's certified transactions in an answer, and
// their certificates.
type aheadBlock struct {
	height int64
	txs    [][]byte
	certs  []fsm.Certificate
}

// ahead is the Plane's state for fetching ahead. Its lock is taken before
// the fetches' (Prefetch and the releases take that one).
type ahead struct {
	sync.Mutex
	next     int64            // the first height not asked for yet
	asking   bool             // a request to a peer is under way
	applying int64            // the height being applied
	releases map[int64]func() // per block fetched ahead, ends its fetches
}

// Ahead is called with the height of the block about to be applied, and
// whether this broker is catching up. It ends the fetches started ahead for
// the blocks before it, and, while catching up, asks a peer in the
// background for the next blocks' certificates and starts fetching the
// batches they name that this broker lacks.
func (p *Plane) Ahead(height int64, catchingUp bool) {
	a := &p.ahead
	a.Lock()
	defer a.Unlock()
	a.applying = height
	for h, release := range a.releases {
		if h < height {
			release()
			delete(a.releases, h)
		}
	}
	if !catchingUp || a.asking || len(p.peers()) == 0 {
		return
	}
	from := max(a.next, height+1)
	if from > height+aheadHeights/2 {
		return // enough is under way
	}
	count := height + aheadHeights - from + 1
	a.asking = p.spawn(func() {
		blocks := p.askAhead(from, int(count))
		a.Lock()
		defer a.Unlock()
		a.asking = false
		vs := p.current()
		for _, b := range blocks {
			a.next = max(a.next, b.height+1)
			if b.height <= a.applying || a.releases[b.height] != nil {
				continue // applied meanwhile, or under way
			}
			var txs [][]byte
			for i, c := range b.certs {
				if p.holds(c.Digest) {
					continue
				}
				if err := vs.Verify(c); err != nil {
					p.opts.Logger.Debug("not fetching ahead a batch whose certificate does not verify", "height", b.height, "err", err)
					continue
				}
				txs = append(txs, b.txs[i])
			}
			a.releases[b.height] = p.Prefetch(txs)
			p.opts.Metrics.aheadBlocks.Inc()
		}
	})
}

// askAhead asks the peers, one after another in a random order, for the
// certificates of count blocks from height from on, and returns the first
// answer that holds at least one block and decodes (nil if none does).
func (p *Plane) askAhead(from int64, count int) []aheadBlock {
	for _, peer := range shuffled(p.peers(), nil) {
		blocks, err := p.requestAhead(peer, from, count)
		if p.ctx.Err() != nil {
			return nil
		}
		if err != nil {
			p.opts.Logger.Debug("asking a peer for the next blocks' certificates", "peer", peer.URL, "from", from, "err", err)
			continue
		}
		return blocks
	}
	return nil
}

// requestAhead makes one request of askAhead, within FetchTimeout.
func (p *Plane) requestAhead(peer Peer, from int64, count int) ([]aheadBlock, error) {
	body, done, err := p.get(p.ctx, peer, fmt.Sprintf("%s?from=%d&count=%d", certificatesPath, from, count))
	if err != nil {
		return nil, err
	}
	defer done()
	b, err := io.ReadAll(io.LimitReader(body, aheadMaxBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > aheadMaxBody {
		return nil, fmt.Errorf("stele/dataplane: %s answered more than %d bytes", peer.URL, aheadMaxBody)
	}
	return decodeAhead(b, from, count)
}

// errAheadBody is decodeAhead's error.
var errAheadBody = errors.New("stele/dataplane: bad certificates answer")

// decodeAhead decodes an answer to a request for count blocks from height
// from on: at least one block, heights consecutive from from, at most
// count of them, every transaction a certificate the state machine could
// apply at its block's height.
func decodeAhead(b []byte, from int64, count int) ([]aheadBlock, error) {
	var out []aheadBlock
	for len(b) > 0 {
		if len(out) == count {
			return nil, fmt.Errorf("%w: more than %d blocks", errAheadBody, count)
		}
		if len(b) < 12 {
			return nil, fmt.Errorf("%w: a block header cut short", errAheadBody)
		}
		h := int64(binary.BigEndian.Uint64(b))
		n := binary.BigEndian.Uint32(b[8:])
		b = b[12:]
		if want := from + int64(len(out)); h != want {
			return nil, fmt.Errorf("%w: block %d where %d was due", errAheadBody, h, want)
		}
		if uint64(n) > uint64(len(b))/4 {
			return nil, fmt.Errorf("%w: block %d announces %d transactions in %d bytes", errAheadBody, h, n, len(b))
		}
		blk := aheadBlock{height: h} // n is the peer's word: nothing is sized by it
		for range n {
			if len(b) < 4 {
				return nil, fmt.Errorf("%w: a transaction length cut short", errAheadBody)
			}
			l := binary.BigEndian.Uint32(b)
			b = b[4:]
			if uint64(l) > uint64(len(b)) {
				return nil, fmt.Errorf("%w: a transaction of %d bytes in %d", errAheadBody, l, len(b))
			}
			tx := b[:l:l]
			b = b[l:]
			c, err := fsm.DecodeCertifiedTx(tx)
			if err != nil {
				return nil, fmt.Errorf("%w: block %d: not a certificate", errAheadBody, h)
			}
			if c.Height >= h || h > c.Height+fsm.CertWindow {
				return nil, fmt.Errorf("%w: block %d names a batch of height %d", errAheadBody, h, c.Height)
			}
			blk.txs = append(blk.txs, tx)
			blk.certs = append(blk.certs, c)
		}
		out = append(out, blk)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no block", errAheadBody)
	}
	return out, nil
}

// encodeAhead appends one block of an answer to b.
func encodeAhead(b []byte, height int64, txs [][]byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(height))
	b = binary.BigEndian.AppendUint32(b, uint32(len(txs)))
	for _, tx := range txs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(tx)))
		b = append(b, tx...)
	}
	return b
}

// serveCertificates answers GET /v1/internal/certificates from the blocks
// this broker holds (Options.Blocks).
func (p *Plane) serveCertificates(w http.ResponseWriter, r *http.Request) {
	if _, err := p.authenticated(r); err != nil {
		p.refuse(w, r, err)
		return
	}
	q := r.URL.Query()
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	count, err2 := strconv.Atoi(q.Get("count"))
	if err1 != nil || err2 != nil || from < 1 || count < 1 || count > aheadHeights {
		http.Error(w, fmt.Sprintf("want from=HEIGHT (at least 1) and count=N (1 to %d)", aheadHeights), http.StatusBadRequest)
		return
	}
	var body []byte
	for h := from; h < from+int64(count); h++ {
		txs, ok := p.blockTxs(h)
		if !ok {
			break
		}
		var certs [][]byte
		for _, tx := range txs {
			if fsm.IsCertifiedTx(tx) {
				certs = append(certs, tx)
			}
		}
		next := encodeAhead(body, h, certs)
		if len(body) > 0 && len(next) > aheadMaxBody {
			break
		}
		body = next
	}
	if len(body) == 0 {
		http.Error(w, "block not held here", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

// blockTxs returns the transactions of the block at height h if this broker
// holds it.
func (p *Plane) blockTxs(h int64) ([][]byte, bool) {
	if p.opts.Blocks == nil {
		return nil, false
	}
	return p.opts.Blocks(h)
}
