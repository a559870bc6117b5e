package kafka

// Fetch plugins (issue 24, docs/plugins.md "The fetch hook"): the plugins
// deployed to a topic's fetch hook run on this broker, on the records a
// Fetch or ShareFetch answer is about to carry, after the broker read and
// checked them.
//
//  * Each partition's records of one answer go to each plugin in one
//    call, in offset order, with the consumer's principal; plugins run in
//    the order of their names, each given what the one before returned.
//  * A plugin returns records with the offsets of the records they stand
//    for (a subset of its input's, in order). Each stored batch is encoded
//    afresh with the records kept, the same base offset, offset deltas,
//    producer id, epoch, sequence, attributes and codec, so offsets,
//    transactions and aborted-transaction lists are as stored; a batch
//    whose records were all left out is sent empty, as compaction leaves
//    one. Control batches pass untouched.
//  * A plugin that fails (an error it returns, a trap, out of fuel or
//    memory, or an answer that breaks the rules above) fails the
//    partition's fetch with UNKNOWN_SERVER_ERROR (a share fetch's with
//    KAFKA_STORAGE_ERROR, its acquisitions' locks then expire): the records
//    are never sent as stored in its place.
//  * What a fetch plugin sends is not what proofs cover: verification
//    (stele consume --verify, /v1 proofs) is of the stored batches, and a
//    consumer of a topic with a fetch plugin gets batches no proof
//    matches. The HTTP API's record reads serve the stored records.
//
// Each broker compiles a module once (by its digest) and runs its calls
// one at a time, on the same limits as the produce hook.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/plugin"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/plugin/wire"
)

// fetchModules are the modules of fetch plugins this broker has compiled,
// by digest.
type fetchModules struct {
	mu   sync.Mutex
	byDg map[[32]byte]*fetchModule
}

// fetchModule is one module, compiled and started once.
type fetchModule struct {
	once sync.Once
	m    *plugin.Module
	err  error
}

// module returns d's module, compiling and starting it on first use, and
// closes the modules no fetch plugin of view runs any more.
func (fm *fetchModules) module(view *fsm.PluginsView, d fsm.PluginFetch) (*plugin.Module, error) {
	fm.mu.Lock()
	if fm.byDg == nil {
		fm.byDg = map[[32]byte]*fetchModule{}
	}
	e := fm.byDg[d.Digest]
	if e == nil {
		fm.prune(view)
		e = &fetchModule{}
		fm.byDg[d.Digest] = e
	}
	fm.mu.Unlock()
	e.once.Do(func() {
		ctx := context.Background()
		e.m, e.err = plugin.Compile(ctx, d.Wasm, fsm.PluginLimits(true))
		if e.err == nil {
			if e.err = e.m.Start(ctx); e.err != nil {
				e.m.Close(ctx)
			}
		}
	})
	return e.m, e.err
}

// prune closes the modules of digests no fetch plugin of view has. Called
// with mu held.
func (fm *fetchModules) prune(view *fsm.PluginsView) {
	inUse := map[[32]byte]bool{}
	for _, in := range view.All() {
		if in.Hook == fsm.PluginHookFetch {
			for _, d := range view.Fetch(in.Topic) {
				inUse[d.Digest] = true
			}
		}
	}
	for dg, e := range fm.byDg {
		if !inUse[dg] {
			delete(fm.byDg, dg)
			go func() { // after a call under way ends
				e.once.Do(func() {})
				if e.m != nil {
					e.m.Close(context.Background())
				}
			}()
		}
	}
}

// close closes every module.
func (fm *fetchModules) close() {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	for dg, e := range fm.byDg {
		delete(fm.byDg, dg)
		e.once.Do(func() {})
		if e.m != nil {
			e.m.Close(context.Background())
		}
	}
}

// errFetchPlugin: a fetch plugin failed on a partition's records.
var errFetchPlugin = errors.New("fetch plugin failed")

// runFetchPlugins runs the fetch plugins of topic (qualified) on data, a
// partition's stored batches about to be sent to principal, and returns
// the batches to send instead (data itself when the topic has none).
func (s *Server) runFetchPlugins(topic string, partition int32, principal string, data []byte) ([]byte, error) {
	view := s.b.Plugins()
	ds := view.Fetch(topic)
	if len(ds) == 0 || len(data) == 0 {
		return data, nil
	}
	type stored struct {
		h    record.Header
		raw  []byte // a control batch, sent as stored
		recs []record.Record
	}
	var batches []stored
	var in []wire.FetchRecord
	for rest := data; len(rest) > 0; {
		h, err := record.ParseHeader(rest)
		if err != nil || h.Size() > len(rest) {
			return nil, fmt.Errorf("%w: reading the stored batches: %v", errFetchPlugin, err)
		}
		b := rest[:h.Size()]
		rest = rest[h.Size():]
		if h.Control() {
			batches = append(batches, stored{h: h, raw: b})
			continue
		}
		_, recs, err := record.Records(b)
		if err != nil {
			return nil, fmt.Errorf("%w: reading the stored batch at %d: %v", errFetchPlugin, h.BaseOffset, err)
		}
		batches = append(batches, stored{h: h, recs: recs})
		for _, r := range recs {
			wr := wire.Record{Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
			for _, rh := range r.Headers {
				wr.Headers = append(wr.Headers, wire.Header{Key: rh.Key, Value: rh.Value})
			}
			in = append(in, wire.FetchRecord{Offset: r.Offset, Record: wr})
		}
	}
	if len(in) == 0 {
		return data, nil
	}
	_, localTopic := fsm.SplitTenant(topic)
	for _, d := range ds {
		_, name := fsm.SplitTenant(d.Name)
		m, err := s.fetchModules.module(view, d)
		if err != nil {
			return nil, fmt.Errorf("%w: plugin %s cannot run: %v", errFetchPlugin, name, err)
		}
		fi := wire.FetchInput{Topic: localTopic, Partition: partition, Principal: principal, Records: in}
		for _, kv := range d.Config {
			fi.Config = append(fi.Config, wire.Config{Key: kv.Key, Value: kv.Value})
		}
		out, _, err := m.Fetch(context.Background(), fi)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: plugin %s: %v", errFetchPlugin, name, err)
		case out.Reject:
			return nil, fmt.Errorf("%w: plugin %s refused the records: %s", errFetchPlugin, name, out.Message)
		}
		// Each record returned stands for an input record, in order.
		j := 0
		for _, r := range out.Records {
			for j < len(in) && in[j].Offset < r.Offset {
				j++
			}
			if j == len(in) || in[j].Offset != r.Offset {
				return nil, fmt.Errorf("%w: plugin %s returned a record at offset %d, which is not one it was given or not in order", errFetchPlugin, name, r.Offset)
			}
			j++
		}
		in = out.Records
	}
	// Encode each stored batch afresh with what was returned of it.
	out := make([]byte, 0, len(data))
	k := 0
	for _, b := range batches {
		if b.raw != nil {
			out = append(out, b.raw...)
			continue
		}
		var rs []record.Record
		for ; k < len(in) && in[k].Offset <= b.h.LastOffset(); k++ {
			r := in[k]
			rr := record.Record{OffsetDelta: int32(r.Offset - b.h.BaseOffset), TimestampDelta: r.Timestamp - b.h.FirstTimestamp, Key: r.Key, Value: r.Value}
			for _, wh := range r.Headers {
				rr.Headers = append(rr.Headers, record.RecordHeader{Key: wh.Key, Value: wh.Value})
			}
			rs = append(rs, rr)
		}
		nb, err := record.Build(b.h, rs)
		if err != nil {
			return nil, fmt.Errorf("%w: encoding the batch at %d: %v", errFetchPlugin, b.h.BaseOffset, err)
		}
		out = append(out, nb...)
	}
	return out, nil
}
