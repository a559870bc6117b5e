package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/verified"
)

// runVerifiedConsume is `stele consume --verify`: every partition is read
// through the first --brokers broker with pkg/verified, so that each batch
// printed is proven against the trusted validators, and a lie (an altered,
// reordered or left-out record, a forged high watermark) ends the command
// with an error instead of being printed. A view's records are proven as
// the source records they name too (consume_view.go).
func runVerifiedConsume(cmd *cobra.Command, g *globalOptions, o *consumeOptions, t *trustOptions, topic string) error {
	format, err := checkDirectRead(cmd, g, o, topic, "--verify")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	proofs, err := t.client(ctx, cmd, g)
	if err != nil {
		return err
	}
	// Fetch v12 names topics (v13 names them by id); the reader asks the
	// first seed broker only, and trusts none of its answers.
	cl, err := g.newClient(kgo.MaxVersions(kversion.V3_0_0()))
	if err != nil {
		return err
	}
	defer cl.Close()
	readers, err := verifiedReaders(ctx, g, cmd, cl, o, topic)
	if err != nil {
		return err
	}
	for _, r := range readers {
		r.Proofs = proofs
	}
	// A view's records are proven as the source records they name too.
	var sources *sourceProver
	rctx, cancel := g.requestContext(cmd)
	view, err := isView(rctx, kadm.NewClient(cl), topic)
	cancel()
	if err != nil {
		return fmt.Errorf("describe the configs of topic %q: %w", topic, err)
	}
	if view {
		sources = &sourceProver{broker: cl.SeedBrokers()[0], proofs: proofs, last: map[string]*provenBatch{}}
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %s is a view: each record is proven as the view's and as the source record its %s header names\n", topic, fsm.ViewSourceHeader)
	}

	polls := make([]partPoll, len(readers))
	for i, r := range readers {
		polls[i] = partPoll{partition: r.Partition, next: func() int64 { return r.Next }, poll: func(ctx context.Context) ([][]byte, error) {
			bs, err := r.Poll(ctx)
			out := make([][]byte, 0, len(bs))
			for _, b := range bs {
				if sources != nil {
					if serr := sources.check(ctx, topic, r.Partition, b.Batch); serr != nil {
						return out, serr
					}
				}
				out = append(out, b.Batch)
			}
			return out, err
		}}
	}
	err = printPolled(ctx, cmd, g, o, topic, format, polls)
	if sources != nil && sources.gone > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %d records of view %s name source records no longer in their sources (retention, DeleteRecords or compaction): those are proven as the view's only\n", sources.gone, topic)
	}
	return err
}

// partPoll reads one partition: poll returns the next batches (checked,
// from the offset next returned before the call on; whole, so the first
// may begin below it) and moves on.
type partPoll struct {
	partition int32
	next      func() int64
	poll      func(context.Context) ([][]byte, error)
}

// printPolled prints the records polls return, round robin over the
// partitions, until --max-messages, --timeout-idle, an interrupt, or an
// error of a poll (after printing what that poll returned).
func printPolled(ctx context.Context, cmd *cobra.Command, g *globalOptions, o *consumeOptions, topic string, format recordFormat, polls []partPoll) error {
	out := bufio.NewWriter(cmd.OutOrStdout())
	var buf []byte
	var n int64
	lastRecord := time.Now()
	err := func() error {
		for {
			got := false
			for _, p := range polls {
				from := p.next()
				batches, perr := p.poll(ctx)
				if ctx.Err() != nil {
					return nil // interrupted: the normal end
				}
				for _, b := range batches {
					h, recs, err := record.Records(b)
					if err != nil {
						return fmt.Errorf("a checked batch of %s-%d does not decode: %w", topic, p.partition, err)
					}
					if h.Control() {
						continue
					}
					for _, rec := range recs {
						if rec.Offset < from {
							continue
						}
						kr := &kgo.Record{Topic: topic, Partition: p.partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value,
							Timestamp: time.UnixMilli(rec.Timestamp)}
						for _, hd := range rec.Headers {
							kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: hd.Key, Value: hd.Value})
						}
						if g.jsonOutput() {
							err = emitJSON(out, kr)
						} else {
							buf = format.append(buf[:0], kr)
							_, err = out.Write(buf)
						}
						if err != nil {
							return err
						}
						n++
						got = true
						if o.maxMessages > 0 && n >= o.maxMessages {
							return nil
						}
					}
				}
				var ke *kerr.Error
				if errors.As(perr, &ke) && ke.Retriable {
					// A broker catching up, or a read barrier that timed
					// out: ask again at the next round.
					fmt.Fprintf(cmd.ErrOrStderr(), "reading %s-%d: %v (retrying)\n", topic, p.partition, perr)
					time.Sleep(200 * time.Millisecond)
					continue
				}
				if perr != nil {
					return fmt.Errorf("reading %s-%d: %w", topic, p.partition, perr)
				}
			}
			if err := out.Flush(); err != nil {
				return err
			}
			if got {
				lastRecord = time.Now()
			} else if o.idle > 0 && time.Since(lastRecord) >= o.idle {
				return nil
			}
		}
	}()
	err = joinErr(err, out.Flush())
	fmt.Fprintf(cmd.ErrOrStderr(), "Processed a total of %d messages\n", n)
	return err
}

// checkDirectRead checks the flags of a checked read (--verify, --quorum:
// partitions read directly, read_uncommitted) and the topic, and returns
// the record format.
func checkDirectRead(cmd *cobra.Command, g *globalOptions, o *consumeOptions, topic, mode string) (recordFormat, error) {
	switch {
	case o.group != "":
		return recordFormat{}, usageErrorf("%s cannot be used with --group yet: it reads partitions directly", mode)
	case o.isolation.String() == "read_committed":
		return recordFormat{}, usageErrorf("%s reads read_uncommitted only (aborted transactions' records are printed)", mode)
	}
	if o.format == formatJSON {
		return recordFormat{}, usageErrorf("--format json does not go with %s yet", mode)
	}
	format, err := parseFormat(o.format)
	if err != nil {
		return recordFormat{}, usageError{err}
	}
	_, exact, err := o.startOffset()
	if err != nil {
		return recordFormat{}, err
	}
	return format, checkConsumeTarget(cmd, g, topic, o.partition, exact)
}

// topicCompacted reports whether the topic's cleanup.policy compacts
// (compact, or Stele's snapshot): its batches are rewritten and offsets
// removed, which proofs cannot cover. A topic whose configs cannot be read
// counts as not compacted.
func topicCompacted(ctx context.Context, adm *kadm.Client, topic string) bool {
	rc, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return false
	}
	c, err := rc.On(topic, nil)
	if err != nil {
		return false
	}
	for _, kv := range c.Configs {
		if kv.Key == "cleanup.policy" && kv.Value != nil && (strings.Contains(*kv.Value, "compact") || strings.Contains(*kv.Value, "snapshot")) {
			return true
		}
	}
	return false
}

func joinErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// verifiedReaders makes a reader per partition read, each at its start
// offset. The start offsets come from the broker unproven: a broker can
// make a reader start late (skipping records), not make it print a record
// the cluster did not commit.
func verifiedReaders(ctx context.Context, g *globalOptions, cmd *cobra.Command, cl *kgo.Client, o *consumeOptions, topic string) ([]*verified.Reader, error) {
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return nil, fmt.Errorf("no broker to read through")
	}
	adm := kadm.NewClient(cl)
	rctx, cancel := g.requestContext(cmd)
	defer cancel()
	n, err := topicPartitions(rctx, adm, topic, o.partition)
	if err != nil {
		return nil, err
	}
	compacted := topicCompacted(rctx, adm, topic)
	if compacted {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %s is compacted: offsets compaction removed cannot be proven absent, and batches it rewrote cannot be proven\n", topic)
	}
	starts, err := adm.ListStartOffsets(rctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list offsets of topic %q: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(rctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list offsets of topic %q: %w", topic, err)
	}
	var readers []*verified.Reader
	for p := int32(0); p < int32(n); p++ {
		if o.partition >= 0 && p != o.partition {
			continue
		}
		s, _ := starts.Lookup(topic, p)
		e, _ := ends.Lookup(topic, p)
		next := e.Offset
		switch {
		case o.offset == "earliest" || o.offset == "" && o.fromBeginning:
			next = s.Offset
		case o.offset != "" && o.offset != "latest":
			_, next, _ = o.startOffset()
		}
		readers = append(readers, &verified.Reader{Broker: seeds[0], Topic: topic, Partition: p, Next: next, AllowGaps: compacted, MaxWaitMs: 200})
	}
	return readers, nil
}

// runQuorumConsume is `stele consume --quorum`: every partition is read
// through every --brokers broker at once, and only the batches all of them
// returned byte for byte are printed (pkg/verified.Quorum). With f+1
// brokers of a cluster of 3f+1, at least one is honest.
func runQuorumConsume(cmd *cobra.Command, g *globalOptions, o *consumeOptions, topic string) error {
	if o.verify {
		return usageErrorf("give either --verify or --quorum, not both")
	}
	format, err := checkDirectRead(cmd, g, o, topic, "--quorum")
	if err != nil {
		return err
	}
	seeds, err := g.seedBrokers()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	brokers := make([]*kgo.Broker, len(seeds))
	for i, s := range seeds {
		cl, err := g.newClient(kgo.SeedBrokers(s), kgo.MaxVersions(kversion.V3_0_0()))
		if err != nil {
			return err
		}
		defer cl.Close()
		brokers[i] = cl.SeedBrokers()[0]
	}
	first, err := g.newClient(kgo.SeedBrokers(seeds[0]), kgo.MaxVersions(kversion.V3_0_0()))
	if err != nil {
		return err
	}
	defer first.Close()
	if err := checkQuorumSize(ctx, g, cmd, first, len(seeds)); err != nil {
		return err
	}
	readers, err := verifiedReaders(ctx, g, cmd, first, o, topic)
	if err != nil {
		return err
	}
	polls := make([]partPoll, len(readers))
	for i, r := range readers {
		q := &verified.Quorum{Brokers: brokers, Names: seeds, Topic: topic, Partition: r.Partition, Next: r.Next, MaxWaitMs: 200}
		polls[i] = partPoll{partition: q.Partition, next: func() int64 { return q.Next }, poll: func(ctx context.Context) ([][]byte, error) {
			bs, err := q.Poll(ctx)
			out := make([][]byte, len(bs))
			for k, b := range bs {
				out[k] = b.Batch
			}
			return out, err
		}}
	}
	return printPolled(ctx, cmd, g, o, topic, format, polls)
}

// checkQuorumSize refuses a quorum of fewer than f+1 brokers of the
// cluster's n = 3f+1 (n as the first broker's metadata lists them: a
// Byzantine broker may list fewer, so name brokers you chose yourself).
func checkQuorumSize(ctx context.Context, g *globalOptions, cmd *cobra.Command, cl *kgo.Client, given int) error {
	rctx, cancel := g.requestContext(cmd)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(rctx)
	if err != nil {
		return fmt.Errorf("listing the cluster's brokers: %w", err)
	}
	n := len(md.Brokers)
	if f := (n - 1) / 3; given < f+1 {
		return usageErrorf("--quorum needs at least %d of the cluster's %d brokers in --brokers (f+1, f = %d), got %d", f+1, n, f, given)
	}
	return nil
}
