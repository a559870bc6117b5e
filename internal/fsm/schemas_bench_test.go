package fsm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/schema"
)

// benchOrder is a 1 KiB Avro record: a long, a few strings, a map and an
// array, as an order event might be.
const benchOrder = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"id","type":"long"},{"name":"customer","type":"string"},{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID","SHIPPED"]}},
	{"name":"note","type":["null","string"],"default":null},{"name":"tags","type":{"type":"map","values":"string"}},
	{"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[{"name":"sku","type":"string"},{"name":"qty","type":"int"},{"name":"price","type":"double"}]}}}]}`

type benchLine struct {
	SKU   string  `avro:"sku"`
	Qty   int32   `avro:"qty"`
	Price float64 `avro:"price"`
}

type benchOrderT struct {
	ID       int64             `avro:"id"`
	Customer string            `avro:"customer"`
	Status   string            `avro:"status"`
	Note     *string           `avro:"note"`
	Tags     map[string]string `avro:"tags"`
	Lines    []benchLine       `avro:"lines"`
}

// benchOrderValue is order i in Confluent's wire format with schema id 1,
// 1 KiB or a little more.
func benchOrderValue(tb testing.TB, i int) []byte {
	note := strings.Repeat("n", 200)
	o := benchOrderT{ID: int64(i), Customer: fmt.Sprintf("customer-%06d", i%5000), Status: "PAID", Note: &note,
		Tags: map[string]string{"channel": "web", "region": "eu-west"}}
	for l := range 35 {
		o.Lines = append(o.Lines, benchLine{SKU: fmt.Sprintf("sku-%08d", (i+l)%100000), Qty: int32(l + 1), Price: 9.99})
	}
	b, err := avro.Marshal(avro.MustParse(benchOrder), o)
	if err != nil {
		tb.Fatal(err)
	}
	return append(schema.AppendWire(nil, 1), b...)
}

// benchProtoOrder is benchOrder as a Protobuf message.
const benchProtoOrder = `syntax = "proto3"; package shop;
message Order {
  int64 id = 1; string customer = 2; Status status = 3; optional string note = 4; map<string, string> tags = 5;
  message Line { string sku = 1; int32 qty = 2; double price = 3; }
  repeated Line lines = 6;
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
}`

// benchProtoOrderValue is order i as benchProtoOrder's message in
// Confluent's wire format with schema id 1 (message indexes [0]).
func benchProtoOrderValue(tb testing.TB, s *schema.Schema, i int) []byte {
	md := s.Proto().Messages().ByName("Order")
	ld := md.Messages().ByName("Line")
	m := dynamicpb.NewMessage(md)
	fs := md.Fields()
	m.Set(fs.ByName("id"), protoreflect.ValueOfInt64(int64(i)))
	m.Set(fs.ByName("customer"), protoreflect.ValueOfString(fmt.Sprintf("customer-%06d", i%5000)))
	m.Set(fs.ByName("status"), protoreflect.ValueOfEnum(1))
	m.Set(fs.ByName("note"), protoreflect.ValueOfString(strings.Repeat("n", 200)))
	tags := m.Mutable(fs.ByName("tags")).Map()
	tags.Set(protoreflect.ValueOfString("channel").MapKey(), protoreflect.ValueOfString("web"))
	tags.Set(protoreflect.ValueOfString("region").MapKey(), protoreflect.ValueOfString("eu-west"))
	lines := m.Mutable(fs.ByName("lines")).List()
	for l := range 35 {
		lm := dynamicpb.NewMessage(ld)
		lm.Set(ld.Fields().ByName("sku"), protoreflect.ValueOfString(fmt.Sprintf("sku-%08d", (i+l)%100000)))
		lm.Set(ld.Fields().ByName("qty"), protoreflect.ValueOfInt32(int32(l+1)))
		lm.Set(ld.Fields().ByName("price"), protoreflect.ValueOfFloat64(9.99))
		lines.Append(protoreflect.ValueOfMessage(lm))
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return append(schema.AppendProtoIndexes(schema.AppendWire(nil, 1), []int{0}), b...)
}

// BenchmarkProduceValidation: records applied and committed per second,
// 100 per batch, 1 KiB Avro values in Confluent's wire format, with
// stele.value.schema.validation none, id and full (docs/schemas.md) — the
// cost of validation on the produce path — and the same order as a
// Protobuf message under id and full.
func BenchmarkProduceValidation(b *testing.B) {
	values := make([][]byte, 1000)
	for i := range values {
		values[i] = benchOrderValue(b, i)
	}
	ps, err := schema.Parse(schema.Def{Type: schema.TypeProtobuf, Text: benchProtoOrder}, nil)
	if err != nil {
		b.Fatal(err)
	}
	protoValues := make([][]byte, 1000)
	for i := range protoValues {
		protoValues[i] = benchProtoOrderValue(b, ps, i)
	}
	b.Logf("value size: %d bytes (Avro), %d bytes (Protobuf)", len(values[0]), len(protoValues[0]))
	for _, level := range []string{"none", "id", "full", "protobuf-id", "protobuf-full"} {
		b.Run(level, func(b *testing.B) {
			reg, values := RegisterSchema{Subject: "sb-value", Text: benchOrder}, values
			if l, ok := strings.CutPrefix(level, "protobuf-"); ok {
				level, values = l, protoValues
				reg.Type, reg.Text = schema.TypeProtobuf, benchProtoOrder
			}
			f, h := subjectBenchFSM(b, topics.ConfigEntry{Name: "stele.value.schema.validation", Value: level})
			h++
			out, err := f.ApplyBlock(core.Block{Height: h, TimeMs: t0, Txs: [][]byte{tx(0, reg)}})
			if err != nil || out.Txs[0].Results[0].Code != 0 {
				b.Fatalf("register: %v %+v", err, out)
			}
			if _, err := f.Commit(); err != nil {
				b.Fatal(err)
			}
			records := 10_000 * b.N
			took := subjectBenchBlocks(b, f, records, &h, func(i int) record.Record {
				return record.Record{Key: fmt.Appendf(nil, "k-%d", i%1000), Value: values[i%len(values)]}
			})
			b.ReportMetric(float64(records)/took.Seconds(), "records/s")
			b.ReportMetric(float64(records*len(values[0]))/took.Seconds()/1e6, "MB/s")
		})
	}
}
