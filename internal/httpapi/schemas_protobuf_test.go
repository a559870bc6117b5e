package httpapi

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/schema"
)

const (
	protoMoney = `syntax = "proto3";
package common;
message Money { int64 cents = 1; string currency = 2; }
`
	protoOrderV1 = `syntax = "proto3";
package shop;
import "common/money.proto";
message Order {
  string id = 1;
  common.Money total = 2;
  message Line { string sku = 1; int32 qty = 2; }
  repeated Line lines = 3;
}
`
)

var (
	// protoOrderV2 adds a field: compatible both ways.
	protoOrderV2 = strings.Replace(protoOrderV1, "  repeated Line lines = 3;\n", "  repeated Line lines = 3;\n  string note = 4;\n", 1)
	// protoOrderV3 makes qty a sint32, which encodes otherwise.
	protoOrderV3 = strings.Replace(protoOrderV1, "int32 qty", "sint32 qty", 1)
)

// TestSchemaRegistryProtobufWithFranzGo (docs/schemas.md): franz-go's
// registry client registers Protobuf schemas with a reference (an
// import), the registry checks their compatibility by Confluent's
// Protobuf rules, franz-go's Serde writes messages (with their message
// indexes) that a validating topic takes under full, and the topic reads
// back typed as Protobuf's JSON mapping.
func TestSchemaRegistryProtobufWithFranzGo(t *testing.T) {
	b, srv, cl := registryAt(t, fsm.MaxAppVersion)
	ctx := context.Background()
	if types, err := cl.SupportedTypes(ctx); err != nil || len(types) != 3 || !slices.Contains(types, sr.TypeProtobuf) {
		t.Fatalf("types: %v %v", types, err)
	}
	money, err := cl.CreateSchema(ctx, "common/money.proto", sr.Schema{Type: sr.TypeProtobuf, Schema: protoMoney})
	if err != nil {
		t.Fatal(err)
	}
	ref := []sr.SchemaReference{{Name: "common/money.proto", Subject: "common/money.proto", Version: money.Version}}
	if _, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Type: sr.TypeProtobuf, Schema: protoOrderV1}); srCode(err) != 42201 {
		t.Fatalf("an import without its reference: %v", err)
	}
	v1, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Type: sr.TypeProtobuf, Schema: protoOrderV1, References: ref})
	if err != nil || v1.Version != 1 {
		t.Fatalf("v1: %+v %v", v1, err)
	}
	// The same file laid out otherwise is the same schema.
	if id, err := cl.RegisterSchema(ctx, "orders-value", sr.Schema{Type: sr.TypeProtobuf, Schema: "// the order\n" + strings.ReplaceAll(protoOrderV1, "\n", "\n\n"), References: ref}, -1, -1); err != nil || id != v1.ID {
		t.Fatalf("v1 again: %d %v", id, err)
	}
	if r, err := cl.CheckCompatibility(ctx, "orders-value", -1, sr.Schema{Type: sr.TypeProtobuf, Schema: protoOrderV3, References: ref}); err != nil || r.Is {
		t.Fatalf("v3 compatible: %+v %v", r, err)
	}
	if _, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Type: sr.TypeProtobuf, Schema: protoOrderV3, References: ref}); srCode(err) != 409 {
		t.Fatalf("v3 under BACKWARD: %v", err)
	}
	v2, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Type: sr.TypeProtobuf, Schema: protoOrderV2, References: ref})
	if err != nil || v2.Version != 2 {
		t.Fatalf("v2: %+v %v", v2, err)
	}
	if got, err := cl.SchemaByID(ctx, v2.ID); err != nil || got.Type != sr.TypeProtobuf || got.Schema != protoOrderV2 || len(got.References) != 1 {
		t.Fatalf("by id: %+v %v", got, err)
	}

	// franz-go's Serde writes an Order.Line (indexes [0 0]) and an Order.
	parsed, err := schema.Parse(schema.Def{Type: schema.TypeProtobuf, Text: protoOrderV2,
		Refs: []schema.Ref{{Name: "common/money.proto", Subject: "common/money.proto", Version: int32(money.Version)}}},
		func(string, int32) (schema.Def, bool) {
			return schema.Def{Type: schema.TypeProtobuf, Text: protoMoney}, true
		})
	if err != nil {
		t.Fatal(err)
	}
	orderD := parsed.Proto().Messages().ByName("Order")
	lineD := orderD.Messages().ByName("Line")
	type line struct{ *dynamicpb.Message }
	marshal := func(v any) ([]byte, error) {
		if l, ok := v.(line); ok {
			return proto.Marshal(l.Message)
		}
		return proto.Marshal(v.(*dynamicpb.Message))
	}
	var serde sr.Serde
	serde.Register(v2.ID, &dynamicpb.Message{}, sr.EncodeFn(marshal), sr.Index(0))
	serde.Register(v2.ID, line{}, sr.EncodeFn(marshal), sr.Index(0, 0))
	order := dynamicpb.NewMessage(orderD)
	order.Set(orderD.Fields().ByName("id"), protoreflect.ValueOfString("o-1"))
	order.Set(orderD.Fields().ByName("note"), protoreflect.ValueOfString("gift"))
	l := dynamicpb.NewMessage(lineD)
	l.Set(lineD.Fields().ByName("sku"), protoreflect.ValueOfString("tea"))
	l.Set(lineD.Fields().ByName("qty"), protoreflect.ValueOfInt32(2))
	orderBytes, err := serde.Encode(order)
	if err != nil {
		t.Fatal(err)
	}
	lineBytes, err := serde.Encode(line{l})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []fsm.Command{
		fsm.CreateTopic{Name: "orders", Partitions: 1, ReplicationFactor: -1, Configs: []fsm.ConfigEntry{{Name: "stele.value.schema.validation", Value: "full"}}},
	} {
		if r, err := b.SubmitOne(ctx, c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	produce := func(values ...[]byte) fsm.Result {
		var recs []record.Record
		for i, v := range values {
			recs = append(recs, record.Record{OffsetDelta: int32(i), Value: v})
		}
		batch, err := record.Build(record.Header{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		r, err := b.SubmitOne(ctx, fsm.Produce{Topic: "orders", Partition: 0, Records: batch})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := produce(orderBytes, lineBytes); r.Code != 0 {
		t.Fatalf("franz-go's messages: %+v", r)
	}
	bad := slices.Clone(orderBytes)
	bad[len(bad)-1] ^= 0x80 // the note's last byte: not UTF-8
	if r := produce(bad); r.Code != kerr.InvalidRecord.Code || len(r.RecordErrors) != 1 || !strings.Contains(r.RecordErrors[0].Message, "does not decode") {
		t.Fatalf("a broken message: %+v", r)
	}
	var page SubjectRecordsPage
	getJSON(t, srv.URL+"/v1/topics/orders/records?format=json", &page)
	if len(page.Records) != 2 {
		t.Fatalf("%d records", len(page.Records))
	}
	if v := page.Records[0].ValueTyped; v == nil || string(v.JSON) != `{"id":"o-1","note":"gift"}` {
		t.Fatalf("the order typed: %+v", v)
	}
	if v := page.Records[1].ValueTyped; v == nil || string(v.JSON) != `{"sku":"tea","qty":2}` {
		t.Fatalf("the line typed: %+v", v)
	}
}
