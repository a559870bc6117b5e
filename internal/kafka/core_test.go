package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/record"
)

func client(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestProduceConsumeRoundTrip: franz-go with its defaults (idempotence
// requested, so it must fall back when InitProducerId is not offered)
// produces keyed records to a 3-partition topic and reads every one back in
// per-partition order.
func TestProduceConsumeRoundTrip(t *testing.T) {
	addr := newTestBroker(t)
	adm := kadm.NewClient(client(t, addr))
	if _, err := adm.CreateTopic(ctx(t), 3, -1, nil, "rt"); err != nil {
		t.Fatal(err)
	}
	prod := client(t, addr, kgo.DefaultProduceTopic("rt"), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	const n = 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	var perr error
	for i := 0; i < n; i++ {
		wg.Add(1)
		prod.Produce(ctx(t), &kgo.Record{Key: []byte(strconv.Itoa(i % 17)), Value: []byte(fmt.Sprintf("v%d", i))}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				perr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if perr != nil {
		t.Fatal(perr)
	}
	cons := client(t, addr, kgo.ConsumeTopics("rt"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[int32][]int64{}
	seen := map[string]bool{}
	for len(seen) < n {
		fs := cons.PollFetches(ctx(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], r.Offset)
			seen[string(r.Value)] = true
		})
	}
	for p, offs := range got {
		for i, o := range offs {
			if o != int64(i) {
				t.Fatalf("partition %d: record %d has offset %d", p, i, o)
			}
		}
	}
	offs, err := adm.ListEndOffsets(ctx(t), "rt")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	offs.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != n {
		t.Fatalf("end offsets sum to %d, want %d", total, n)
	}
}

// TestAutoCreate: Metadata for an unknown topic creates it, with the
// default partition count, when auto-creation is on.
func TestAutoCreate(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr, kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(ctx(t), &kgo.Record{Topic: "auto", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	td, err := kadm.NewClient(cl).ListTopics(ctx(t), "auto")
	if err != nil || td["auto"].Err != nil || len(td["auto"].Partitions) != 1 {
		t.Fatalf("auto-created topic: %v %+v", err, td["auto"])
	}
}

func TestListOffsetsByTime(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr, kgo.DefaultProduceTopic("lo"), kgo.AllowAutoTopicCreation())
	base := time.UnixMilli(1_600_000_000_000)
	for i := 0; i < 10; i++ {
		r := &kgo.Record{Value: []byte{byte(i)}, Timestamp: base.Add(time.Duration(i) * time.Second)}
		if err := cl.ProduceSync(ctx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	lo, err := adm.ListOffsetsAfterMilli(ctx(t), base.Add(4500*time.Millisecond).UnixMilli(), "lo")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := lo.Lookup("lo", 0); o.Offset != 5 {
		t.Fatalf("offset after 4.5 s: %d, want 5", o.Offset)
	}
	start, _ := adm.ListStartOffsets(ctx(t), "lo")
	end, _ := adm.ListEndOffsets(ctx(t), "lo")
	if s, _ := start.Lookup("lo", 0); s.Offset != 0 {
		t.Fatalf("start offset %d", s.Offset)
	}
	if e, _ := end.Lookup("lo", 0); e.Offset != 10 {
		t.Fatalf("end offset %d", e.Offset)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "lo"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -3
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.Offset != 9 || p.Timestamp != base.Add(9*time.Second).UnixMilli() {
		t.Fatalf("max timestamp: offset %d ts %d", p.Offset, p.Timestamp)
	}
}

// TestFetchLongPoll: a fetch at the end waits for max_wait and is woken
// early by a produce.
func TestFetchLongPoll(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr, kgo.DefaultProduceTopic("lp"), kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(ctx(t), &kgo.Record{Value: []byte("a")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cons := client(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"lp": {0: kgo.NewOffset().At(1)}}), kgo.FetchMaxWait(5*time.Second))
	go func() {
		time.Sleep(200 * time.Millisecond)
		cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("b")})
	}()
	fs := cons.PollFetches(ctx(t))
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Value) != "b" {
		t.Fatalf("long poll returned %d records, err %v", len(recs), fs.Err0())
	}
}

func TestProduceErrors(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr, kgo.RecordRetries(0), kgo.ProducerBatchCompression(kgo.NoCompression()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx(t), 1, -1, map[string]*string{"max.message.bytes": kadm.StringPtr("200")}, "small"); err != nil {
		t.Fatal(err)
	}
	err := cl.ProduceSync(ctx(t), &kgo.Record{Topic: "small", Value: make([]byte, 1000)}).FirstErr()
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("oversized record: %v, want MESSAGE_TOO_LARGE", err)
	}
	err = cl.ProduceSync(ctx(t), &kgo.Record{Topic: "small", Partition: 0, Value: []byte("ok")}).FirstErr()
	if err != nil {
		t.Fatal(err)
	}
}

// rawRequest sends one framed request and returns the response body after
// the correlation id, or an error if the broker closed the connection.
func rawConn(t testing.TB, addr string) net.Conn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func readFrame(c net.Conn) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}

// rawAnswer sends req on c and reads its answer.
func rawAnswer(t *testing.T, c net.Conn, req kmsg.Request) kmsg.Response {
	t.Helper()
	if _, err := c.Write(frames(req, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := readFrame(c)
	if err != nil {
		t.Fatalf("%s: no answer: %v", kmsg.NameForKey(req.Key()), err)
	}
	resp := req.ResponseKind()
	body := b[4:]
	if resp.IsFlexible() {
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestBadInputClosesOnlyThatConnection: each malformed request closes its
// own connection, as Apache Kafka does, and the broker goes on serving.
func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	addr := newTestBroker(t)
	hdr := func(key, version int16) []byte {
		b := binary.BigEndian.AppendUint16(nil, uint16(key))
		b = binary.BigEndian.AppendUint16(b, uint16(version))
		b = binary.BigEndian.AppendUint32(b, 7)
		return binary.BigEndian.AppendUint16(b, 0xffff) // null client id
	}
	cases := map[string][]byte{
		"oversized frame":  binary.BigEndian.AppendUint32(nil, 200<<20),
		"negative frame":   binary.BigEndian.AppendUint32(nil, 0xfffffff0),
		"unknown api key":  frame(hdr(9999, 0)),
		"unserved version": frame(hdr(0, 99)),
		"truncated body":   frame(append(hdr(3, 1), 0, 0, 0, 5)),
		"garbage":          frame([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}),
		"short header":     frame([]byte{0, 3, 0}),
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			c := rawConn(t, addr)
			c.Write(raw)
			if _, err := readFrame(c); err == nil {
				t.Fatalf("broker answered instead of closing")
			}
		})
	}
	// ApiVersions at an unknown version: UNSUPPORTED_VERSION in v0 (KIP-511).
	c := rawConn(t, addr)
	c.Write(frame(append(hdr(18, 99), 1, 2, 3)))
	resp, err := readFrame(c)
	if err != nil {
		t.Fatal(err)
	}
	if code := int16(binary.BigEndian.Uint16(resp[4:6])); code != kerr.UnsupportedVersion.Code {
		t.Fatalf("ApiVersions v99: error code %d", code)
	}
	// And the broker still serves.
	cl := client(t, addr)
	if err := cl.Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestFetchEmptyRecordsNotNull: a partition with nothing to return carries
// an empty record set, never a null one (librdkafka rejects null).
func TestFetchEmptyRecordsNotNull(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 1, -1, nil, "empty"); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MaxBytes = 10, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "empty"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.RecordBatches == nil {
		t.Fatalf("error %d, records nil: %v", p.ErrorCode, p.RecordBatches == nil)
	}
}

// TestCodecsStoredVerbatim: batches compressed with each of Kafka's four
// codecs are stored and fetched back byte for byte as the client sent them
// (only the base offset and leader epoch are the broker's), and decode to
// the records produced.
func TestCodecsStoredVerbatim(t *testing.T) {
	tb := startTestBroker(t, nil)
	codecs := map[string]kgo.CompressionCodec{"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			cl := client(t, tb.addr, kgo.DefaultProduceTopic("c-"+name), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchCompression(codec))
			var recs []*kgo.Record
			for i := 0; i < 50; i++ {
				recs = append(recs, &kgo.Record{Key: []byte("k"), Value: []byte(strings.Repeat(fmt.Sprint(i), 40))})
			}
			if err := cl.ProduceSync(ctx(t), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			data, err := tb.b.View().Partition("c-"+name, 0).Read(0, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			h, err := record.ParseHeader(data)
			if err != nil || h.Codec().String() != name {
				t.Fatalf("stored batch codec %v (%v), want %s", h.Codec(), err, name)
			}
			cons := client(t, tb.addr, kgo.ConsumeTopics("c-"+name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			got := 0
			for got < 50 {
				fs := cons.PollFetches(ctx(t))
				if err := fs.Err0(); err != nil {
					t.Fatal(err)
				}
				fs.EachRecord(func(r *kgo.Record) {
					if string(r.Value) != string(recs[got].Value) {
						t.Fatalf("record %d: %q", got, r.Value)
					}
					got++
				})
			}
		})
	}
}

// TestFetchAtLeastOneBatch: KIP-74, a batch larger than max_bytes is still
// returned when it is the first one.
func TestFetchAtLeastOneBatch(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr, kgo.DefaultProduceTopic("big"), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err := cl.ProduceSync(ctx(t), &kgo.Record{Value: make([]byte, 50_000)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cons := client(t, addr, kgo.ConsumeTopics("big"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(1000), kgo.FetchMaxPartitionBytes(1000))
	fs := cons.PollFetches(ctx(t))
	if err := fs.Err0(); err != nil || len(fs.Records()) != 1 {
		t.Fatalf("fetch with max_bytes 1000: %d records, %v", len(fs.Records()), err)
	}
}

// TestAnnouncedSizeIsNotReserved: memory for a request follows the bytes
// a client sent, not the size it announced: a frame announcing 99 MiB and
// sending 10 bytes costs kilobytes (found by test/chaos's malformed-traffic
// test, where 16 such connections made each broker allocate 1.6 GB), and so
// does one that sends its first 100 KiB, since 99 MiB do not fit in the
// reserve of bodies allocated whole.
func TestAnnouncedSizeIsNotReserved(t *testing.T) {
	var reserve bodyReserve
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, sent := range []int{10, 100 << 10} {
		for range 10 {
			if _, err := readRequestBody(bytes.NewReader(make([]byte, sent)), 99<<20, &reserve); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("a frame cut short after %d bytes: %v, want io.ErrUnexpectedEOF", sent, err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("20 frames announcing 99 MiB with 10 bytes or 100 KiB each allocated %d MiB", grew>>20)
	}
	if h := reserve.held.Load(); h != 0 {
		t.Fatalf("the reserve holds %d bytes after the frames ended", h)
	}
	body := bytes.Repeat([]byte("stele"), 300_000) // 1.5 MB: grown several times
	got, err := readRequestBody(bytes.NewReader(body), len(body), nil)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("a whole frame: %d bytes, %v", len(got), err)
	}
}

// TestBodyReadWhole: a large body that fits in the reserve is read into
// one buffer of its size once its first 64 KiB have arrived (1.5 MB and
// 64 KiB allocated, not the 3.5 MB of doubling), holds its size in the
// reserve while it arrives and gives it back when it has, or when its
// connection ends; the reserve takes no more than 64 MiB in all. (A body
// that does not fit grows as it arrives: TestAnnouncedSizeIsNotReserved.)
func TestBodyReadWhole(t *testing.T) {
	var reserve bodyReserve
	body := bytes.Repeat([]byte("stele"), 300_000)
	// Bytes allocated per read, the least of five (other goroutines'
	// allocations only add): 1.5 MB and 64 KiB read whole, about 3.5 MB
	// doubling.
	allocated := func(reserve *bodyReserve) uint64 {
		least := uint64(math.MaxUint64)
		for range 5 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := readRequestBody(bytes.NewReader(body), len(body), reserve)
			runtime.ReadMemStats(&after)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("a whole frame: %d bytes, %v", len(got), err)
			}
			least = min(least, after.TotalAlloc-before.TotalAlloc)
		}
		return least
	}
	if whole, doubled := allocated(&reserve), allocated(nil); whole > 2<<20 || doubled < 3<<20 {
		t.Errorf("reading 1.5 MB allocated %d bytes with a reserve, %d without: want under 2 MiB and over 3 MiB", whole, doubled)
	}
	if h := reserve.held.Load(); h != 0 {
		t.Fatalf("the reserve holds %d bytes after whole frames", h)
	}

	// A 10 MiB frame whose first 100 KiB arrived holds 10 MiB of the
	// reserve until its connection ends.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := readRequestBody(pr, 10<<20, &reserve)
		done <- err
	}()
	if _, err := pw.Write(make([]byte, 100<<10)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); reserve.held.Load() != 10<<20; {
		if time.Now().After(deadline) {
			t.Fatalf("the reserve holds %d bytes, want 10 MiB", reserve.held.Load())
		}
		time.Sleep(time.Millisecond)
	}
	// 60 MiB more do not fit; a 1.5 MB frame still does.
	if reserve.take(60 << 20) {
		t.Fatal("60 MiB taken beside 10 MiB held, the reserve is 64 MiB")
	}
	got, err := readRequestBody(bytes.NewReader(body), len(body), &reserve)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("a frame beside the held one: %d bytes, %v", len(got), err)
	}
	pw.Close()
	if err := <-done; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a frame cut short: %v, want io.ErrUnexpectedEOF", err)
	}
	if h := reserve.held.Load(); h != 0 {
		t.Fatalf("the reserve holds %d bytes after the connection ended", h)
	}
}

// TestIdleConnectionClosed: a connection that sends nothing for the idle
// timeout (connections.max.idle.ms) is closed, one that is half way through
// a frame too.
func TestIdleConnectionClosed(t *testing.T) {
	tb := startTestBroker(t, func(o *Options) { o.IdleTimeout = 300 * time.Millisecond })
	for _, sent := range [][]byte{nil, {0, 0, 1, 0, 0, 3}} {
		c := rawConn(t, tb.addr)
		c.Write(sent)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("after sending %d bytes: read %v, want the broker to close (EOF)", len(sent), err)
		}
		t.Logf("sent %d bytes: closed after %v", len(sent), time.Since(start).Round(time.Millisecond))
	}
	if err := client(t, tb.addr).Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
}
