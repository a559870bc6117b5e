package chaos

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The attackers of TestMalformedTraffic (malformed_test.go): what they
// send to the brokers' Kafka and HTTP ports, and what they require back.

// attack sends malformed traffic to every broker of a cluster from
// malAttackers goroutines (the kinds of attackKinds), each with
// its own random source from the seed, for malAttempts attempts each or
// until malAttackFor has passed or a broker has exited.
type attack struct {
	seed     uint64
	kafka    []string
	http     []string
	exited   []<-chan struct{}
	served   map[int16][2]int16
	height   atomic.Int64 // the latest height seen on /healthz, for data-plane pushes
	deadline time.Time
	// mustClose counts connections closed that the docs say must be
	// closed for bad input.
	mustClose atomic.Int64
	attackers []*attacker

	mu struct {
		sync.Mutex
		frames   map[string]int // frames sent, by kind
		outcomes map[string]map[string]int
		statuses map[int]int // HTTP statuses answered
		failures []string
		dropped  int // failures past the first 20
	}
}

func newAttack(t *testing.T, c *harness.Cluster, seed uint64) *attack {
	t.Helper()
	a := &attack{seed: seed, served: map[int16][2]int16{}}
	a.mu.frames, a.mu.outcomes, a.mu.statuses = map[string]int{}, map[string]map[string]int{}, map[int]int{}
	for _, n := range c.Nodes {
		a.kafka = append(a.kafka, n.Kafka)
		a.http = append(a.http, n.HTTP)
		a.exited = append(a.exited, n.Proc.Done)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Request(ctx, 0, kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		t.Fatalf("ApiVersions: %v", err)
	}
	for _, k := range resp.(*kmsg.ApiVersionsResponse).ApiKeys {
		a.served[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	h, err := c.Health(0)
	if err != nil {
		t.Fatal(err)
	}
	a.height.Store(h.Height)
	return a
}

// run runs the attackers and returns when all have stopped.
func (a *attack) run() {
	a.deadline = time.Now().Add(malAttackFor)
	var wg sync.WaitGroup
	for id := range malAttackers {
		at := &attacker{a: a, id: id, rng: rand.New(rand.NewPCG(a.seed, uint64(id))),
			fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID(fmt.Sprintf("malformed-%d", id)))}
		at.corr = at.rng.Int32()
		a.attackers = append(a.attackers, at)
		wg.Go(at.loop)
	}
	wg.Wait()
}

func (a *attack) brokerExited() bool {
	for _, d := range a.exited {
		select {
		case <-d:
			return true
		default:
		}
	}
	return false
}

func (a *attack) sent(kind string, frames int) {
	a.mu.Lock()
	a.mu.frames[kind] += frames
	a.mu.Unlock()
}

func (a *attack) outcome(kind, what string) {
	a.mu.Lock()
	if a.mu.outcomes[kind] == nil {
		a.mu.outcomes[kind] = map[string]int{}
	}
	a.mu.outcomes[kind][what]++
	a.mu.Unlock()
}

func (a *attack) fail(format string, args ...any) {
	a.mu.Lock()
	if len(a.mu.failures) < 20 {
		a.mu.failures = append(a.mu.failures, fmt.Sprintf(format, args...))
	} else {
		a.mu.dropped++
	}
	a.mu.Unlock()
}

func (a *attack) failures() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.mu.failures)
	if a.mu.dropped > 0 {
		out = append(out, fmt.Sprintf("... and %d more failures of the attack", a.mu.dropped))
	}
	return out
}

// summary prints frames sent and outcomes by kind, and HTTP statuses.
func (a *attack) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	total, closed := 0, 0
	for _, kind := range slices.Sorted(maps.Keys(a.mu.frames)) {
		total += a.mu.frames[kind]
		closed += a.mu.outcomes[kind]["closed"] + a.mu.outcomes[kind]["answered+closed"]
		var outs []string
		for _, o := range slices.Sorted(maps.Keys(a.mu.outcomes[kind])) {
			outs = append(outs, fmt.Sprintf("%s %d", o, a.mu.outcomes[kind][o]))
		}
		fmt.Fprintf(&b, "  %-18s %5d frames; %s\n", kind, a.mu.frames[kind], strings.Join(outs, ", "))
	}
	var sts []string
	for _, s := range slices.Sorted(maps.Keys(a.mu.statuses)) {
		sts = append(sts, fmt.Sprintf("%d×%d", a.mu.statuses[s], s))
	}
	return fmt.Sprintf("frames sent: %d by %d attackers, connections closed by the broker: %d (%d required by the docs)\n%sHTTP statuses: %s\n",
		total, malAttackers, closed, a.mustClose.Load(), b.String(), strings.Join(sts, " "))
}

// saveFrames writes the last frames of every attacker to a directory, to
// replay the one that broke a broker.
func (a *attack) saveFrames(t *testing.T) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("stele-malformed-%d", a.seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("saving frames: %v", err)
		return
	}
	for _, at := range a.attackers {
		for _, f := range at.recent {
			name := fmt.Sprintf("a%d-%05d-%s-%s.bin", at.id, f.seq, f.at.Format("150405.000"), f.kind)
			if err := os.WriteFile(filepath.Join(dir, name), f.data, 0o644); err != nil {
				t.Logf("saving frames: %v", err)
				return
			}
		}
	}
	t.Logf("the last %d frames of each attacker are in %s (file: attacker-seq-time-kind.bin, as written to the socket)", recentFrames, dir)
}

// closedByPeer reports whether err means the peer closed the connection.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// splitFrames splits size-prefixed frames off data.
func splitFrames(data []byte) (frames [][]byte) {
	for len(data) >= 4 {
		n := int(binary.BigEndian.Uint32(data))
		if len(data)-4 < n {
			break
		}
		frames = append(frames, data[4:4+n])
		data = data[4+n:]
	}
	return frames
}

// logUniform returns a number in [lo, hi] whose logarithm is uniform, so
// that small and huge sizes are both drawn.
func logUniform(rng *rand.Rand, lo, hi int64) int64 {
	l, h := math.Log(float64(lo)), math.Log(float64(hi))
	return min(hi, max(lo, int64(math.Exp(l+rng.Float64()*(h-l)))))
}

// maxPushBytes is the data plane's largest batch push (a payload's
// Content-Length may be up to this): CometBFT's max_tx_bytes, 16 MiB.
const maxPushBytes = 16 << 20

// holdShortFrames opens 16 connections to every broker's Kafka port, each
// sending only the 4-byte size prefix of a frame of nearly 100 MiB; then 32
// to its HTTP port, each sending only the head of a data-plane push (POST
// /v1/internal/batches) announcing a 16 MiB body. A broker must not set
// memory aside for bytes it has not received: nothing times such a
// connection out, so a few hundred of them, a few bytes each, would reserve
// tens of GiB and raise the Go heap's collection target so far that the
// broker's ordinary garbage is no longer collected, until the process is
// killed for memory. What each broker allocates while they are opened
// (go_memstats_alloc_bytes_total, a few MiB a second without them) must
// stay under half of what they announce.
func (a *attack) holdShortFrames(t *testing.T) {
	t.Helper()
	a.hold(t, "held-short-frame", a.kafka, 16, maxRequestBytes-1, func() []byte { return sizePrefix(maxRequestBytes - 1) })
	a.hold(t, "held-http-push", a.http, 32, maxPushBytes, func() []byte {
		return httpRequest("POST", fmt.Sprintf("/v1/internal/batches?height=%d", a.height.Load()),
			[]string{"Content-Type: application/octet-stream", fmt.Sprintf("Content-Length: %d", maxPushBytes)}, nil)
	})
}

// hold opens n connections to each of addrs (one per broker), writes head
// on each, waits a second and closes them, and compares what each broker
// allocated meanwhile with what the heads announce (announced bytes each).
func (a *attack) hold(t *testing.T, kind string, addrs []string, n, announced int, head func() []byte) {
	t.Helper()
	allocated := func() []float64 {
		out := make([]float64, len(a.http))
		for i, addr := range a.http {
			var err error
			if out[i], _, err = brokerMetric(addr, "go_memstats_alloc_bytes_total"); err != nil {
				t.Fatalf("node%d: %v", i, err)
			}
		}
		return out
	}
	before := allocated()
	var conns []net.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for i, addr := range addrs {
		for range n {
			nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Errorf("%s: dialing node%d: %v", kind, i, err)
				return
			}
			conns = append(conns, nc)
			if _, err := nc.Write(head()); err != nil {
				t.Errorf("%s: node%d: %v", kind, i, err)
			}
			a.sent(kind, 1)
			a.outcome(kind, "held 1s, closed by us")
		}
	}
	time.Sleep(time.Second)
	after := allocated()
	var report []string
	for i := range after {
		grew := after[i] - before[i]
		report = append(report, fmt.Sprintf("node%d %.0f MiB", i, grew/(1<<20)))
		if grew > float64(n*announced/2) {
			t.Errorf("%s: node%d allocated %.0f MiB while %d connections each sent only %q, announcing %d bytes: "+
				"the broker sets aside memory for bytes it has not received", kind, i, grew/(1<<20), n, head(), announced)
		}
	}
	t.Logf("%s: %d connections per broker held, each announcing %d bytes and sending none of them; allocated meanwhile: %s",
		kind, n, announced, strings.Join(report, ", "))
}

// recentFrames is how many of its last frames each attacker keeps.
const recentFrames = 32

// sentFrame is a frame as an attacker wrote it to its socket.
type sentFrame struct {
	seq  int
	at   time.Time
	kind string
	data []byte
}

// attacker is one goroutine of the attack, with its own random source.
type attacker struct {
	a        *attack
	id       int
	rng      *rand.Rand
	fmt      *kmsg.RequestFormatter
	corr     int32
	produced int // values of its Produce requests
	seq      int
	recent   []sentFrame
}

// attackKinds are what attackers send, with their weights: Kafka frames
// (random bytes, bad sizes, real requests cut short, corrupted or sent to
// an API or version not served, bad frames in the middle of a pipeline,
// idle and dribbled connections) and bad HTTP requests.
var attackKinds = []struct {
	name   string
	weight int
	run    func(*attacker, string)
}{
	{"bad-size", 8, (*attacker).badSize},
	{"random-bytes", 7, (*attacker).randomBytes},
	{"sized-random", 7, (*attacker).sizedRandom},
	{"short-frame", 7, (*attacker).shortFrame},
	{"truncated-request", 9, (*attacker).truncatedRequest},
	{"cut-request", 6, (*attacker).cutRequest},
	{"flipped-request", 12, (*attacker).flippedRequest},
	{"bad-batch", 6, (*attacker).badBatch},
	{"unknown-api-key", 6, (*attacker).unknownKey},
	{"bad-version", 6, (*attacker).badVersion},
	{"header-random-body", 8, (*attacker).randomBody},
	{"pipeline", 6, (*attacker).pipeline},
	{"idle", 2, (*attacker).idle},
	{"dribble", 2, (*attacker).dribble},
	{"http-path", 2, (*attacker).httpPath},
	{"http-method", 2, (*attacker).httpMethod},
	{"http-header", 1, (*attacker).httpHeader},
	{"http-body", 3, (*attacker).httpBody},
	{"http-truncated", 2, (*attacker).httpTruncated},
	{"http-random", 2, (*attacker).httpRandom},
}

// safeKeys are the APIs attackers build requests of: none deletes or
// rewrites what the well-behaved clients wrote. syncKeys are answered at
// once from the broker's state, so a pipeline of them is answered in full.
var (
	safeKeys = []int16{18, 3, 0, 1, 2, 10, 11, 12, 8, 9, 22, 24, 26, 32, 16, 15}
	syncKeys = []int16{18, 3, 2, 32, 16}
)

func (at *attacker) loop() {
	total := 0
	for _, k := range attackKinds {
		total += k.weight
	}
	for i := range malAttempts {
		if time.Now().After(at.a.deadline) || at.a.brokerExited() {
			return
		}
		if at.id == 0 && i%100 == 0 {
			at.refreshHeight()
		}
		r := at.rng.IntN(total)
		for _, k := range attackKinds {
			if r < k.weight {
				k.run(at, k.name)
				break
			}
			r -= k.weight
		}
	}
}

func (at *attacker) random(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(at.rng.Uint32())
	}
	return b
}

func (at *attacker) clientID() string { return fmt.Sprintf("malformed-%d", at.id) }

// note remembers data as written to a socket.
func (at *attacker) note(kind string, data []byte) {
	at.seq++
	if len(at.recent) == recentFrames {
		copy(at.recent, at.recent[1:])
		at.recent = at.recent[:recentFrames-1]
	}
	at.recent = append(at.recent, sentFrame{at.seq, time.Now(), kind, data})
}

// dial connects to a random broker's Kafka port (or HTTP port): a live
// broker must accept the connection.
func (at *attacker) dial(kind string, httpPort bool) net.Conn {
	addrs := at.a.kafka
	if httpPort {
		addrs = at.a.http
	}
	nc, err := net.DialTimeout("tcp", addrs[at.rng.IntN(len(addrs))], 5*time.Second)
	if err != nil {
		at.a.fail("%s: dialing the broker: %v", kind, err)
		return nil
	}
	return nc
}

// attackReply is what came back on one connection.
type attackReply struct {
	raw    []byte
	frames [][]byte // complete Kafka frames of raw
	closed bool     // the broker closed the connection (EOF or reset)
}

// exchange writes data (frames frames) on a new connection, a few bytes at
// a time when dribble is set, then reads until the broker closes it, want
// Kafka answers have come (want < 0: no limit) or wait has passed. ok is
// false if the connection could not be made.
func (at *attacker) exchange(kind string, httpPort bool, data []byte, frames int, wait time.Duration, want int, dribble bool) (r attackReply, ok bool) {
	nc := at.dial(kind, httpPort)
	if nc == nil {
		return r, false
	}
	defer nc.Close()
	at.note(kind, data)
	at.a.sent(kind, frames)
	nc.SetDeadline(time.Now().Add(wait))
	for rest := data; len(rest) > 0; {
		k := len(rest)
		if dribble {
			k = min(k, 1+at.rng.IntN(3))
			time.Sleep(time.Millisecond)
		}
		if _, err := nc.Write(rest[:k]); err != nil {
			r.closed = closedByPeer(err)
			break
		}
		rest = rest[k:]
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := nc.Read(buf)
		r.raw = append(r.raw, buf[:n]...)
		if !httpPort && want >= 0 && len(splitFrames(r.raw)) >= want {
			break
		}
		if err != nil {
			r.closed = r.closed || closedByPeer(err)
			break
		}
	}
	if !httpPort {
		r.frames = splitFrames(r.raw)
	}
	switch {
	case len(r.raw) > 0 && r.closed:
		at.a.outcome(kind, "answered+closed")
	case len(r.raw) > 0:
		at.a.outcome(kind, "answered")
	case r.closed:
		at.a.outcome(kind, "closed")
	default:
		at.a.outcome(kind, "silent")
	}
	return r, true
}

// sendAndClose writes data on a new connection and closes it after linger
// without reading: the broker sees a frame or request cut short.
func (at *attacker) sendAndClose(kind string, httpPort bool, data []byte, linger time.Duration) {
	nc := at.dial(kind, httpPort)
	if nc == nil {
		return
	}
	at.note(kind, data)
	at.a.sent(kind, 1)
	nc.SetDeadline(time.Now().Add(mustWait))
	nc.Write(data)
	time.Sleep(linger)
	nc.Close()
	at.a.outcome(kind, "closed by us")
}

// mustBeClosed requires that the broker closed the connection without
// answering (docs/kafka-api.md: bad sizes, undecodable frames, APIs and
// versions not served).
func (at *attacker) mustBeClosed(kind string, r attackReply, what string) {
	switch {
	case len(r.frames) > 0:
		at.a.fail("%s: %s was answered (%d bytes) instead of closing the connection", kind, what, len(r.raw))
	case !r.closed:
		at.a.fail("%s: %s did not close the connection within %v", kind, what, mustWait)
	default:
		at.a.mustClose.Add(1)
	}
}

// checkCorr requires every answer to carry the correlation id of a request
// sent on its connection, in the order sent (acks=0 produces are not
// answered, so answers are a subsequence).
func (at *attacker) checkCorr(kind string, sent []int32, frames [][]byte) {
	i := 0
	for _, f := range frames {
		if len(f) < 4 {
			at.a.fail("%s: an answer frame of %d bytes", kind, len(f))
			return
		}
		corr := int32(binary.BigEndian.Uint32(f))
		for i < len(sent) && sent[i] != corr {
			i++
		}
		if i == len(sent) {
			at.a.fail("%s: an answer with correlation id %d, not among those sent (%v) or out of order", kind, corr, sent)
			return
		}
		i++
	}
}

// request builds a request of one of keys at a served version, with
// plausible contents aimed at malTopic (a partition that does not exist
// now and then).
func (at *attacker) request(keys []int16) kmsg.Request {
	key := keys[at.rng.IntN(len(keys))]
	vr, ok := at.a.served[key]
	if !ok {
		key, vr = 18, at.a.served[18]
	}
	req := kmsg.RequestForKey(key)
	hi := min(vr[1], req.MaxVersion())
	req.SetVersion(vr[0] + int16(at.rng.IntN(int(hi-vr[0])+1)))
	rng := at.rng
	part := int32(rng.IntN(malParts + 1))
	const group, txn = "malformed-group", "malformed-txn"
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		r.ClientSoftwareName, r.ClientSoftwareVersion = "malformed", "1.0"
	case *kmsg.MetadataRequest:
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(malTopic)
		r.Topics = append(r.Topics, mt)
	case *kmsg.ProduceRequest:
		r.Acks, r.TimeoutMillis = []int16{-1, 1, 0}[rng.IntN(3)], 5000
		var values []string
		for range 1 + rng.IntN(3) {
			at.produced++
			values = append(values, fmt.Sprintf("atk%d-%d", at.id, at.produced))
		}
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = malTopic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = part, harness.EncodeBatch(time.Now().UnixMilli(), values...)
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	case *kmsg.FetchRequest:
		r.ReplicaID, r.MaxWaitMillis, r.MinBytes, r.MaxBytes = -1, int32(rng.IntN(300)), 1, 1<<20
		r.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = malTopic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = part, rng.Int64N(300), 1<<20
		rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.LogStartOffset = -1, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	case *kmsg.ListOffsetsRequest:
		r.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = malTopic
		for p := range int32(malParts) {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, -1-rng.Int64N(2), -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
	case *kmsg.FindCoordinatorRequest:
		r.CoordinatorKey, r.CoordinatorKeys = group, []string{group}
	case *kmsg.JoinGroupRequest:
		r.Group, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = group, 6000, 6000, "consumer"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", []byte{0, 1, 0, 0, 0, 1, 0, byte(len(malTopic))}
		p.Metadata = append(append(p.Metadata, malTopic...), 0, 0, 0, 0)
		r.Protocols = append(r.Protocols, p)
	case *kmsg.HeartbeatRequest:
		r.Group, r.Generation, r.MemberID = group, 1, "malformed-member"
	case *kmsg.OffsetCommitRequest:
		r.Group, r.Generation = group, -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = malTopic
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = part, rng.Int64N(100)
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	case *kmsg.OffsetFetchRequest:
		r.Group = group
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group = group
		r.Groups = append(r.Groups, g)
	case *kmsg.InitProducerIDRequest:
		if rng.IntN(2) == 0 {
			r.TransactionalID = kmsg.StringPtr(txn)
		}
		r.TransactionTimeoutMillis, r.ProducerID, r.ProducerEpoch = 10000, -1, -1
	case *kmsg.AddPartitionsToTxnRequest:
		pid := 1<<40 + rng.Int64N(1<<40) // no producer the broker gave out
		r.TransactionalID, r.ProducerID = txn, pid
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic, rt.Partitions = malTopic, []int32{part}
		r.Topics = append(r.Topics, rt)
		tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
		tx.TransactionalID, tx.ProducerID, tx.VerifyOnly = txn, pid, rng.IntN(2) == 0
		tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		tt.Topic, tt.Partitions = malTopic, []int32{part}
		tx.Topics = append(tx.Topics, tt)
		r.Transactions = append(r.Transactions, tx)
	case *kmsg.EndTxnRequest:
		r.TransactionalID, r.ProducerID, r.Commit = txn, 1<<40+rng.Int64N(1<<40), rng.IntN(2) == 0
	case *kmsg.DescribeConfigsRequest:
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, malTopic
		r.Resources = append(r.Resources, rr)
	case *kmsg.DescribeGroupsRequest:
		r.Groups = []string{group}
	}
	return req
}

// frame encodes req as a whole frame; body is where its body begins.
func (at *attacker) frame(req kmsg.Request) (data []byte, corr int32, body int) {
	at.corr++
	data = at.fmt.AppendRequest(nil, req, at.corr)
	body = 4 + 8 + 2 + len(at.clientID())
	if req.IsFlexible() {
		body++
	}
	return data, at.corr, body
}

func requestName(req kmsg.Request) string {
	return fmt.Sprintf("%s v%d", kmsg.NameForKey(req.Key()), req.GetVersion())
}

func sizePrefix(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }

// badSize: a negative, tiny (< 8) or huge (> 100 MiB) size prefix and a few
// random bytes; the broker must close the connection.
func (at *attacker) badSize(kind string) {
	var n int32
	switch at.rng.IntN(3) {
	case 0:
		n = -1 - at.rng.Int32N(math.MaxInt32)
	case 1:
		n = at.rng.Int32N(8)
	default:
		n = maxRequestBytes + 1 + at.rng.Int32N(math.MaxInt32-maxRequestBytes)
	}
	data := append(sizePrefix(n), at.random(at.rng.IntN(64))...)
	if r, ok := at.exchange(kind, false, data, 1, mustWait, -1, false); ok {
		at.mustBeClosed(kind, r, fmt.Sprintf("a frame size of %d", n))
	}
}

// randomBytes: 1-64 random bytes, no structure.
func (at *attacker) randomBytes(kind string) {
	at.exchange(kind, false, at.random(1+at.rng.IntN(64)), 1, 30*time.Millisecond, -1, false)
}

// sizedRandom: a correct size prefix and that many random bytes.
func (at *attacker) sizedRandom(kind string) {
	n := 8 + at.rng.IntN(512)
	at.exchange(kind, false, append(sizePrefix(int32(n)), at.random(n)...), 1, 100*time.Millisecond, 1, false)
}

// shortFrame: a size prefix much larger than what follows (up to 100 MiB),
// then the connection is closed.
func (at *attacker) shortFrame(kind string) {
	m := at.rng.IntN(256)
	n := logUniform(at.rng, int64(m+1), maxRequestBytes)
	at.sendAndClose(kind, false, append(sizePrefix(int32(n)), at.random(m)...), time.Duration(at.rng.IntN(20))*time.Millisecond)
}

// truncatedRequest: a real request cut at a random byte, its size prefix
// saying so: the frame does not decode and the broker must close.
func (at *attacker) truncatedRequest(kind string) {
	req := at.request(safeKeys)
	data, _, _ := at.frame(req)
	cut := at.rng.IntN(len(data) - 4)
	out := append(sizePrefix(int32(cut)), data[4:4+cut]...)
	if r, ok := at.exchange(kind, false, out, 1, mustWait, -1, false); ok {
		at.mustBeClosed(kind, r, fmt.Sprintf("%s cut to %d of %d bytes", requestName(req), cut, len(data)-4))
	}
}

// cutRequest: a real request whose connection closes part way through it.
func (at *attacker) cutRequest(kind string) {
	data, _, _ := at.frame(at.request(safeKeys))
	at.sendAndClose(kind, false, data[:1+at.rng.IntN(len(data)-1)], time.Duration(at.rng.IntN(20))*time.Millisecond)
}

// flippedRequest: a real request with 1-4 random bytes of its body changed;
// the broker answers it or closes.
func (at *attacker) flippedRequest(kind string) {
	var data []byte
	var corr int32
	body := 0
	for body >= len(data) {
		data, corr, body = at.frame(at.request(safeKeys))
	}
	for range 1 + at.rng.IntN(4) {
		data[body+at.rng.IntN(len(data)-body)] ^= byte(1 + at.rng.IntN(255))
	}
	if r, ok := at.exchange(kind, false, data, 1, 300*time.Millisecond, 1, false); ok {
		at.checkCorr(kind, []int32{corr}, r.frames)
	}
}

// badBatch: a well-formed Produce whose record batch is corrupt under a
// correct CRC-32C (bytes changed after the CRC field, a compression codec
// set on uncompressed records, random records, a wrong record count), so
// that only the broker's batch validation stands between it and the log.
// The answer's error code is tallied; only a batch with bytes changed may be
// accepted (a changed value or timestamp is still a good batch), and what
// was accepted must decode when the log is read back (malLog).
func (at *attacker) badBatch(kind string) {
	req := kmsg.NewPtrProduceRequest()
	vr := at.a.served[req.Key()]
	req.SetVersion(vr[0] + int16(at.rng.IntN(int(vr[1]-vr[0])+1)))
	req.Acks, req.TimeoutMillis = []int16{-1, 1}[at.rng.IntN(2)], 5000
	var values []string
	for range 1 + at.rng.IntN(3) {
		at.produced++
		values = append(values, fmt.Sprintf("atk%d-%d", at.id, at.produced))
	}
	b := harness.EncodeBatch(time.Now().UnixMilli(), values...)
	const attrs, crcAt, countAt, recordsAt = 21, 17, 57, 61
	variant := ""
	switch at.rng.IntN(4) {
	case 0:
		variant = "bytes changed"
		for range 1 + at.rng.IntN(4) {
			b[attrs+at.rng.IntN(len(b)-attrs)] ^= byte(1 + at.rng.IntN(255))
		}
	case 1:
		variant = "codec set on plain records"
		b[attrs+1] |= byte(1 + at.rng.IntN(4))
	case 2:
		variant = "random records"
		b = append(b[:recordsAt], at.random(at.rng.IntN(200))...)
		binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	default:
		variant = "wrong record count"
		n := int32(len(values))
		wrong := []int32{-1, 0, n - 1, n + 1, n + 2, 1000}[at.rng.IntN(6)]
		if wrong == n {
			wrong = n + 1
		}
		binary.BigEndian.PutUint32(b[countAt:], uint32(wrong))
	}
	binary.BigEndian.PutUint32(b[crcAt:], crc32.Checksum(b[attrs:], crc32.MakeTable(crc32.Castagnoli)))
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = malTopic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = int32(at.rng.IntN(malParts)), b
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	data, corr, _ := at.frame(req)
	r, ok := at.exchange(kind, false, data, 1, 2*time.Second, 1, false)
	if !ok || len(r.frames) == 0 {
		return
	}
	at.checkCorr(kind, []int32{corr}, r.frames)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	body := r.frames[0][4:]
	if resp.IsFlexible() && len(body) > 0 {
		body = body[1:] // the response header's empty tag section
	}
	if err := resp.ReadFrom(body); err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		at.a.fail("%s: the answer to %s (%s) does not decode: %v", kind, requestName(req), variant, err)
		return
	}
	name := "NONE"
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); err != nil {
		name = err.Error()
		if ke, ok := err.(*kerr.Error); ok {
			name = ke.Message
		}
	}
	at.a.outcome(kind, variant+": "+name)
	if name == "NONE" && variant != "bytes changed" { // a changed value or timestamp is still a good batch
		at.a.fail("%s: a batch with %s was accepted (% x)", kind, variant, b)
	}
}

// unknownKey: a real request under an API key that is not served; the
// broker must close.
func (at *attacker) unknownKey(kind string) {
	req := at.request(safeKeys)
	data, _, _ := at.frame(req)
	var key int16
	for {
		key = int16(at.rng.Uint32())
		if _, ok := at.a.served[key]; !ok {
			break
		}
	}
	binary.BigEndian.PutUint16(data[4:], uint16(key))
	if r, ok := at.exchange(kind, false, data, 1, mustWait, -1, false); ok {
		at.mustBeClosed(kind, r, fmt.Sprintf("%s sent as API key %d", requestName(req), key))
	}
}

// badVersion: a real request under a version that is not served: the
// broker must close, except for ApiVersions, which it answers with
// UNSUPPORTED_VERSION (KIP-511).
func (at *attacker) badVersion(kind string) {
	req := at.request(safeKeys)
	data, corr, _ := at.frame(req)
	vr := at.a.served[req.Key()]
	v := vr[1] + 1 + int16(at.rng.IntN(50))
	switch {
	case at.rng.IntN(3) == 0:
		v = -1 - int16(at.rng.IntN(1000))
	case vr[0] > 0 && at.rng.IntN(2) == 0:
		v = int16(at.rng.IntN(int(vr[0])))
	}
	binary.BigEndian.PutUint16(data[6:], uint16(v))
	what := fmt.Sprintf("%s sent as v%d", requestName(req), v)
	if req.Key() != 18 {
		if r, ok := at.exchange(kind, false, data, 1, mustWait, -1, false); ok {
			at.mustBeClosed(kind, r, what)
		}
		return
	}
	r, ok := at.exchange(kind, false, data, 1, mustWait, 1, false)
	switch {
	case !ok:
	case len(r.frames) != 1 || len(r.frames[0]) < 6:
		at.a.fail("%s: %s was not answered (closed: %v)", kind, what, r.closed)
	case int32(binary.BigEndian.Uint32(r.frames[0])) != corr || binary.BigEndian.Uint16(r.frames[0][4:]) != 35:
		at.a.fail("%s: %s was answered % x, want correlation id %d and UNSUPPORTED_VERSION (35)", kind, what, r.frames[0][:6], corr)
	}
}

// randomBody: a correct header of a served API and version, then random
// bytes as its body; the broker answers or closes.
func (at *attacker) randomBody(kind string) {
	key := safeKeys[at.rng.IntN(len(safeKeys))]
	vr := at.a.served[key]
	req := kmsg.RequestForKey(key)
	req.SetVersion(vr[0] + int16(at.rng.IntN(int(min(vr[1], req.MaxVersion())-vr[0])+1)))
	at.corr++
	data := sizePrefix(0)
	data = binary.BigEndian.AppendUint16(data, uint16(key))
	data = binary.BigEndian.AppendUint16(data, uint16(req.GetVersion()))
	data = binary.BigEndian.AppendUint32(data, uint32(at.corr))
	data = binary.BigEndian.AppendUint16(data, uint16(len(at.clientID())))
	data = append(data, at.clientID()...)
	if req.IsFlexible() {
		data = append(data, 0)
	}
	data = append(data, at.random(at.rng.IntN(512))...)
	binary.BigEndian.PutUint32(data, uint32(len(data)-4))
	if r, ok := at.exchange(kind, false, data, 1, 200*time.Millisecond, 1, false); ok {
		at.checkCorr(kind, []int32{at.corr}, r.frames)
	}
}

// pipeline: 1-8 good requests, one bad frame, 1-8 good requests, written
// at once: the broker must answer exactly the requests before the bad
// frame, in order, and close.
func (at *attacker) pipeline(kind string) {
	var data []byte
	var before []int32
	k1, k2 := 1+at.rng.IntN(8), 1+at.rng.IntN(8)
	for range k1 {
		f, corr, _ := at.frame(at.request(syncKeys))
		data, before = append(data, f...), append(before, corr)
	}
	req := at.request(syncKeys[1:]) // not ApiVersions, answered at any version
	bad, _, _ := at.frame(req)
	var what string
	switch at.rng.IntN(4) {
	case 0:
		binary.BigEndian.PutUint16(bad[4:], uint16(1000+at.rng.IntN(30000)))
		what = requestName(req) + " under an unknown API key"
	case 1:
		binary.BigEndian.PutUint16(bad[6:], uint16(at.a.served[req.Key()][1]+1))
		what = requestName(req) + " at an unserved version"
	case 2:
		cut := at.rng.IntN(len(bad) - 4)
		bad = append(sizePrefix(int32(cut)), bad[4:4+cut]...)
		what = fmt.Sprintf("%s cut to %d bytes", requestName(req), cut)
	default:
		binary.BigEndian.PutUint32(bad, uint32(maxRequestBytes+1+at.rng.IntN(1<<20)))
		what = "a frame size over 100 MiB"
	}
	data = append(data, bad...)
	for range k2 {
		f, _, _ := at.frame(at.request(syncKeys))
		data = append(data, f...)
	}
	r, ok := at.exchange(kind, false, data, k1+1+k2, mustWait, -1, false)
	if !ok {
		return
	}
	var got []int32
	for _, f := range r.frames {
		if len(f) >= 4 {
			got = append(got, int32(binary.BigEndian.Uint32(f)))
		}
	}
	if !slices.Equal(got, before) {
		at.a.fail("%s: %d requests, then %s, then %d more: answers for correlation ids %v, want %v", kind, k1, what, k2, got, before)
	}
	if !r.closed {
		at.a.fail("%s: %s in a pipeline did not close the connection within %v", kind, what, mustWait)
	} else {
		at.a.mustClose.Add(1)
	}
}

// idle: a connection left idle (after 0-3 bytes of a size prefix), then
// closed.
func (at *attacker) idle(kind string) {
	at.sendAndClose(kind, false, at.random(at.rng.IntN(4)), time.Duration(20+at.rng.IntN(300))*time.Millisecond)
}

// dribble: a good request written 1-3 bytes at a time; it must be answered.
func (at *attacker) dribble(kind string) {
	req := at.request(syncKeys)
	data, corr, _ := at.frame(req)
	r, ok := at.exchange(kind, false, data, 1, mustWait, 1, true)
	if ok && (len(r.frames) != 1 || len(r.frames[0]) < 4 || int32(binary.BigEndian.Uint32(r.frames[0])) != corr) {
		at.a.fail("%s: %s written a few bytes at a time was not answered (closed: %v, %d bytes back)", kind, requestName(req), r.closed, len(r.raw))
	}
}

// httpEndpoints are the broker's HTTP paths (internal/httpapi and the data
// plane, internal/dataplane) and a few that do not exist.
func (at *attacker) httpEndpoint() string {
	h := at.a.height.Load() + int64(at.rng.IntN(11)) - 5
	paths := []string{"/healthz", "/metrics", "/v1/cluster", "/v1/internal/batches?height=" + strconv.FormatInt(h, 10),
		"/v1/internal/batches?height=junk", fmt.Sprintf("/v1/internal/batches/%x", at.random(32)),
		"/v1/internal/batches/zz", "/", "/v1/", "/debug/pprof/"}
	return paths[at.rng.IntN(len(paths))]
}

// httpExchange sends a complete HTTP request; the server must answer or
// close within mustWait, and never with 500.
func (at *attacker) httpExchange(kind string, data []byte) {
	r, ok := at.exchange(kind, true, data, 1, mustWait, -1, false)
	if !ok {
		return
	}
	status := 0
	if len(r.raw) >= 12 && strings.HasPrefix(string(r.raw), "HTTP/1.") {
		status, _ = strconv.Atoi(string(r.raw[9:12]))
	}
	if status > 0 {
		at.a.mu.Lock()
		at.a.mu.statuses[status]++
		at.a.mu.Unlock()
	}
	switch {
	case status >= 500:
		line, _, _ := strings.Cut(string(r.raw), "\r\n")
		head, _, _ := strings.Cut(string(data[:min(len(data), 200)]), "\r\n")
		at.a.fail("%s: %q answered %q", kind, head, line)
	case status == 0 && !r.closed:
		at.a.fail("%s: the HTTP server neither answered nor closed within %v", kind, mustWait)
	}
}

func httpRequest(method, path string, headers []string, body []byte) []byte {
	b := []byte(method + " " + path + " HTTP/1.1\r\nHost: stele\r\nConnection: close\r\n")
	for _, h := range headers {
		b = append(b, h+"\r\n"...)
	}
	return append(append(b, "\r\n"...), body...)
}

// httpPath: GET of a random path.
func (at *attacker) httpPath(kind string) {
	const chars = "abcz09/._-~%?&=#;:@!$'()*+,"
	path := []byte(at.httpEndpoint())
	for range at.rng.IntN(64) {
		if at.rng.IntN(8) == 0 {
			path = append(path, byte(0x80+at.rng.IntN(128)))
		} else {
			path = append(path, chars[at.rng.IntN(len(chars))])
		}
	}
	at.httpExchange(kind, httpRequest("GET", string(path), nil, nil))
}

// httpMethod: a garbage method (a token or raw bytes) on a real path.
func (at *attacker) httpMethod(kind string) {
	const token = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~"
	var m []byte
	for range 1 + at.rng.IntN(12) {
		if at.rng.IntN(4) == 0 {
			c := byte(at.rng.IntN(256))
			if c == ' ' || c == '\r' || c == '\n' {
				c = 0
			}
			m = append(m, c)
		} else {
			m = append(m, token[at.rng.IntN(len(token))])
		}
	}
	at.httpExchange(kind, httpRequest(string(m), at.httpEndpoint(), nil, nil))
}

// httpHeader: one header of 1-3 MiB, or thousands of small ones.
func (at *attacker) httpHeader(kind string) {
	var headers []string
	if at.rng.IntN(2) == 0 {
		headers = []string{"X-Big: " + strings.Repeat("a", 1<<20+at.rng.IntN(2<<20))}
	} else {
		for i := range 5000 + at.rng.IntN(50000) {
			headers = append(headers, fmt.Sprintf("X-%d: %d", i, i))
		}
	}
	at.httpExchange(kind, httpRequest("GET", at.httpEndpoint(), headers, nil))
}

// httpBody: a random body (or a broken chunked one) to a real endpoint.
func (at *attacker) httpBody(kind string) {
	method := []string{"POST", "PUT", "GET", "POST"}[at.rng.IntN(4)]
	body := at.random(int(logUniform(at.rng, 1, 256<<10)))
	headers := []string{"Content-Type: application/octet-stream", "Content-Length: " + strconv.Itoa(len(body))}
	if at.rng.IntN(4) == 0 {
		headers = []string{"Transfer-Encoding: chunked"}
		body = append([]byte(fmt.Sprintf("%x\r\n", len(body)+at.rng.IntN(3)-1)), body...) // sometimes a wrong chunk size
		body = append(body, "\r\n0\r\n\r\n"...)
	}
	at.httpExchange(kind, httpRequest(method, at.httpEndpoint(), headers, body))
}

// httpTruncated: a request cut short (in its head, or a body shorter than
// its Content-Length), then the connection is closed.
func (at *attacker) httpTruncated(kind string) {
	body := at.random(at.rng.IntN(4096))
	req := httpRequest("POST", at.httpEndpoint(), []string{"Content-Length: " + strconv.Itoa(len(body)+1+at.rng.IntN(1<<20))}, body)
	at.sendAndClose(kind, true, req[:1+at.rng.IntN(len(req)-1)], time.Duration(at.rng.IntN(20))*time.Millisecond)
}

// httpRandom: random bytes ending a line, on the HTTP port.
func (at *attacker) httpRandom(kind string) {
	at.httpExchange(kind, append(at.random(1+at.rng.IntN(512)), "\r\n\r\n"...))
}

// refreshHeight reads the broker's height for the data plane's pushes,
// which are refused outright when their height is far from it.
func (at *attacker) refreshHeight() {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + at.a.http[0] + "/healthz")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var h harness.Health
	if json.NewDecoder(resp.Body).Decode(&h) == nil && h.Height > 0 {
		at.a.height.Store(h.Height)
	}
}
