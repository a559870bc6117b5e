package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

// asyncAPISpecsEnv names the directory of the npm package @asyncapi/specs,
// whose schemas/3.0.0.json is AsyncAPI's own JSON Schema of its 3.0.0
// documents. scripts/test.sh installs the package from the npm registry
// and sets it; without it TestAsyncAPIValidates fails unless
// STELE_SKIP_ASYNCAPI_SPECS=1 says to skip it.
const asyncAPISpecsEnv = "STELE_ASYNCAPI_SPECS"

// TestAsyncAPIValidates (docs/schemas.md "AsyncAPI"): GET /v1/asyncapi of
// a broker with topics, a view, subjects, schemas and a validating topic
// is an AsyncAPI 3.0.0 document that validates against AsyncAPI's own JSON
// Schema, and names what it should: each channel, its operations, the
// value's Avro schema and the Kafka binding of the validation.
func TestAsyncAPIValidates(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	ctx := context.Background()
	for _, c := range []fsm.Command{
		fsm.CreateTopic{Name: "orders", Partitions: 3, ReplicationFactor: -1, Configs: []fsm.ConfigEntry{{Name: "stele.value.schema.validation", Value: "full"}}},
		fsm.CreateTopic{Name: "fr", Partitions: 3, ReplicationFactor: -1, Configs: []fsm.ConfigEntry{{Name: "stele.view.from", Value: "orders"}, {Name: "stele.view.subject", Value: "orders.*.fr.>"}}},
		fsm.CreateTopic{Name: "compacted", Partitions: 1, ReplicationFactor: -1, Configs: []fsm.ConfigEntry{{Name: "cleanup.policy", Value: "compact"}}},
		fsm.CreateTenant{Name: "acme"},
		fsm.CreateTopic{Name: "acme~secret", Partitions: 1, ReplicationFactor: -1},
	} {
		if r, err := b.SubmitOne(ctx, c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	batch, _ := record.Build(record.Header{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]record.Record{{Value: []byte("x"), Headers: []record.RecordHeader{{Key: "stele-subject", Value: []byte("orders.eu.fr.created")}}}})
	if r, err := b.SubmitOne(ctx, fsm.Produce{Topic: "t", Partition: 0, Records: batch}); err != nil || r.Code != 0 {
		t.Fatalf("produce: %v %+v", err, r)
	}
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg, NodeID: 0, KafkaAddr: func() string { return "127.0.0.1:9092" }}))
	defer srv.Close()
	cl, _ := sr.NewClient(sr.URLs(srv.URL))
	if _, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: orderV2}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSchema(ctx, "orders-key", sr.Schema{Schema: `"string"`}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSchema(ctx, "compacted-value", sr.Schema{Type: sr.TypeJSON,
		Schema: `{"$schema":"http://json-schema.org/draft-07/schema#","title":"Balance","type":"object","properties":{"amount":{"type":"integer"}}}`}); err != nil {
		t.Fatal(err)
	}
	const protoEvent = `syntax = "proto3"; package shop; message Event { string id = 1; }`
	if _, err := cl.CreateSchema(ctx, "t-value", sr.Schema{Type: sr.TypeProtobuf, Schema: protoEvent}); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	getJSON(t, srv.URL+"/v1/asyncapi", &doc)

	// What it names.
	raw, _ := json.Marshal(doc)
	var d struct {
		AsyncAPI   string                     `json:"asyncapi"`
		Servers    map[string]map[string]any  `json:"servers"`
		Channels   map[string]json.RawMessage `json:"channels"`
		Operations map[string]struct {
			Action string `json:"action"`
		} `json:"operations"`
		Components struct {
			Messages map[string]struct {
				Payload struct {
					SchemaFormat string `json:"schemaFormat"`
					Schema       any    `json:"schema"`
				} `json:"payload"`
				Subjects []map[string]string `json:"x-stele-subjects"`
				Bindings struct {
					Kafka map[string]any `json:"kafka"`
				} `json:"bindings"`
			} `json:"messages"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.AsyncAPI != "3.0.0" || d.Servers["broker-0"]["host"] != "127.0.0.1:9092" {
		t.Fatalf("asyncapi %q servers %v", d.AsyncAPI, d.Servers)
	}
	for _, ch := range []string{"orders", "fr", "compacted", "t"} {
		if _, ok := d.Channels[ch]; !ok {
			t.Errorf("no channel %s", ch)
		}
	}
	if _, ok := d.Channels["secret"]; ok || len(d.Channels) != 4 {
		t.Errorf("channels %v: a tenant's topic is not the default tenant's", len(d.Channels))
	}
	if _, ok := d.Operations["fr.send"]; ok || d.Operations["fr.receive"].Action != "receive" || d.Operations["orders.send"].Action != "send" {
		t.Errorf("operations: %+v", d.Operations)
	}
	m := d.Components.Messages["orders"]
	field := func(v any, k string) any { m, _ := v.(map[string]any); return m[k] }
	if m.Payload.SchemaFormat != avroSchemaFormat || field(m.Payload.Schema, "name") != "Order" || m.Bindings.Kafka["key"] == nil || m.Bindings.Kafka["schemaIdPayloadEncoding"] != "confluent" {
		t.Errorf("orders' message: %+v", m)
	}
	if p := d.Components.Messages["compacted"].Payload; p.SchemaFormat != jsonSchemaFormat || field(p.Schema, "title") != "Balance" {
		t.Errorf("compacted's JSON payload: %+v", p)
	}
	if p := d.Components.Messages["t"].Payload; p.SchemaFormat != "application/vnd.google.protobuf;version=3" || p.Schema != protoEvent {
		t.Errorf("t's Protobuf payload: %+v", p)
	}
	if s := d.Components.Messages["t"].Subjects; len(s) != 1 || s[0]["subject"] != "orders.eu.fr.created" {
		t.Errorf("t's subjects: %v", s)
	}

	// AsyncAPI's own JSON Schema.
	dir := os.Getenv(asyncAPISpecsEnv)
	if dir == "" {
		if os.Getenv("STELE_SKIP_ASYNCAPI_SPECS") == "1" {
			t.Skip("STELE_SKIP_ASYNCAPI_SPECS=1: not validated against AsyncAPI's JSON Schema")
		}
		t.Fatalf("%s is not set: npm install @asyncapi/specs and set it to node_modules/@asyncapi/specs (scripts/test.sh does), or STELE_SKIP_ASYNCAPI_SPECS=1", asyncAPISpecsEnv)
	}
	f, err := os.Open(filepath.Join(dir, "schemas", "3.0.0.json"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jsonschema.UnmarshalJSON(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("asyncapi-3.0.0.json", spec); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("asyncapi-3.0.0.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytesReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("the document does not validate against AsyncAPI 3.0.0's JSON Schema: %v\n%s", err, raw)
	}
	// The check is not vacuous: an AsyncAPI 2 action, a channel binding's
	// unknown field, or an Avro schema that is none are each refused.
	for _, bad := range []func(map[string]any){
		func(d map[string]any) {
			d["operations"].(map[string]any)["orders.send"].(map[string]any)["action"] = "publish"
		},
		func(d map[string]any) {
			d["channels"].(map[string]any)["orders"].(map[string]any)["bindings"].(map[string]any)["kafka"].(map[string]any)["partitions"] = "three"
		},
		func(d map[string]any) {
			d["components"].(map[string]any)["messages"].(map[string]any)["orders"].(map[string]any)["payload"].(map[string]any)["schema"] = map[string]any{"type": "recrod"}
		},
	} {
		var mutated map[string]any
		json.Unmarshal(raw, &mutated)
		bad(mutated)
		b, _ := json.Marshal(mutated)
		inst, _ := jsonschema.UnmarshalJSON(bytesReader(b))
		if err := sch.Validate(inst); err == nil {
			t.Errorf("a broken document validates: %s", b)
		}
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// TestAsyncAPITenant: a tenant's user gets its tenant's topics, by their
// short names, and nothing of the default tenant's.
func TestAsyncAPITenant(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	ctx := context.Background()
	for _, c := range []fsm.Command{fsm.CreateTenant{Name: "acme"}, fsm.CreateTopic{Name: "acme~secret", Partitions: 2, ReplicationFactor: -1}} {
		if r, err := b.SubmitOne(ctx, c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	addUser(t, b, "alice@acme", "alice-pw")
	if r, err := b.SubmitOne(ctx, allow("User:alice@acme", fsm.ACLResourceCluster, fsm.TenantCluster("acme"), fsm.ACLOpDescribe)); err != nil || r.Code != 0 {
		t.Fatalf("acl: %v %+v", err, r)
	}
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg, Security: &Security{BasicOverPlaintext: true}}))
	defer srv.Close()
	get := func(user, pass string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/asyncapi", nil)
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get("alice@acme", "alice-pw")
	var d struct {
		Channels map[string]struct {
			Address  string `json:"address"`
			Bindings struct {
				Kafka struct {
					Topic string `json:"topic"`
				} `json:"kafka"`
			} `json:"bindings"`
		} `json:"channels"`
	}
	if err := json.Unmarshal([]byte(body), &d); code != http.StatusOK || err != nil {
		t.Fatalf("alice: %d %v %s", code, err, body)
	}
	if len(d.Channels) != 1 || d.Channels["secret"].Address != "secret" || d.Channels["secret"].Bindings.Kafka.Topic != "secret" || strings.Contains(body, "acme~") {
		t.Fatalf("alice's document: %s", body)
	}
}
