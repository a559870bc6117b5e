package plugin

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/plugin/plugintest"
	"github.com/stele-io/stele/pkg/plugin/wire"
)

// guest is testdata/guest built with the SDK.
func guest(t testing.TB) []byte { return plugintest.Guest(t) }

func compiled(t *testing.T, lim Limits) *Module {
	t.Helper()
	m, err := Compile(context.Background(), guest(t), lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

func batch(mode string, keys ...string) wire.Input {
	in := wire.Input{Config: []wire.Config{{Key: "mode", Value: mode}, {Key: "suffix", Value: "!"}}, Topic: "orders", Partition: 1}
	for i, k := range keys {
		in.Records = append(in.Records, wire.Record{Timestamp: int64(i), Key: []byte(k), Value: []byte("v-" + k)})
	}
	return in
}

// TestProduceHook: a plugin built with the SDK transforms and filters a
// batch, or rejects it with its message; it answers the same records, to
// the byte, and uses the same fuel on two modules compiled apart and on
// every call, though it reads the clock and draws random numbers.
func TestProduceHook(t *testing.T) {
	ctx := context.Background()
	a, b := compiled(t, DefaultLimits), compiled(t, DefaultLimits)
	out, st, err := a.Produce(ctx, batch("upper", "k1", "drop", "k2"))
	if err != nil || out.Reject || len(out.Records) != 2 || string(out.Records[0].Value) != "V-K1!" || string(out.Records[1].Value) != "V-K2!" {
		t.Fatalf("upper: %+v %v", out, err)
	}
	t.Logf("a call of two records used %d fuel after a start of %d; the module is %d bytes, its memory after the start %d bytes",
		st.Fuel, a.warm.startFuel, len(guest(t)), len(a.warm.savedMem))
	for _, m := range []*Module{a, b} {
		again, st2, err := m.Produce(ctx, batch("upper", "k1", "drop", "k2"))
		if err != nil || !reflect.DeepEqual(again, out) || st2 != st {
			t.Fatalf("a second call: %+v (%+v) %v, the first %+v (%+v)", again, st2, err, out, st)
		}
	}
	rej, _, err := a.Produce(ctx, batch("upper", "k1", "bad"))
	if err != nil || !rej.Reject || rej.Message != "a record keyed bad" {
		t.Fatalf("bad: %+v %v", rej, err)
	}
}

// TestHostileModules: a hook that never returns runs out of fuel, one
// that allocates without end out of memory, one that panics traps; each
// is an error, and the module serves the next call. What is not a plugin
// is refused when compiled.
func TestHostileModules(t *testing.T) {
	ctx := context.Background()
	m := compiled(t, Limits{Fuel: 200_000_000, MemoryPages: 512, HostImports: true})
	if _, st, err := m.Produce(ctx, batch("spin", "k")); !errors.Is(err, ErrFuel) || st.Fuel <= 200_000_000 {
		t.Fatalf("spin: %v, %d fuel", err, st.Fuel)
	}
	if _, _, err := m.Produce(ctx, batch("hog", "k")); !errors.Is(err, ErrTrap) || errors.Is(err, ErrFuel) {
		t.Fatalf("hog: %v", err)
	} else {
		t.Logf("hog: %v", err)
	}
	if _, _, err := m.Produce(ctx, batch("panic", "k")); !errors.Is(err, ErrTrap) || errors.Is(err, ErrFuel) {
		t.Fatalf("panic: %v", err)
	}
	if out, _, err := m.Produce(ctx, batch("upper", "k")); err != nil || len(out.Records) != 1 {
		t.Fatalf("after them: %+v %v", out, err)
	}
	for name, w := range map[string][]byte{
		"not wasm":   []byte("hello"),
		"no exports": []byte("\x00asm\x01\x00\x00\x00"),
	} {
		if _, err := Compile(ctx, w, DefaultLimits); !errors.Is(err, ErrModule) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A module importing what is not WASI: env.now.
	imp := []byte("\x00asm\x01\x00\x00\x00" + "\x01\x04\x01\x60\x00\x00" + "\x02\x0b\x01\x03env\x03now\x00\x00")
	if _, err := Compile(ctx, imp, DefaultLimits); !errors.Is(err, ErrModule) || !strings.Contains(err.Error(), "env.now") {
		t.Errorf("an env import: %v", err)
	}
}

// BenchmarkProduceHook: one call of the SDK's produce hook on a batch of
// ten records, from the started instance restored (kept) and, the peer,
// on a new instance for each call (new).
func BenchmarkProduceHook(b *testing.B) {
	for _, fresh := range []bool{false, true} {
		name := "kept"
		if fresh {
			name = "new"
		}
		b.Run(name, func(b *testing.B) {
			m, err := Compile(context.Background(), guest(b), DefaultLimits)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			m.fresh = fresh
			in := batch("upper", "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9")
			b.ResetTimer()
			for range b.N {
				if _, _, err := m.Produce(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCallsStartFromTheSameState: a module that keeps its started
// instance and restores it before each call answers every call of a
// sequence (transforms, a call that grows the memory, one that panics,
// one that runs out of fuel) as a module that starts a new instance for
// each call does, to the byte, with the same fuel: nothing a call leaves
// reaches the next, so a broker that restarted answers as the others.
func TestCallsStartFromTheSameState(t *testing.T) {
	ctx := context.Background()
	lim := Limits{Fuel: 100_000_000, MemoryPages: 1024, HostImports: true}
	warm, fresh := compiled(t, lim), compiled(t, lim)
	fresh.fresh = true
	seq := []wire.Input{
		batch("upper", "k1", "k2"), batch("upper", "k1", "k2"), batch("grow", "k3"), batch("upper", "k1", "k2"),
		batch("panic", "k"), batch("upper", "k4"), batch("spin", "k"), batch("upper", "k1", "k2"),
	}
	for i, in := range seq {
		o1, s1, e1 := warm.Produce(ctx, in)
		o2, s2, e2 := fresh.Produce(ctx, in)
		if !reflect.DeepEqual(o1, o2) || s1 != s2 || (e1 == nil) != (e2 == nil) || errors.Is(e1, ErrFuel) != errors.Is(e2, ErrFuel) {
			t.Fatalf("call %d (%s): kept instance %+v %+v %v; new instance %+v %+v %v", i, in.Config[0].Value, o1, s1, e1, o2, s2, e2)
		}
	}
}

// TestExampleRedact: examples/plugins/redact, built for wasip1 as its
// comment says and run by the runtime, redacts a batch's JSON values
// (its own tests cover its rules) and rejects one it cannot redact.
func TestExampleRedact(t *testing.T) {
	w := buildRedact(t)
	ctx := context.Background()
	m, err := Compile(ctx, w, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	in := wire.Input{Config: []wire.Config{{Key: "fields", Value: "card"}, {Key: "mask", Value: "XXXX"}}, Topic: "payments",
		Records: []wire.Record{{Key: []byte("p1"), Value: []byte(`{"card": "4111", "amount": 3}`)}, {Key: []byte("p2"), Value: nil}}}
	res, st, err := m.Produce(ctx, in)
	if err != nil || res.Reject || len(res.Records) != 2 || string(res.Records[0].Value) != `{"card":"XXXX","amount":3}` || res.Records[1].Value != nil {
		t.Fatalf("redact: %+v %v", res, err)
	}
	t.Logf("redacting two records used %d fuel", st.Fuel)
	in.Records = append(in.Records, wire.Record{Key: []byte("p3"), Value: []byte("not json")})
	if res, _, err := m.Produce(ctx, in); err != nil || !res.Reject || !strings.Contains(res.Message, "record 2") {
		t.Fatalf("a value that is not JSON: %+v %v", res, err)
	}
}

// buildRedact builds examples/plugins/redact with the SDK.
func buildRedact(t testing.TB) []byte { return plugintest.Example(t, "redact") }

// buildExample builds examples/plugins/name with the SDK.
func buildExample(t testing.TB, name string) []byte { return plugintest.Example(t, name) }

// TestExampleJSONSchemaCheck: the jsonschema-check example, built with the
// SDK, passes a batch whose values conform and rejects one with a value
// that does not, within the budget the brokers give it.
func TestExampleJSONSchemaCheck(t *testing.T) {
	ctx := context.Background()
	m, err := Compile(ctx, buildExample(t, "jsonschema-check"), Limits{Fuel: 100_000_000, FuelPerRecord: 5_000_000, StartFuel: 1_000_000_000, MemoryPages: 1024, HostImports: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	in := wire.Input{Config: []wire.Config{{Key: "schema", Value: `{"type":"object","required":["id"],"properties":{"id":{"type":"integer"}}}`}}, Topic: "orders",
		Records: []wire.Record{{Value: []byte(`{"id":1}`)}, {Value: nil}, {Value: []byte(`{"id":2,"note":"x"}`)}}}
	out, st, err := m.Produce(ctx, in)
	if err != nil || out.Reject || len(out.Records) != 3 {
		t.Fatalf("conforming: %+v %v", out, err)
	}
	t.Logf("checking three records used %d fuel after a start of %d", st.Fuel, m.warm.startFuel)
	in.Records = append(in.Records, wire.Record{Value: []byte(`{"id":"three"}`)})
	if out, _, err := m.Produce(ctx, in); err != nil || !out.Reject || !strings.Contains(out.Message, "record 3 does not conform") {
		t.Fatalf("a value that does not conform: %+v %v", out, err)
	}
}

// TestExampleEncrypt: the encrypt example, built with the SDK, has both
// hooks: its produce hook seals a value into an envelope (the same one on
// a second call: nothing of a call reaches the next, and the nonce is
// derived), and its fetch hook opens it for a reader and leaves it sealed
// for anyone else, offsets kept. A module is compiled once for both.
func TestExampleEncrypt(t *testing.T) {
	ctx := context.Background()
	m, err := Compile(ctx, buildExample(t, "encrypt"), Limits{Fuel: 100_000_000, FuelPerRecord: 5_000_000, StartFuel: 1_000_000_000, MemoryPages: 1024, HostImports: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if !m.HasProduce() || !m.HasFetch() {
		t.Fatalf("hooks: produce %v, fetch %v", m.HasProduce(), m.HasFetch())
	}
	key := wire.Config{Key: "secret.key.k1", Value: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}
	in := wire.Input{Config: []wire.Config{key}, Topic: "payments",
		Records: []wire.Record{{Key: []byte("p1"), Value: []byte("4111 1111")}, {Key: []byte("p2"), Value: nil}}}
	out, st, err := m.Produce(ctx, in)
	if err != nil || out.Reject || len(out.Records) != 2 || !bytes.HasPrefix(out.Records[0].Value, []byte("STE1")) || out.Records[1].Value != nil {
		t.Fatalf("sealing: %+v %v", out, err)
	}
	again, _, err := m.Produce(ctx, in)
	if err != nil || !bytes.Equal(again.Records[0].Value, out.Records[0].Value) {
		t.Fatalf("sealed again: %q, first %q (%v)", again.Records[0].Value, out.Records[0].Value, err)
	}
	t.Logf("sealing two records used %d fuel", st.Fuel)
	fin := wire.FetchInput{Config: []wire.Config{key, {Key: "readers", Value: "User:alice"}}, Topic: "payments", Principal: "User:alice",
		Records: []wire.FetchRecord{{Offset: 10, Record: out.Records[0]}, {Offset: 11, Record: out.Records[1]}}}
	fout, st, err := m.Fetch(ctx, fin)
	if err != nil || fout.Reject || len(fout.Records) != 2 || string(fout.Records[0].Value) != "4111 1111" || fout.Records[0].Offset != 10 || fout.Records[1].Offset != 11 {
		t.Fatalf("opening for alice: %+v %v", fout, err)
	}
	t.Logf("opening two records used %d fuel", st.Fuel)
	fin.Principal = "User:eve"
	if fout, _, err := m.Fetch(ctx, fin); err != nil || !bytes.Equal(fout.Records[0].Value, out.Records[0].Value) {
		t.Fatalf("eve's fetch: %+v %v", fout, err)
	}
}

// TestHookExports: a module with only one hook compiles, says which, and
// refuses a call of the other; one with neither is refused.
func TestHookExports(t *testing.T) {
	ctx := context.Background()
	m, err := Compile(ctx, pluginModule(t, "stele_fetch"), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if m.HasProduce() || !m.HasFetch() {
		t.Fatalf("hooks: produce %v, fetch %v", m.HasProduce(), m.HasFetch())
	}
	if _, _, err := m.Produce(ctx, wire.Input{}); !errors.Is(err, ErrModule) {
		t.Fatalf("a produce call of a fetch-only module: %v", err)
	}
	if _, err := Compile(ctx, pluginModule(t, "stele_other"), DefaultLimits); !errors.Is(err, ErrModule) || !strings.Contains(err.Error(), "no hook") {
		t.Fatalf("a module with no hook: %v", err)
	}
}

// mapState is a State in a map, with a bound on values.
type mapState map[string][]byte

func (m mapState) Get(key []byte) ([]byte, bool) { v, ok := m[string(key)]; return v, ok }
func (m mapState) Set(key, value []byte) error {
	if len(value) > 4096 {
		return fmt.Errorf("state: a value of %d bytes", len(value))
	}
	m[string(key)] = value
	return nil
}
func (m mapState) Delete(key []byte) { delete(m, string(key)) }

// TestHostFunctions: a module built with the SDK imports the host
// functions, so it is refused where they are not allowed; with them its
// produce hook reads the block time and keeps state across calls (what
// a call leaves in memory does not reach the next; the state does);
// without a state, or past its bounds, a call traps.
func TestHostFunctions(t *testing.T) {
	ctx := context.Background()
	if _, err := Compile(ctx, guest(t), Limits{Fuel: 100_000_000, MemoryPages: 1024}); !errors.Is(err, ErrModule) || !strings.Contains(err.Error(), "stele.") {
		t.Fatalf("without HostImports: %v", err)
	}
	m := compiled(t, DefaultLimits)
	st := mapState{}
	in := wire.Input{Config: []wire.Config{{Key: "mode", Value: "state"}}, Records: []wire.Record{{Value: []byte("x")}}}
	for i, want := range []string{"1@1700000000123", "2@1700000000123", "3@1700000000123"} {
		out, _, err := m.ProduceWith(ctx, in, &Env{BlockTime: 1_700_000_000_123, State: st})
		if err != nil || len(out.Records) != 1 || string(out.Records[0].Value) != want {
			t.Fatalf("call %d: %+v %v, want %s", i, out, err, want)
		}
	}
	if _, _, err := m.Produce(ctx, in); !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), "no state") {
		t.Fatalf("without a state: %v", err)
	}
	in.Config = append(in.Config, wire.Config{Key: "big", Value: "xxxxx"})
	if _, _, err := m.ProduceWith(ctx, in, &Env{State: st}); !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), "a value of 5120 bytes") {
		t.Fatalf("a value past the bounds: %v", err)
	}
}

// BenchmarkRedactRecords: a call of redact (fields=card) on batches of 1,
// 10, 100 and 1000 records of 1 KiB JSON, as the broker makes it (the
// instance restored, the input encoded, the output decoded): the fixed
// cost of a call and, from the slope, each record's (docs/benchmarks.md).
func BenchmarkRedactRecords(b *testing.B) {
	ctx := context.Background()
	m, err := Compile(ctx, buildRedact(b), Limits{Fuel: 100_000_000, FuelPerRecord: 5_000_000, MemoryPages: 1024, HostImports: true})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(ctx)
	value := []byte(`{"id":12345,"card":"4111-1111-1111-1111","pad":"` + strings.Repeat("ab", 480) + `"}`)
	for _, n := range []int{1, 10, 100, 1000} {
		in := wire.Input{Config: []wire.Config{{Key: "fields", Value: "card"}}, Topic: "payments"}
		for range n {
			in.Records = append(in.Records, wire.Record{Key: []byte("k"), Value: value})
		}
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			var fuel int64
			for range b.N {
				out, st, err := m.Produce(ctx, in)
				if err != nil || out.Reject || len(out.Records) != n {
					b.Fatalf("%+v %v", out.Message, err)
				}
				fuel = st.Fuel
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
			b.ReportMetric(float64(fuel)/float64(n), "fuel/record")
		})
	}
}

// pluginModule is a module with a start, an allocator and one function,
// exported as hook, that answers nothing: the least a plugin exports.
func pluginModule(t *testing.T, hook string) []byte {
	t.Helper()
	section := func(m []byte, id byte, body []byte) []byte {
		return append(append(m, id, byte(len(body))), body...)
	}
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = section(m, 1, []byte{3, 0x60, 0, 0, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 2, 0x7f, 0x7f, 1, 0x7e}) // () (i32)->i32 (i32,i32)->i64
	m = section(m, 3, []byte{3, 0, 1, 2})
	m = section(m, 5, []byte{1, 0, 1})
	exports := []byte{4}
	for i, name := range []string{"memory", "_initialize", "stele_alloc", hook} {
		kind, index := byte(0), byte(i-1)
		if i == 0 {
			kind, index = 2, 0
		}
		exports = append(append(append(exports, byte(len(name))), name...), kind, index)
	}
	m = section(m, 7, exports)
	// init: end; alloc: i32.const 1024; hook: i64.const 0.
	return section(m, 10, []byte{3, 2, 0, 0x0b, 5, 0, 0x41, 0x80, 0x08, 0x0b, 4, 0, 0x42, 0, 0x0b})
}
