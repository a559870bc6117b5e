package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/test/harness"
)

// TestSubjectsAgree (issue 21): franz-go produces records with subjects to
// four brokers, one of them killed with SIGKILL midway and restarted; a
// batch with an invalid subject is refused with INVALID_RECORD. Then every
// broker answers a read by each pattern, and the list of subjects, with
// the same bytes, and the reads hold exactly the records produced with a
// matching subject: the summaries are written by the deterministic apply
// and rebuilt by replay after a crash.
func TestSubjectsAgree(t *testing.T) {
	const topic = "orders"
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	all := c.KafkaAddrs(c.All()...)
	harness.CreateTopic(t, all, topic, 3, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(all...), kgo.DefaultProduceTopic(topic), kgo.RecordRetries(20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	subjects := []string{"orders.eu.fr.created", "orders.eu.fr.paid", "orders.eu.de.created", "orders.us.ny.created", "audit.login", ""}
	produced := map[string]int{}
	produce := func(from, to int) {
		t.Helper()
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			s := subjects[i%len(subjects)]
			r := &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "v%d", i)}
			if s != "" {
				r.Headers = []kgo.RecordHeader{{Key: "stele-subject", Value: []byte(s)}}
				produced[s]++
			}
			recs = append(recs, r)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce %d..%d: %v", from, to, err)
		}
	}
	produce(0, 150)
	c.Kill9(3)
	produce(150, 300)
	bad := &kgo.Record{Value: []byte("bad"), Headers: []kgo.RecordHeader{{Key: "stele-subject", Value: []byte("orders..bad")}}}
	if err := cl.ProduceSync(ctx, bad).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("a record with subject orders..bad: %v, want INVALID_RECORD", err)
	}
	c.Restart(3)
	produce(300, 450)
	c.WaitCaughtUp(2*time.Minute, 3, 0, 1, 2)
	c.CheckAppHashes(time.Minute, c.All()...)

	get := func(node int, path string) string {
		t.Helper()
		resp, err := http.Get("http://" + c.Nodes[node].HTTP + path)
		if err != nil {
			t.Fatalf("node%d GET %s: %v", node, path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("node%d GET %s: %d %s", node, path, resp.StatusCode, body)
		}
		return string(body)
	}
	for pattern, want := range map[string]int{
		"orders.*.fr.>": produced["orders.eu.fr.created"] + produced["orders.eu.fr.paid"],
		"orders.>":      produced["orders.eu.fr.created"] + produced["orders.eu.fr.paid"] + produced["orders.eu.de.created"] + produced["orders.us.ny.created"],
		"audit.login":   produced["audit.login"],
		">":             450 * 5 / 6,
		"nothing.*":     0,
	} {
		path := "/v1/topics/" + topic + "/records?limit=10000&subject=" + url.QueryEscape(pattern)
		var first string
		c.Eventually(30*time.Second, "every broker answers "+pattern+" alike", func() error {
			first = get(0, path)
			for _, i := range []int{1, 2, 3} {
				if got := get(i, path); got != first {
					return fmt.Errorf("node%d answers %q with %d bytes, node0 with %d", i, pattern, len(got), len(first))
				}
			}
			return nil
		})
		if got := strings.Count(first, `"offset":`); got != want {
			t.Fatalf("%q: %d records, want %d", pattern, got, want)
		}
		if strings.Contains(first, "orders..bad") {
			t.Fatalf("%q returned the refused record", pattern)
		}
		t.Logf("%q: %d records on every broker", pattern, want)
	}
	list := get(0, "/v1/topics/"+topic+"/subjects")
	for _, i := range []int{1, 2, 3} {
		if got := get(i, "/v1/topics/"+topic+"/subjects"); got != list {
			t.Fatalf("node%d lists the subjects as %s, node0 as %s", i, got, list)
		}
	}
	for s, n := range produced {
		if !strings.Contains(list, fmt.Sprintf(`{"subject":%q,"records":%d}`, s, n)) {
			t.Fatalf("the subjects %s lack %s with %d records", list, s, n)
		}
	}
}
