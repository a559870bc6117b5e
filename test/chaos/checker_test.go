package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hand-made histories. Topic "t" has partitions 0 and 1; topic "u" is
// written but never polled.
//
//	t/0: 0 a, 1 b (sends of process 1), 2 c (txn of process 2), 3 marker,
//	     4 e (aborted txn of process 2), 5 marker, 6 g (send of process 1)
//	t/1: 0 d (committed txn), 1 marker, 2 f (aborted txn), 3 marker
//	u/0: 0 y, 1 x (overlapping sends of process 3)

var (
	t0 = TP{"t", 0}
	t1 = TP{"t", 1}
	u0 = TP{"u", 0}
)

func rec(tp TP, off int64, v string) Rec {
	return Rec{Topic: tp.Topic, Partition: tp.Partition, Offset: off, Value: v}
}

func sendOp(p int, r Rec, inv, comp int64, outcome string) Op {
	return Op{Process: p, Type: TypeSend, Invoke: inv, Complete: comp, Outcome: outcome, Records: []Rec{r}}
}

func txnOp(p int, commit bool, inv, comp int64, outcome string, recs ...Rec) Op {
	return Op{Process: p, Type: TypeTxn, Invoke: inv, Complete: comp, Outcome: outcome, Commit: commit, Records: recs}
}

func pollOp(p, session int, iso string, inv, comp int64, recs ...Rec) Op {
	return Op{Process: p, Type: TypePoll, Invoke: inv, Complete: comp, Outcome: OutcomeOK,
		Session: session, Isolation: iso, Records: recs}
}

// Indexes of ops in clean() that the anomaly tests change.
const (
	opSendB    = 1
	opSendG    = 4
	opSendX    = 7
	opSendY    = 8
	opC10      = 9  // consumer 10, read_committed
	opC11s2    = 11 // consumer 11, session 2, read_uncommitted
	firstPollT = 500
)

// clean returns a history without anomalies: sends (one of them of unknown
// outcome, one failed), a committed and an aborted transaction, overlapping
// sends whose offsets are in the opposite order of invocation, and two
// consumers, one in two sessions.
func clean() (History, Final) {
	h := History{
		Seed: 7,
		Ops: []Op{
			sendOp(1, rec(t0, 0, "a"), 0, 10, OutcomeOK),
			sendOp(1, rec(t0, 1, "b"), 20, 30, OutcomeOK),
			txnOp(2, true, 100, 150, OutcomeOK, rec(t0, -1, "c"), rec(t1, -1, "d")),
			txnOp(2, false, 200, 250, OutcomeOK, rec(t0, -1, "e"), rec(t1, -1, "f")),
			sendOp(1, rec(t0, 6, "g"), 300, 310, OutcomeOK),
			sendOp(1, rec(t0, -1, "h"), 320, 330, OutcomeInfo),
			sendOp(1, rec(t0, -1, "i"), 340, 350, OutcomeFail),
			sendOp(3, rec(u0, 1, "x"), 0, 30, OutcomeOK),
			sendOp(3, rec(u0, 0, "y"), 10, 20, OutcomeOK),
			pollOp(10, 1, ReadCommitted, firstPollT, 510,
				rec(t0, 0, "a"), rec(t0, 1, "b"), rec(t0, 2, "c"), rec(t0, 6, "g"), rec(t1, 0, "d")),
			pollOp(11, 1, ReadUncommitted, firstPollT, 520,
				rec(t0, 0, "a"), rec(t0, 1, "b"), rec(t0, 2, "c"), rec(t0, 4, "e"), rec(t0, 6, "g"),
				rec(t1, 0, "d"), rec(t1, 2, "f")),
			pollOp(11, 2, ReadUncommitted, 600, 610, rec(t0, 2, "c"), rec(t0, 6, "g")),
		},
		Faults: []FaultRecord{
			{At: 5, End: 400, Kind: "kill", Nodes: []int{2}},
			{At: 50, End: 90, Kind: "partition", Nodes: []int{0, 1}, Note: "{0,1} | {2,3}"},
		},
	}
	f := Final{
		Committed: map[TP]map[int64]string{
			t0: {0: "a", 1: "b", 2: "c", 6: "g"},
			t1: {0: "d"},
			u0: {0: "y", 1: "x"},
		},
		Aborted: map[string]bool{"e": true, "f": true},
	}
	return h, f
}

// expectOnly fails unless rep counts n anomalies of kind, none of any other
// kind, and its examples name every string of want.
func expectOnly(t *testing.T, rep Report, kind string, n int, want ...string) {
	t.Helper()
	for _, k := range AnomalyKinds() {
		got, ok := rep.Counts[k]
		if !ok {
			t.Errorf("Counts lacks kind %s", k)
		}
		if k == kind && got != n {
			t.Errorf("%s: got %d, want %d", k, got, n)
		}
		if k != kind && got != 0 {
			t.Errorf("%s: got %d, want 0 (examples %q)", k, got, rep.Examples[k])
		}
	}
	if rep.OK() {
		t.Errorf("OK() is true with %d %s", n, kind)
	}
	examples := strings.Join(rep.Examples[kind], "\n")
	for _, w := range want {
		if !strings.Contains(examples, w) {
			t.Errorf("%s examples %q do not mention %q", kind, examples, w)
		}
	}
}

func TestCheckClean(t *testing.T) {
	h, f := clean()
	rep := Check(h, f)
	if !rep.OK() {
		t.Fatalf("clean history reports anomalies:\n%s", rep.Summary())
	}
	wantOps := map[string]int{"send/ok": 5, "send/info": 1, "send/fail": 1, "txn/ok": 2, "poll/ok": 3}
	if !reflect.DeepEqual(rep.Ops, wantOps) {
		t.Errorf("Ops = %v, want %v", rep.Ops, wantOps)
	}
	if want := map[string]int{"kill": 1, "partition": 1}; !reflect.DeepEqual(rep.Faults, want) {
		t.Errorf("Faults = %v, want %v", rep.Faults, want)
	}
	sum := rep.Summary()
	for _, kind := range AnomalyKinds() {
		if !strings.Contains(sum, kind+" ") {
			t.Errorf("summary does not list %s:\n%s", kind, sum)
		}
	}
	for _, w := range []string{"seed 7", "operations: 12", "faults: 2", "anomalies: 0", "send/ok"} {
		if !strings.Contains(sum, w) {
			t.Errorf("summary lacks %q:\n%s", w, sum)
		}
	}
}

func TestCheckAnomalies(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(h *History, f *Final)
		kind   string
		n      int
		want   []string
	}{
		{"lost acked send", func(h *History, f *Final) {
			delete(f.Committed[t0], 6)
		}, LostWrite, 1, []string{"process 1", `"g"`, "t/0@6"}},
		{"lost committed txn", func(h *History, f *Final) {
			delete(f.Committed[t1], 0)
		}, LostWrite, 1, []string{"process 2 txn to commit", `"d"`}},
		{"value stored twice", func(h *History, f *Final) {
			f.Committed[t1][5] = "a"
		}, Duplicate, 1, []string{`"a"`, "t/0@0, t/1@5"}},
		{"value read twice by one session", func(h *History, f *Final) {
			h.Ops[opC10].Records = append(h.Ops[opC10].Records, rec(t1, 5, "a"))
		}, Duplicate, 1, []string{`"a"`, "process 10 session 1", "t/0@0, t/1@5"}},
		{"ack at another value's offset", func(h *History, f *Final) {
			h.Ops[opSendB].Records[0].Offset = 2
		}, InconsistentOffsets, 1, []string{"t/0@2", `"c" by the final log`, `"b" by the ack of process 1`}},
		{"two reads of one offset", func(h *History, f *Final) {
			h.Ops[opC11s2].Records[0].Value = "b"
		}, InconsistentOffsets, 1, []string{"t/0@2", `"b" by process 11 session 2`}},
		{"ack at an empty offset", func(h *History, f *Final) {
			h.Ops[opSendG].Records[0].Offset = 7
		}, InconsistentOffsets, 1, []string{`"g"`, "t/0@7", "t/0@6"}},
		{"read_committed reads an aborted value", func(h *History, f *Final) {
			r := h.Ops[opC10].Records
			h.Ops[opC10].Records = append(r[:3:3], append([]Rec{rec(t0, 4, "e")}, r[3:]...)...)
		}, AbortedRead, 1, []string{"process 10 session 1", `"e"`, "t/0@4", "deliberately aborted"}},
		{"read_committed reads a deliberately aborted value the final state omits", func(h *History, f *Final) {
			delete(f.Aborted, "f")
			h.Ops[opC10].Records = append(h.Ops[opC10].Records, rec(t1, 2, "f"))
		}, AbortedRead, 1, []string{`"f"`, "t/1@2"}},
		{"aborted value in the final committed log", func(h *History, f *Final) {
			f.Committed[t1][2] = "f"
		}, AbortedRead, 1, []string{"final committed log", `"f"`, "t/1@2"}},
		{"read before the commit was asked for", func(h *History, f *Final) {
			h.Ops = append(h.Ops, pollOp(12, 1, ReadCommitted, 80, 90, rec(t0, 2, "c")))
		}, PrecommittedRead, 1, []string{"process 12 session 1", `"c"`, "t/0@2", "invoked at 100 ns"}},
		{"a session skips a committed record", func(h *History, f *Final) {
			r := h.Ops[opC10].Records
			h.Ops[opC10].Records = append([]Rec{r[0]}, r[2:]...)
		}, PollSkip, 1, []string{"process 10 session 1 t/0", `"a" @0 then "c" @2`, `"b" @1`}},
		{"a session goes back", func(h *History, f *Final) {
			h.Ops[opC10].Records = append(h.Ops[opC10].Records, rec(t0, 1, "b"))
		}, NonmonotonicPoll, 1, []string{"process 10 session 1 t/0", `"b" @1 after "g" @6`}},
		{"a session goes back across polls", func(h *History, f *Final) {
			h.Ops = append(h.Ops, pollOp(11, 2, ReadUncommitted, 700, 710, rec(t0, 6, "g")))
		}, NonmonotonicPoll, 1, []string{"process 11 session 2 t/0", `"g" @6 after "g" @6`}},
		{"a producer's later send gets a lower offset", func(h *History, f *Final) {
			h.Ops[opSendY].Invoke, h.Ops[opSendY].Complete = 40, 50
		}, NonmonotonicSend, 1, []string{"process 3 u/0", `"y" acked @0`, `"x" acked @1`}},
		{"a committed value no poll handed out", func(h *History, f *Final) {
			for i := range h.Ops {
				if h.Ops[i].Type == TypePoll {
					r := h.Ops[i].Records[:0]
					for _, x := range h.Ops[i].Records {
						if x.Value != "g" {
							r = append(r, x)
						}
					}
					h.Ops[i].Records = r
				}
			}
		}, Unseen, 1, []string{`"g"`, "t/0@6", "process 1 send"}},
		{"a value nobody wrote", func(h *History, f *Final) {
			r := h.Ops[opC10].Records
			h.Ops[opC10].Records = append(r[:4:4], append([]Rec{rec(t0, 7, "zz")}, r[4:]...)...)
		}, GarbageRead, 1, []string{"process 10 session 1", `"zz"`, "t/0@7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, f := clean()
			tt.mutate(&h, &f)
			rep := Check(h, f)
			expectOnly(t, rep, tt.kind, tt.n, tt.want...)
			if t.Failed() {
				t.Log(rep.Summary())
			}
		})
	}
}

// TestCheckNewSessionResetsOrder: a consumer that starts a new session may
// read from any offset, even behind its previous session.
func TestCheckNewSessionResetsOrder(t *testing.T) {
	h, f := clean()
	h.Ops = append(h.Ops, pollOp(11, 3, ReadUncommitted, 700, 710, rec(t0, 0, "a"), rec(t0, 1, "b")))
	if rep := Check(h, f); !rep.OK() {
		t.Fatalf("a new session reading from the start reports anomalies:\n%s", rep.Summary())
	}
}

// TestCheckSendAtSameOffset: a producer's later send acked at the offset
// of its earlier one is both a non-monotonic send and an inconsistent
// offset.
func TestCheckSendAtSameOffset(t *testing.T) {
	h, f := clean()
	h.Ops[opSendY].Invoke, h.Ops[opSendY].Complete = 40, 50
	h.Ops[opSendY].Records[0].Offset = 1
	rep := Check(h, f)
	for kind, want := range map[string]int{NonmonotonicSend: 1, InconsistentOffsets: 1} {
		if got := rep.Counts[kind]; got != want {
			t.Errorf("%s: got %d, want %d\n%s", kind, got, want, rep.Summary())
		}
	}
	if !strings.Contains(strings.Join(rep.Examples[NonmonotonicSend], ""), `"y" acked @1`) {
		t.Errorf("examples %q", rep.Examples[NonmonotonicSend])
	}
}

// TestCheckExamplesAreCapped: counts go on past the five examples kept.
func TestCheckExamplesAreCapped(t *testing.T) {
	h, f := clean()
	for i := 0; i < 8; i++ {
		v := fmt.Sprintf("lost%d", i)
		h.Ops = append(h.Ops, sendOp(4, rec(t0, int64(10+i), v), int64(800+10*i), int64(805+10*i), OutcomeOK))
	}
	rep := Check(h, f)
	expectOnly(t, rep, LostWrite, 8, `"lost0"`, `"lost4"`)
	if n := len(rep.Examples[LostWrite]); n != maxExamples {
		t.Errorf("kept %d examples, want %d", n, maxExamples)
	}
}

// TestCheckDeterministic: map iteration never reaches the report.
func TestCheckDeterministic(t *testing.T) {
	h, f := clean()
	// Many anomalies of several kinds, spread over maps.
	for i := 0; i < 20; i++ {
		f.Committed[TP{"t", int32(2 + i)}] = map[int64]string{0: fmt.Sprintf("dup%d", i%3), 1: fmt.Sprintf("v%d", i)}
		h.Ops = append(h.Ops, pollOp(20+i, i, ReadCommitted, 900, 910,
			rec(TP{"t", int32(2 + i)}, 1, fmt.Sprintf("junk%d", i))))
	}
	want := Check(h, f)
	if want.OK() {
		t.Fatal("expected anomalies")
	}
	for i := 0; i < 10; i++ {
		if got := Check(h, f); !reflect.DeepEqual(got, want) {
			t.Fatalf("run %d differs:\n%s\nwant:\n%s", i, got.Summary(), want.Summary())
		}
	}
}

func TestFileRoundTrip(t *testing.T) {
	h, f := clean()
	path := filepath.Join(t.TempDir(), "history.json")
	if err := WriteFile(path, h, f); err != nil {
		t.Fatal(err)
	}
	gotH, gotF, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotH, h) {
		t.Errorf("history differs after a round trip:\n got %+v\nwant %+v", gotH, h)
	}
	if !reflect.DeepEqual(gotF, f) {
		t.Errorf("final state differs after a round trip:\n got %+v\nwant %+v", gotF, f)
	}
	// The same state gives the same bytes.
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, gotH, gotF); err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != string(second) {
		t.Error("rewriting a decoded file changed its bytes")
	}
}

func TestReadFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, _, err := ReadFile(write("bad.json", `{"history": [`)); !errors.Is(err, ErrBadFile) {
		t.Errorf("truncated file: got %v, want ErrBadFile", err)
	}
	dup := `{"final": {"committed": [{"topic": "t", "partition": 0,
		"records": [{"offset": 3, "value": "a"}, {"offset": 3, "value": "b"}]}]}}`
	if _, _, err := ReadFile(write("dup.json", dup)); !errors.Is(err, ErrDuplicateOffset) {
		t.Errorf("offset listed twice: got %v, want ErrDuplicateOffset", err)
	}
	if _, _, err := ReadFile(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want os.ErrNotExist", err)
	}
	h, f, err := ReadFile(write("empty.json", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Committed == nil || f.Aborted == nil {
		t.Error("an empty file should decode to empty, usable maps")
	}
	if rep := Check(h, f); !rep.OK() {
		t.Errorf("an empty history reports anomalies:\n%s", rep.Summary())
	}
}

// TestRecorderConcurrent: producers, consumers and a fault injector record
// at once (run with -race); every op is there, complete, with its records.
func TestRecorderConcurrent(t *testing.T) {
	start := time.Now()
	r := NewRecorder(42, start)
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				v := fmt.Sprintf("w%d-%d", w, i)
				recs := []Rec{rec(t0, -1, v)}
				idx := r.Invoke(w, TypeTxn, recs)
				recs[0].Value = "changed by the caller" // the recorder holds its own copy
				r.SetCommit(idx, i%2 == 0)
				var acked []Rec // nil keeps the records given to Invoke
				if i%2 == 0 {
					acked = []Rec{rec(t0, int64(i), v)}
				}
				r.Complete(idx, OutcomeOK, acked, nil)
				r.Poll(100+w, 1, ReadCommitted, time.Now(), []Rec{rec(t0, int64(i), v)})
			}
			end := r.Fault("pause", []int{w % 4}, "")
			end()
			end() // ends once
		}()
	}
	pending := r.Invoke(999, TypeSend, []Rec{rec(t0, -1, "pending")})
	r.Complete(-1, OutcomeOK, nil, nil)    // ignored
	r.Complete(1<<30, OutcomeOK, nil, nil) // ignored
	r.SetCommit(1<<30, true)               // ignored
	failed := r.Invoke(998, TypeSend, []Rec{rec(t0, -1, "failed")})
	r.Complete(failed, OutcomeFail, nil, errors.New("NOT_LEADER_FOR_PARTITION"))
	open := r.Fault("kill", []int{3}, "never healed")
	_ = open
	wg.Wait()

	h := r.History()
	if h.Seed != 42 {
		t.Errorf("seed %d, want 42", h.Seed)
	}
	if n := len(h.Ops); n != 2*workers*each+2 {
		t.Fatalf("%d ops, want %d", n, 2*workers*each+2)
	}
	seen := map[string]int{}
	for i, op := range h.Ops {
		if op.Invoke < 0 || op.Complete < op.Invoke {
			t.Errorf("op %d: invoke %d, complete %d", i, op.Invoke, op.Complete)
		}
		if len(op.Records) != 1 {
			t.Fatalf("op %d has %d records", i, len(op.Records))
		}
		seen[op.Type+"/"+op.Outcome]++
		if op.Type == TypeTxn {
			var w, n int
			if _, err := fmt.Sscanf(op.Records[0].Value, "w%d-%d", &w, &n); err != nil {
				t.Fatalf("op %d: record %q: %v", i, op.Records[0].Value, err)
			}
			wantOff := int64(-1)
			if n%2 == 0 {
				wantOff = int64(n)
			}
			if op.Commit != (n%2 == 0) || op.Records[0].Offset != wantOff {
				t.Errorf("op %d: commit %v, record %+v", i, op.Commit, op.Records[0])
			}
		}
	}
	want := map[string]int{"txn/ok": workers * each, "poll/ok": workers * each, "send/info": 1, "send/fail": 1}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("ops %v, want %v", seen, want)
	}
	if op := h.Ops[pending]; op.Outcome != OutcomeInfo || op.Error == "" {
		t.Errorf("pending op: %+v, want info with an error", op)
	}
	if op := h.Ops[failed]; op.Error != "NOT_LEADER_FOR_PARTITION" {
		t.Errorf("failed op error %q", op.Error)
	}
	if len(h.Faults) != workers+1 {
		t.Fatalf("%d faults, want %d", len(h.Faults), workers+1)
	}
	for i, f := range h.Faults {
		if f.Kind == "kill" {
			if f.End != -1 {
				t.Errorf("fault %d never ended but has End %d", i, f.End)
			}
		} else if f.End < f.At {
			t.Errorf("fault %d: at %d, end %d", i, f.At, f.End)
		}
	}

	// History returns a copy.
	h.Ops[0].Records[0].Value = "scribbled"
	h.Faults[0].Nodes[0] = 77
	again := r.History()
	if again.Ops[0].Records[0].Value == "scribbled" || again.Faults[0].Nodes[0] == 77 {
		t.Error("History shares memory with the recorder")
	}
	// The pending op, completed later, is no longer info.
	r.Complete(pending, OutcomeOK, []Rec{rec(t0, 9, "pending")}, nil)
	if op := r.History().Ops[pending]; op.Outcome != OutcomeOK || op.Records[0].Offset != 9 || op.Error != "" {
		t.Errorf("completed op: %+v", op)
	}
}

// FuzzDecodeFile: no history file, however malformed, makes decoding or
// checking panic, and a decoded file checks the same after re-encoding.
func FuzzDecodeFile(f *testing.F) {
	h, fin := clean()
	seed, err := json.Marshal(fileJSON{History: h, Final: fin})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"history": {"ops": [{"type": "poll", "records": [{"topic": "t", "offset": -5, "value": "x"}]}]}}`))
	f.Add([]byte(`{"final": {"committed": [{"topic": "t", "records": [{"offset": 1, "value": "a"}, {"offset": 1, "value": "a"}]}]}}`))
	f.Add([]byte(`{"history": null, "final": {"committed": null, "aborted": ["a", "a"]}}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, fin, err := decodeFile(data)
		if err != nil {
			return
		}
		rep := Check(h, fin)
		again, err := json.Marshal(fileJSON{History: h, Final: fin})
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		h2, fin2, err := decodeFile(again)
		if err != nil {
			t.Fatalf("decode re-encoded file: %v", err)
		}
		if got := Check(h2, fin2); got.Summary() != rep.Summary() {
			t.Fatalf("report changed after a round trip:\n%s\nwas:\n%s", got.Summary(), rep.Summary())
		}
	})
}

// TestCheckShareGroups: share polls and acknowledgements (KIP-932). A
// record redelivered after an unconfirmed (info) acceptance is fine; one
// handed out by a poll begun after its acceptance was confirmed is
// share-accepted-again; a committed record of the polled topic that no
// share poll handed out is share-unseen. Ordinary polls are not share
// polls: neither check looks at them, nor do the order checks at share
// polls.
func TestCheckShareGroups(t *testing.T) {
	sharePoll := func(p int, inv, comp int64, recs ...Rec) Op {
		return Op{Process: p, Type: TypeSharePoll, Invoke: inv, Complete: comp, Outcome: OutcomeOK, Records: recs}
	}
	shareAck := func(p int, inv, comp int64, outcome string, recs ...Rec) Op {
		return Op{Process: p, Type: TypeShareAck, Invoke: inv, Complete: comp, Outcome: outcome, Records: recs}
	}
	h, f := clean()
	h.Ops = append(h.Ops,
		// Out of offset order, across partitions: share polls are not
		// checked for order.
		sharePoll(30, 700, 710, rec(t0, 6, "g"), rec(t0, 0, "a"), rec(t0, 1, "b")),
		shareAck(30, 711, 720, OutcomeOK, rec(t0, 6, "g"), rec(t0, 0, "a")),
		shareAck(30, 711, 720, OutcomeInfo, rec(t0, 1, "b")),
		sharePoll(31, 730, 740, rec(t0, 1, "b"), rec(t0, 2, "c"), rec(t1, 0, "d")),
		shareAck(31, 741, 750, OutcomeOK, rec(t0, 1, "b"), rec(t0, 2, "c"), rec(t1, 0, "d")),
	)
	if r := Check(h, f); !r.OK() {
		t.Fatalf("a clean share history: %s", r.Summary())
	}
	// g accepted (confirmed at 720) handed out again by a poll begun at
	// 760; a poll begun before the confirmation is fine.
	again := append(slices.Clone(h.Ops), sharePoll(31, 715, 725, rec(t0, 6, "g")), sharePoll(31, 760, 770, rec(t0, 6, "g")))
	if r := Check(History{Seed: h.Seed, Ops: again}, f); r.Counts[ShareAcceptedAgain] != 1 || r.Counts[ShareUnseen] != 0 {
		t.Fatalf("g accepted, then handed out again:\n%s", r.Summary())
	}
	// Without the second member's poll, c and d were never handed to a
	// share member.
	short := slices.Clone(h.Ops[:len(h.Ops)-2])
	if r := Check(History{Seed: h.Seed, Ops: short}, f); r.Counts[ShareUnseen] != 2 || r.Counts[ShareAcceptedAgain] != 0 {
		t.Fatalf("c and d never handed to a share member:\n%s", r.Summary())
	}
}

// TestCheckShareKeyOrder: under key ordering (a poll's KeyOrdered), a
// record handed while an earlier record of its key in its partition had
// no acknowledgement sent is share-key-order; one handed after it is
// fine, as is one handed after the earlier record was handed out
// ShareDeliveryLimit times (it may have been archived), and the same
// history in a group without key ordering. Groups are checked apart: a
// record accepted by one group and handed to another is not
// share-accepted-again.
func TestCheckShareKeyOrder(t *testing.T) {
	k0 := TP{Topic: "k", Partition: 0}
	poll := func(p int, group string, keyed bool, inv, comp int64, recs ...Rec) Op {
		return Op{Process: p, Type: TypeSharePoll, Invoke: inv, Complete: comp, Outcome: OutcomeOK, Records: recs, Group: group, KeyOrdered: keyed}
	}
	ack := func(p int, inv, comp int64, recs ...Rec) Op {
		return Op{Process: p, Type: TypeShareAck, Invoke: inv, Complete: comp, Outcome: OutcomeOK, Records: recs}
	}
	// s0-11 and s1-11 have key "11", s0-12 key "12".
	a, b, c := rec(k0, 0, "s0-11"), rec(k0, 1, "s1-11"), rec(k0, 2, "s0-12")
	f := Final{Committed: map[TP]map[int64]string{k0: {0: a.Value, 1: b.Value, 2: c.Value}}}
	sends := []Op{sendOp(1, a, 0, 10, OutcomeOK), sendOp(1, b, 20, 30, OutcomeOK), sendOp(1, c, 40, 50, OutcomeOK)}
	history := func(keyed bool, ops ...Op) History {
		h := History{Seed: 7, Ops: slices.Clone(sends)}
		for _, op := range ops {
			if op.Type == TypeSharePoll && op.Group == "kg" {
				op.KeyOrdered = keyed
			}
			h.Ops = append(h.Ops, op)
		}
		return h
	}
	inOrder := []Op{poll(32, "kg", true, 100, 110, a, c), ack(32, 111, 120, a, c), poll(33, "kg", true, 115, 130, b), ack(33, 131, 140, b)}
	if r := Check(history(true, inOrder...), f); !r.OK() {
		t.Fatalf("key order kept: %s", r.Summary())
	}
	// b handed by a poll that completed before a's acknowledgement was sent.
	early := []Op{poll(32, "kg", true, 100, 110, a, c), poll(33, "kg", true, 105, 109, b), ack(32, 111, 120, a, c), ack(33, 131, 140, b)}
	if r := Check(history(true, early...), f); r.Counts[ShareKeyOrder] != 1 {
		t.Fatalf("b handed while a was in flight:\n%s", r.Summary())
	}
	if r := Check(history(false, early...), f); !r.OK() {
		t.Fatalf("the same without key ordering: %s", r.Summary())
	}
	// In one poll: b handed with a.
	together := []Op{poll(32, "kg", true, 100, 110, a, b, c), ack(32, 111, 120, a, b, c)}
	if r := Check(history(true, together...), f); r.Counts[ShareKeyOrder] != 1 {
		t.Fatalf("a and b handed together:\n%s", r.Summary())
	}
	// a handed ShareDeliveryLimit times and never acknowledged: it may have
	// been archived, and b may come.
	var archived []Op
	for i := range int64(ShareDeliveryLimit) {
		archived = append(archived, poll(32, "kg", true, 100+i*100, 110+i*100, a))
	}
	archived = append(archived, poll(33, "kg", true, 5000, 5010, b, c), ack(33, 5011, 5020, b, c))
	if r := Check(history(true, archived...), f); r.Counts[ShareKeyOrder] != 0 {
		t.Fatalf("after a's last delivery:\n%s", r.Summary())
	}
	// Two groups: each is handed every record once; a record one accepted
	// is handed to the other later.
	two := append(slices.Clone(inOrder), poll(30, "other", false, 200, 210, a, b, c), ack(30, 211, 220, a, b, c))
	if r := Check(history(true, two...), f); !r.OK() {
		t.Fatalf("two groups: %s", r.Summary())
	}
	// The other group never handed c: share-unseen, of that group only.
	short := append(slices.Clone(inOrder), poll(30, "other", false, 200, 210, a, b), ack(30, 211, 220, a, b))
	if r := Check(history(true, short...), f); r.Counts[ShareUnseen] != 1 {
		t.Fatalf("c never handed to group other:\n%s", r.Summary())
	}
}
