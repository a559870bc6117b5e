package cluster

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/test/harness"
)

// TestVerifyTable (issue 16): `stele verify --table` proves a key's value
// in a compacted topic, a deleted key and a key never written, against the
// genesis validators, through an honest broker; through a broker that
// serves another value than it proves (the stelebyzantine build's
// alter-tables) it fails, with exit status 1, for each. `stele consume
// --verify` proves the high watermark it is told against the signed state.
func TestVerifyTable(t *testing.T) {
	const topic = "accounts"
	byz := harness.ByzantineBin(t)
	c := newCluster(t, clusterOptions{})
	liar, honest := 0, 1
	c.Nodes[liar].Bin, c.Nodes[liar].Env = byz, []string{"STELE_BYZANTINE=alter-tables"}
	c.StartAll()
	all := c.KafkaAddrs(c.All()...)
	compact := "compact"
	harness.CreateTopic(t, all, topic, 2, map[string]*string{"cleanup.policy": &compact})
	cl, err := kgo.NewClient(kgo.SeedBrokers(all...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, r := range []*kgo.Record{
		{Key: []byte("alice"), Value: []byte("10"), Partition: 0},
		{Key: []byte("bob"), Value: []byte("5"), Partition: 1},
		{Key: []byte("alice"), Value: []byte("12"), Partition: 0},
		{Key: []byte("bob"), Value: nil, Partition: 1}, // bob deleted
	} {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	c.CheckAppHashes(time.Minute, c.All()...)
	genesis := filepath.Join(c.Nodes[0].Dir, "cometbft", "config", "genesis.json")
	verify := func(node int, key string) (string, error) {
		out, err := exec.Command(harness.SteleBin, "verify", "--table", topic, key, "--http", c.Nodes[node].HTTP,
			"--genesis", genesis, "--timeout", "60s").CombinedOutput()
		return string(out), err
	}
	for key, want := range map[string]string{
		"alice": `value "12"`,
		"bob":   "deleted (its latest version is a tombstone",
		"carol": "no value (none of its 2 partitions",
	} {
		out, err := verify(honest, key)
		t.Logf("stele verify --table %s %s through the honest node%d:\n%s", topic, key, honest, out)
		if err != nil || !strings.Contains(out, "verified "+topic+" key \""+key+"\": "+want) || !strings.Contains(out, "by more than 2/3 of the 4 validators") {
			t.Errorf("%s through the honest broker: %v\n%s", key, err, out)
		}
		out, err = verify(liar, key)
		t.Logf("through the lying node%d: %v\n%s", liar, err, out)
		var ee *exec.ExitError
		if !errAs(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "unproven") {
			t.Errorf("%s through the lying broker: %v, want exit status 1 naming what is unproven\n%s", key, err, out)
		}
	}

	// consume --verify: the high watermark is proven against the signed
	// state; everything committed is printed.
	out, err := exec.Command(harness.SteleBin, "consume", topic, "--from-beginning", "--verify", "--partition", "0", "--timeout-idle", "2s",
		"--brokers", c.Nodes[honest].Kafka, "--http", c.Nodes[honest].HTTP, "--genesis", genesis).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "12") || !strings.Contains(string(out), "Processed a total of 2 messages") {
		t.Errorf("stele consume --verify: %v\n%s", err, out)
	}
}

func errAs(err error, target **exec.ExitError) bool {
	ee, ok := err.(*exec.ExitError)
	if ok {
		*target = ee
	}
	return ok
}
