package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/stele-io/stele/pkg/proof"
	"github.com/stele-io/stele/pkg/verified"
)

// auditOptions are `stele audit`'s flags.
type auditOptions struct {
	trust      trustOptions
	https      []string
	topics     []string
	fromHeight int64
}

func newAuditCmd(g *globalOptions) *cobra.Command {
	o := &auditOptions{}
	c := &cobra.Command{
		Use:   "audit",
		Short: "Compare brokers' headers and logs against what the validators signed",
		Long: `Audit a cluster without trusting any of its brokers: for each broker given
(--brokers, its Kafka address, and --http, its HTTP API, in the same order),

  - every signed header it holds from --from-height on must verify against the
    trusted validators (--genesis, or the genesis pinned on first use), link to
    the header before it, and be the same header every other broker holds at
    that height: the chain of app hashes is one history;
  - the app hash its state reports (/healthz) must be the one the validators
    signed for its height, once the next header is there;
  - every batch of every partition of every topic (--topic, default all), read
    through it over the Kafka protocol from its log start to its high
    watermark, must be proven (the batch its block committed, no offsets left
    out between batches), as stele consume --verify proves it;
  - every such topic and the offsets of each of its partitions must be proven
    from the broker's state against the state root the validators signed,
    and the log start offsets and high watermarks it serves over Kafka may
    not be ahead of its proven state.

It prints what it checked and every divergence, the first of each broker
first, and exits 1 when there is one. docs/audit.md says what an auditor can
prove to a third party.`,
		Example: `  stele audit --brokers 10.0.0.1:9092,10.0.0.2:9092 --http 10.0.0.1:8080,10.0.0.2:8080 \
    --genesis cluster/node0/cometbft/config/genesis.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAudit(cmd, g, o)
		},
	}
	f := c.Flags()
	f.StringSliceVar(&o.https, "http", []string{defaultHTTP}, "the brokers' HTTP APIs host:port, comma-separated, in the order of --brokers")
	f.StringSliceVar(&o.topics, "topic", nil, "audit only this topic (repeatable; default every topic any broker lists)")
	f.Int64Var(&o.fromHeight, "from-height", 1, "compare signed headers from this height on")
	f.StringVar(&o.trust.genesis, "genesis", "", "the cluster's genesis.json to trust (default: the one pinned on first use)")
	return c
}

// auditNode is one audited broker.
type auditNode struct {
	kafka, http string
	proofs      *proof.Client
	hc          *http.Client // the client of its HTTP API
	height      int64
	appHash     []byte
	headers     map[int64]proof.Header
	problems    []string
}

func (n *auditNode) diverge(format string, args ...any) {
	n.problems = append(n.problems, fmt.Sprintf(format, args...))
}

func runAudit(cmd *cobra.Command, g *globalOptions, o *auditOptions) error {
	seeds, err := g.seedBrokers()
	if err != nil {
		return err
	}
	if len(o.https) != len(seeds) {
		return usageErrorf("--http names %d HTTP APIs for %d --brokers: give one per broker, in the same order", len(o.https), len(seeds))
	}
	if o.fromHeight < 1 {
		return usageErrorf("invalid --from-height %d: heights start at 1", o.fromHeight)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.trust.httpAddr = o.https[0]
	first, err := o.trust.client(ctx, cmd, g)
	if err != nil {
		return err
	}
	hc := first.HC
	out := cmd.OutOrStdout()
	nodes := make([]*auditNode, len(seeds))
	for i := range seeds {
		nodes[i] = &auditNode{kafka: seeds[i], http: o.https[i], hc: hc, proofs: &proof.Client{HTTP: httpBase(o.https[i]), HC: hc, Trust: first.Trust}}
	}
	fmt.Fprintf(out, "auditing %d brokers of chain %q against its %d validators\n", len(nodes), first.Trust.ChainID, first.Trust.Validators.Size())

	for _, n := range nodes {
		if err := n.health(ctx); err != nil {
			n.diverge("no health report: %v", err)
			continue
		}
		if err := n.loadHeaders(ctx, o.fromHeight); err != nil {
			n.diverge("%v", err)
		}
	}
	compareHeaders(out, nodes)
	topics, err := auditTopics(ctx, g, nodes, o.topics)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := auditLogs(ctx, g, out, n, topics); err != nil {
			return err
		}
		if err := auditState(ctx, g, out, n, topics); err != nil {
			return err
		}
	}

	total := 0
	for _, n := range nodes {
		if len(n.problems) == 0 {
			fmt.Fprintf(out, "broker %s (%s): no divergence\n", n.kafka, n.http)
			continue
		}
		total += len(n.problems)
		fmt.Fprintf(out, "broker %s (%s): %d divergences, the first: %s\n", n.kafka, n.http, len(n.problems), n.problems[0])
		for _, p := range n.problems[1:] {
			fmt.Fprintf(out, "  also: %s\n", p)
		}
	}
	if total > 0 {
		return fmt.Errorf("audit found %d divergences", total)
	}
	fmt.Fprintln(out, "audit: every broker holds the history the validators signed")
	return nil
}

// health reads the broker's height and app hash.
func (n *auditNode) health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, "GET", httpBase(n.http)+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := n.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct {
		Height  int64  `json:"height"`
		AppHash string `json:"app_hash"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(body, &h); err != nil {
		return fmt.Errorf("/healthz: %s: %v", resp.Status, err)
	}
	n.height = h.Height
	fmt.Sscanf(h.AppHash, "%x", &n.appHash)
	return nil
}

// loadHeaders fetches and verifies every signed header the broker holds
// from height from to its height, checking that each links to the one
// before it where both are held.
func (n *auditNode) loadHeaders(ctx context.Context, from int64) error {
	n.headers = map[int64]proof.Header{}
	for h := from; h <= n.height; {
		hs, next, err := n.proofs.Headers(ctx, h, 1000)
		if err != nil {
			return fmt.Errorf("headers from height %d: %w", h, err)
		}
		for _, x := range hs {
			n.headers[x.Height] = x
			if prev, ok := n.headers[x.Height-1]; ok && !bytes.Equal(prev.Hash, x.LastBlock) {
				n.diverge("the header of height %d does not link to its header of height %d", x.Height, x.Height-1)
			}
		}
		if next <= h {
			break
		}
		h = next
	}
	return nil
}

// compareHeaders reports heights at which brokers hold different signed
// headers (a fork: more than a third of the validators signed two
// blocks), and brokers whose state's app hash is not the one signed for
// their height.
func compareHeaders(out io.Writer, nodes []*auditNode) {
	byHeight := map[int64]map[string][]*auditNode{}
	for _, n := range nodes {
		for h, x := range n.headers {
			if byHeight[h] == nil {
				byHeight[h] = map[string][]*auditNode{}
			}
			k := fmt.Sprintf("%X", x.Hash)
			byHeight[h][k] = append(byHeight[h][k], n)
		}
	}
	heights := make([]int64, 0, len(byHeight))
	for h := range byHeight {
		heights = append(heights, h)
	}
	sort.Slice(heights, func(i, j int) bool { return heights[i] < heights[j] })
	for _, h := range heights {
		if len(byHeight[h]) > 1 {
			for hash, ns := range byHeight[h] {
				for _, n := range ns {
					n.diverge("at height %d it holds header %s, other brokers another: the validators signed two blocks", h, hash[:16])
				}
			}
		}
	}
	for _, n := range nodes {
		for _, m := range nodes {
			if next, ok := m.headers[n.height+1]; ok && n.appHash != nil && !bytes.Equal(next.AppHash, n.appHash) {
				n.diverge("its state at height %d has app hash %X; the validators signed %X", n.height, n.appHash, next.AppHash)
				break
			}
		}
	}
	held := 0
	for _, n := range nodes {
		held += len(n.headers)
	}
	fmt.Fprintf(out, "headers: %d signed headers verified (%d heights), compared between brokers\n", held, len(heights))
}

// auditTopics is --topic, or every topic any broker lists.
func auditTopics(ctx context.Context, g *globalOptions, nodes []*auditNode, want []string) ([]string, error) {
	if len(want) > 0 {
		return want, nil
	}
	set := map[string]bool{}
	for _, n := range nodes {
		cl, err := g.newClient(kgo.SeedBrokers(n.kafka))
		if err != nil {
			return nil, err
		}
		tds, err := kadm.NewClient(cl).ListTopics(ctx)
		cl.Close()
		if err != nil {
			n.diverge("listing topics: %v", err)
			continue
		}
		for _, t := range tds.Names() {
			set[t] = true
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out, nil
}

// auditLogs reads every partition of topics through the broker and proves
// every batch.
func auditLogs(ctx context.Context, g *globalOptions, out io.Writer, n *auditNode, topics []string) error {
	cl, err := g.newClient(kgo.SeedBrokers(n.kafka), kgo.MaxVersions(kversion.V3_0_0()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	seeds := cl.SeedBrokers()
	batches, records := 0, int64(0)
	for _, topic := range topics {
		tds, err := adm.ListTopics(ctx, topic)
		td, ok := tds[topic]
		if err != nil || !ok || td.Err != nil {
			n.diverge("topic %s: not listed (%v)", topic, errors.Join(err, td.Err))
			continue
		}
		if topicCompacted(ctx, adm, topic) {
			fmt.Fprintf(out, "topic %s: compacted, its logs are not audited (batches compaction rewrote cannot be proven)\n", topic)
			continue
		}
		starts, err1 := adm.ListStartOffsets(ctx, topic)
		ends, err2 := adm.ListEndOffsets(ctx, topic)
		if err := errors.Join(err1, err2); err != nil {
			n.diverge("topic %s: listing offsets: %v", topic, err)
			continue
		}
		for _, p := range td.Partitions.Numbers() {
			s, _ := starts.Lookup(topic, p)
			e, _ := ends.Lookup(topic, p)
			r := &verified.Reader{Broker: seeds[0], Proofs: n.proofs, Topic: topic, Partition: p, Next: s.Offset, MaxWaitMs: 100}
			for empty := 0; r.Next < e.Offset; {
				bs, err := r.Poll(ctx)
				for _, b := range bs {
					batches++
					records += b.LastOffset - b.BaseOffset + 1
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				var ke *kerr.Error
				if errors.As(err, &ke) && ke.Retriable {
					err, bs = nil, nil // catching up, or a read barrier timed out: ask again
					time.Sleep(200 * time.Millisecond)
				}
				if err != nil {
					n.diverge("%s-%d: at offset %d: %v", topic, p, r.Next, err)
					break
				}
				if empty = empty + 1; len(bs) > 0 {
					empty = 0
				}
				if empty == 5 {
					n.diverge("%s-%d: serves nothing from offset %d on; the cluster's high watermark is %d (behind, or withholding)", topic, p, r.Next, e.Offset)
					break
				}
			}
		}
	}
	fmt.Fprintf(out, "broker %s: %d batches (%d offsets) of %d topics read and proven\n", n.kafka, batches, records, len(topics))
	return nil
}
