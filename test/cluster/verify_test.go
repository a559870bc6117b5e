package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
	"github.com/stele-io/stele/pkg/verified"
	"github.com/stele-io/stele/test/harness"
)

// TestVerifiedReads (issue 9): three of four brokers lie to their clients
// (the stelebyzantine build's Fetch lies: a record's value altered, one
// batch of several left out, two records' values swapped, a high
// watermark 1000 above the truth, told with any answer holding records;
// every batch with a valid CRC). A reader
// that proves what it reads (pkg/verified, against the genesis validators)
// catches each lie at the first read that meets it and is handed nothing
// unproven; through the honest broker it reads everything. Every broker,
// liars included, proves every batch over HTTP with the four validators'
// signatures: the proofs come from the state all brokers agree on, not
// from the broker's word.
func TestVerifiedReads(t *testing.T) {
	const topic, batches, per = "verified", 6, 3
	byz := harness.ByzantineBin(t)
	c := newCluster(t, clusterOptions{})
	lies := []string{"alter-records", "drop-batch", "reorder-records,forge-watermark"}
	honest := 3
	for i, lie := range lies {
		c.Nodes[i].Bin, c.Nodes[i].Env = byz, []string{"STELE_BYZANTINE=" + lie}
	}
	c.StartAll()
	all := c.KafkaAddrs(c.All()...)
	harness.CreateTopic(t, all, topic, 1, nil)
	var want []string
	for b := 0; b < batches; b++ {
		vals := make([]string, per)
		for k := range vals {
			vals[k] = fmt.Sprintf("v%d-%d", b, k)
		}
		want = append(want, vals...)
		code, base, err := c.RawProduce(b%4, topic, 0, 10*time.Second, vals...)
		if err != nil || code != 0 || base != int64(b*per) {
			t.Fatalf("produce batch %d through node%d: code %d base %d err %v", b, b%4, code, base, err)
		}
	}
	// A batch of one record last: reorder-records (two records of one
	// batch swapped) leaves it alone, so node2's other lie shows.
	want = append(want, "last")
	if code, base, err := c.RawProduce(0, topic, 0, 10*time.Second, "last"); err != nil || code != 0 || base != batches*per {
		t.Fatalf("produce the last batch: code %d base %d err %v", code, base, err)
	}
	c.CheckAppHashes(time.Minute, c.All()...)
	trust, err := proof.TrustGenesisFile(filepath.Join(c.Nodes[0].Dir, "cometbft", "config", "genesis.json"))
	if err != nil {
		t.Fatal(err)
	}
	if trust.Validators.Size() != 4 {
		t.Fatalf("trusting %d validators, want 4", trust.Validators.Size())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	end := int64(batches*per + 1)

	// Every broker proves every batch, each offset inside it too.
	for _, i := range c.All() {
		pc := &proof.Client{HTTP: c.Nodes[i].HTTP, Trust: trust}
		for off := int64(0); off < end; off++ {
			v, err := pc.Prove(ctx, topic, 0, off)
			if err != nil {
				t.Fatalf("node%d's proof of offset %d: %v", i, off, err)
			}
			if wantBase := min(off/per*per, end-1); v.BaseOffset != wantBase || v.LastOffset != min(wantBase+per, end)-1 {
				t.Fatalf("node%d proved offset %d in batch %d-%d, want the batch of %d records it was produced in", i, off, v.BaseOffset, v.LastOffset, per)
			}
		}
		if _, err := pc.Prove(ctx, topic, 0, end); err == nil {
			t.Errorf("node%d proved offset %d, past the end", i, end)
		}
	}

	read := func(i int, from int64) (values []string, hwm int64, err error) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Nodes[i].Kafka), kgo.MaxVersions(kversion.V3_0_0()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		r := &verified.Reader{Broker: cl.SeedBrokers()[0], Proofs: &proof.Client{HTTP: c.Nodes[i].HTTP, Trust: trust},
			Topic: topic, Partition: 0, Next: from, MaxWaitMs: 100}
		for polls := 0; polls < 20 && (r.Next < end || r.HighWatermark() < end); polls++ {
			bs, err := r.Poll(ctx)
			for _, b := range bs {
				_, recs, derr := record.Records(b.Batch)
				if derr != nil {
					t.Fatalf("a proven batch does not decode: %v", derr)
				}
				for _, rec := range recs {
					values = append(values, string(rec.Value))
				}
			}
			if err != nil {
				return values, r.HighWatermark(), err
			}
		}
		return values, r.HighWatermark(), nil
	}

	got, hwm, err := read(honest, 0)
	if err != nil || strings.Join(got, ",") != strings.Join(want, ",") || hwm != end {
		t.Fatalf("through the honest node%d: %v, high watermark %d, err %v; want %v, %d", honest, got, hwm, err, want, end)
	}
	for i, c := range []struct {
		lie  string
		from int64
		want error
	}{{"alter-records", 0, proof.ErrUnproven}, {"drop-batch", 0, verified.ErrGap},
		{"reorder-records", 0, proof.ErrUnproven}, {"forge-watermark", end - 1, verified.ErrForgedWatermark}} {
		node := min(i, 2)
		got, _, err := read(node, c.from)
		t.Logf("node%d (%s) from %d: handed %d records, then %v", node, c.lie, c.from, len(got), err)
		if !errors.Is(err, c.want) {
			t.Errorf("node%d's %s: error %v, want %v", node, c.lie, err, c.want)
		}
		// Whatever was handed over before the lie is the truth.
		if strings.Join(got, ",") != strings.Join(want[c.from:int(c.from)+len(got)], ",") {
			t.Errorf("node%d's %s: handed %v, not a prefix of the committed records", node, c.lie, got)
		}
	}

	// Quorum reads (no genesis): a liar and the honest broker disagree at
	// the lie; the honest broker's answers agree with themselves; the CLI
	// refuses fewer than f+1 = 2 brokers and reports a disagreement.
	quorum := func(nodes ...int) ([]string, error) {
		q := &verified.Quorum{Topic: topic, Partition: 0, MaxWaitMs: 100}
		for _, i := range nodes {
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.Nodes[i].Kafka), kgo.MaxVersions(kversion.V3_0_0()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			q.Brokers, q.Names = append(q.Brokers, cl.SeedBrokers()[0]), append(q.Names, fmt.Sprintf("node%d", i))
		}
		var values []string
		for polls := 0; polls < 20 && q.Next < end; polls++ {
			bs, err := q.Poll(ctx)
			for _, b := range bs {
				_, recs, _ := record.Records(b.Batch)
				for _, rec := range recs {
					values = append(values, string(rec.Value))
				}
			}
			if err != nil {
				return values, err
			}
		}
		return values, nil
	}
	if got, err := quorum(honest, honest); err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("quorum of the honest broker with itself: %v %v", got, err)
	}
	for _, liar := range []int{0, 1, 2} {
		got, err := quorum(liar, honest)
		t.Logf("quorum of node%d (%s) and node%d: handed %d records, then %v", liar, lies[liar], honest, len(got), err)
		if !errors.Is(err, verified.ErrDisagree) || strings.Join(got, ",") != strings.Join(want[:len(got)], ",") {
			t.Errorf("quorum of node%d (%s) and node%d: %v, %v", liar, lies[liar], honest, got, err)
		}
	}
	if out, err := exec.Command(harness.SteleBin, "consume", topic, "--from-beginning", "--quorum", "--timeout-idle", "2s",
		"--brokers", c.Nodes[honest].Kafka).CombinedOutput(); err == nil || !strings.Contains(string(out), "at least 2") {
		t.Errorf("stele consume --quorum through one broker of four: %v %s", err, out)
	}
	if out, err := exec.Command(harness.SteleBin, "consume", topic, "--from-beginning", "--quorum", "--timeout-idle", "2s",
		"--brokers", c.Nodes[1].Kafka+","+c.Nodes[honest].Kafka).CombinedOutput(); err == nil || !strings.Contains(string(out), "brokers disagree") {
		t.Errorf("stele consume --quorum through a liar and the honest broker: %v %s", err, out)
	}

	// stele audit: the three liars diverge, each from its first lie; the
	// honest broker holds the signed history.
	genesis := filepath.Join(c.Nodes[0].Dir, "cometbft", "config", "genesis.json")
	audit := func(nodes ...int) (string, error) {
		var kafka, https []string
		for _, i := range nodes {
			kafka, https = append(kafka, c.Nodes[i].Kafka), append(https, c.Nodes[i].HTTP)
		}
		out, err := exec.Command(harness.SteleBin, "audit", "--brokers", strings.Join(kafka, ","), "--http", strings.Join(https, ","),
			"--genesis", genesis, "--timeout", "60s").CombinedOutput()
		return string(out), err
	}
	out, err := audit(c.All()...)
	t.Logf("stele audit of the four brokers:\n%s", out)
	if err == nil || !strings.Contains(out, "audit found") {
		t.Errorf("stele audit with three liars: %v", err)
	}
	for i := range c.Nodes {
		clean := strings.Contains(out, fmt.Sprintf("broker %s (%s): no divergence", c.Nodes[i].Kafka, c.Nodes[i].HTTP))
		if clean != (i == honest) {
			t.Errorf("stele audit: node%d reported clean %v, want %v", i, clean, i == honest)
		}
	}
	if !strings.Contains(out, "offsets left out") || !strings.Contains(out, "is not the one committed there") {
		t.Errorf("stele audit does not name the lies it met")
	}
	// The forged watermark is over ListOffsets too; the broker's proven
	// state says otherwise.
	if !strings.Contains(out, "above the") || !strings.Contains(out, "its proven state holds") {
		t.Errorf("stele audit does not catch a high watermark served above the proven state")
	}
	if out, err := audit(honest); err != nil || !strings.Contains(out, "every broker holds the history the validators signed") ||
		!strings.Contains(out, fmt.Sprintf("%d batches (%d offsets) of 1 topics read and proven", batches+1, end)) ||
		!strings.Contains(out, "the state of 1 topics and 1 partitions proven") {
		t.Errorf("stele audit of the honest broker: %v\n%s", err, out)
	}
}
