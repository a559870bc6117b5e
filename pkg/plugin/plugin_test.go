package plugin

import (
	"errors"
	"testing"

	"github.com/stele-io/stele/pkg/plugin/wire"
)

// TestRunProduce: the SDK's side of a call, outside WebAssembly (the
// broker's runtime tests run it inside, internal/plugin): no hook, an
// input it cannot read, a hook's error and a hook's records.
func TestRunProduce(t *testing.T) {
	defer func() { produce = nil }()
	in := wire.AppendInput(nil, wire.Input{Config: []wire.Config{{Key: "x", Value: "1"}}, Topic: "t", Records: []wire.Record{{Key: []byte("k"), Value: []byte("v")}}})
	decode := func(b []byte) wire.Output {
		t.Helper()
		out, err := wire.DecodeOutput(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := decode(runProduce(in)); !out.Reject || out.Message != "the plugin has no produce hook" {
		t.Fatalf("no hook: %+v", out)
	}
	HandleProduce(func(b *Batch) ([]Record, error) {
		if b.Config["x"] != "1" || b.Topic != "t" {
			return nil, errors.New("wrong batch")
		}
		return append(b.Records, Record{Key: []byte("added")}), nil
	})
	if out := decode(runProduce([]byte{1, 2})); !out.Reject {
		t.Fatalf("a bad input: %+v", out)
	}
	if out := decode(runProduce(in)); out.Reject || len(out.Records) != 2 || string(out.Records[1].Key) != "added" {
		t.Fatalf("records: %+v", out)
	}
	HandleProduce(func(*Batch) ([]Record, error) { return nil, errors.New("no") })
	if out := decode(runProduce(in)); !out.Reject || out.Message != "no" {
		t.Fatalf("an error: %+v", out)
	}
	HandleProduce(func(*Batch) ([]Record, error) { return nil, nil })
	if out := decode(runProduce(in)); out.Reject || len(out.Records) != 0 {
		t.Fatalf("all filtered: %+v", out)
	}
}

// TestRunFetch: the same of the fetch hook, the principal and offsets
// passed through.
func TestRunFetch(t *testing.T) {
	defer func() { fetch = nil }()
	in := wire.AppendFetchInput(nil, wire.FetchInput{Config: []wire.Config{{Key: "x", Value: "1"}}, Topic: "t", Principal: "User:alice",
		Records: []wire.FetchRecord{{Offset: 7, Record: wire.Record{Value: []byte("a")}}, {Offset: 9, Record: wire.Record{Value: []byte("b")}}}})
	decode := func(b []byte) wire.FetchOutput {
		t.Helper()
		out, err := wire.DecodeFetchOutput(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := decode(runFetch(in)); !out.Reject || out.Message != "the plugin has no fetch hook" {
		t.Fatalf("no hook: %+v", out)
	}
	HandleFetch(func(b *FetchBatch) ([]FetchRecord, error) {
		if b.Config["x"] != "1" || b.Principal != "User:alice" {
			return nil, errors.New("wrong batch")
		}
		return b.Records[1:], nil
	})
	if out := decode(runFetch([]byte{1, 2})); !out.Reject {
		t.Fatalf("a bad input: %+v", out)
	}
	if out := decode(runFetch(in)); out.Reject || len(out.Records) != 1 || out.Records[0].Offset != 9 {
		t.Fatalf("records: %+v", out)
	}
	HandleFetch(func(*FetchBatch) ([]FetchRecord, error) { return nil, errors.New("no") })
	if out := decode(runFetch(in)); !out.Reject || out.Message != "no" {
		t.Fatalf("an error: %+v", out)
	}
}
