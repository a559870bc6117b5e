package bench

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Scenario is what a run measures.
type Scenario string

// The scenarios.
const (
	// Produce measures producer throughput and produce latency (intended
	// send time to acknowledgement).
	Produce Scenario = "produce"
	// Consume reads what the topic holds as fast as it can.
	Consume Scenario = "consume"
	// EndToEnd runs producers and consumers at once and measures the
	// latency from intended send time to receipt by a consumer.
	EndToEnd Scenario = "e2e"
	// Commit has members of a consumer group read the topic and commit
	// each record's offset synchronously before the next (the
	// at-least-once pattern), and measures the OffsetCommit round trip.
	Commit Scenario = "commit"
)

// DefaultCommitGroup is the group the Commit scenario's consumers join
// when Group is empty.
const DefaultCommitGroup = "stele-bench-commit"

// Limits checked by Validate.
const (
	// MaxRecordSize is the largest --record-size accepted (64 MiB); brokers
	// refuse far smaller records by default (message.max.bytes, ~1 MiB).
	MaxRecordSize = 64 << 20
	// MaxClients bounds --producers and --consumers.
	MaxClients = 1024
)

// Config is one benchmark run. DefaultConfig returns the defaults of the
// `stele bench` command line; Args returns the command line that reproduces
// a Config (Brokers, Progress and ClientOpts aside).
type Config struct {
	Scenario Scenario
	// Brokers are the bootstrap brokers, host:port.
	Brokers []string
	// Topic is the topic written and read.
	Topic string
	// Create creates Topic with Partitions partitions (replication factor
	// 1) when it does not exist, and fails the run when it exists with
	// fewer than Partitions partitions.
	Create     bool
	Partitions int

	// RecordSize is the size of each record value in bytes. Consumers
	// check it on every record they read (Consume: 0 checks nothing).
	RecordSize int
	// JSON makes each value a JSON object of RecordSize bytes,
	// {"id":N,"card":"...","pad":"..."}, as a plugin that reads JSON
	// (docs/plugins.md) needs; otherwise values are pseudo-random bytes.
	JSON bool
	// KeySize is the size of each record key in bytes; 0 sends no key.
	// Keys go round-robin over Keys distinct keys.
	KeySize int
	Keys    int

	// Producers and Consumers are how many clients produce and consume;
	// each is its own kgo client with its own connections.
	Producers int
	Consumers int

	// Rate is the target of records per second over all producers; 0 is
	// open loop (as fast as the producers can).
	Rate int64
	// Duration is how long records are measured after Warmup (Produce and
	// EndToEnd stop sending then; Consume stops reading); 0 is no time
	// limit, which Produce and EndToEnd allow only with Records.
	Duration time.Duration
	// Warmup is an initial span whose records are sent but left out of
	// every figure (Produce, EndToEnd; Consume has none).
	Warmup time.Duration
	// Records, if > 0, stops the run after this many measured records:
	// sent (Produce, EndToEnd) or read (Consume).
	Records int64

	// Acks is "all", "1" or "0".
	Acks string
	// Linger is the producers' linger; 0 sends a batch as soon as it can.
	Linger time.Duration
	// BatchMaxBytes caps a record batch; 0 keeps the client default (1 MB).
	BatchMaxBytes int32
	// MaxInflight is how many produce requests each producer keeps in
	// flight per broker (Kafka's max.in.flight.requests.per.connection,
	// default 5). Above 1 the client does not write idempotently, as
	// Kafka's producer before idempotence; 1 keeps franz-go's default.
	MaxInflight int
	// BufferMemory bounds the bytes each producer holds unacknowledged
	// (Kafka's buffer.memory, default 32 MiB); Produce waits beyond it.
	BufferMemory int64
	// Compression is "none", "gzip", "snappy", "lz4" or "zstd".
	Compression string

	// Group, if set, makes the consumers members of this consumer group
	// (offsets are never committed, except by Commit); otherwise each
	// consumer is assigned a share of the partitions directly. Commit
	// always consumes in a group: DefaultCommitGroup when this is empty.
	Group string
	// Rack, if set, is the consumers' rack (Kafka's client.rack): a broker
	// outside it sends them to read from a broker in it (KIP-392).
	Rack string

	// Timeout bounds each admin request, the delivery of each record, and
	// how long the consumers may go without a record while records are
	// still expected.
	Timeout time.Duration

	// Progress, if not nil, gets a line of progress every
	// ProgressInterval; with ProgressRedraw the line is redrawn in place
	// (for a terminal) instead of a new line each time.
	Progress         io.Writer
	ProgressInterval time.Duration
	ProgressRedraw   bool

	// ClientOpts are added to every client the run builds (TLS, SASL,
	// logging). They are not part of Args.
	ClientOpts []kgo.Opt
}

// Sentinel errors of Run; test with errors.Is.
var (
	// ErrInvalidConfig is wrapped by every error of Config.Validate.
	ErrInvalidConfig = errors.New("stele/bench: invalid config")
	// ErrTopicNotFound means the topic does not exist and Create is off.
	ErrTopicNotFound = errors.New("stele/bench: topic does not exist")
	// ErrTooFewPartitions means Create found the topic with fewer
	// partitions than asked for.
	ErrTooFewPartitions = errors.New("stele/bench: topic has too few partitions")
	// ErrStalled means the consumers received no record for Timeout while
	// records were still expected; the report covers what was done.
	ErrStalled = errors.New("stele/bench: consumers stalled")
)

// DefaultConfig returns the defaults of `stele bench produce` (change
// Scenario for the others).
func DefaultConfig() Config {
	return Config{
		Scenario:         Produce,
		Brokers:          []string{"127.0.0.1:9092"},
		Topic:            "stele-bench",
		Partitions:       8,
		RecordSize:       1024,
		Keys:             1000,
		Producers:        4,
		Consumers:        1,
		Duration:         30 * time.Second,
		Warmup:           5 * time.Second,
		Acks:             "all",
		MaxInflight:      5,
		BufferMemory:     32 << 20,
		Compression:      "none",
		Timeout:          30 * time.Second,
		ProgressInterval: time.Second,
	}
}

// bufferMemory is BufferMemory, or 32 MiB when unset.
func (c *Config) bufferMemory() int64 {
	if c.BufferMemory > 0 {
		return c.BufferMemory
	}
	return 32 << 20
}

// produces and consumes report whether the scenario runs producers and
// consumers.
func (c *Config) produces() bool { return c.Scenario == Produce || c.Scenario == EndToEnd }
func (c *Config) consumes() bool {
	return c.Scenario == Consume || c.Scenario == EndToEnd || c.Scenario == Commit
}

// group is the consumer group: Group, or for Commit DefaultCommitGroup
// when Group is empty.
func (c *Config) group() string {
	if c.Group == "" && c.Scenario == Commit {
		return DefaultCommitGroup
	}
	return c.Group
}

// Validate checks c and returns an error wrapping ErrInvalidConfig that
// names the first field out of range.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch c.Scenario {
	case Produce, Consume, EndToEnd, Commit:
	default:
		return bad("unknown scenario %q: want produce, consume, e2e or commit", c.Scenario)
	}
	switch {
	case len(c.Brokers) == 0:
		return bad("no brokers")
	case c.Topic == "":
		return bad("empty topic name")
	case c.Create && (c.Partitions < 1 || c.Partitions > 1<<20):
		return bad("partitions %d: want 1 to %d", c.Partitions, 1<<20)
	case c.RecordSize < 0 || c.RecordSize > MaxRecordSize:
		return bad("record size %d: want 0 to %d bytes", c.RecordSize, MaxRecordSize)
	case c.produces() && c.RecordSize < 1:
		return bad("record size %d: want at least 1 byte", c.RecordSize)
	case c.JSON && (c.Scenario == EndToEnd || c.RecordSize < minJSONValue):
		return bad("--json: values of at least %d bytes, and not with e2e (whose values start with the send time)", minJSONValue)
	case c.Scenario == EndToEnd && c.RecordSize < 8:
		return bad("record size %d: e2e needs at least 8 bytes for the send timestamp", c.RecordSize)
	case c.Duration < 0 || c.Warmup < 0 || c.Records < 0 || c.Rate < 0 || c.Linger < 0 || c.BatchMaxBytes < 0 || c.MaxInflight < 0 || c.BufferMemory < 0:
		return bad("negative duration, warmup, records, rate, linger or batch max bytes")
	case c.Timeout <= 0:
		return bad("timeout %v: must be positive", c.Timeout)
	case c.Progress != nil && c.ProgressInterval <= 0:
		return bad("progress interval %v: must be positive", c.ProgressInterval)
	case c.consumes() && (c.Consumers < 1 || c.Consumers > MaxClients):
		return bad("consumers %d: want 1 to %d", c.Consumers, MaxClients)
	case c.Scenario == Commit && c.Duration == 0 && c.Records == 0:
		return bad("neither a duration nor a commit count: the run would never end")
	}
	if !c.produces() {
		return nil
	}
	switch {
	case c.Producers < 1 || c.Producers > MaxClients:
		return bad("producers %d: want 1 to %d", c.Producers, MaxClients)
	case c.Duration == 0 && c.Records == 0:
		return bad("neither a duration nor a record count: the run would never end")
	case c.KeySize < 0 || c.KeySize > MaxRecordSize:
		return bad("key size %d: want 0 to %d bytes", c.KeySize, MaxRecordSize)
	case c.KeySize > 0 && c.Keys < 1:
		return bad("keys %d: want at least 1 distinct key", c.Keys)
	case c.KeySize > 0 && c.KeySize < 19 && int64(c.Keys) > pow10(c.KeySize):
		return bad("%d distinct keys do not fit in %d-byte keys (at most %d)", c.Keys, c.KeySize, pow10(c.KeySize))
	case c.KeySize > 0 && c.Keys > 1<<24:
		return bad("keys %d: want at most %d", c.Keys, 1<<24)
	}
	switch c.Acks {
	case "all", "1", "0":
	default:
		return bad("acks %q: want all, 1 or 0", c.Acks)
	}
	if _, ok := codec(c.Compression); !ok {
		return bad("compression %q: want none, gzip, snappy, lz4 or zstd", c.Compression)
	}
	return nil
}

// Args returns the flags of `stele bench SCENARIO` that reproduce c, every
// flag that applies to the scenario spelt out (defaults change; a quoted
// figure's command line should not). Brokers, Progress, ClientOpts and
// Timeout are left out: they do not change what is measured.
func (c *Config) Args() []string {
	var a []string
	add := func(flag, v string) { a = append(a, "--"+flag, v) }
	add("topic", c.Topic)
	if c.Create {
		a = append(a, "--create")
		add("partitions", strconv.Itoa(c.Partitions))
	}
	add("record-size", strconv.Itoa(c.RecordSize))
	if c.produces() {
		if c.JSON {
			a = append(a, "--json")
		}
		add("key-size", strconv.Itoa(c.KeySize))
		if c.KeySize > 0 {
			add("keys", strconv.Itoa(c.Keys))
		}
		add("producers", strconv.Itoa(c.Producers))
	}
	if c.consumes() {
		add("consumers", strconv.Itoa(c.Consumers))
		if g := c.group(); g != "" {
			add("group", g)
		}
		if c.Rack != "" {
			add("rack", c.Rack)
		}
	}
	if c.produces() {
		add("rate", strconv.FormatInt(c.Rate, 10))
		add("acks", c.Acks)
		add("linger", c.Linger.String())
		if c.BatchMaxBytes > 0 {
			add("batch-max-bytes", strconv.FormatInt(int64(c.BatchMaxBytes), 10))
		}
		add("max-inflight", strconv.Itoa(max(c.MaxInflight, 1)))
		if c.BufferMemory > 0 {
			add("buffer-memory", strconv.FormatInt(c.BufferMemory, 10))
		}
		add("compression", c.Compression)
	}
	if c.produces() || c.Scenario == Commit {
		add("warmup", c.Warmup.String())
	}
	add("duration", c.Duration.String())
	if c.Records > 0 {
		add("records", strconv.FormatInt(c.Records, 10))
	}
	return a
}

// CommandLine returns "stele bench SCENARIO" and Args as one shell line.
func (c *Config) CommandLine() string {
	parts := []string{"stele", "bench", string(c.Scenario)}
	for _, s := range c.Args() {
		parts = append(parts, shellQuote(s))
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/=,+@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pow10 returns 10^n for n < 19.
func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// codec returns the franz-go codec of a Compression name.
func codec(name string) (kgo.CompressionCodec, bool) {
	switch name {
	case "none":
		return kgo.NoCompression(), true
	case "gzip":
		return kgo.GzipCompression(), true
	case "snappy":
		return kgo.SnappyCompression(), true
	case "lz4":
		return kgo.Lz4Compression(), true
	case "zstd":
		return kgo.ZstdCompression(), true
	}
	return kgo.CompressionCodec{}, false
}
