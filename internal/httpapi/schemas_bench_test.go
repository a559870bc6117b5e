package httpapi

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/stele-io/stele/internal/fsm"
)

// BenchmarkRegistryLookups: registry requests answered per second by one
// broker over loopback HTTP, from franz-go's registry client with 8
// requests in flight: a schema by id (what a deserializer asks once per
// id) and a lookup of a schema under its subject (what a serializer asks
// once per schema; the broker parses the schema to find its canonical
// form). 100 subjects of 3 versions each.
func BenchmarkRegistryLookups(b *testing.B) {
	br, reg := startBrokerAt(b, fsm.SchemasVersion)
	srv := httptest.NewServer(New(Options{Broker: br, Gatherer: reg}))
	defer srv.Close()
	cl, err := sr.NewClient(sr.URLs(srv.URL))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	text := func(s, v int) string {
		f := ""
		for k := range v {
			f += fmt.Sprintf(`,{"name":"f%d","type":"string","default":""}`, k)
		}
		return fmt.Sprintf(`{"type":"record","name":"R%d","namespace":"bench","fields":[{"name":"id","type":"long"}%s]}`, s, f)
	}
	for s := range 100 {
		for v := range 3 {
			if _, err := cl.RegisterSchema(ctx, fmt.Sprintf("s%d-value", s), sr.Schema{Schema: text(s, v)}, -1, -1); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("by-id", func(b *testing.B) {
		var n atomic.Int64
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				id := int(n.Add(1)%300) + 1
				if _, err := cl.SchemaByID(ctx, id); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	})
	b.Run("lookup", func(b *testing.B) {
		var n atomic.Int64
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := int(n.Add(1))
				s, v := i%100, i%3
				if _, err := cl.LookupSchema(ctx, fmt.Sprintf("s%d-value", s), sr.Schema{Schema: text(s, v)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	})
}
