package bench

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// producerStats is what one producer's promises record. The promises of a
// kgo client run one at a time; the mutex is for the progress printer and
// the final report, which read while the promises write.
type producerStats struct {
	mu struct {
		sync.Mutex
		warm, meas   Histogram // latency (ns) of warmup and measured records
		acked, bytes int64     // every record acknowledged, warmup included
		records      int64     // measured records acknowledged
		measBytes    int64     // their key and value bytes
		errors       int64
		firstErr     error
		lastAck      time.Time // of a measured record
	}
}

// producer is one producing client and its send loop.
type producer struct {
	cl      *kgo.Client
	stats   *producerStats
	pacer   *pacer // nil for open loop
	payload *payload
	keys    [][]byte
	index   int // among the producers
	stride  int // number of producers
	e2e     bool

	measureFrom time.Time     // intended send times from here on are measured
	end         time.Time     // no record is sent with an intended time from here; zero: none
	quota       *atomic.Int64 // measured records claimed so far, when limit > 0
	limit       int64
}

// producerOpts returns the kgo options of a producing client.
func producerOpts(cfg *Config) []kgo.Opt {
	c, _ := codec(cfg.Compression)
	opts := []kgo.Opt{
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchCompression(c),
		kgo.RecordDeliveryTimeout(cfg.Timeout),
		// Bound the memory of an open-loop producer: Produce blocks
		// when this much is buffered and not yet acknowledged.
		kgo.MaxBufferedBytes(max(int(cfg.bufferMemory()), 4*(cfg.RecordSize+cfg.KeySize))),
	}
	switch cfg.Acks {
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	default:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	if cfg.MaxInflight > 1 {
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(cfg.MaxInflight))
	}
	if cfg.BatchMaxBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(cfg.BatchMaxBytes))
	}
	return opts
}

// run sends records until the end time, the record limit or ctx, then
// waits for the records in flight (at most Timeout after an interrupt).
func (p *producer) run(ctx context.Context, timeout time.Duration) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for n := 0; ctx.Err() == nil; n++ {
		var intended time.Time
		if p.pacer != nil {
			intended = p.pacer.next()
			if !p.end.IsZero() && !intended.Before(p.end) {
				break
			}
			if d := time.Until(intended); d > 0 {
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-ctx.Done():
				case <-timer.C:
				}
				if ctx.Err() != nil {
					break
				}
			}
		} else {
			intended = time.Now()
			if !p.end.IsZero() && !intended.Before(p.end) {
				break
			}
		}
		measured := !intended.Before(p.measureFrom)
		if measured && p.limit > 0 && p.quota.Add(1) > p.limit {
			break
		}
		seq := n*p.stride + p.index
		rec := &kgo.Record{Value: p.payload.value(seq, intended, p.e2e)}
		if len(p.keys) > 0 {
			rec.Key = p.keys[seq%len(p.keys)]
		}
		size := int64(len(rec.Key) + len(rec.Value))
		p.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			p.stats.done(ctx, intended, measured, size, err)
		})
	}
	// After an interrupt the buffered records fail with ctx's error;
	// flushing waits only for the requests already sent. Otherwise every
	// record is acknowledged or failed by its delivery timeout (Timeout)
	// before this flush gives up.
	grace := timeout + 5*time.Second
	if ctx.Err() != nil {
		grace = min(timeout, 5*time.Second) // Ctrl-C: do not keep the user waiting
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	_ = p.cl.Flush(fctx)
}

// done is the promise of every record.
func (s *producerStats) done(ctx context.Context, intended time.Time, measured bool, size int64, err error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed)) {
			return // stopped by the interrupt, not failed by the broker
		}
		s.mu.errors++
		if s.mu.firstErr == nil {
			s.mu.firstErr = fmt.Errorf("produce: %w", err)
		}
		return
	}
	lat := now.Sub(intended).Nanoseconds()
	s.mu.acked++
	s.mu.bytes += size
	if !measured {
		s.mu.warm.Record(lat)
		return
	}
	s.mu.meas.Record(lat)
	s.mu.records++
	s.mu.measBytes += size
	if now.After(s.mu.lastAck) {
		s.mu.lastAck = now
	}
}

// payload is a pool of pseudo-random bytes the record values are cut
// from: consecutive records take consecutive, non-overlapping slices, so
// the values of a batch do not repeat one another and compression sees
// data as incompressible as real encrypted or compressed payloads
// (a pessimistic case for the codecs, never a flattering one).
type payload struct {
	pool  []byte
	size  int // record value size
	slots int // values in the pool
}

// newPayload builds the pool for values of size bytes: at least 16 MiB,
// larger than any batch, from a fixed seed so that runs are repeatable.
func newPayload(size int) *payload {
	slots := max(4, (16<<20)/max(size, 1))
	pool := make([]byte, slots*size)
	rng := rand.NewChaCha8([32]byte{'s', 't', 'e', 'l', 'e'})
	_, _ = rng.Read(pool) // ChaCha8.Read never fails
	return &payload{pool: pool, size: size, slots: slots}
}

// minJSONValue is the smallest JSON value newJSONPayload makes.
const minJSONValue = 64

// newJSONPayload builds a pool of JSON objects of size bytes each,
// {"id":N,"card":"4111-....","pad":"<hex>"}, from a fixed seed.
func newJSONPayload(size int) *payload {
	p := newPayload(size)
	rng := rand.NewChaCha8([32]byte{'j', 's', 'o', 'n'})
	var rnd [8]byte
	for i := range p.slots {
		_, _ = rng.Read(rnd[:])
		v := fmt.Appendf(nil, `{"id":%d,"card":"4111-%04d-%04d","pad":"`, i, i%10000, binary.BigEndian.Uint16(rnd[:])%10000)
		for len(v) < size-2 {
			_, _ = rng.Read(rnd[:])
			v = hex.AppendEncode(v, rnd[:])
		}
		v = append(v[:size-2], '"', '}')
		copy(p.pool[i*size:], v)
	}
	return p
}

// value returns the value of record seq. For e2e it is a new buffer whose
// first 8 bytes are the intended send time (big-endian Unix nanoseconds);
// otherwise it is a slice of the pool, shared and never written.
func (p *payload) value(seq int, intended time.Time, e2e bool) []byte {
	off := (seq % p.slots) * p.size
	v := p.pool[off : off+p.size : off+p.size]
	if !e2e {
		return v
	}
	b := make([]byte, p.size)
	binary.BigEndian.PutUint64(b, uint64(intended.UnixNano()))
	copy(b[8:], v[8:])
	return b
}

// makeKeys returns n distinct keys of size bytes: the decimal numbers 1 to
// n, zero-padded (left-padded with zeros up to size; longer sizes pad
// further). Validate guarantees n fits.
func makeKeys(n, size int) [][]byte {
	if size == 0 {
		return nil
	}
	keys := make([][]byte, n)
	for i := range keys {
		d := strconv.Itoa(i + 1)
		k := make([]byte, size)
		for j := range k {
			k[j] = '0'
		}
		copy(k[max(0, size-len(d)):], d[max(0, len(d)-size):])
		keys[i] = k
	}
	return keys
}
