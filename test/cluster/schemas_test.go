package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/stele-io/stele/test/harness"
)

// TestSchemasAgree (issue 22, docs/schemas.md): four brokers, each taking
// registrations from a client of its own at once (franz-go's registry
// client, as Confluent's serializers use a registry), give every schema one
// id and every subject one order of versions, which each broker answers
// alike; a broker killed with SIGKILL, wiped and restored by state sync
// from the others' snapshots while they go on registering, answers the
// same after, Protobuf schemas (a shared subject of .proto files growing
// a field a version) as Avro ones. A topic with stele.value.schema.validation=full takes what a serde writes with
// the registry's ids, through any broker, and refuses an unregistered id;
// the brokers end with one app hash.
func TestSchemasAgree(t *testing.T) {
	c := newCluster(t, clusterOptions{ServeArgs: []string{"--snapshot-interval", "5", "--retain-blocks", "5"}})
	c.StartAll()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	clients := make([]*sr.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		cl, err := sr.NewClient(sr.URLs(n.HTTPURL))
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = cl
	}
	// Each broker's client registers 10 schemas of its own under one
	// subject, and 5 shared ones (the same text through every broker).
	schemaText := func(name string, fields int) string {
		s := fmt.Sprintf(`{"type":"record","name":%q,"fields":[`, name)
		for f := range fields {
			if f > 0 {
				s += ","
			}
			s += fmt.Sprintf(`{"name":"f%d","type":"long","default":0}`, f)
		}
		return s + "]}"
	}
	protoText := func(fields int) string {
		s := `syntax = "proto3"; package shop; message Shared {`
		for f := range fields {
			s += fmt.Sprintf(" int64 f%d = %d;", f, f+1)
		}
		return s + " }"
	}
	register := func(nodes []int, round int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for _, i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range 5 {
					subject := fmt.Sprintf("own-%d", i)
					if _, err := clients[i].CreateSchema(ctx, subject, sr.Schema{Schema: schemaText("Own", round*5+k+1)}); err != nil {
						errs <- fmt.Errorf("node%d %s: %w", i, subject, err)
					}
					if _, err := clients[i].CreateSchema(ctx, "shared", sr.Schema{Schema: schemaText("Shared", round*5+k+1)}); err != nil {
						errs <- fmt.Errorf("node%d shared: %w", i, err)
					}
					if _, err := clients[i].CreateSchema(ctx, "proto-shared", sr.Schema{Type: sr.TypeProtobuf, Schema: protoText(round*5 + k + 1)}); err != nil {
						errs <- fmt.Errorf("node%d proto-shared: %w", i, err)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	register(c.All(), 0)

	// node2 killed with SIGKILL and wiped: it comes back by state sync
	// once the blocks it lacks are pruned (TestWipeRejoinsByStateSync
	// shows the procedure).
	const victim = 2
	c.Kill9(victim)
	c.Wipe(victim)
	stoppedAt := c.MaxHeight(0, 1, 3)
	register([]int{0, 1, 3}, 1)
	all := c.KafkaAddrs(0, 1, 3)
	harness.CreateTopic(t, all, "orders", 2, map[string]*string{"stele.value.schema.validation": ptr("full")})
	orderSchema := `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"}]}`
	ss, err := clients[0].CreateSchema(ctx, "orders-value", sr.Schema{Schema: orderSchema})
	if err != nil {
		t.Fatal(err)
	}
	register([]int{0, 1, 3}, 2)
	c.WaitHeight(60*time.Second, stoppedAt+15, 0, 1, 3)
	c.Restart(victim)
	c.Eventually(90*time.Second, fmt.Sprintf("node%d restores a snapshot", victim), func() error {
		if err := c.Exited(victim); err != nil {
			return harness.GiveUp(err)
		}
		if len(c.logLines(victim, "snapshot restored")) > 0 {
			return nil
		}
		return fmt.Errorf("no snapshot restored yet")
	})
	c.WaitCaughtUp(60*time.Second, victim, 0, 1, 3)

	// Produce with a serde, through every broker.
	type order struct {
		ID   int64  `avro:"id"`
		Item string `avro:"item"`
	}
	parsed := avro.MustParse(orderSchema)
	var serde sr.Serde
	serde.Register(ss.ID, order{}, sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(parsed, v) }),
		sr.DecodeFn(func(b []byte, v any) error { return avro.Unmarshal(parsed, b, v) }))
	for _, i := range c.All() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Nodes[i].Kafka), kgo.RecordRetries(10))
		if err != nil {
			t.Fatal(err)
		}
		v, err := serde.Encode(order{ID: int64(i), Item: "tea"})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: v}).FirstErr(); err != nil {
			t.Fatalf("a valid record through node%d: %v", i, err)
		}
		bad := append([]byte{0, 0, 0, 0x7f, 0xff}, v[5:]...)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: bad}).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
			t.Fatalf("an unregistered id through node%d: %v, want INVALID_RECORD", i, err)
		}
		cl.Close()
	}

	// Every broker answers the same: each subject's versions and ids, and
	// each id's schema.
	answers := func(i int) string {
		var out string
		for _, path := range []string{"/subjects", "/subjects/shared/versions", "/subjects/own-0/versions", "/subjects/own-3/versions", "/config"} {
			out += path + " " + c.httpGet(i, path) + "\n"
		}
		for _, s := range []string{"shared", "proto-shared", "own-0", "own-1", "own-2", "own-3", "orders-value"} {
			for v := 1; v <= 15; v++ {
				out += fmt.Sprintf("%s/%d %s\n", s, v, c.httpGet(i, fmt.Sprintf("/subjects/%s/versions/%d", s, v)))
			}
		}
		for id := 1; id <= 90; id++ {
			out += fmt.Sprintf("id %d %s\n", id, c.httpGet(i, fmt.Sprintf("/schemas/ids/%d", id)))
		}
		return out
	}
	want := answers(0)
	for _, i := range c.All()[1:] {
		if got := answers(i); got != want {
			t.Fatalf("node%d answers otherwise than node0:\n%s\nnode0:\n%s", i, got, want)
		}
	}
	// 4 + 3 + 3 clients × 5 shared registrations of 15 distinct texts:
	// "shared" has 15 versions, whoever registered each first.
	vs, err := clients[victim].SubjectVersions(ctx, "shared")
	if err != nil || !slices.Equal(vs, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
		t.Fatalf("shared's versions on node%d: %v %v", victim, vs, err)
	}
	if vs, err := clients[victim].SubjectVersions(ctx, "proto-shared"); err != nil || len(vs) != 15 {
		t.Fatalf("proto-shared's versions on node%d: %v %v", victim, vs, err)
	}
	c.CheckAppHashes(30*time.Second, c.All()...)
}

// httpGet is node i's answer to GET path: its status and body.
func (c *cluster) httpGet(i int, path string) string {
	resp, err := c.HTTPC.Get(c.Nodes[i].HTTPURL + path)
	if err != nil {
		c.T.Fatalf("node%d GET %s: %v", i, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}
