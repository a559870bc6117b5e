package main

import (
	"strings"
	"testing"

	"github.com/stele-io/stele/pkg/plugin"
)

// TestCheck: conforming values and tombstones pass unchanged; a value that
// does not conform, or is not JSON, rejects the batch naming the record;
// no schema, or one that does not compile, is an error.
func TestCheck(t *testing.T) {
	schema := `{"type":"object","required":["id"],"properties":{"id":{"type":"integer"},"qty":{"type":"integer","minimum":1}}}`
	run := func(cfg map[string]string, values ...string) ([]plugin.Record, error) {
		b := &plugin.Batch{Config: cfg}
		for _, v := range values {
			r := plugin.Record{Key: []byte("k")}
			if v != "<null>" {
				r.Value = []byte(v)
			}
			b.Records = append(b.Records, r)
		}
		return checkBatch(b)
	}
	recs, err := run(map[string]string{"schema": schema}, `{"id":1,"qty":2}`, "<null>", `{"id":2}`)
	if err != nil || len(recs) != 3 || string(recs[0].Value) != `{"id":1,"qty":2}` {
		t.Fatalf("conforming: %v %v", recs, err)
	}
	for _, c := range []struct{ value, want string }{
		{`{"qty":2}`, "record 1 does not conform"},
		{`{"id":"x"}`, "record 1 does not conform"},
		{`{"id":1,"qty":0}`, "record 1 does not conform"},
		{`not json`, "record 1 is not JSON"},
	} {
		if _, err := run(map[string]string{"schema": schema}, `{"id":1}`, c.value); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.value, err, c.want)
		}
	}
	if _, err := run(map[string]string{}, `{}`); err == nil || !strings.Contains(err.Error(), "no schema") {
		t.Errorf("no schema: %v", err)
	}
	if _, err := run(map[string]string{"schema": `{"type":7}`}, `{}`); err == nil || !strings.Contains(err.Error(), "does not compile") {
		t.Errorf("a bad schema: %v", err)
	}
}
