// Package plugin is the Go SDK of Stele's plugins (issue 24): a plugin is a
// Go program built with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared that
// registers its hooks in an init function:
//
//	package main
//
//	import "github.com/stele-io/stele/pkg/plugin"
//
//	func init() {
//		plugin.HandleProduce(func(b *plugin.Batch) ([]plugin.Record, error) {
//			for i := range b.Records {
//				b.Records[i].Value = bytes.ToUpper(b.Records[i].Value)
//			}
//			return b.Records, nil
//		})
//	}
//
//	func main() {}
//
// The module exports what the broker calls (exports_wasip1.go):
// stele_alloc(n) gives a buffer of n bytes for the broker to write a
// hook's input into, and stele_produce(ptr, n) runs the produce hook on
// the input there and answers a pointer and length of its output, packed
// as ptr<<32|len (pkg/plugin/wire says the encoding of both).
//
// A fetch hook, registered with HandleFetch, is exported as
// stele_fetch(ptr, n) in the same way.
//
// Deploy one with `stele plugin deploy NAME --wasm FILE --topic T [--hook
// produce|fetch]` (docs/plugins.md): every broker runs its produce hook on
// each batch produced to the topic, inside the deterministic apply, with
// a runtime (internal/plugin) that meters it, bounds its memory and gives
// it a clock and randomness that are the same on every broker. A fetch
// hook runs on the broker a consumer fetches from, on the records it is
// about to send. One module may have both hooks, deployed under two
// names. The snapshot hook does not run yet.
//
// A produce hook's batch carries the block's time and the plugin's own
// state (Batch.Time, Batch.State), which the module reads and writes
// through host functions it imports from module "stele"
// (host_wasip1.go): a module built with this SDK needs a chain at app
// version 18.
package plugin

import (
	"time"

	"github.com/stele-io/stele/pkg/plugin/wire"
)

// Record is a record as a hook sees it; a nil Key or Value is null.
type Record = wire.Record

// Header is a record header.
type Header = wire.Header

// Batch is what a produce hook is given: the records of one produce to
// one partition, and the plugin's config; and, from app version 18, the
// time of the block the produce is in and the plugin's own state.
type Batch struct {
	Topic     string
	Partition int32
	Records   []Record
	Config    map[string]string
	// Time is the time of the block that orders the produce (the same on
	// every broker; block times only go forward).
	Time time.Time
	// State is the plugin's own key-value state, kept in the replicated
	// state from one batch to the next. What a hook sets is kept only if
	// its batch is stored: a batch refused, by the hook or by the checks
	// after it, leaves the state as it was.
	State State
}

// State is a plugin's own key-value state (the broker's bounds: keys of
// 1 to 256 bytes, values of at most 64 KiB, 4 MiB in all; a Set past them
// fails the call, which refuses its batch). It belongs to the plugin's
// name: a new module deployed under it keeps it, removing the plugin
// drops it.
type State interface {
	Get(key []byte) (value []byte, ok bool)
	Set(key, value []byte)
	Delete(key []byte)
}

// MapState is a State in memory: for testing a hook outside WebAssembly.
type MapState map[string][]byte

func (m MapState) Get(key []byte) ([]byte, bool) { v, ok := m[string(key)]; return v, ok }
func (m MapState) Set(key, value []byte)         { m[string(key)] = append([]byte{}, value...) }
func (m MapState) Delete(key []byte)             { delete(m, string(key)) }

// ProduceHook validates, transforms, filters or enriches a batch before it
// is stored: it returns the records to store in its place (the same
// ones, changed, fewer or more), or an error, which rejects the batch
// with the error's text as the message its producer is given.
type ProduceHook func(b *Batch) ([]Record, error)

var produce ProduceHook

// HandleProduce registers the plugin's produce hook.
func HandleProduce(h ProduceHook) { produce = h }

// runProduce decodes in, runs the produce hook and encodes its answer.
func runProduce(in []byte) []byte {
	dec, err := wire.DecodeInput(in)
	if err != nil {
		return wire.AppendOutput(nil, wire.Output{Reject: true, Message: "the plugin could not read its input: " + err.Error()})
	}
	if produce == nil {
		return wire.AppendOutput(nil, wire.Output{Reject: true, Message: "the plugin has no produce hook"})
	}
	b := &Batch{Topic: dec.Topic, Partition: dec.Partition, Records: dec.Records, Config: map[string]string{},
		Time: time.UnixMilli(hostBlockTime()), State: hostState{}}
	for _, c := range dec.Config {
		b.Config[c.Key] = c.Value
	}
	recs, err := produce(b)
	if err != nil {
		return wire.AppendOutput(nil, wire.Output{Reject: true, Message: err.Error()})
	}
	if recs == nil {
		recs = []Record{}
	}
	return wire.AppendOutput(nil, wire.Output{Records: recs})
}

// FetchRecord is a stored record as a fetch hook sees it: its offset and
// the record.
type FetchRecord = wire.FetchRecord

// FetchBatch is what a fetch hook is given: the records a consumer's
// fetch of one partition is about to receive, in offset order, the
// consumer's principal (User:alice; User:ANONYMOUS where clients are not
// authenticated) and the plugin's config.
type FetchBatch struct {
	Topic     string
	Partition int32
	Principal string
	Records   []FetchRecord
	Config    map[string]string
}

// FetchHook filters or transforms the records of a fetch: it returns the
// records to send in their place, each with the offset of the record it
// stands for (a subset of the input's offsets, in order: a record left
// out is not sent), or an error, which fails the consumer's fetch of the
// partition.
type FetchHook func(b *FetchBatch) ([]FetchRecord, error)

var fetch FetchHook

// HandleFetch registers the plugin's fetch hook.
func HandleFetch(h FetchHook) { fetch = h }

// runFetch decodes in, runs the fetch hook and encodes its answer.
func runFetch(in []byte) []byte {
	dec, err := wire.DecodeFetchInput(in)
	if err != nil {
		return wire.AppendFetchOutput(nil, wire.FetchOutput{Reject: true, Message: "the plugin could not read its input: " + err.Error()})
	}
	if fetch == nil {
		return wire.AppendFetchOutput(nil, wire.FetchOutput{Reject: true, Message: "the plugin has no fetch hook"})
	}
	b := &FetchBatch{Topic: dec.Topic, Partition: dec.Partition, Principal: dec.Principal, Records: dec.Records, Config: map[string]string{}}
	for _, c := range dec.Config {
		b.Config[c.Key] = c.Value
	}
	recs, err := fetch(b)
	if err != nil {
		return wire.AppendFetchOutput(nil, wire.FetchOutput{Reject: true, Message: err.Error()})
	}
	if recs == nil {
		recs = []FetchRecord{}
	}
	return wire.AppendFetchOutput(nil, wire.FetchOutput{Records: recs})
}
