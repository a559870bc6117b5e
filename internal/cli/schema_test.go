package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSchemaCLI: against a real node (docs/schemas.md), `stele schema`
// registers, lists, gets, checks, configures and deletes schemas through
// the broker's registry.
func TestSchemaCLI(t *testing.T) {
	cfg, n := startStele(t)
	c := &testCluster{t: t, brokers: n.KafkaAddr()}
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := file("v1.avsc", `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}`)
	v2 := file("v2.avsc", `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string","default":""}]}`)
	bad := file("bad.avsc", `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"}]}`)
	h := "--http=" + cfg.HTTPAddr

	if r := c.ok("", "schema", "register", "orders-value", "--file", v1, h); r.stdout != "subject orders-value version 1: schema id 1\n" {
		t.Fatalf("register: %q", r.stdout)
	}
	var reg struct{ ID, Version int }
	decodeJSON(t, c.ok(`{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string","default":""}]}`,
		"schema", "register", "orders-value", "--file", "-", h, "--output", "json").stdout, &reg)
	if reg.ID != 2 || reg.Version != 2 {
		t.Fatalf("register from stdin: %+v", reg)
	}
	if r := c.ok("", "schema", "compat", "orders-value", "--file", v2, h); r.stdout != "compatible with subject orders-value\n" {
		t.Fatalf("compat: %q", r.stdout)
	}
	r := c.run("", "schema", "compat", "orders-value", "--file", bad, h)
	if r.code != ExitFailure || !strings.Contains(r.stdout, "NOT compatible") || !strings.Contains(r.stdout, "qty") {
		t.Fatalf("compat of an incompatible schema: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	wantFailure(t, c.run("", "schema", "register", "orders-value", "--file", bad, h), ExitFailure, "incompatible", "409")
	if r := c.ok("", "schema", "config", "orders-value", "--set", "none", h); r.stdout != "subject orders-value: NONE\n" {
		t.Fatalf("config --set: %q", r.stdout)
	}
	if r := c.ok("", "schema", "config", h); r.stdout != "the registry: BACKWARD\n" {
		t.Fatalf("config: %q", r.stdout)
	}
	c.ok("", "schema", "register", "orders-value", "--file", bad, h)

	r = c.ok("", "schema", "list", h)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 ||
		strings.Join(strings.Fields(lines[1]), " ") != "orders-value 3 3 3 AVRO" {
		t.Fatalf("list:\n%s", r.stdout)
	}
	if r := c.ok("", "schema", "get", "orders-value", "--version", "1", h); strings.TrimSpace(r.stdout) != `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}` {
		t.Fatalf("get: %q", r.stdout)
	}
	if r := c.ok("", "schema", "get", "--id", "2", h); !strings.Contains(r.stdout, `"note"`) {
		t.Fatalf("get --id: %q", r.stdout)
	}
	wantFailure(t, c.run("", "schema", "get", "nope", h), ExitFailure, "40401")
	if r := c.run("", "schema", "get", h); r.code != ExitUsage {
		t.Fatalf("get without a subject or id: exit %d", r.code)
	}
	wantFailure(t, c.run("", "schema", "delete", "orders-value", "--version", "3", "--permanent", h), ExitFailure, "40407")
	if r := c.ok("", "schema", "delete", "orders-value", "--version", "3", h); r.stdout != "subject orders-value: soft-deleted version 3\n" {
		t.Fatalf("delete a version: %q", r.stdout)
	}
	if r := c.ok("", "schema", "delete", "orders-value", h); r.stdout != "subject orders-value: soft-deleted versions 1, 2\n" {
		t.Fatalf("delete the subject: %q", r.stdout)
	}
	if r := c.ok("", "schema", "delete", "orders-value", "--permanent", h); r.stdout != "subject orders-value: deleted for good versions 1, 2, 3\n" {
		t.Fatalf("delete for good: %q", r.stdout)
	}
	if r := c.ok("", "schema", "list", h); strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("list after the deletes:\n%s", r.stdout)
	}
}

// TestConsumeFormatJSON: `stele consume --format json` prints each record
// with its value decoded by the schema its wire format names, fetched from
// the registry; what is not in the wire format stays as it is.
func TestConsumeFormatJSON(t *testing.T) {
	cfg, n := startStele(t)
	c := &testCluster{t: t, brokers: n.KafkaAddr()}
	h := "--http=" + cfg.HTTPAddr
	text := `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"}]}`
	p := filepath.Join(t.TempDir(), "o.avsc")
	os.WriteFile(p, []byte(text), 0o600)
	c.ok("", "schema", "register", "orders-value", "--file", p, h)
	c.ok("", "topic", "create", "orders")
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	payload, err := avro.Marshal(avro.MustParse(text), map[string]any{"id": int64(5), "item": "tea"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: "orders", Key: []byte("k"), Value: append([]byte{0, 0, 0, 0, 1}, payload...)},
		&kgo.Record{Topic: "orders", Value: []byte("plain")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := c.ok("", "consume", "orders", "--from-beginning", "--max-messages", "2", "--timeout-idle", "5s", "--format", "json", h)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"value_typed":{"schema_id":1,"json":{"id":5,"item":"tea"}}`) ||
		strings.Contains(lines[0], "key_typed") || !strings.Contains(lines[1], `"value":"plain"`) || strings.Contains(lines[1], "value_typed") {
		t.Fatalf("consume --format json:\n%s", r.stdout)
	}
	if r := c.run("", "consume", "orders", "--subject", ">", "--format", "json", h); r.code != ExitUsage {
		t.Fatalf("--format json with --subject: exit %d", r.code)
	}
}

// TestSchemaCLIProtobuf: `stele schema register --type PROTOBUF` with
// --ref for an import, and `stele consume --format json` decoding a
// Protobuf value (message indexes, then the message) to Protobuf's JSON
// mapping.
func TestSchemaCLIProtobuf(t *testing.T) {
	cfg, n := startStele(t)
	c := &testCluster{t: t, brokers: n.KafkaAddr()}
	h := "--http=" + cfg.HTTPAddr
	dir := t.TempDir()
	money := filepath.Join(dir, "money.proto")
	os.WriteFile(money, []byte(`syntax = "proto3"; package common; message Money { int64 cents = 1; }`), 0o600)
	order := filepath.Join(dir, "order.proto")
	os.WriteFile(order, []byte(`syntax = "proto3"; package shop; import "common/money.proto"; message Order { string id = 1; common.Money total = 2; }`), 0o600)
	c.ok("", "schema", "register", "common/money.proto", "--type", "protobuf", "--file", money, h)
	if r := c.run("", "schema", "register", "orders-value", "--type", "PROTOBUF", "--file", order, h); r.code == 0 {
		t.Fatal("an import without its --ref registered")
	}
	r := c.ok("", "schema", "register", "orders-value", "--type", "PROTOBUF", "--file", order, "--ref", "common/money.proto=common/money.proto:1", h, "--output", "json")
	if !strings.Contains(r.stdout, `"id": 2`) {
		t.Fatalf("register: %s", r.stdout)
	}
	if r := c.ok("", "schema", "get", "orders-value", h, "--output", "json"); !strings.Contains(r.stdout, "PROTOBUF") || !strings.Contains(r.stdout, "common/money.proto") {
		t.Fatalf("get: %s", r.stdout)
	}
	c.ok("", "topic", "create", "orders")
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Indexes [0] (the shortcut 0), then id "o-1" and total {cents: 250}.
	value := append([]byte{0, 0, 0, 0, 2, 0}, 0x0a, 3, 'o', '-', '1', 0x12, 3, 0x08, 0xfa, 0x01)
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "orders", Value: value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r = c.ok("", "consume", "orders", "--from-beginning", "--max-messages", "1", "--timeout-idle", "5s", "--format", "json", h)
	if !strings.Contains(r.stdout, `"value_typed":{"schema_id":2,"json":{"id":"o-1","total":{"cents":"250"}}}`) {
		t.Fatalf("consume --format json:\n%s", r.stdout)
	}
}

// TestAsyncAPICLI: `stele asyncapi --out FILE` writes the broker's
// AsyncAPI document.
func TestAsyncAPICLI(t *testing.T) {
	cfg, n := startStele(t)
	c := &testCluster{t: t, brokers: n.KafkaAddr()}
	c.ok("", "topic", "create", "orders")
	out := filepath.Join(t.TempDir(), "asyncapi.json")
	c.ok("", "asyncapi", "--out", out, "--http", cfg.HTTPAddr)
	b, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(b), `"asyncapi": "3.0.0"`) || !strings.Contains(string(b), `"address": "orders"`) ||
		!strings.Contains(string(b), `"host": "`+n.KafkaAddr()+`"`) {
		t.Fatalf("asyncapi --out: %v\n%s", err, b)
	}
}
