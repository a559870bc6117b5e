package bench

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runner holds one run's configuration and admin client.
type runner struct {
	cfg   *Config
	admCl *kgo.Client
	adm   *kadm.Client
	parts []int32 // the topic's partitions, sorted
}

// Run runs the benchmark cfg describes and returns its report.
//
// Cancelling ctx (Ctrl-C) stops the run early: the report then covers what
// was done, Interrupted is set, and the error is nil. A run that cannot start
// returns an error and no report: a Config that fails Validate
// (ErrInvalidConfig), a missing topic (ErrTopicNotFound), a topic with too
// few partitions (ErrTooFewPartitions), a broker that does not answer. A run
// whose consumers stall returns its report and ErrStalled.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	admCl, err := newClient(&cfg)
	if err != nil {
		return Report{}, err
	}
	defer admCl.Close()
	r := &runner{cfg: &cfg, admCl: admCl, adm: kadm.NewClient(admCl)}
	r.adm.SetTimeoutMillis(int32(min(cfg.Timeout.Milliseconds(), 1<<31-1)))
	if err := r.prepareTopic(ctx); err != nil {
		return Report{}, err
	}

	rep := Report{
		Scenario:   cfg.Scenario,
		Command:    cfg.CommandLine(),
		Topic:      cfg.Topic,
		Partitions: len(r.parts),
		RecordSize: cfg.RecordSize,
	}
	if cfg.produces() {
		rep.KeySize, rep.Producers, rep.Acks, rep.Compression = cfg.KeySize, cfg.Producers, cfg.Acks, cfg.Compression
		rep.TargetRate, rep.WarmupS = cfg.Rate, round3(cfg.Warmup.Seconds())
	}
	if cfg.consumes() {
		rep.Consumers = cfg.Consumers
	}
	switch cfg.Scenario {
	case Produce:
		err = r.produce(ctx, &rep)
	case Consume:
		err = r.consume(ctx, &rep)
	case Commit:
		err = r.commit(ctx, &rep)
	default:
		err = r.endToEnd(ctx, &rep)
	}
	rep.Interrupted = ctx.Err() != nil
	if rep.Interrupted && errors.Is(err, ctx.Err()) {
		err = nil // the report is what the caller asked for
	}
	return rep, err
}

// newClient builds a kgo client for cfg's brokers with opts added.
func newClient(cfg *Config, opts ...kgo.Opt) (*kgo.Client, error) {
	all := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID("stele-bench"),
		kgo.DialTimeout(min(cfg.Timeout, 10*time.Second)),
	}
	all = append(all, cfg.ClientOpts...)
	all = append(all, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("stele/bench: build a Kafka client: %w", err)
	}
	return cl, nil
}

// prepareTopic checks (and with Create makes) the topic and learns its
// partitions.
func (r *runner) prepareTopic(ctx context.Context) error {
	cfg := r.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	for created := false; ; {
		td, err := r.adm.ListTopics(ctx, cfg.Topic)
		if err != nil {
			return fmt.Errorf("look up topic %q: %w", cfg.Topic, err)
		}
		t, ok := td[cfg.Topic]
		missing := !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition)
		switch {
		case missing && !cfg.Create && !created:
			return fmt.Errorf("%w: topic %q does not exist; create it, or pass --create (with --partitions, default 8)",
				ErrTopicNotFound, cfg.Topic)
		case missing && !created:
			resp, err := r.adm.CreateTopic(ctx, int32(cfg.Partitions), 1, nil, cfg.Topic)
			if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				return fmt.Errorf("create topic %q: %w", cfg.Topic, errors.Join(err, resp.Err))
			}
			created = true
			continue
		case t.Err != nil && !missing && !kerr.IsRetriable(t.Err):
			return fmt.Errorf("look up topic %q: %w", cfg.Topic, t.Err)
		case !missing && t.Err == nil && allLed(t.Partitions):
			if cfg.Create && len(t.Partitions) < cfg.Partitions {
				return fmt.Errorf("%w: topic %q exists with %d partitions, fewer than --partitions %d; delete it or use another --topic",
					ErrTooFewPartitions, cfg.Topic, len(t.Partitions), cfg.Partitions)
			}
			r.parts = r.parts[:0]
			for p := range t.Partitions {
				r.parts = append(r.parts, p)
			}
			sort.Slice(r.parts, func(i, j int) bool { return r.parts[i] < r.parts[j] })
			return nil
		}
		// Just created, or leaders not elected yet: ask again, past
		// kadm's metadata cache (MetadataMinAge, 5 s).
		r.admCl.PurgeTopicsFromClient(cfg.Topic)
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %q has no leader for every partition within %v: %w", cfg.Topic, cfg.Timeout, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// allLed reports whether every partition has a leader and no error.
func allLed(ps kadm.PartitionDetails) bool {
	if len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// listOffsets returns the start or end offset of every partition.
func (r *runner) listOffsets(ctx context.Context, end bool) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	list, what := r.adm.ListStartOffsets, "start"
	if end {
		list, what = r.adm.ListEndOffsets, "end"
	}
	// A broker that has not yet applied the block creating the topic (a
	// cluster's brokers apply each block a moment apart), or one catching
	// up, answers with a retriable error: ask again until the timeout.
	var lo kadm.ListedOffsets
	for {
		var err error
		lo, err = list(ctx, r.cfg.Topic)
		if err == nil {
			err = lo.Error()
		}
		if err == nil {
			break
		}
		if !kerr.IsRetriable(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("list the %s offsets of topic %q: %w", what, r.cfg.Topic, err)
		}
		r.admCl.PurgeTopicsFromClient(r.cfg.Topic)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list the %s offsets of topic %q: %w", what, r.cfg.Topic, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	out := make(map[int32]int64, len(r.parts))
	for _, p := range r.parts {
		o, ok := lo.Lookup(r.cfg.Topic, p)
		if !ok {
			return nil, fmt.Errorf("list the %s offsets of topic %q: no answer for partition %d", what, r.cfg.Topic, p)
		}
		out[p] = o.Offset
	}
	return out, nil
}
