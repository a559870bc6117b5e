package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/internal/plugin/plugintest"
	"github.com/stele-io/stele/test/harness"
)

// TestPluginOnFourBrokers (issue 24): the redact example, built with the
// SDK and deployed with `stele plugin deploy` through one broker's HTTP
// API, runs on all four brokers inside the apply. While a franz-go
// producer writes JSON records, a new config of the plugin is deployed
// through another broker: every record is stored redacted, the records
// before one offset by the first config and every one from it by the
// second (the upgrade takes effect at one height on every broker), and
// the four brokers hold the same records and app hashes. `stele plugin
// list` and `describe` show the deployment; after `stele plugin remove`
// records are stored as sent.
func TestPluginOnFourBrokers(t *testing.T) {
	const topic = "payments"
	c := newCluster(t, clusterOptions{})
	wasm := plugintest.File(t, t.TempDir(), "redact")
	c.StartAll()
	seeds := c.KafkaAddrs(c.All()...)
	harness.CreateTopic(t, seeds, topic, 1, nil)

	out := c.stele("plugin", "deploy", "redact", "--wasm", wasm, "--topic", topic, "--config", "fields=card", "--http", c.Nodes[0].HTTP)
	t.Logf("%s", strings.TrimSpace(out))

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var (
		wg       sync.WaitGroup
		stop     = make(chan struct{})
		produced int
		perr     error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var rs []*kgo.Record
			for j := range 5 {
				rs = append(rs, &kgo.Record{Value: fmt.Appendf(nil, `{"n":%d,"card":"4111-%d","amount":%d}`, i*5+j, i, j)})
			}
			if perr = cl.ProduceSync(context.Background(), rs...).FirstErr(); perr != nil {
				return
			}
			produced += len(rs)
		}
	}()
	c.Eventually(30*time.Second, "records produced through the first config", func() error {
		hw, err := c.HighWatermarks(1, topic, 1)
		if err != nil || hw[0] < 20 {
			return fmt.Errorf("high watermark %v (%v)", hw, err)
		}
		return nil
	})
	out = c.stele("plugin", "deploy", "redact", "--wasm", wasm, "--topic", topic, "--config", "fields=card", "--config", "mask=XXXX", "--http", c.Nodes[2].HTTP)
	t.Logf("%s", strings.TrimSpace(out))
	if !strings.Contains(out, "ran already") {
		t.Errorf("redeploying the same module with another config uploaded it again: %s", out)
	}
	c.Eventually(30*time.Second, "records produced through the second config", func() error {
		recs, err := c.FetchAll(3, topic, 0)
		if err != nil {
			return err
		}
		if len(recs) == 0 || !strings.Contains(recs[len(recs)-1].Value, "XXXX") {
			return fmt.Errorf("%d records, none masked yet", len(recs))
		}
		return nil
	})
	close(stop)
	wg.Wait()
	if perr != nil {
		t.Fatalf("producing: %v", perr)
	}

	list := c.stele("plugin", "list", "--http", c.Nodes[1].HTTP)
	describe := c.stele("plugin", "describe", "redact", "--output", "json", "--http", c.Nodes[3].HTTP)
	t.Logf("stele plugin list:\n%s", list)
	var ps []struct {
		Name, Topic, State string
		Config             []struct{ Key, Value string }
	}
	if err := json.Unmarshal([]byte(describe), &ps); err != nil || len(ps) != 1 || ps[0].State != "active" || len(ps[0].Config) != 2 || ps[0].Config[1].Value != "XXXX" {
		t.Fatalf("stele plugin describe: %v\n%s", err, describe)
	}
	if !strings.Contains(list, "redact") || !strings.Contains(list, topic) {
		t.Fatalf("stele plugin list:\n%s", list)
	}

	c.stele("plugin", "remove", "redact", "--http", c.Nodes[1].HTTP)
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte(`{"n":-1,"card":"kept"}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c.CheckAppHashes(30*time.Second, c.All()...)

	var ref []harness.LogRecord
	for _, i := range c.All() {
		recs, err := c.FetchAll(i, topic, 0)
		if err != nil {
			t.Fatalf("node%d: %v", i, err)
		}
		if i == 0 {
			ref = recs
			continue
		}
		if len(recs) != len(ref) {
			t.Fatalf("node%d holds %d records, node0 %d", i, len(recs), len(ref))
		}
		for k := range recs {
			if recs[k] != ref[k] {
				t.Fatalf("offset %d: node%d holds %q, node0 %q", ref[k].Offset, i, recs[k].Value, ref[k].Value)
			}
		}
	}
	if len(ref) != produced+1 {
		t.Fatalf("%d records stored, %d produced", len(ref), produced+1)
	}
	removed, masked, switchAt := 0, 0, int64(-1)
	for _, r := range ref[:len(ref)-1] {
		switch {
		case !strings.Contains(r.Value, "card"):
			if masked > 0 {
				t.Fatalf("offset %d: %q without its card after masked records from %d", r.Offset, r.Value, switchAt)
			}
			removed++
		case strings.Contains(r.Value, `"card":"XXXX"`):
			if masked == 0 {
				switchAt = r.Offset
			}
			masked++
		default:
			t.Fatalf("offset %d: %q stored with its card while redact ran", r.Offset, r.Value)
		}
	}
	if removed == 0 || masked == 0 {
		t.Fatalf("%d records with the card removed, %d masked: the upgrade was not seen while producing", removed, masked)
	}
	if last := ref[len(ref)-1].Value; last != `{"n":-1,"card":"kept"}` {
		t.Fatalf("after stele plugin remove, stored %q", last)
	}
	t.Logf("%d records on each broker: %d with the card removed, %d masked from offset %d", len(ref), removed, masked, switchAt)
}
