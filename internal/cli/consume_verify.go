package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/verified"
)

// runVerifiedConsume is `stele consume --verify`: every partition is read
// through the first --brokers broker with pkg/verified, so that each batch
// printed is proven against the trusted validators, and a lie (an altered,
// reordered or left-out record, a forged high watermark) ends the command
// with an error instead of being printed.
func runVerifiedConsume(cmd *cobra.Command, g *globalOptions, o *consumeOptions, t *trustOptions, topic string) error {
	switch {
	case o.group != "":
		return usageErrorf("--verify cannot be used with --group yet: it reads partitions directly")
	case o.isolation.String() == "read_committed":
		return usageErrorf("--verify reads read_uncommitted only (aborted transactions' records are printed)")
	}
	format, err := parseFormat(o.format)
	if err != nil {
		return usageError{err}
	}
	if _, exact, err := o.startOffset(); err != nil {
		return err
	} else if err := checkConsumeTarget(cmd, g, topic, o.partition, exact); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	proofs, err := t.client(ctx, cmd, g.timeout)
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

	out := bufio.NewWriter(cmd.OutOrStdout())
	var buf []byte
	var n int64
	lastRecord := time.Now()
	err = func() error {
		for {
			got := false
			for _, r := range readers {
				from := r.Next
				batches, err := r.Poll(ctx)
				if ctx.Err() != nil {
					return nil // interrupted: the normal end
				}
				for _, b := range batches {
					h, recs, err := record.Records(b.Batch)
					if err != nil {
						return fmt.Errorf("a proven batch of %s-%d does not decode: %w", topic, r.Partition, err)
					}
					if h.Control() {
						continue
					}
					for _, rec := range recs {
						if rec.Offset < from {
							continue
						}
						kr := &kgo.Record{Topic: topic, Partition: r.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value,
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
				if err != nil {
					return fmt.Errorf("reading %s-%d through %s: %w", topic, r.Partition, g.brokers, err)
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
	compacted := false
	if rc, err := adm.DescribeTopicConfigs(rctx, topic); err == nil {
		if c, err := rc.On(topic, nil); err == nil {
			for _, kv := range c.Configs {
				if kv.Key == "cleanup.policy" && kv.Value != nil && (strings.Contains(*kv.Value, "compact") || strings.Contains(*kv.Value, "snapshot")) {
					compacted = true
				}
			}
		}
	}
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
