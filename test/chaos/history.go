// Package chaos is Stele's fault-injection suite (issue 7): a harness that
// drives a cluster of real broker processes under injected faults while
// clients record every operation, and a checker that reads the recorded
// history and the final state of the brokers and reports the anomalies
// Jepsen's Kafka workload names.
//
// This file holds the history: what the clients record (Op, Rec, FaultRecord),
// the ground truth read back after healing (Final), the thread-safe Recorder
// the clients share, and the JSON file that reproduces a failure. The
// checker, Check, is pure and needs no cluster.
package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

// Operation types and outcomes, as recorded in Op.Type and Op.Outcome.
const (
	TypeSend = "send" // one record produced outside a transaction
	TypeTxn  = "txn"  // the records of one transaction and its commit or abort
	TypePoll = "poll" // the records one poll handed to a consumer
	// TypeSharePoll: the records one poll handed to a share group member
	// (KIP-932); TypeShareAck: the records a member accepted, ok once the
	// broker confirmed the acknowledgement.
	TypeSharePoll = "share-poll"
	TypeShareAck  = "share-ack"

	OutcomeOK   = "ok"   // the operation happened
	OutcomeFail = "fail" // the operation definitely did not happen
	OutcomeInfo = "info" // unknown: it may or may not have happened

	ReadCommitted   = "read_committed"
	ReadUncommitted = "read_uncommitted"
)

// Errors returned by ReadFile and the decoding of a history file.
var (
	// ErrBadFile reports a history file that is not valid JSON of the
	// expected shape.
	ErrBadFile = errors.New("stele/chaos: malformed history file")
	// ErrDuplicateOffset reports a final state listing one offset of a
	// partition twice.
	ErrDuplicateOffset = errors.New("stele/chaos: final state lists an offset twice")
)

// Rec is one record: where it is stored and its value. Values are unique in
// a run, so a value names the record.
type Rec struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Offset is -1 when unknown: a send that failed or whose outcome is
	// unknown, or a transactional record whose offset was not reported.
	Offset int64  `json:"offset"`
	Value  string `json:"value"`
}

// TP returns the record's topic and partition.
func (r Rec) TP() TP { return TP{Topic: r.Topic, Partition: r.Partition} }

// Op is one client operation with its invocation and completion times, in
// nanoseconds since the run began.
//
// For a txn, Invoke should be the time the commit (or abort) was asked for,
// not the time the transaction began: the precommitted-read check compares
// a read's completion with it, and an earlier Invoke only weakens that
// check. Call SetCommit before Complete: an ok txn whose Commit is false is
// taken for a deliberate abort, whose values must never become visible.
type Op struct {
	Process  int    `json:"process"` // client id; a producer or a consumer
	Type     string `json:"type"`    // TypeSend, TypeTxn or TypePoll
	Invoke   int64  `json:"invoke"`
	Complete int64  `json:"complete"`
	Outcome  string `json:"outcome"` // OutcomeOK, OutcomeFail or OutcomeInfo
	// Records: for a send, the one record (with its acked offset when ok);
	// for a txn, the records written in the transaction; for a poll, the
	// records handed to the consumer, in the order handed.
	Records []Rec `json:"records"`
	// Commit is true, for a txn, when the transaction was to commit; false
	// for a deliberate abort.
	Commit bool `json:"commit,omitempty"`
	// Session is the consumer's session, for a poll: a new session (a
	// restart, a new client, a seek) resets the per-consumer order checks.
	Session int `json:"session,omitempty"`
	// Isolation is ReadCommitted or ReadUncommitted, for a poll; anything
	// else is taken as ReadUncommitted (franz-go's default).
	Isolation string `json:"isolation,omitempty"`
	// Group is the share group of a share poll's member (its
	// acknowledgements are its process's), and KeyOrdered says the group
	// has stele.share.key.ordering=true.
	Group      string `json:"group,omitempty"`
	KeyOrdered bool   `json:"key_ordered,omitempty"`
	Error      string `json:"error,omitempty"`
}

// RecordKey is the key the workload gives the record whose value is v:
// its last two bytes (all of v when shorter), so about a hundred keys
// each partition's records spread over.
func RecordKey(v string) string { return v[max(0, len(v)-2):] }

// FaultRecord is one injected fault, in nanoseconds since the run began.
type FaultRecord struct {
	At   int64  `json:"at"`
	End  int64  `json:"end"` // -1 while the fault is in force (never healed)
	Kind string `json:"kind"`
	// Nodes are the brokers the fault applies to.
	Nodes []int  `json:"nodes,omitempty"`
	Note  string `json:"note,omitempty"`
}

// History is what a run records.
type History struct {
	Seed   uint64        `json:"seed"`
	Ops    []Op          `json:"ops"`
	Faults []FaultRecord `json:"faults"`
}

// TP names one partition of a topic.
type TP struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// String returns "topic/partition".
func (tp TP) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// less orders partitions by topic, then partition.
func (tp TP) less(o TP) bool {
	if tp.Topic != o.Topic {
		return tp.Topic < o.Topic
	}
	return tp.Partition < o.Partition
}

// Final is the ground truth read from the brokers after healing.
type Final struct {
	// Committed holds, per partition and by offset, the records visible to
	// read_committed: data records of non-transactional producers and of
	// committed transactions; control markers excluded.
	Committed map[TP]map[int64]string
	// Aborted holds the values stored by aborted transactions.
	Aborted map[string]bool
}

// finalJSON is Final's form in a file: partitions and values as sorted
// lists, since JSON object keys must be strings.
type finalJSON struct {
	Committed []partitionJSON `json:"committed"`
	Aborted   []string        `json:"aborted"`
}

type partitionJSON struct {
	Topic     string       `json:"topic"`
	Partition int32        `json:"partition"`
	Records   []offsetJSON `json:"records"`
}

type offsetJSON struct {
	Offset int64  `json:"offset"`
	Value  string `json:"value"`
}

// MarshalJSON writes Final with its partitions, offsets and aborted values
// as sorted lists, so the same state always gives the same bytes.
func (f Final) MarshalJSON() ([]byte, error) {
	out := finalJSON{Committed: []partitionJSON{}, Aborted: []string{}}
	for _, tp := range sortedTPs(f.Committed) {
		p := partitionJSON{Topic: tp.Topic, Partition: tp.Partition, Records: []offsetJSON{}}
		for _, off := range sortedOffsets(f.Committed[tp]) {
			p.Records = append(p.Records, offsetJSON{Offset: off, Value: f.Committed[tp][off]})
		}
		out.Committed = append(out.Committed, p)
	}
	for v, aborted := range f.Aborted {
		if aborted {
			out.Aborted = append(out.Aborted, v)
		}
	}
	sort.Strings(out.Aborted)
	return json.Marshal(out)
}

// UnmarshalJSON reads the form MarshalJSON writes. An offset listed twice
// for one partition is an error (ErrDuplicateOffset).
func (f *Final) UnmarshalJSON(data []byte) error {
	var in finalJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	committed := make(map[TP]map[int64]string, len(in.Committed))
	for _, p := range in.Committed {
		tp := TP{Topic: p.Topic, Partition: p.Partition}
		offs := committed[tp]
		if offs == nil {
			offs = make(map[int64]string, len(p.Records))
			committed[tp] = offs
		}
		for _, r := range p.Records {
			if _, dup := offs[r.Offset]; dup {
				return fmt.Errorf("%w: offset %d of %s", ErrDuplicateOffset, r.Offset, tp)
			}
			offs[r.Offset] = r.Value
		}
	}
	aborted := make(map[string]bool, len(in.Aborted))
	for _, v := range in.Aborted {
		aborted[v] = true
	}
	f.Committed, f.Aborted = committed, aborted
	return nil
}

// fileJSON is the whole file: the history and the final state.
type fileJSON struct {
	History History `json:"history"`
	Final   Final   `json:"final"`
}

// WriteFile writes h and f to path as indented JSON, replacing the file.
func WriteFile(path string, h History, f Final) error {
	data, err := json.MarshalIndent(fileJSON{History: h, Final: f}, "", " ")
	if err != nil {
		return fmt.Errorf("stele/chaos: encode history: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("stele/chaos: write history: %w", err)
	}
	return nil
}

// ReadFile reads a history and final state written by WriteFile.
func ReadFile(path string) (History, Final, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return History{}, Final{}, fmt.Errorf("stele/chaos: read history: %w", err)
	}
	h, f, err := decodeFile(data)
	if err != nil {
		return History{}, Final{}, fmt.Errorf("%s: %w", path, err)
	}
	return h, f, nil
}

// decodeFile decodes the bytes of a history file.
func decodeFile(data []byte) (History, Final, error) {
	var in fileJSON
	if err := json.Unmarshal(data, &in); err != nil {
		if errors.Is(err, ErrDuplicateOffset) {
			return History{}, Final{}, err
		}
		return History{}, Final{}, fmt.Errorf("%w: %v", ErrBadFile, err)
	}
	if in.Final.Committed == nil {
		in.Final.Committed = map[TP]map[int64]string{}
	}
	if in.Final.Aborted == nil {
		in.Final.Aborted = map[string]bool{}
	}
	return in.History, in.Final, nil
}

// Recorder records a history while clients run concurrently. The times of
// Invoke, Complete and Fault are taken under its lock.
type Recorder struct {
	start time.Time

	mu struct {
		sync.Mutex
		h History
	}
}

// NewRecorder returns a Recorder for a run with the given seed that began at
// start.
func NewRecorder(seed uint64, start time.Time) *Recorder {
	r := &Recorder{start: start}
	r.mu.h.Seed = seed
	return r
}

// Invoke records the invocation of an operation of type typ (TypeSend or
// TypeTxn) by process, writing recs, and returns its index for Complete and
// SetCommit.
func (r *Recorder) Invoke(process int, typ string, recs []Rec) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.h.Ops = append(r.mu.h.Ops, Op{
		Process: process,
		Type:    typ,
		Invoke:  r.since(time.Now()),
		Records: copyRecs(recs),
	})
	return len(r.mu.h.Ops) - 1
}

// Complete records the completion of operation idx with its outcome
// (OutcomeOK, OutcomeFail or OutcomeInfo) and error, if any. When recs is
// not nil it replaces the op's records (a send's record with its acked
// offset). An idx Invoke did not return is ignored.
func (r *Recorder) Complete(idx int, outcome string, recs []Rec, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if idx < 0 || idx >= len(r.mu.h.Ops) {
		return
	}
	op := &r.mu.h.Ops[idx]
	op.Complete = r.since(time.Now())
	op.Outcome = outcome
	if recs != nil {
		op.Records = copyRecs(recs)
	}
	if err != nil {
		op.Error = err.Error()
	}
}

// SetCommit records whether transaction idx was to commit (true) or was
// deliberately aborted (false). An idx Invoke did not return is ignored.
func (r *Recorder) SetCommit(idx int, commit bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if idx >= 0 && idx < len(r.mu.h.Ops) {
		r.mu.h.Ops[idx].Commit = commit
	}
}

// Poll records, in one call, a poll by consumer process in the given
// session and isolation level, invoked at invoke and completed now, that
// handed recs to the consumer (in the order handed).
func (r *Recorder) Poll(process, session int, isolation string, invoke time.Time, recs []Rec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.h.Ops = append(r.mu.h.Ops, Op{
		Process:   process,
		Type:      TypePoll,
		Invoke:    r.since(invoke),
		Complete:  r.since(time.Now()),
		Outcome:   OutcomeOK,
		Records:   copyRecs(recs),
		Session:   session,
		Isolation: isolation,
	})
}

// SharePoll records, in one call, a poll by process, a member of share
// group (key-ordered or not), invoked at invoke and completed now, that
// handed it recs.
func (r *Recorder) SharePoll(process int, group string, keyOrdered bool, invoke time.Time, recs []Rec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.h.Ops = append(r.mu.h.Ops, Op{Process: process, Type: TypeSharePoll, Invoke: r.since(invoke), Complete: r.since(time.Now()),
		Outcome: OutcomeOK, Records: copyRecs(recs), Group: group, KeyOrdered: keyOrdered})
}

// Fault records the start of a fault of the given kind on nodes, now, and
// returns the function that records its end (calls after the first do
// nothing).
func (r *Recorder) Fault(kind string, nodes []int, note string) (end func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.h.Faults = append(r.mu.h.Faults, FaultRecord{
		At:    r.since(time.Now()),
		End:   -1,
		Kind:  kind,
		Nodes: append([]int(nil), nodes...),
		Note:  note,
	})
	idx := len(r.mu.h.Faults) - 1
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.mu.h.Faults[idx].End = r.since(time.Now())
		})
	}
}

// History returns a copy of the history recorded so far. An operation not
// yet completed is given the outcome OutcomeInfo and a completion time of
// now in the copy: it may or may not take effect.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.since(time.Now())
	h := History{Seed: r.mu.h.Seed}
	h.Ops = make([]Op, len(r.mu.h.Ops))
	for i, op := range r.mu.h.Ops {
		op.Records = copyRecs(op.Records)
		if op.Outcome == "" {
			op.Outcome = OutcomeInfo
			op.Complete = now
			if op.Error == "" {
				op.Error = "not completed when the history was taken"
			}
		}
		h.Ops[i] = op
	}
	h.Faults = make([]FaultRecord, len(r.mu.h.Faults))
	for i, f := range r.mu.h.Faults {
		f.Nodes = append([]int(nil), f.Nodes...)
		h.Faults[i] = f
	}
	return h
}

// since returns t in nanoseconds since the run began. start never changes,
// so it needs no lock.
func (r *Recorder) since(t time.Time) int64 { return t.Sub(r.start).Nanoseconds() }

// copyRecs returns a copy of recs that shares nothing with the caller.
func copyRecs(recs []Rec) []Rec {
	if recs == nil {
		return nil
	}
	return append([]Rec{}, recs...)
}

// sortedTPs returns the keys of m in order.
func sortedTPs[V any](m map[TP]V) []TP {
	tps := make([]TP, 0, len(m))
	for tp := range m {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool { return tps[i].less(tps[j]) })
	return tps
}

// sortedOffsets returns the offsets of m in increasing order.
func sortedOffsets(m map[int64]string) []int64 {
	offs := make([]int64, 0, len(m))
	for off := range m {
		offs = append(offs, off)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	return offs
}
