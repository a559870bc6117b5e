package fsm

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/pokt-network/smt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/schemas"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/schema"
	"github.com/stele-io/stele/internal/subject"
	"github.com/stele-io/stele/pkg/proof"
)

const (
	avroV1      = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"}]}`
	avroV1Space = "{ \"type\": \"record\", \"name\": \"Order\", \"namespace\": \"shop\",\n  \"fields\": [ {\"type\": \"long\", \"name\": \"id\"} ] }"
	// avroV2 adds a field with a default: readers of v2 read v1's data.
	avroV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"note","type":"string","default":""}]}`
	// avroV3 adds a field without a default: not BACKWARD compatible.
	avroV3   = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"}]}`
	avroItem = `{"type":"record","name":"Item","namespace":"shop","fields":[{"name":"sku","type":"string"}]}`
	// avroCart references shop.Item, registered under subject "item".
	avroCart = `{"type":"record","name":"Cart","namespace":"shop","fields":[{"name":"items","type":{"type":"array","items":"shop.Item"}}]}`
)

// schemaCode fails the test unless r has Kafka code code and registry
// error code ec.
func schemaCode(t *testing.T, what string, r core.Result, code int16, ec int32) *core.SchemaResult {
	t.Helper()
	if r.Code != code || r.Schema == nil || r.Schema.ErrorCode != ec {
		t.Fatalf("%s: code %d registry code %+v (%s), want %d / %d", what, r.Code, r.Schema, r.Message, code, ec)
	}
	return r.Schema
}

// TestSchemaRegistry (issue 22, docs/schemas.md): the registry's commands
// as Confluent's Schema Registry answers them, applied by two machines
// that must agree on every result, state root and app hash, and by a
// third opened again from the first's store.
func TestSchemaRegistry(t *testing.T) {
	var fs []*FSM
	for range 2 {
		f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	closed := false
	defer func() {
		if !closed {
			fs[0].Close()
		}
		fs[1].Close()
	}()
	run := oneCommandBlocks(t, fs...)
	ok := func(what string, c core.Command) *core.SchemaResult {
		t.Helper()
		return schemaCode(t, what, run(c), 0, 0)
	}
	reg := func(subject, text string, refs ...schema.Ref) RegisterSchema {
		return RegisterSchema{Subject: subject, Text: text, Refs: refs}
	}

	if r := ok("v1", reg("orders-value", avroV1)); r.ID != 1 || r.Version != 1 {
		t.Fatalf("v1: %+v", r)
	}
	// The same schema spelled otherwise is the same schema: no new version.
	if r := ok("v1 again", reg("orders-value", avroV1Space)); r.ID != 1 || r.Version != 1 {
		t.Fatalf("v1 again: %+v", r)
	}
	if r := ok("v2", reg("orders-value", avroV2)); r.ID != 2 || r.Version != 2 {
		t.Fatalf("v2: %+v", r)
	}
	schemaCode(t, "v3 under BACKWARD", run(reg("orders-value", avroV3)), kerr.InvalidRecord.Code, schemas.ErrIncompatible)
	schemaCode(t, "not Avro", run(reg("orders-value", `{"type":"recrod"}`)), kerr.InvalidRecord.Code, schemas.ErrInvalidSchema)
	schemaCode(t, "not Protobuf", run(RegisterSchema{Subject: "p", Type: "PROTOBUF", Text: `syntax = "proto3"; message {`}), kerr.InvalidRecord.Code, schemas.ErrInvalidSchema)
	schemaCode(t, "bad level", run(SetSchemaConfig{Level: "SIDEWAYS"}), kerr.InvalidRequest.Code, schemas.ErrInvalidLevel)
	ok("subject NONE", SetSchemaConfig{Subject: "orders-value", Level: schema.None})
	if r := ok("v3 under NONE", reg("orders-value", avroV3)); r.ID != 3 || r.Version != 3 {
		t.Fatalf("v3: %+v", r)
	}
	// The same schema under another subject keeps its id.
	if r := ok("v1 elsewhere", reg("audit-value", avroV1)); r.ID != 1 || r.Version != 1 {
		t.Fatalf("v1 under audit-value: %+v", r)
	}
	// References: the cart names shop.Item through subject item.
	ok("item", reg("item", avroItem))
	schemaCode(t, "cart without its reference", run(reg("cart", avroCart)), kerr.InvalidRecord.Code, schemas.ErrInvalidSchema)
	if r := ok("cart", reg("cart", avroCart, schema.Ref{Name: "shop.Item", Subject: "item", Version: 1})); r.ID != 5 {
		t.Fatalf("cart: %+v", r)
	}
	// A version another schema references cannot be deleted (as
	// Confluent's registry, softly or not) until the referrer is gone.
	schemaCode(t, "delete of a referenced version", run(DeleteSchemaVersion{Subject: "item", Version: 1}), kerr.InvalidRequest.Code, schemas.ErrReferenceExists)
	ok("soft delete cart", DeleteSchemaSubject{Subject: "cart"})
	schemaCode(t, "delete of a version a soft-deleted schema references", run(DeleteSchemaVersion{Subject: "item", Version: 1}), kerr.InvalidRequest.Code, schemas.ErrReferenceExists)
	ok("hard delete cart", DeleteSchemaSubject{Subject: "cart", Permanent: true})
	ok("soft delete item", DeleteSchemaVersion{Subject: "item", Version: 1})

	// Deletes: soft, then hard; a hard delete needs a soft one first.
	schemaCode(t, "hard before soft", run(DeleteSchemaVersion{Subject: "orders-value", Version: 3, Permanent: true}), kerr.InvalidRequest.Code, schemas.ErrVersionNotSoftDeleted)
	if r := ok("soft delete latest", DeleteSchemaVersion{Subject: "orders-value", Version: SchemaLatest}); r.Version != 3 {
		t.Fatalf("soft delete latest: %+v", r)
	}
	schemaCode(t, "soft twice", run(DeleteSchemaVersion{Subject: "orders-value", Version: 3}), kerr.InvalidRequest.Code, schemas.ErrVersionSoftDeleted)
	ok("hard delete 3", DeleteSchemaVersion{Subject: "orders-value", Version: 3, Permanent: true})
	schemaCode(t, "gone", run(DeleteSchemaVersion{Subject: "orders-value", Version: 3}), kerr.ResourceNotFound.Code, schemas.ErrVersionNotFound)
	schemaCode(t, "no subject", run(DeleteSchemaSubject{Subject: "nope"}), kerr.ResourceNotFound.Code, schemas.ErrSubjectNotFound)
	if r := ok("soft delete audit", DeleteSchemaSubject{Subject: "audit-value"}); !slices.Equal(r.Versions, []int32{1}) {
		t.Fatalf("soft delete audit: %+v", r)
	}
	ok("hard delete audit", DeleteSchemaSubject{Subject: "audit-value", Permanent: true})

	// READONLY refuses changes of schemas, not of the mode.
	ok("readonly", SetSchemaMode{Mode: schemas.ModeReadOnly})
	schemaCode(t, "register in READONLY", run(reg("x", avroItem)), kerr.InvalidRequest.Code, schemas.ErrOperationNotPermitted)
	schemaCode(t, "delete in READONLY", run(DeleteSchemaSubject{Subject: "orders-value"}), kerr.InvalidRequest.Code, schemas.ErrOperationNotPermitted)
	ok("a level in READONLY", SetSchemaConfig{Level: schema.Full})
	ok("and back", SetSchemaConfig{Remove: true})
	ok("readwrite", SetSchemaMode{Mode: schemas.ModeReadWrite})

	// A tenant's registry is its own: it needs the tenant, and its ids
	// start at 1.
	schemaCode(t, "no such tenant", run(RegisterSchema{Tenant: "acme", Subject: "s", Text: avroItem}), kerr.InvalidRequest.Code, schemas.ErrInvalidSubject)
	if r := run(CreateTenant{Name: "acme"}); r.Code != 0 {
		t.Fatal(r.Message)
	}
	if r := ok("tenant's first", RegisterSchema{Tenant: "acme", Subject: "orders-value", Text: avroV3}); r.ID != 1 || r.Version != 1 {
		t.Fatalf("acme's first schema: %+v", r)
	}

	for _, f := range fs {
		v := f.SchemasView().Tenant("")
		if got := v.Subjects(false); !slices.Equal(got, []string{"orders-value"}) {
			t.Fatalf("subjects: %v", got)
		}
		if got := v.Subjects(true); !slices.Equal(got, []string{"item", "orders-value"}) {
			t.Fatalf("subjects with deleted: %v", got)
		}
		if got := v.IDs(); !slices.Equal(got, []int32{1, 2, 4}) {
			t.Fatalf("ids: %v (3 and 5 went with their last versions)", got)
		}
		if _, st, ok := v.Version("orders-value", SchemaLatest, false); !ok || st.ID != 2 || st.Text != avroV2 {
			t.Fatalf("latest of orders-value: %+v", st)
		}
		p, err := schema.Parse(schema.Def{Text: avroV1Space}, v.Resolver())
		if err != nil {
			t.Fatal(err)
		}
		if ver, _, ok := v.Lookup("orders-value", p, false); !ok || ver.Version != 1 {
			t.Fatalf("lookup of v1: %+v %v", ver, ok)
		}
		if a := f.SchemasView().Tenant("acme"); !slices.Equal(a.Subjects(false), []string{"orders-value"}) {
			t.Fatalf("acme's subjects: %v", a.Subjects(false))
		}
	}
	// A schema is proven like any state (issue 10): its key's value in a
	// proof against the app hash, as pkg/proof reads it.
	if got, want := proof.SchemaKey("acme", 1), schemas.SchemaKey("acme", 1); !bytes.Equal(got, want) {
		t.Fatalf("proof.SchemaKey %q, store %q", got, want)
	}
	p, err := fs[1].ProveState(proof.SchemaKey("", 2))
	if err != nil {
		t.Fatal(err)
	}
	if _, appHash := fs[1].Info(); !bytes.Equal(proof.AppHash(p.Digest, p.StateRoot, p.LeavesRoot), appHash) {
		t.Fatal("the proof's parts do not hash to the app hash")
	}
	spec := smt.NewTrieSpec(sha256.New(), false)
	e := p.Entries[0]
	if ok, err := smt.VerifyProof(&smt.SparseMerkleProof{SideNodes: e.SideNodes, NonMembershipLeafData: e.NonMembershipLeafData}, p.StateRoot, proof.SchemaKey("", 2), trieLeaf(e.Value), &spec); err != nil || !ok {
		t.Fatalf("the schema's proof does not verify: %v", err)
	}
	if s, err := proof.DecodeSchema(e.Value); err != nil || s.Type != "AVRO" || s.Text != avroV2 {
		t.Fatalf("proven schema %+v, %v", s, err)
	}

	h0, hash0 := fs[0].Info()
	if h1, hash1 := fs[1].Info(); h0 != h1 || string(hash0) != string(hash1) {
		t.Fatalf("app hashes differ at heights %d and %d", h0, h1)
	}

	// Deleting the tenant removes its registry and counts its schemas.
	r := run(DeleteTenant{Name: "acme"})
	if r.Code != 0 || !slices.Contains(r.Counts, core.Count{What: "schemas", N: 1}) {
		t.Fatalf("delete tenant: %+v", r)
	}

	// What a restart reads back is what was published.
	dir := fs[0].opts.Dir
	before := fs[0].SchemasView()
	fs[0].Close()
	closed = true
	g, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	after := g.SchemasView()
	for _, tenant := range []string{"", "acme"} {
		b, a := before.Tenant(tenant), after.Tenant(tenant)
		if !slices.Equal(a.Subjects(true), b.Subjects(true)) || !slices.Equal(a.IDs(), b.IDs()) || a.EffectiveLevel("orders-value") != b.EffectiveLevel("orders-value") {
			t.Fatalf("tenant %q after a restart: subjects %v ids %v, before %v %v", tenant, a.Subjects(true), a.IDs(), b.Subjects(true), b.IDs())
		}
	}
	if n := len(after.Tenant("acme").IDs()); n != 0 {
		t.Fatalf("the deleted tenant's registry holds %d schemas", n)
	}
	// Ids are never given again, after a restart too.
	if r := schemaCode(t, "after a restart", oneCommandBlocks(t, g)(RegisterSchema{Subject: "new", Text: avroV3}), 0, 0); r.ID != 6 {
		t.Fatalf("a new schema after a restart: %+v, want id 6", r)
	}
}

// TestSchemasBeforeVersion13: under app version 12 the registry's commands
// are refused, as the binaries before it refuse an unknown command's work.
func TestSchemasBeforeVersion13(t *testing.T) {
	f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: 12})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	run := oneCommandBlocks(t, f)
	schemaCode(t, "register under 12", run(RegisterSchema{Subject: "s", Text: avroItem}), kerr.UnsupportedVersion.Code, schemas.ErrOperationNotPermitted)
}

// TestProtobufBeforeVersion14: under app version 13 a Protobuf schema is
// refused as an invalid schema, as version 13's binaries refuse it; Avro
// is taken.
func TestProtobufBeforeVersion14(t *testing.T) {
	f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: 13})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	run := oneCommandBlocks(t, f)
	schemaCode(t, "Protobuf under 13", run(RegisterSchema{Subject: "p", Type: "PROTOBUF", Text: protoOrder}), kerr.InvalidRecord.Code, schemas.ErrInvalidSchema)
	if r := run(RegisterSchema{Subject: "a", Text: avroItem}); r.Code != 0 {
		t.Fatalf("Avro under 13: %+v", r)
	}
}

// newestMachines are n state machines at the newest app version, closed
// when the test ends.
func newestMachines(t *testing.T, n int) []*FSM {
	t.Helper()
	var fs []*FSM
	for range n {
		f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fs = append(fs, f)
	}
	return fs
}

// wireBatch is a batch of records with keys and values as given (nil:
// null), timestamps t0.
func wireBatch(t *testing.T, kvs ...[]byte) []byte {
	t.Helper()
	var recs []record.Record
	for i := 0; i < len(kvs); i += 2 {
		recs = append(recs, record.Record{OffsetDelta: int32(i / 2), Key: kvs[i], Value: kvs[i+1]})
	}
	b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// avroWire is v encoded with text's schema, in Confluent's wire format
// with id.
func avroWire(t *testing.T, id int32, text string, v any) []byte {
	t.Helper()
	b, err := avro.Marshal(avro.MustParse(text), v)
	if err != nil {
		t.Fatal(err)
	}
	return append(schema.AppendWire(nil, id), b...)
}

// TestSchemaValidation (docs/schemas.md "Validation on produce"): a topic
// that validates takes a batch only when every record's value (or key) is
// in Confluent's wire format with an id registered under its subject, and
// under full also decodes with that schema; otherwise the batch is refused
// whole with INVALID_RECORD, each failing record listed, and nothing is
// written. Two machines agree on every verdict and on the app hash.
func TestSchemaValidation(t *testing.T) {
	fs := newestMachines(t, 2)
	run := oneCommandBlocks(t, fs...)
	must := func(what string, r core.Result, code int16) core.Result {
		t.Helper()
		if r.Code != code {
			t.Fatalf("%s: code %d (%s), want %d", what, r.Code, r.Message, code)
		}
		return r
	}
	must("ids", run(topics.CreateTopic{Name: "ids", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.value.schema.validation", Value: "id"}}}), 0)
	must("full", run(topics.CreateTopic{Name: "full", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{
		{Name: "stele.value.schema.validation", Value: "full"},
		{Name: "stele.key.schema.validation", Value: "id"}, {Name: "stele.key.subject.name.strategy", Value: "io.confluent.kafka.serializers.subject.RecordNameStrategy"}}}), 0)
	must("bad strategy", run(topics.CreateTopic{Name: "x", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.value.subject.name.strategy", Value: "Whatever"}}}), kerr.InvalidConfig.Code)
	must("bad level", run(topics.CreateTopic{Name: "x", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.value.schema.validation", Value: "some"}}}), kerr.InvalidConfig.Code)
	must("ids-value", run(RegisterSchema{Subject: "ids-value", Text: avroV1}), 0)   // id 1
	must("full-value", run(RegisterSchema{Subject: "full-value", Text: avroV2}), 0) // id 2
	must("key", run(RegisterSchema{Subject: "shop.Item", Text: avroItem}), 0)       // id 3

	type order struct {
		ID   int64  `avro:"id"`
		Note string `avro:"note"`
	}
	v1 := avroWire(t, 1, avroV1, order{ID: 1})
	v2 := avroWire(t, 2, avroV2, order{ID: 2, Note: "n"})
	key := avroWire(t, 3, avroItem, map[string]any{"sku": "tea"})
	produce := func(topic string, kvs ...[]byte) core.Result {
		return run(topics.Produce{Topic: topic, Partition: 0, Records: wireBatch(t, kvs...)})
	}

	must("valid ids", produce("ids", nil, v1, nil, nil, []byte("k"), avroWire(t, 1, avroV1, order{ID: 9})), 0)
	r := must("a wrong id and bytes", produce("ids", nil, v1, nil, v2, nil, []byte("plain"), nil, append(schema.AppendWire(nil, 77), 1)), kerr.InvalidRecord.Code)
	if len(r.RecordErrors) != 3 || r.RecordErrors[0].Index != 1 || r.RecordErrors[1].Index != 2 || r.RecordErrors[2].Index != 3 ||
		!strings.Contains(r.RecordErrors[0].Message, `not registered under subject "ids-value"`) ||
		!strings.Contains(r.RecordErrors[1].Message, "wire format") || !strings.Contains(r.RecordErrors[2].Message, "id 77 is not registered") {
		t.Fatalf("record errors: %+v", r.RecordErrors)
	}
	// id accepts any payload after a registered id; full decodes it.
	must("id takes an undecodable payload", produce("ids", nil, append(schema.AppendWire(nil, 1), 0xff)), 0)
	must("valid full", produce("full", key, v2, key, nil), 0)
	r = must("undecodable under full", produce("full", key, append(schema.AppendWire(nil, 2), 0x02)), kerr.InvalidRecord.Code)
	if len(r.RecordErrors) != 1 || !strings.Contains(r.RecordErrors[0].Message, "does not decode with schema id 2") {
		t.Fatalf("record errors: %+v", r.RecordErrors)
	}
	r = must("a key by RecordNameStrategy", produce("full", v2, v2), kerr.InvalidRecord.Code)
	if len(r.RecordErrors) != 1 || !strings.Contains(r.RecordErrors[0].Message, `key's schema id 2 is not registered under subject "shop.Order"`) {
		t.Fatalf("record errors: %+v", r.RecordErrors)
	}
	// Nothing of a refused batch was written.
	for _, f := range fs {
		if hw := f.View().Partition("ids", 0).HighWatermark(); hw != 4 {
			t.Fatalf("ids holds %d records, want 4", hw)
		}
		if hw := f.View().Partition("full", 0).HighWatermark(); hw != 2 {
			t.Fatalf("full holds %d records, want 2", hw)
		}
	}
	// A soft-deleted version's id is refused; the validation off takes it.
	must("soft delete", run(DeleteSchemaVersion{Subject: "ids-value", Version: 1}), 0)
	must("a deleted version's id", produce("ids", nil, v1), kerr.InvalidRecord.Code)
	must("validation off", run(topics.AlterConfigs{Topic: "ids", Incremental: true, Changes: []topics.ConfigChange{{Name: "stele.value.schema.validation", Op: topics.OpDelete}}}), 0)
	must("validation off: anything", produce("ids", nil, []byte("plain")), 0)

	// A tenant's topic validates against its tenant's registry, by its
	// short name.
	must("tenant", run(CreateTenant{Name: "acme"}), 0)
	must("acme~ids", run(topics.CreateTopic{Name: "acme~ids", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.value.schema.validation", Value: "full"}}}), 0)
	must("the default tenant's id 2 in acme", produce("acme~ids", nil, v2), kerr.InvalidRecord.Code)
	must("acme's schema", run(RegisterSchema{Tenant: "acme", Subject: "ids-value", Text: avroV2}), 0) // acme's id 1
	must("acme's id 1", produce("acme~ids", nil, avroWire(t, 1, avroV2, order{ID: 3})), 0)

	h0, hash0 := fs[0].Info()
	if h1, hash1 := fs[1].Info(); h0 != h1 || !bytes.Equal(hash0, hash1) {
		t.Fatal("the machines' app hashes differ")
	}
}

// TestSchemaValidationJSON: under full, a JSON Schema's payload is one
// JSON value valid under it; RecordNameStrategy names the subject by the
// schema's title.
func TestSchemaValidationJSON(t *testing.T) {
	f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	run := oneCommandBlocks(t, f)
	for _, c := range []core.Command{
		topics.CreateTopic{Name: "events", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{
			{Name: "stele.value.schema.validation", Value: "full"}, {Name: "stele.value.subject.name.strategy", Value: "RecordNameStrategy"}}},
		RegisterSchema{Subject: "shop.Event", Type: "JSON", Text: `{"title":"shop.Event","type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}`},
	} {
		if r := run(c); r.Code != 0 {
			t.Fatalf("%T: %s", c, r.Message)
		}
	}
	wire := func(s string) []byte { return append(schema.AppendWire(nil, 1), s...) }
	if r := run(topics.Produce{Topic: "events", Partition: 0, Records: wireBatch(t, nil, wire(`{"id": 7}`))}); r.Code != 0 {
		t.Fatalf("a valid event: %s", r.Message)
	}
	r := run(topics.Produce{Topic: "events", Partition: 0, Records: wireBatch(t, nil, wire(`{"id": 7}`), nil, wire(`{"id": "x"}`), nil, wire(`{"id": 8`))})
	if r.Code != kerr.InvalidRecord.Code || len(r.RecordErrors) != 2 || r.RecordErrors[0].Index != 1 || r.RecordErrors[1].Index != 2 {
		t.Fatalf("invalid events: %d %+v", r.Code, r.RecordErrors)
	}
}

// protoOrder is a Protobuf schema with a nested message.
const protoOrder = `syntax = "proto3"; package shop; message Order { int64 id = 1; string note = 2; message Line { string sku = 1; } } message Refund { int64 order_id = 1; }`

// TestSchemaValidationProtobuf: a Protobuf value's id is followed by
// message indexes naming one of its schema's messages (under id and
// full); under full the message decodes; RecordNameStrategy names the
// subject by the message the indexes name. Two machines agree.
func TestSchemaValidationProtobuf(t *testing.T) {
	fs := newestMachines(t, 2)
	run := oneCommandBlocks(t, fs...)
	for _, c := range []core.Command{
		topics.CreateTopic{Name: "ids", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.value.schema.validation", Value: "id"}}},
		topics.CreateTopic{Name: "full", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{
			{Name: "stele.value.schema.validation", Value: "full"}, {Name: "stele.value.subject.name.strategy", Value: "RecordNameStrategy"}}},
		RegisterSchema{Subject: "ids-value", Type: "PROTOBUF", Text: protoOrder},       // id 1
		RegisterSchema{Subject: "shop.Order.Line", Type: "PROTOBUF", Text: protoOrder}, // id 1 again
	} {
		if r := run(c); r.Code != 0 {
			t.Fatalf("%T: %s", c, r.Message)
		}
	}
	wire := func(idx []int, msg ...byte) []byte {
		return append(schema.AppendProtoIndexes(schema.AppendWire(nil, 1), idx), msg...)
	}
	order := wire([]int{0}, 0x08, 7, 0x12, 2, 'h', 'i') // id 7, note "hi"
	line := wire([]int{0, 0}, 0x0a, 1, 'x')             // sku "x"
	produce := func(topic string, vs ...[]byte) core.Result {
		var kvs [][]byte
		for _, v := range vs {
			kvs = append(kvs, nil, v)
		}
		return run(topics.Produce{Topic: topic, Partition: 0, Records: wireBatch(t, kvs...)})
	}
	if r := produce("ids", order, line, wire([]int{1}, 0xff)); r.Code != 0 {
		t.Fatalf("id: valid indexes, any message: %s", r.Message)
	}
	r := produce("ids", order, wire([]int{2}), append(schema.AppendWire(nil, 1), 0x03))
	if r.Code != kerr.InvalidRecord.Code || len(r.RecordErrors) != 2 || r.RecordErrors[0].Index != 1 || r.RecordErrors[1].Index != 2 ||
		!strings.Contains(r.RecordErrors[0].Message, "message indexes") {
		t.Fatalf("indexes naming no message: %d %+v", r.Code, r.RecordErrors)
	}
	if r := produce("full", line); r.Code != 0 {
		t.Fatalf("full: Order.Line under subject shop.Order.Line: %s", r.Message)
	}
	r = produce("full", line, order, wire([]int{0, 0}, 0x0a, 5, 'x'))
	if r.Code != kerr.InvalidRecord.Code || len(r.RecordErrors) != 2 ||
		!strings.Contains(r.RecordErrors[0].Message, `not registered under subject "shop.Order"`) ||
		!strings.Contains(r.RecordErrors[1].Message, "does not decode") {
		t.Fatalf("full: %d %+v", r.Code, r.RecordErrors)
	}
	h0, hash0 := fs[0].Info()
	if h1, hash1 := fs[1].Info(); h0 != h1 || !bytes.Equal(hash0, hash1) {
		t.Fatal("the machines' app hashes differ")
	}
}

// TestSubjectFromField (docs/subjects.md, stele.subject.from=field:PATH):
// a record's subject is the string at a field of its schema-encoded value,
// whatever the schema's format (Avro, JSON Schema, Protobuf); a value
// without it is refused where the topic requires a subject; reads by
// subject and views find the same subjects; under app version 13 the rule
// is refused as version 13's binaries refuse it. Two machines agree.
func TestSubjectFromField(t *testing.T) {
	old := func() *FSM {
		f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: 13})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}()
	field := []topics.ConfigEntry{{Name: "stele.subject.from", Value: "field:customer.region"}, {Name: "stele.subject.required", Value: "true"}}
	if r := oneCommandBlocks(t, old)(topics.CreateTopic{Name: "events", Partitions: 1, ReplicationFactor: -1, Configs: field}); r.Code != kerr.InvalidConfig.Code {
		t.Fatalf("field: under version 13: %d %s", r.Code, r.Message)
	}

	fs := newestMachines(t, 2)
	run := oneCommandBlocks(t, fs...)
	const (
		avroEvent = `{"type":"record","name":"Event","fields":[{"name":"id","type":"long"},
			{"name":"customer","type":["null",{"type":"record","name":"Customer","fields":[{"name":"region","type":"string"}]}]}]}`
		jsonEvent  = `{"type":"object","properties":{"customer":{"type":"object","properties":{"region":{"type":"string"}}}}}`
		protoEvent = `syntax = "proto3"; message Event { int64 id = 1; Customer customer = 2; } message Customer { string region = 1; }`
	)
	for _, c := range []core.Command{
		topics.CreateTopic{Name: "events", Partitions: 1, ReplicationFactor: -1, Configs: field},
		topics.CreateTopic{Name: "eu", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{
			{Name: "stele.view.from", Value: "events"}, {Name: "stele.view.subject", Value: "eu.>"}}},
		RegisterSchema{Subject: "a", Text: avroEvent},                    // id 1
		RegisterSchema{Subject: "j", Type: "JSON", Text: jsonEvent},      // id 2
		RegisterSchema{Subject: "p", Type: "PROTOBUF", Text: protoEvent}, // id 3
	} {
		if r := run(c); r.Code != 0 {
			t.Fatalf("%T: %s", c, r.Message)
		}
	}
	type customer struct {
		Region string `avro:"region"`
	}
	type event struct {
		ID       int64     `avro:"id"`
		Customer *customer `avro:"customer"`
	}
	avroValue := func(region *string) []byte {
		v := event{ID: 1}
		if region != nil {
			v.Customer = &customer{Region: *region}
		}
		b, err := avro.Marshal(avro.MustParse(avroEvent), v)
		if err != nil {
			t.Fatal(err)
		}
		return append(schema.AppendWire(nil, 1), b...)
	}
	ptr := func(s string) *string { return &s }
	jsonValue := append(schema.AppendWire(nil, 2), `{"customer":{"region":"us.ny"}}`...)
	// Event{id: 1, customer: {region: "eu.de"}}, indexes [0].
	protoValue := append(schema.AppendProtoIndexes(schema.AppendWire(nil, 3), []int{0}), 0x08, 1, 0x12, 7, 0x0a, 5, 'e', 'u', '.', 'd', 'e')
	produce := func(vs ...[]byte) core.Result {
		var kvs [][]byte
		for _, v := range vs {
			kvs = append(kvs, nil, v)
		}
		return run(topics.Produce{Topic: "events", Partition: 0, Records: wireBatch(t, kvs...)})
	}
	if r := produce(avroValue(ptr("eu.fr")), jsonValue, protoValue); r.Code != 0 {
		t.Fatalf("subjects from fields: %s", r.Message)
	}
	r := produce(avroValue(ptr("eu.it")), avroValue(nil), []byte(`{"customer":{"region":"eu.es"}}`), avroValue(ptr("eu..x")))
	if r.Code != kerr.InvalidRecord.Code || len(r.RecordErrors) != 3 || r.RecordErrors[0].Index != 1 ||
		!strings.Contains(r.RecordErrors[0].Message, "no string at field customer.region") ||
		!strings.Contains(r.RecordErrors[1].Message, "no subject at field customer.region") {
		t.Fatalf("values without a subject: %d %+v", r.Code, r.RecordErrors)
	}
	for i, f := range fs {
		if got, _ := readSubjects(t, f, "events", anyPattern(t), 0, 10); !slices.Equal(got, []string{"0/0=eu.fr", "0/1=us.ny", "0/2=eu.de"}) {
			t.Fatalf("machine %d reads by subject: %v", i, got)
		}
		if got, _ := readSubjects(t, f, "eu", anyPattern(t), 0, 10); !slices.Equal(got, []string{"0/0=eu.fr", "0/1=eu.de"}) {
			t.Fatalf("machine %d's view: %v", i, got)
		}
	}
	h0, hash0 := fs[0].Info()
	if h1, hash1 := fs[1].Info(); h0 != h1 || !bytes.Equal(hash0, hash1) {
		t.Fatal("the machines' app hashes differ")
	}
}

// anyPattern is the pattern every subject matches.
func anyPattern(t *testing.T) subject.Pattern {
	t.Helper()
	p, err := subject.ParsePattern(">")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
