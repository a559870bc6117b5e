package dataplane

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stele-io/stele/internal/fsm"
)

// The data plane's HTTP endpoints, served on each broker's HTTP listener:
//
//	POST /v1/internal/batches?height=H&digest=D[&chain=ID]   body: a
//	     payload whose SHA-256 is D (hex). The
//	     broker checks it, stores it durably and answers 200 with its
//	     signature of the statement (fsm.Statement: chain ID, digest, size,
//	     H): 20 bytes of validator address, then 64 bytes of ed25519
//	     signature. A chain other than its own is refused (400), and so is
//	     a push naming none once this chain's certificates are bound to it
//	     (409: app version 2).
//	GET  /v1/internal/batches/{digest}   the payload with that SHA-256
//	     (hex), 404 when this broker does not hold it.
//	GET  /v1/internal/certificates?from=H&count=N   the certified
//	     transactions of the blocks from H on (ahead.go).
//
// Both are served only to the cluster's validators: each request carries
// its sender's signature (NodeAuthHeader, auth.go), and one no validator
// signed is answered 401 before its body is read. A pushed batch is
// stored only if it is well formed and its height is current, signed only
// if it is the batch the signed request names, and removed with the
// others once no certificate can name it (Plane.Prune). A fetched batch
// needs no trust: the fetcher checks the digest.
const batchesPath = "/v1/internal/batches"

// heightSlack is how far a pushed batch's height may be from this broker's
// committed height: ahead, because the pusher may have committed a block
// this broker has not; behind, so that the batch can still be ordered
// within its window.
const heightSlack = 100

// Handler serves the data plane's endpoints.
func (p *Plane) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+batchesPath, p.servePush)
	mux.HandleFunc("GET "+batchesPath+"/{digest}", p.serveFetch)
	mux.HandleFunc("GET "+certificatesPath, p.serveCertificates)
	return mux
}

// refuse answers 401 to a request no validator signed.
func (p *Plane) refuse(w http.ResponseWriter, r *http.Request, err error) {
	p.opts.Metrics.unauthenticated.Inc()
	p.opts.Logger.Info("refused an unauthenticated data-plane request", "from", r.RemoteAddr, "method", r.Method, "err", err)
	http.Error(w, err.Error(), http.StatusUnauthorized)
}

// refusesPushes reports whether this broker signs no batch pushed by the
// broker at from: one the chain took out of the cluster, or (without
// Options.Excluded) any broker outside the validator set.
func (p *Plane) refusesPushes(from [20]byte) bool {
	if p.opts.Excluded != nil {
		return p.opts.Excluded(from)
	}
	_, ok := p.current().Lookup(from)
	return !ok
}

func (p *Plane) servePush(w http.ResponseWriter, r *http.Request) {
	from, err := p.authenticated(r)
	if err != nil {
		p.refuse(w, r, err)
		return
	}
	if p.refusesPushes(from) {
		// A broker the chain took out (removed, or voted out for
		// misbehavior: fsm/cluster's membership.go) still fetches the
		// batches it applies, but has none signed. A replica's are
		// signed: it takes produce requests like any broker.
		http.Error(w, fmt.Sprintf("%X was taken out of the cluster: its batches are not signed", from), http.StatusForbidden)
		return
	}
	claimed, err := hex.DecodeString(r.URL.Query().Get("digest"))
	if err != nil || len(claimed) != 32 {
		http.Error(w, "digest: want the batch's SHA-256, 64 hex digits", http.StatusBadRequest)
		return
	}
	height, err := strconv.ParseInt(r.URL.Query().Get("height"), 10, 64)
	if err != nil {
		http.Error(w, "height: want an integer", http.StatusBadRequest)
		return
	}
	if own := p.opts.Height(); height > own+heightSlack || height < own-fsm.CertWindow/2 || height < 0 {
		http.Error(w, fmt.Sprintf("batch height %d is too far from this broker's height %d", height, own), http.StatusConflict)
		return
	}
	chain := r.URL.Query().Get("chain")
	switch {
	case chain != "" && chain != p.opts.ChainID:
		http.Error(w, fmt.Sprintf("batch certified for chain %q; this broker is of chain %q", chain, p.opts.ChainID), http.StatusBadRequest)
		return
	case chain == "" && p.bound():
		http.Error(w, fmt.Sprintf("this chain certifies only batches bound to it: push with chain=%s", url.QueryEscape(p.opts.ChainID)), http.StatusConflict)
		return
	}
	payload, err := readBody(http.MaxBytesReader(w, r.Body, int64(p.opts.MaxBatchBytes)), r.ContentLength, p.opts.MaxBatchBytes)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("batch larger than %d bytes", p.opts.MaxBatchBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(payload) == 0 {
		http.Error(w, "empty batch", http.StatusBadRequest)
		return
	}
	if err := p.opts.Check(payload); err != nil {
		http.Error(w, "batch refused: "+err.Error(), http.StatusBadRequest)
		return
	}
	d, err := p.store(payload, height)
	if err != nil {
		p.opts.Logger.Error("storing a pushed batch", "err", err)
		http.Error(w, "storing the batch failed", http.StatusInternalServerError)
		return
	}
	if string(d[:]) != string(claimed) {
		// Stored but never signed: pruned with the others of its height.
		http.Error(w, fmt.Sprintf("the batch's digest is %x, the signed request names %x", d, claimed), http.StatusBadRequest)
		return
	}
	s := p.sign(fsm.Certificate{Chain: chain, Digest: d, Size: uint32(len(payload)), Height: height})
	p.opts.Metrics.signed.Inc()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(append(s.Validator[:], s.Signature[:]...))
}

func (p *Plane) serveFetch(w http.ResponseWriter, r *http.Request) {
	if _, err := p.authenticated(r); err != nil {
		p.refuse(w, r, err)
		return
	}
	raw, err := hex.DecodeString(r.PathValue("digest"))
	if err != nil || len(raw) != 32 {
		http.Error(w, "digest: want 64 hex digits", http.StatusBadRequest)
		return
	}
	var d fsm.Digest
	copy(d[:], raw)
	b, err := p.load(d)
	switch {
	case errors.Is(err, ErrNotFound):
		http.Error(w, "batch not held here", http.StatusNotFound)
		return
	case err != nil:
		p.opts.Logger.Error("reading a batch for a peer", "err", err)
		http.Error(w, "reading the batch failed", http.StatusInternalServerError)
		return
	}
	p.opts.Metrics.served.Inc()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

// push sends payload to peer and returns the peer's signature of c's
// statement, checked.
func (p *Plane) push(peer Peer, c fsm.Certificate, payload []byte) (fsm.CertSig, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.opts.PushTimeout)
	defer cancel()
	target := fmt.Sprintf("%s%s?height=%d&digest=%x", peer.URL, batchesPath, c.Height, c.Digest)
	if c.Chain != "" {
		target += "&chain=" + url.QueryEscape(c.Chain)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(payload))
	if err != nil {
		return fsm.CertSig{}, err
	}
	p.authenticate(req)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := p.opts.Client.Do(req)
	if err != nil {
		return fsm.CertSig{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return fsm.CertSig{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return fsm.CertSig{}, fmt.Errorf("stele/dataplane: %s answered %s: %s", peer.URL, resp.Status, bytes.TrimSpace(body))
	}
	var s fsm.CertSig
	if len(body) != len(s.Validator)+len(s.Signature) {
		return s, fmt.Errorf("stele/dataplane: %s answered %d bytes, want a signature", peer.URL, len(body))
	}
	copy(s.Validator[:], body)
	copy(s.Signature[:], body[len(s.Validator):])
	pub, ok := p.key(s.Validator)
	if !ok || s.Validator != peer.Validator || !ed25519.Verify(pub, c.Statement(), s.Signature[:]) {
		return s, fmt.Errorf("stele/dataplane: %s answered a signature that does not verify", peer.URL)
	}
	return s, nil
}

// fetch gets c's payload from peer and checks it against the digest. The
// attempt ends at FetchTimeout, or with ctx.
func (p *Plane) fetch(ctx context.Context, peer Peer, c fsm.Certificate) ([]byte, error) {
	body, done, err := p.get(ctx, peer, fmt.Sprintf("%s/%x", batchesPath, c.Digest))
	if err != nil {
		return nil, err
	}
	defer done()
	b, err := readBody(io.LimitReader(body, int64(c.Size)+1), int64(c.Size), int(c.Size)+1)
	if err != nil {
		return nil, err
	}
	if uint32(len(b)) != c.Size || sha256.Sum256(b) != c.Digest {
		return nil, fmt.Errorf("%w: %s served %d bytes, the certificate names %d", errMismatch, peer.URL, len(b), c.Size)
	}
	return b, nil
}

// get makes a signed GET of path (with its query) to peer, within
// FetchTimeout or until ctx ends, and returns the body of a 200 answer, to
// be read before done is called; any other answer is an error.
func (p *Plane) get(ctx context.Context, peer Peer, path string) (body io.Reader, done func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.FetchTimeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peer.URL+path, nil)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	p.authenticate(req)
	resp, err := p.opts.Client.Do(req)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		cancel()
		return nil, nil, fmt.Errorf("stele/dataplane: %s answered %s", peer.URL, resp.Status)
	}
	return resp.Body, func() { resp.Body.Close(); cancel() }, nil
}

// readBody reads r to its end into a buffer of the announced length (when
// it is at most limit), so that a batch of several MiB is not copied and
// zeroed again each time io.ReadAll's buffer grows.
func readBody(r io.Reader, announced int64, limit int) ([]byte, error) {
	if announced < 0 || announced > int64(limit) {
		return io.ReadAll(r)
	}
	// The first MiB is read before the whole announced length is
	// allocated, so that a sender must send bytes to make a broker hold
	// memory for them.
	buf := make([]byte, min(announced, 1<<20))
	n, err := io.ReadFull(r, buf)
	if err == nil && int64(n) < announced {
		whole := make([]byte, announced)
		copy(whole, buf)
		var m int
		m, err = io.ReadFull(r, whole[n:])
		buf, n = whole, n+m
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // some bytes came, not all
		}
	}
	switch {
	case errors.Is(err, io.EOF): // nothing at all
		return buf[:n], nil
	case err != nil: // shorter than announced, or a read error
		return nil, err
	}
	// Anything beyond the announced length is read too, so that limits
	// and digests see the whole body.
	rest, err := io.ReadAll(r)
	if len(rest) > 0 {
		buf = append(buf, rest...)
	}
	return buf, err
}

// addressOf is CometBFT's validator address of an ed25519 key: the first
// 20 bytes of the key's SHA-256.
func addressOf(pub ed25519.PublicKey) []byte {
	h := sha256.Sum256(pub)
	return h[:20]
}

// Metrics are the data plane's Prometheus metrics.
type Metrics struct {
	certified, signed, served, fetched prometheus.Counter
	pushErrors, fetchErrors            prometheus.Counter
	fetchAttempts, fetchMismatches     prometheus.Counter
	recentHits, aheadBlocks            prometheus.Counter
	unauthenticated                    prometheus.Counter
	certifySeconds, fetchSeconds       prometheus.Histogram
	fetchPending, fetchOldest          prometheus.GaugeFunc

	// pending holds when each fetch under way began, for the gauges.
	pending struct {
		sync.Mutex
		next   uint64
		starts map[uint64]time.Time
	}
}

// NewMetrics creates the metrics and registers them with reg (nil: nowhere).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "stele_dataplane_" + name, Help: help})
	}
	m := &Metrics{
		certified:       c("certified_total", "Batches this broker certified."),
		signed:          c("signed_total", "Batches pushed by peers that this broker stored and signed."),
		served:          c("served_total", "Batches this broker served to peers that lacked them."),
		fetched:         c("fetched_total", "Certified batches this broker fetched from a peer."),
		pushErrors:      c("push_errors_total", "Pushes of a batch to a peer that failed."),
		fetchAttempts:   c("fetch_attempts_total", "Requests to a peer for a certified batch this broker lacked."),
		fetchErrors:     c("fetch_errors_total", "Requests to a peer for a certified batch that failed (error, timeout, wrong bytes)."),
		fetchMismatches: c("fetch_mismatches_total", "Batches a peer served whose digest did not match the certificate; the peer is not asked again for that batch."),
		recentHits:      c("recent_hits_total", "Batches applied from memory, as stored moments before, without reading them back from disk."),
		aheadBlocks:     c("ahead_blocks_total", "Blocks whose missing batches this broker started fetching before applying the block before them, while catching up."),
		unauthenticated: c("unauthenticated_requests_total", "Data-plane requests refused because no validator of this cluster signed them (Stele-Node-Auth)."),
		certifySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stele_dataplane_certify_seconds",
			Help: "Time from a batch's arrival to its certificate.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		fetchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stele_dataplane_fetch_seconds",
			Help: "Time from finding a certified batch missing to having fetched it.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}),
	}
	m.pending.starts = map[uint64]time.Time{}
	m.fetchPending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stele_dataplane_fetch_pending",
		Help: "Certified batches being fetched from peers now."}, func() float64 {
		m.pending.Lock()
		defer m.pending.Unlock()
		return float64(len(m.pending.starts))
	})
	m.fetchOldest = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stele_dataplane_fetch_oldest_seconds",
		Help: "How long the oldest fetch under way has lasted; a batch no peer delivers makes it grow."}, func() float64 {
		m.pending.Lock()
		defer m.pending.Unlock()
		var oldest time.Duration
		for _, t := range m.pending.starts {
			oldest = max(oldest, time.Since(t))
		}
		return oldest.Seconds()
	})
	if reg != nil {
		reg.MustRegister(m.certified, m.signed, m.served, m.fetched, m.pushErrors, m.fetchAttempts, m.fetchErrors,
			m.fetchMismatches, m.recentHits, m.aheadBlocks, m.unauthenticated, m.certifySeconds, m.fetchSeconds, m.fetchPending, m.fetchOldest)
	}
	return m
}

// trackFetch counts a fetch as under way until the returned func is called.
func (m *Metrics) trackFetch() (untrack func()) {
	m.pending.Lock()
	defer m.pending.Unlock()
	id := m.pending.next
	m.pending.next++
	m.pending.starts[id] = time.Now()
	return func() {
		m.pending.Lock()
		delete(m.pending.starts, id)
		m.pending.Unlock()
	}
}
