package kafka

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

// liesBatches builds three uncompressed batches of three records each at
// offsets 0-8, values "v0".."v8".
func liesBatches(t *testing.T, codec int16) []byte {
	t.Helper()
	var out []byte
	for b := range 3 {
		var recs []record.Record
		for k := range 3 {
			recs = append(recs, record.Record{OffsetDelta: int32(k), Value: []byte(fmt.Sprintf("v%d", 3*b+k))})
		}
		batch, err := record.Build(record.Header{BaseOffset: int64(3 * b), Attributes: codec, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, batch...)
	}
	return out
}

// liesRead decodes data as franz-go does (CRCs checked) into "offset:value".
func liesRead(t *testing.T, data []byte) []string {
	t.Helper()
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.HighWatermark, rp.RecordBatches = 1<<40, data
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: "t", Offset: 0}, &rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		t.Fatalf("the client refuses the forged answer: %v", fp.Err)
	}
	var out []string
	for _, r := range fp.Records {
		out = append(out, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	return out
}

// TestLies: every Fetch lie of the byzantine build gives an answer a Kafka
// client accepts (valid CRCs, compressed or not) and that says something
// else than the truth, in the way its name says.
func TestLies(t *testing.T) {
	for _, codec := range []int16{0, 2} { // none, snappy
		truth := liesBatches(t, codec)
		honest := liesRead(t, truth)
		cases := []struct {
			lie  string
			want []string
		}{
			{lieAlterRecords, append([]string{"0:forged:v0"}, honest[1:]...)},
			{lieReorderRecords, append([]string{"0:v1", "1:v0"}, honest[2:]...)},
			{lieDropBatch, append(append([]string{}, honest[:3]...), honest[6:]...)},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/codec%d", c.lie, codec), func(t *testing.T) {
				data, hwm := lieAboutFetch(lies(c.lie), bytes.Clone(truth), 9)
				if hwm != 9 {
					t.Errorf("high watermark %d, want 9 (not this lie)", hwm)
				}
				if got := liesRead(t, data); fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Errorf("read %v\nwant %v", got, c.want)
				}
			})
		}
	}
	if _, hwm := lieAboutFetch(lies("forge-watermark"), nil, 9); hwm != 1009 {
		t.Errorf("forged high watermark %d, want 1009", hwm)
	}
	if data, hwm := lieAboutFetch(lies("no-such-lie,sign-without-storing"), liesBatches(t, 0), 9); !bytes.Equal(data, liesBatches(t, 0)) || hwm != 9 {
		t.Error("modes this front-end does not know changed the answer")
	}
}

// TestRewriteTenantLie: rewrite-tenant=globex moves every tenant's name
// of the commands into globex and leaves the default tenant's and
// globex's own; the lie is parsed only with a valid tenant name.
func TestRewriteTenantLie(t *testing.T) {
	set := lies("forge-admin,rewrite-tenant=globex,rewrite-tenant=Bad")
	if !set[lieForgeAdmin] || rewriteTarget(set) != "globex" || len(set) != 2 {
		t.Fatalf("lies parsed %v", set)
	}
	in := []fsm.Command{
		fsm.Produce{Topic: "acme~orders", Partition: 3},
		fsm.Produce{Topic: "orders"},
		fsm.CreateTopic{Name: "initech~t", Partitions: 2},
		fsm.OffsetCommit{Group: "acme~billing", Topic: "globex~orders", Offset: 7},
	}
	out := rewriteTenant(in, "globex")
	want := []fsm.Command{
		fsm.Produce{Topic: "globex~orders", Partition: 3},
		fsm.Produce{Topic: "orders"},
		fsm.CreateTopic{Name: "globex~t", Partitions: 2},
		fsm.OffsetCommit{Group: "globex~billing", Topic: "globex~orders", Offset: 7},
	}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("rewritten %+v, want %+v", out, want)
	}
	if in[0].(fsm.Produce).Topic != "acme~orders" {
		t.Fatal("the lie changed the commands it was given")
	}
}
