package main

import (
	"strings"
	"testing"

	"github.com/stele-io/stele/pkg/plugin"
)

// TestRedact: fields removed or masked, nested ones by their paths,
// members kept in order; a tombstone kept; a value that is not a JSON
// object rejects the batch unless non_json=keep; no fields is an error.
func TestRedact(t *testing.T) {
	value := `{"id": 7, "card": "4111 1111", "customer": {"name": "Ada", "ssn": "123"}, "note": {"ssn": "keep"}, "amount": 12.50}`
	run := func(cfg map[string]string, values ...string) ([]string, error) {
		b := &plugin.Batch{Config: cfg}
		for _, v := range values {
			r := plugin.Record{Key: []byte("k")}
			if v != "<null>" {
				r.Value = []byte(v)
			}
			b.Records = append(b.Records, r)
		}
		recs, err := redactBatch(b)
		var out []string
		for _, r := range recs {
			if r.Value == nil {
				out = append(out, "<null>")
				continue
			}
			out = append(out, string(r.Value))
		}
		return out, err
	}
	got, err := run(map[string]string{"fields": "card, customer.ssn"}, value, "<null>")
	if err != nil || got[0] != `{"id":7,"customer":{"name":"Ada"},"note":{"ssn":"keep"},"amount":12.50}` || got[1] != "<null>" {
		t.Fatalf("removed: %q %v", got, err)
	}
	got, err = run(map[string]string{"fields": "card,customer.ssn", "mask": "***"}, value)
	if err != nil || got[0] != `{"id":7,"card":"***","customer":{"name":"Ada","ssn":"***"},"note":{"ssn":"keep"},"amount":12.50}` {
		t.Fatalf("masked: %q %v", got, err)
	}
	if _, err := run(map[string]string{"fields": "card"}, value, "plain text"); err == nil || !strings.Contains(err.Error(), "record 1") {
		t.Fatalf("a value that is not JSON: %v", err)
	}
	if got, err := run(map[string]string{"fields": "card", "non_json": "keep"}, "plain text", "[1]"); err != nil || got[0] != "plain text" || got[1] != "[1]" {
		t.Fatalf("non_json=keep: %q %v", got, err)
	}
	if _, err := run(map[string]string{}, value); err == nil {
		t.Fatal("no fields: no error")
	}
}
