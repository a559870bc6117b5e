package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/stele-io/stele/internal/bench"
)

// newBenchCmd returns `stele bench`, the load generator: a thin wrapper
// over internal/bench, which does the work and owns the figures.
func newBenchCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("bench", "Measure produce, consume and offset-commit throughput and latency against any Kafka broker",
		newBenchScenarioCmd(g, bench.Produce),
		newBenchScenarioCmd(g, bench.Consume),
		newBenchScenarioCmd(g, bench.EndToEnd),
		newBenchScenarioCmd(g, bench.Commit),
	)
}

// benchOptions are the flags of the bench subcommands; each registers
// those that apply to its scenario.
type benchOptions struct {
	cfg         bench.Config // filled in place by the flags
	acks        *enumFlag
	compression *enumFlag
	quiet       bool
}

// benchHelp returns the help texts of a scenario.
func benchHelp(s bench.Scenario) (short, long, example string) {
	switch s {
	case bench.Produce:
		return "Measure produce throughput and latency", `Produce records of --record-size bytes from --producers clients, open loop (as
fast as they can) or at --rate records/s in total, for --warmup then --duration
(or until --records measured records). Reports records/s, MB/s (10^6 bytes) and
MiB/s, and the produce latency p50/p99/p99.9/max from each record's intended
send time to its acknowledgement: with --rate, a record due while the producer
was held up still counts from when it was due (no coordinated omission).
Records sent during --warmup are not counted; only acknowledged records are.`,
			`  stele bench produce --create --record-size 1024 --duration 30s
  stele bench produce --rate 50000 --acks 1 --compression lz4 --output json`
	case bench.Consume:
		return "Measure consume throughput", `Read what the topic holds, from the start of every partition to the end offsets
it had when the run started (or --records records, or for --duration), as fast
as --consumers clients can. Without --group the partitions are dealt to the
consumers directly; with --group they join that consumer group (and commit
nothing). Reports records/s, MB/s, MiB/s and the time to the first record;
every record's value must be --record-size bytes (0 checks nothing).`,
			`  stele bench produce --create --records 1000000 --warmup 0s
  stele bench consume --consumers 4`
	case bench.Commit:
		return "Measure synchronous offset commits: a consumer that commits after every record", `Join --consumers clients to --group (default stele-bench-commit) and read the
topic from the group's committed offsets (or its start); after each record,
commit that record's offset synchronously and wait for the answer before the
next record (the at-least-once pattern of committing after every message).
Reports the commits per second and the commit latency p50/p99/p99.9/max, from
sending each OffsetCommit to its answer; commits sent during --warmup are not
counted. The topic must hold enough records for the run (a consumer commits
about one per commit latency); a group that reaches the end stalls and the run
fails after --timeout. Run 'stele bench produce' beside it to measure commits
under load.`,
			`  stele bench produce --create --records 20000 --warmup 0s
  stele bench commit --duration 30s
  stele bench commit --group payments --consumers 4 --output json`
	default:
		return "Measure end-to-end latency, producers and consumers at once", `Run producers and consumers together. Every value starts with the record's
intended send time (8 bytes, Unix nanoseconds); the consumers measure the
latency from it to receipt (p50/p99/p99.9/max), next to the produce figures.
The consumers start at the end of the topic and read only this run's records.

--rate is required: 0 is open loop, which measures the client's queue more than
the broker; the published e2e figure is taken at half the max produce rate
that 'stele bench produce' measured with the same flags.`,
			`  stele bench e2e --create --rate 20000 --duration 60s`
	}
}

func newBenchScenarioCmd(g *globalOptions, s bench.Scenario) *cobra.Command {
	def := bench.DefaultConfig()
	def.Scenario = s
	if s == bench.Consume {
		def.Duration = 0
	}
	o := &benchOptions{
		cfg:         def,
		acks:        newEnumFlag("all", "all", "-1", "1", "0"),
		compression: newEnumFlag("none", "none", "gzip", "snappy", "lz4", "zstd"),
	}
	short, long, example := benchHelp(s)
	c := &cobra.Command{
		Use:     string(s),
		Short:   short,
		Long:    long,
		Example: example,
		Args:    noArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runBench(cmd, g, o) },
	}
	cfg, f := &o.cfg, c.Flags()
	produces, consumes := s == bench.Produce || s == bench.EndToEnd, s != bench.Produce
	f.StringVar(&cfg.Topic, "topic", def.Topic, "topic to write and read")
	f.BoolVar(&cfg.Create, "create", false, "create the topic if it is missing (replication factor 1); fail if it has fewer than --partitions")
	f.IntVar(&cfg.Partitions, "partitions", def.Partitions, "partitions of the topic --create makes")
	if !produces {
		f.IntVar(&cfg.RecordSize, "record-size", def.RecordSize, "expected value size in bytes, checked on every record (0: no check)")
	} else {
		f.IntVar(&cfg.RecordSize, "record-size", def.RecordSize, "value size in bytes (figures are published for 100, 1024 and 16384)")
	}
	if produces {
		f.IntVar(&cfg.KeySize, "key-size", def.KeySize, "key size in bytes; 0 sends no key")
		f.BoolVar(&cfg.JSON, "json", false, `values are JSON objects of --record-size bytes, {"id":N,"card":"...","pad":"..."} (for a plugin that reads JSON, docs/plugins.md); not with e2e`)
		f.IntVar(&cfg.Keys, "keys", def.Keys, "distinct keys, used round-robin (with --key-size)")
		f.IntVar(&cfg.Producers, "producers", def.Producers, "producing clients, each with its own connections")
	}
	if consumes {
		f.IntVar(&cfg.Consumers, "consumers", def.Consumers, "consuming clients, each with its own connections")
		if s == bench.Commit {
			f.StringVar(&cfg.Group, "group", bench.DefaultCommitGroup, "the consumer group whose offsets are committed")
		} else {
			f.StringVar(&cfg.Group, "group", "", "consume as members of this consumer group (nothing is committed); default: assign partitions directly")
		}
		f.StringVar(&cfg.Rack, "rack", "", "the consumers' rack (client.rack): brokers send them to read from a broker of that rack (KIP-392 read replicas, stele cluster add --rack)")
	}
	if produces {
		f.Int64Var(&cfg.Rate, "rate", def.Rate, "target records/s over all producers; 0 is open loop (as fast as possible)")
		f.DurationVar(&cfg.Warmup, "warmup", def.Warmup, "initial span whose records are sent but not counted")
	}
	if s == bench.Commit {
		f.DurationVar(&cfg.Warmup, "warmup", def.Warmup, "initial span whose commits are made but not counted (the group's join, the first connections)")
	}
	switch s {
	case bench.Consume:
		f.DurationVar(&cfg.Duration, "duration", def.Duration, "stop reading after this long (0: at the end of the topic)")
		f.Int64Var(&cfg.Records, "records", 0, "stop after reading this many records instead of at the end of the topic")
	case bench.Commit:
		f.DurationVar(&cfg.Duration, "duration", def.Duration, "how long to measure after --warmup")
		f.Int64Var(&cfg.Records, "records", 0, "stop after this many measured commits instead of after --duration")
	default:
		f.DurationVar(&cfg.Duration, "duration", def.Duration, "how long to measure after --warmup")
		f.Int64Var(&cfg.Records, "records", 0, "stop after this many measured records instead of after --duration")
	}
	if produces {
		f.Var(o.acks, "acks", "acknowledgements: all (-1) waits for every in-sync replica, 1 for the leader, 0 for none")
		f.DurationVar(&cfg.Linger, "linger", def.Linger, "how long a partition's batch may wait for more records")
		f.Int32Var(&cfg.BatchMaxBytes, "batch-max-bytes", 0, "largest record batch in bytes (0: the client default, 1 MB)")
		f.Int64Var(&cfg.BufferMemory, "buffer-memory", cfg.BufferMemory, "bytes each producer holds unacknowledged before it waits (Kafka's buffer.memory)")
		f.IntVar(&cfg.MaxInflight, "max-inflight", cfg.MaxInflight, "produce requests in flight per producer and broker (Kafka's max.in.flight.requests.per.connection); above 1 the producer is not idempotent")
		f.Var(o.compression, "compression", "batch compression codec")
	}
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines on stderr")
	return c
}

// runBench checks the flags, runs the benchmark and prints its report.
func runBench(cmd *cobra.Command, g *globalOptions, o *benchOptions) error {
	cfg, err := o.config(cmd, g)
	if err != nil {
		return err
	}
	rep, err := bench.Run(cmd.Context(), cfg)
	if errors.Is(err, bench.ErrInvalidConfig) {
		return usageError{err}
	}
	if err != nil && !errors.Is(err, bench.ErrStalled) {
		return err // nothing was measured
	}
	out := cmd.OutOrStdout()
	if g.jsonOutput() {
		if werr := writeJSON(out, rep); werr != nil {
			return werr
		}
	} else if werr := rep.WriteTable(out); werr != nil {
		return werr
	}
	if rep.Interrupted {
		fmt.Fprintln(cmd.ErrOrStderr(), "Interrupted: the report covers the run until it was stopped.")
	}
	return err
}

// config turns the flags into a bench.Config.
func (o *benchOptions) config(cmd *cobra.Command, g *globalOptions) (bench.Config, error) {
	if err := g.validate(); err != nil {
		return bench.Config{}, err
	}
	seeds, err := g.seedBrokers()
	if err != nil {
		return bench.Config{}, err
	}
	g.seeds = seeds
	cfg := o.cfg
	cfg.Brokers, cfg.Timeout = seeds, g.timeout
	if cfg.ClientOpts, err = g.securityOpts(); err != nil {
		return bench.Config{}, err
	}
	changed := cmd.Flags().Changed
	if cfg.Scenario != bench.Consume {
		cfg.Acks, cfg.Compression = o.acks.String(), o.compression.String()
		if cfg.Acks == "-1" {
			cfg.Acks = "all"
		}
		if cfg.Records > 0 && !changed("duration") {
			cfg.Duration = 0 // --records replaces --duration unless both are given
		}
	}
	if cfg.Scenario == bench.Commit && cfg.Group == "" {
		return cfg, usageErrorf("commit needs a --group to commit in (default %s)", bench.DefaultCommitGroup)
	}
	if cfg.Scenario == bench.EndToEnd && !changed("rate") {
		return cfg, usageErrorf("e2e needs --rate RECORDS/S (0 for open loop); " +
			"the published e2e figure is at half the max rate 'stele bench produce' measures")
	}
	if !o.quiet {
		cfg.Progress = cmd.ErrOrStderr()
		cfg.ProgressRedraw = isTerminal(cmd.ErrOrStderr())
		cfg.ProgressInterval = time.Second
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}
