package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/stele-io/stele/internal/broker"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

const (
	orderV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"}]}`
	orderV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"qty","type":"int","default":1}]}`
	orderV3 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"price","type":"double"}]}`
)

// srCode is the registry error code of err (0 when it is none).
func srCode(err error) int {
	var re *sr.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return 0
}

// registryAt is a broker at app version v, its HTTP API served without
// security (closed when the test ends), and franz-go's registry client of
// it.
func registryAt(t *testing.T, v uint32) (*broker.Broker, *httptest.Server, *sr.Client) {
	t.Helper()
	b, reg := startBrokerAt(t, v)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	t.Cleanup(srv.Close)
	cl, err := sr.NewClient(sr.URLs(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	return b, srv, cl
}

// TestSchemaRegistryWithFranzGo (issue 22, docs/schemas.md): franz-go's
// schema registry client (pkg/sr), written for Confluent's registry, runs
// against a broker's registry: registration, lookups, versions, ids,
// compatibility levels and checks, modes, deletes, and the Confluent wire
// format a serde writes with the ids the registry gave.
func TestSchemaRegistryWithFranzGo(t *testing.T) {
	_, srv, cl := registryAt(t, fsm.SchemasVersion)
	ctx := context.Background()

	if types, err := cl.SupportedTypes(ctx); err != nil || !slices.Equal(types, []sr.SchemaType{sr.TypeAvro, sr.TypeJSON}) {
		t.Fatalf("types: %v %v", types, err)
	}
	s1, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: orderV1})
	if err != nil || s1.ID != 1 || s1.Version != 1 || s1.Subject != "orders-value" {
		t.Fatalf("v1: %+v %v", s1, err)
	}
	// Registering it again, spelled otherwise, answers the same id.
	if id, err := cl.RegisterSchema(ctx, "orders-value", sr.Schema{Schema: strings.ReplaceAll(orderV1, ",", ", ")}, -1, -1); err != nil || id != 1 {
		t.Fatalf("v1 again: %d %v", id, err)
	}
	if got, err := cl.LookupSchema(ctx, "orders-value", sr.Schema{Schema: orderV1}); err != nil || got.ID != 1 || got.Version != 1 {
		t.Fatalf("lookup: %+v %v", got, err)
	}
	if _, err := cl.LookupSchema(ctx, "orders-value", sr.Schema{Schema: orderV2}); srCode(err) != 40403 {
		t.Fatalf("lookup of an unregistered schema: %v", err)
	}
	if _, err := cl.LookupSchema(ctx, "nope", sr.Schema{Schema: orderV2}); srCode(err) != 40401 {
		t.Fatalf("lookup under an unknown subject: %v", err)
	}
	// The compatibility check first, then the registration.
	if r, err := cl.CheckCompatibility(ctx, "orders-value", -1, sr.Schema{Schema: orderV2}); err != nil || !r.Is {
		t.Fatalf("v2 compatible: %+v %v", r, err)
	}
	if r, err := cl.CheckCompatibility(ctx, "orders-value", -1, sr.Schema{Schema: orderV3}); err != nil || r.Is {
		t.Fatalf("v3 compatible: %+v %v", r, err)
	}
	s2, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: orderV2})
	if err != nil || s2.ID != 2 || s2.Version != 2 {
		t.Fatalf("v2: %+v %v", s2, err)
	}
	if _, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: orderV3}); srCode(err) != 409 {
		t.Fatalf("v3 under BACKWARD: %v", err)
	}
	if _, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: `{"type":"nonsense"}`}); srCode(err) != 42201 {
		t.Fatalf("not a schema: %v", err)
	}
	if _, err := cl.CreateSchema(ctx, "p", sr.Schema{Schema: `syntax = "proto3"; message M {}`, Type: sr.TypeProtobuf}); srCode(err) != 42201 {
		t.Fatalf("Protobuf: %v", err)
	}
	cl.DeleteSubject(ctx, "j", sr.SoftDelete)
	cl.DeleteSubject(ctx, "j", sr.HardDelete)

	// Levels: the global one, a subject's, and back.
	if r := cl.Compatibility(ctx); r[0].Err != nil || r[0].Level != sr.CompatBackward {
		t.Fatalf("global level: %+v", r[0])
	}
	if r := cl.Compatibility(ctx, "orders-value"); srCode(r[0].Err) != 40408 {
		t.Fatalf("subject level not set: %+v", r[0])
	}
	if r := cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatNone}, "orders-value"); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if r := cl.Compatibility(ctx, "orders-value"); r[0].Err != nil || r[0].Level != sr.CompatNone {
		t.Fatalf("subject level: %+v", r[0])
	}
	s3, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: orderV3})
	if err != nil || s3.Version != 3 {
		t.Fatalf("v3 under NONE: %+v %v", s3, err)
	}
	if r := cl.ResetCompatibility(ctx, "orders-value"); r[0].Err != nil || r[0].Level != sr.CompatNone {
		t.Fatalf("reset: %+v", r[0])
	}

	// Reads by subject and by id.
	if vs, err := cl.SubjectVersions(ctx, "orders-value"); err != nil || !slices.Equal(vs, []int{1, 2, 3}) {
		t.Fatalf("versions: %v %v", vs, err)
	}
	if got, err := cl.SchemaByVersion(ctx, "orders-value", -1); err != nil || got.ID != 3 || got.Schema.Schema != orderV3 {
		t.Fatalf("latest: %+v %v", got, err)
	}
	if got, err := cl.SchemaByID(ctx, 2); err != nil || got.Schema != orderV2 {
		t.Fatalf("by id: %+v %v", got, err)
	}
	if _, err := cl.SchemaByID(ctx, 99); srCode(err) != 40403 {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := cl.SchemaByVersion(ctx, "orders-value", 9); srCode(err) != 40402 {
		t.Fatalf("unknown version: %v", err)
	}
	cl.CreateSchema(ctx, "audit-value", sr.Schema{Schema: orderV1})
	if subs, err := cl.SubjectsByID(ctx, 1); err != nil || !slices.Equal(subs, []string{"audit-value", "orders-value"}) {
		t.Fatalf("subjects of id 1: %v %v", subs, err)
	}
	if subs, err := cl.Subjects(ctx); err != nil || !slices.Equal(subs, []string{"audit-value", "orders-value"}) {
		t.Fatalf("subjects: %v %v", subs, err)
	}

	// References: a cart names shop.Item, registered under "item".
	item := `{"type":"record","name":"Item","namespace":"shop","fields":[{"name":"sku","type":"string"}]}`
	cart := `{"type":"record","name":"Cart","namespace":"shop","fields":[{"name":"items","type":{"type":"array","items":"shop.Item"}}]}`
	si, err := cl.CreateSchema(ctx, "item", sr.Schema{Schema: item})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSchema(ctx, "cart", sr.Schema{Schema: cart}); srCode(err) != 42201 {
		t.Fatalf("a cart without its reference: %v", err)
	}
	sc, err := cl.CreateSchema(ctx, "cart", sr.Schema{Schema: cart, References: []sr.SchemaReference{{Name: "shop.Item", Subject: "item", Version: 1}}})
	if err != nil || len(sc.References) != 1 || sc.References[0].Subject != "item" {
		t.Fatalf("cart: %+v %v", sc, err)
	}
	if refs, err := cl.SchemaReferences(ctx, "item", 1); err != nil || len(refs) != 1 || refs[0].ID != sc.ID {
		t.Fatalf("referenced by: %+v %v", refs, err)
	}
	if err := cl.DeleteSchema(ctx, "item", 1, sr.SoftDelete); srCode(err) != 42206 {
		t.Fatalf("delete of a referenced version: %v", err)
	}
	_ = si
	// ?normalize=true stores the canonical form.
	spaced := "{ \"type\": \"record\", \"name\": \"N\", \"fields\": [ {\"name\": \"a\", \"type\": \"int\"} ] }"
	sn, err := cl.CreateSchema(sr.WithParams(ctx, sr.Normalize), "normal", sr.Schema{Schema: spaced})
	if err != nil || sn.Schema.Schema != `{"name":"N","type":"record","fields":[{"name":"a","type":"int"}]}` {
		t.Fatalf("normalized: %q %v", sn.Schema.Schema, err)
	}
	var prefixed []string
	getJSON(t, srv.URL+"/subjects?subjectPrefix=orders", &prefixed)
	if !slices.Equal(prefixed, []string{"orders-value"}) {
		t.Fatalf("subjects by prefix: %v", prefixed)
	}
	for _, s := range []string{"cart", "item", "normal"} {
		cl.DeleteSubject(ctx, s, sr.SoftDelete)
		cl.DeleteSubject(ctx, s, sr.HardDelete)
	}

	// A serde writes Confluent's wire format with the registry's id, and
	// reads it back.
	type order struct {
		ID   int64  `avro:"id"`
		Item string `avro:"item"`
		Qty  int32  `avro:"qty"`
	}
	parsed := avro.MustParse(orderV2)
	var serde sr.Serde
	serde.Register(s2.ID, order{}, sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(parsed, v) }),
		sr.DecodeFn(func(b []byte, v any) error { return avro.Unmarshal(parsed, b, v) }))
	wire, err := serde.Encode(order{ID: 7, Item: "tea", Qty: 2})
	if err != nil || wire[0] != 0 || wire[4] != 2 {
		t.Fatalf("wire format: % x %v", wire, err)
	}
	var back order
	if err := serde.Decode(wire, &back); err != nil || back != (order{ID: 7, Item: "tea", Qty: 2}) {
		t.Fatalf("decoded %+v %v", back, err)
	}

	// Modes.
	if r := cl.SetMode(ctx, sr.ModeReadOnly); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if _, err := cl.CreateSchema(ctx, "x", sr.Schema{Schema: orderV1}); srCode(err) != 42205 {
		t.Fatalf("register in READONLY: %v", err)
	}
	if r := cl.SetMode(ctx, sr.ModeImport); srCode(r[0].Err) != 42204 {
		t.Fatalf("IMPORT: %+v", r[0])
	}
	cl.SetMode(ctx, sr.ModeReadWrite)

	// Deletes, soft then hard.
	if err := cl.DeleteSchema(ctx, "orders-value", 3, sr.HardDelete); srCode(err) != 40407 {
		t.Fatalf("hard before soft: %v", err)
	}
	if err := cl.DeleteSchema(ctx, "orders-value", 3, sr.SoftDelete); err != nil {
		t.Fatal(err)
	}
	if vs, _ := cl.SubjectVersions(ctx, "orders-value"); !slices.Equal(vs, []int{1, 2}) {
		t.Fatalf("versions after a soft delete: %v", vs)
	}
	if vs, _ := cl.SubjectVersions(sr.WithParams(ctx, sr.ShowDeleted), "orders-value"); !slices.Equal(vs, []int{1, 2, 3}) {
		t.Fatalf("versions with deleted: %v", vs)
	}
	if vs, err := cl.DeleteSubject(ctx, "audit-value", sr.SoftDelete); err != nil || !slices.Equal(vs, []int{1}) {
		t.Fatalf("soft delete of a subject: %v %v", vs, err)
	}
	if _, err := cl.DeleteSubject(ctx, "audit-value", sr.SoftDelete); srCode(err) != 40404 {
		t.Fatalf("soft delete twice: %v", err)
	}
	if vs, err := cl.DeleteSubject(ctx, "audit-value", sr.HardDelete); err != nil || !slices.Equal(vs, []int{1}) {
		t.Fatalf("hard delete of a subject: %v %v", vs, err)
	}
	if subs, _ := cl.Subjects(sr.WithParams(ctx, sr.ShowDeleted)); !slices.Equal(subs, []string{"orders-value"}) {
		t.Fatalf("subjects after a hard delete: %v", subs)
	}
	// JSON Schema, with its own content-model rules: an optional property
	// added to a closed model is BACKWARD, to an open one is not.
	j1, err := cl.CreateSchema(ctx, "j", sr.Schema{Schema: `{"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":false}`, Type: sr.TypeJSON})
	if err != nil || j1.Type != sr.TypeJSON {
		t.Fatalf("JSON Schema: %+v %v", j1, err)
	}
	if _, err := cl.CreateSchema(ctx, "j", sr.Schema{Schema: `{"type":"object","properties":{"id":{"type":"integer"},"n":{"type":"string"}},"additionalProperties":false}`, Type: sr.TypeJSON}); err != nil {
		t.Fatalf("a property added to a closed model: %v", err)
	}
	if _, err := cl.CreateSchema(ctx, "j", sr.Schema{Schema: `{"type":"object","properties":{"id":{"type":"integer"},"n":{"type":"string"},"m":{"type":"string"}},"required":["m"]}`, Type: sr.TypeJSON}); srCode(err) != 409 {
		t.Fatalf("a required property added: %v", err)
	}
	if _, err := cl.CreateSchema(ctx, "j2", sr.Schema{Schema: `{"type":"object","properties":{"id":{"type":"integer"}}}`, Type: sr.TypeJSON}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSchema(ctx, "j2", sr.Schema{Schema: `{"type":"object","properties":{"id":{"type":"integer"},"n":{"type":"string"}}}`, Type: sr.TypeJSON}); srCode(err) != 409 {
		t.Fatalf("a property added to an open model: %v", err)
	}
	cl.DeleteSubject(ctx, "j2", sr.SoftDelete)
	cl.DeleteSubject(ctx, "j2", sr.HardDelete)
}

// TestSchemaRegistryErrors: what the routes answer to what a serializer
// would never send, in Confluent's error bodies.
func TestSchemaRegistryErrors(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.SchemasVersion)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	for _, c := range []struct {
		method, path, body string
		status, code       int
	}{
		{"POST", "/subjects/s/versions", `{`, 422, 422},
		{"POST", "/subjects/s/versions", `{"schema":""}`, 422, 42201},
		{"POST", "/subjects/s/versions", `{"schema":"{\"type\":\"int\"}","schemaType":"XML"}`, 422, 42201},
		{"GET", "/subjects/s/versions/zero", ``, 422, 42202},
		{"GET", "/subjects/s/versions/0", ``, 422, 42202},
		{"GET", "/subjects/s/versions/1", ``, 404, 40401},
		{"GET", "/schemas/ids/x", ``, 404, 40403},
		{"PUT", "/config", `{"compatibility":"SIDEWAYS"}`, 422, 42203},
		{"PUT", "/mode", `{"mode":"IMPORT"}`, 422, 42204},
		{"POST", "/subjects/s/versions", `{"schema":"\"int\"","id":7}`, 422, 42205},
		{"DELETE", "/config/s", ``, 404, 40408},
		{"POST", "/compatibility/subjects/s/versions/1", `{"schema":"{\"type\":\"int\"}"}`, 404, 40401},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e RegistryError
		decodeJSON(t, resp, &e)
		if resp.StatusCode != c.status || e.ErrorCode != c.code || e.Message == "" {
			t.Errorf("%s %s %s: %d %+v, want %d %d", c.method, c.path, c.body, resp.StatusCode, e, c.status, c.code)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	decodeJSON(t, resp, v)
}

// TestSchemaRoutesDocumented: docs/schemas.md lists every route of the
// registry.
func TestSchemaRoutesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/schemas.md")
	if err != nil {
		t.Fatal(err)
	}
	for pattern := range registryRoutes(Options{}) {
		if !strings.Contains(string(doc), "| `"+pattern+"` |") {
			t.Errorf("docs/schemas.md does not list %s", pattern)
		}
	}
}

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", resp.Request.URL, err)
	}
}

// TestSchemaRegistryTenantsAndACLs (docs/schemas.md "Tenants and
// authorization"): a tenant's user reaches its tenant's registry only, by
// the same routes, with DESCRIBE or ALTER on its tenant's cluster
// resource; the default tenant's users need them on the cluster.
func TestSchemaRegistryTenantsAndACLs(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	for _, c := range []fsm.Command{fsm.CreateTenant{Name: "acme"}} {
		if r, err := b.SubmitOne(context.Background(), c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	addUser(t, b, "alice@acme", "alice-pw")
	addUser(t, b, "bob@acme", "bob-pw")
	addUser(t, b, "carol", "carol-pw")
	addUser(t, b, "admin", "admin-pw")
	for _, c := range []fsm.Command{
		allow("User:alice@acme", fsm.ACLResourceCluster, fsm.TenantCluster("acme"), fsm.ACLOpAll),
		allow("User:bob@acme", fsm.ACLResourceCluster, fsm.TenantCluster("acme"), fsm.ACLOpDescribe),
		allow("User:carol", fsm.ACLResourceCluster, fsm.ClusterResourceName, fsm.ACLOpDescribe),
	} {
		if r, err := b.SubmitOne(context.Background(), c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg, Security: &Security{BasicOverPlaintext: true}}))
	defer srv.Close()
	client := func(user, pass string) *sr.Client {
		cl, err := sr.NewClient(sr.URLs(srv.URL), sr.BasicAuth(user, pass))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	ctx := context.Background()
	alice, bob, carol, admin := client("alice@acme", "alice-pw"), client("bob@acme", "bob-pw"), client("carol", "carol-pw"), client("admin", "admin-pw")

	if s, err := admin.CreateSchema(ctx, "orders-value", sr.Schema{Schema: orderV1}); err != nil || s.ID != 1 {
		t.Fatalf("the admin registers in the default tenant's registry: %+v %v", s, err)
	}
	if _, err := admin.CreateSchema(ctx, "audit-value", sr.Schema{Schema: orderV2}); err != nil {
		t.Fatal(err)
	}
	// alice's registry is acme's: its ids start at 1, its subjects are its own.
	s, err := alice.CreateSchema(ctx, "orders-value", sr.Schema{Schema: orderV3})
	if err != nil || s.ID != 1 || s.Version != 1 {
		t.Fatalf("alice registers in acme's registry: %+v %v", s, err)
	}
	if subs, err := alice.Subjects(ctx); err != nil || !slices.Equal(subs, []string{"orders-value"}) {
		t.Fatalf("alice's subjects: %v %v", subs, err)
	}
	if got, err := alice.SchemaByID(ctx, 1); err != nil || got.Schema != orderV3 {
		t.Fatalf("alice's id 1: %+v %v", got, err)
	}
	if _, err := alice.SchemaByID(ctx, 2); srCode(err) != 40403 {
		t.Fatalf("alice asks for the default tenant's id 2: %v", err)
	}
	if got, err := admin.SchemaByID(ctx, 1); err != nil || got.Schema != orderV1 {
		t.Fatalf("the default tenant's id 1: %+v %v", got, err)
	}
	if subs, _ := admin.Subjects(ctx); !slices.Equal(subs, []string{"audit-value", "orders-value"}) {
		t.Fatalf("the default tenant's subjects: %v", subs)
	}
	// bob reads acme's registry and changes nothing; carol reads the
	// default tenant's.
	if subs, err := bob.Subjects(ctx); err != nil || !slices.Equal(subs, []string{"orders-value"}) {
		t.Fatalf("bob's subjects: %v %v", subs, err)
	}
	var re *sr.ResponseError
	if _, err := bob.CreateSchema(ctx, "x", sr.Schema{Schema: orderV1}); !errors.As(err, &re) || re.StatusCode != http.StatusForbidden {
		t.Fatalf("bob registers: %v, want 403", err)
	}
	if _, err := carol.SchemaByID(ctx, 2); err != nil {
		t.Fatalf("carol reads: %v", err)
	}
	if err := carol.DeleteSchema(ctx, "audit-value", 1, sr.SoftDelete); !errors.As(err, &re) || re.StatusCode != http.StatusForbidden {
		t.Fatalf("carol deletes: %v, want 403", err)
	}
	if _, err := client("carol", "wrong").Subjects(ctx); !errors.As(err, &re) || re.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong password: %v, want 401", err)
	}

	// Subjects by their topics' ACLs (Confluent's Topic ACL Authorizer):
	// dave may READ orders and WRITE payments, erin (acme's) WRITE acme's
	// orders; none of them holds an ACL on a cluster resource.
	addUser(t, b, "dave", "dave-pw")
	addUser(t, b, "erin@acme", "erin-pw")
	for _, c := range []fsm.Command{
		allow("User:dave", fsm.ACLResourceTopic, "orders", fsm.ACLOpRead),
		allow("User:dave", fsm.ACLResourceTopic, "payments", fsm.ACLOpWrite),
		allow("User:erin@acme", fsm.ACLResourceTopic, "acme~orders", fsm.ACLOpWrite),
	} {
		if r, err := b.SubmitOne(context.Background(), c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	dave, erin := client("dave", "dave-pw"), client("erin@acme", "erin-pw")
	forbidden := func(what string, err error) {
		t.Helper()
		if !errors.As(err, &re) || re.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: %v, want 403", what, err)
		}
	}
	if subs, err := dave.Subjects(ctx); err != nil || !slices.Equal(subs, []string{"orders-value"}) {
		t.Fatalf("dave's subjects: %v %v", subs, err)
	}
	if vs, err := dave.SubjectVersions(ctx, "orders-value"); err != nil || !slices.Equal(vs, []int{1}) {
		t.Fatalf("dave reads orders-value: %v %v", vs, err)
	}
	if got, err := dave.SchemaByID(ctx, 1); err != nil || got.Schema != orderV1 {
		t.Fatalf("dave reads id 1 (orders-value's): %+v %v", got, err)
	}
	_, err = dave.SchemaByID(ctx, 2)
	forbidden("dave reads id 2 (audit-value's)", err)
	_, err = dave.SubjectVersions(ctx, "audit-value")
	forbidden("dave reads audit-value", err)
	_, err = dave.CreateSchema(ctx, "orders-value", sr.Schema{Schema: orderV2})
	forbidden("dave registers under orders-value (READ only)", err)
	if _, err := dave.CreateSchema(ctx, "payments-value", sr.Schema{Schema: orderV1}); err != nil {
		t.Fatalf("dave registers under payments-value: %v", err)
	}
	if r := dave.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatFull}, "payments-value"); r[0].Err != nil {
		t.Fatalf("dave sets payments-value's level: %v", r[0].Err)
	}
	forbidden("dave reads the registry's level", dave.Compatibility(ctx)[0].Err)
	forbidden("dave sets the registry's level", dave.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatNone})[0].Err)
	if s, err := erin.CreateSchema(ctx, "orders-value", sr.Schema{Schema: orderV3}); err != nil || s.ID != 1 {
		t.Fatalf("erin registers in acme's orders-value: %+v %v", s, err)
	}
	_, err = erin.CreateSchema(ctx, "payments-value", sr.Schema{Schema: orderV1})
	forbidden("erin registers under acme's payments-value", err)
	// WRITE implies DESCRIBE, which reads.
	if subs, err := erin.Subjects(ctx); err != nil || !slices.Equal(subs, []string{"orders-value"}) {
		t.Fatalf("erin lists: %v %v", subs, err)
	}
}

// TestTypedReads (docs/schemas.md "Typed reads"): GET
// /v1/topics/{topic}/records?format=json decodes the keys and values in
// Confluent's wire format with their registered schemas, every record
// read whether it has a subject or not, bytes kept; what does not decode
// says why.
func TestTypedReads(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.SchemasVersion)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	cl, _ := sr.NewClient(sr.URLs(srv.URL))
	ctx := context.Background()
	s2, err := cl.CreateSchema(ctx, "t-value", sr.Schema{Schema: orderV2})
	if err != nil {
		t.Fatal(err)
	}
	enc := func(v map[string]any) []byte {
		p, err := avro.Marshal(avro.MustParse(orderV2), v)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{0, 0, 0, 0, byte(s2.ID)}, p...)
	}
	recs := []record.Record{
		{Key: []byte("k1"), Value: enc(map[string]any{"id": int64(1), "item": "tea", "qty": 2})},
		{Key: []byte("k2"), Value: []byte("plain text")},
		{Key: []byte("k3"), Value: []byte{0, 0, 0, 0, 99, 1}},
		{Key: []byte("k4"), Value: append([]byte{0, 0, 0, 0, byte(s2.ID)}, 0xff)},
		{Key: []byte("k5"), Value: nil},
	}
	for i := range recs {
		recs[i].OffsetDelta = int32(i)
	}
	batch, err := record.Build(record.Header{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.SubmitOne(ctx, fsm.Produce{Topic: "t", Partition: 0, Records: batch}); err != nil || r.Code != 0 {
		t.Fatalf("produce: %v %+v", err, r)
	}
	var page SubjectRecordsPage
	getJSON(t, srv.URL+"/v1/topics/t/records?format=json", &page)
	if len(page.Records) != 5 {
		t.Fatalf("%d records: %+v", len(page.Records), page)
	}
	r0 := page.Records[0]
	if r0.ValueTyped == nil || r0.ValueTyped.SchemaID != int32(s2.ID) || string(r0.ValueTyped.JSON) != `{"id":1,"item":"tea","qty":2}` || r0.KeyTyped != nil {
		t.Fatalf("record 0: %+v %s", r0.ValueTyped, r0.ValueTyped.JSON)
	}
	if r0.Value == nil || len(*r0.Value) != len(recs[0].Value) {
		t.Fatal("record 0 lost its bytes")
	}
	if page.Records[1].ValueTyped != nil {
		t.Fatalf("plain text typed: %+v", page.Records[1].ValueTyped)
	}
	if v := page.Records[2].ValueTyped; v == nil || v.SchemaID != 99 || v.Error == "" {
		t.Fatalf("an unknown id: %+v", v)
	}
	if v := page.Records[3].ValueTyped; v == nil || !strings.Contains(v.Error, "does not decode") {
		t.Fatalf("an undecodable payload: %+v", v)
	}
	if page.Records[4].ValueTyped != nil || page.Records[4].Value != nil {
		t.Fatalf("a tombstone: %+v", page.Records[4])
	}
	// Without format=json, nothing is decoded.
	var plain SubjectRecordsPage
	getJSON(t, srv.URL+"/v1/topics/t/records", &plain)
	if len(plain.Records) != 5 || plain.Records[0].ValueTyped != nil {
		t.Fatalf("without format: %+v", plain.Records[0])
	}
}

// TestTypedReadsTenant: a tenant's user reads its topic typed with its
// tenant's registry; its records' data is left as written, even where it
// looks like a qualified name.
func TestTypedReadsTenant(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	ctx := context.Background()
	for _, c := range []fsm.Command{fsm.CreateTenant{Name: "acme"}, fsm.CreateTopic{Name: "acme~t", Partitions: 1, ReplicationFactor: -1}} {
		if r, err := b.SubmitOne(ctx, c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	addUser(t, b, "alice@acme", "alice-pw")
	for _, c := range []fsm.Command{
		fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: fsm.ACLResourceTopic, ResourceName: "acme~", PatternType: fsm.ACLPatternPrefixed,
			Principal: "User:alice@acme", Host: "*", Operation: fsm.ACLOpAll, Permission: fsm.ACLPermissionAllow}},
		allow("User:alice@acme", fsm.ACLResourceCluster, fsm.TenantCluster("acme"), fsm.ACLOpAll),
	} {
		if r, err := b.SubmitOne(ctx, c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg, Security: &Security{BasicOverPlaintext: true}}))
	defer srv.Close()
	cl, _ := sr.NewClient(sr.URLs(srv.URL), sr.BasicAuth("alice@acme", "alice-pw"))
	s, err := cl.CreateSchema(ctx, "t-value", sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"object","properties":{"topic":{"type":"string"}}}`})
	if err != nil {
		t.Fatal(err)
	}
	batch, _ := record.Build(record.Header{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]record.Record{{Value: append([]byte{0, 0, 0, 0, byte(s.ID)}, `{"topic":"acme~x"}`...)}})
	if r, err := b.SubmitOne(ctx, fsm.Produce{Topic: "acme~t", Partition: 0, Records: batch}); err != nil || r.Code != 0 {
		t.Fatalf("produce: %v %+v", err, r)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/v1/topics/t/records?format=json", nil)
	req.SetBasicAuth("alice@acme", "alice-pw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var page SubjectRecordsPage
	decodeJSON(t, resp, &page)
	if page.Topic != "t" || len(page.Records) != 1 || page.Records[0].ValueTyped == nil || string(page.Records[0].ValueTyped.JSON) != `{"topic":"acme~x"}` {
		t.Fatalf("alice's typed read: %+v", page)
	}
}
