package chaos

// The linearizability check of optimistic-concurrency appends (issue 7's
// porcupine item, issue 8's "concurrent writers on one key"): each key is
// a register holding its latest version; a conditional append succeeds
// only at the version it states, and a refusal reports the version the
// key was at.

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Outcomes of an append.
const (
	AppendOK       = "ok"       // written; Version is the new event's offset
	AppendConflict = "conflict" // refused; Version is the key's version then
	AppendUnknown  = "unknown"  // no answer: it may or may not have been written
)

// NoExpectation marks an unconditional append.
const NoExpectation = int64(-2)

// unknownVersion is a key's state after an append of unknown outcome that
// may have written it: some version the history does not tell.
const unknownVersion = int64(-3)

// AppendInput is an append as invoked.
type AppendInput struct {
	Key    string
	Expect int64 // the version stated; -1: no event yet; NoExpectation
}

// AppendOutput is what came back.
type AppendOutput struct {
	Outcome string
	Version int64
}

// KeyVersionModel is the model porcupine checks appends against,
// partitioned by key.
func KeyVersionModel() porcupine.Model {
	m := &porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range h {
				k := op.Input.(AppendInput).Key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{int64(-1)} },
		Step: func(state, input, output interface{}) []interface{} {
			v, in, out := state.(int64), input.(AppendInput), output.(AppendOutput)
			known := v != unknownVersion
			matches := in.Expect == NoExpectation || !known || v == in.Expect
			switch out.Outcome {
			case AppendOK:
				if matches && (!known || out.Version > v) {
					return []interface{}{out.Version}
				}
			case AppendConflict:
				if in.Expect != NoExpectation && in.Expect != out.Version && (!known || v == out.Version) {
					return []interface{}{out.Version}
				}
			case AppendUnknown:
				if matches {
					return []interface{}{v, unknownVersion}
				}
				return []interface{}{v}
			}
			return nil
		},
		Hash: func(state interface{}) uint64 { return uint64(state.(int64)) },
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(AppendInput), output.(AppendOutput)
			return fmt.Sprintf("append(%s, expect %d) -> %s %d", in.Key, in.Expect, out.Outcome, out.Version)
		},
		DescribeState: func(state interface{}) string { return fmt.Sprint(state) },
	}
	return m.ToModel()
}
