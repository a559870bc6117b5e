// Package views is the state machine's views module (issue 21,
// docs/subjects.md): it copies each record whose subject matches a view's
// pattern from the view's sources into the view, in the deterministic
// apply, as the records are applied; the topics module keeps the rules of
// a view as a topic (topics/views.go).
//
// A view's records are its sources' as they were stored, with one header
// added, stele-source: the source's topic (as the view's tenant names it),
// partition and offset, "orders/3/1042". Each source batch with a match
// gives one view batch, uncompressed (its bytes must be the same on every
// broker whatever compression library a binary has), CreateTime with each
// record's stored timestamp, without a producer: so a view has its own
// dense offsets, holds committed records only, and is read by
// read_committed readers like any topic with no transactions.
//
// A source batch is copied once, when it becomes stable: when
// read_committed readers of its source can first read it. A batch written
// with no transaction open before it in its partition is copied as it is
// written; one written after an open transaction's first record (a
// transaction's own batches among them) when the transaction marker that
// makes it stable is written, then without the batches of aborted
// transactions. So a view partition holds its source partition's records
// in the order a read_committed reader of the source reads them.
//
// Under partition order source partition p feeds view partition p (a
// source growing past the view's partitions grows the view), so the order
// of a source partition, and of each key, is kept. Under global order
// every source partition feeds the view's one partition, in the order the
// chain applied the records: a total order across topics and partitions,
// the same on every broker.
//
// A view keeps a record while its source does: when a source partition's
// log start moves (retention, DeleteRecords), the view partitions it feeds
// move theirs past the leading batches whose source records are gone (the
// stele-source header of a batch's last record says where it came from).
// Under global order a record stays while an earlier one in the view is
// still in its source. Records removed from a source by compaction stay
// in the view.
//
// A view's records carry their subjects in the stele-subject header (added
// to a copy when its source takes subjects from JSON), and each view batch
// has its summary (the subjects module's), so a view is read by pattern
// over HTTP like any topic.
//
// The module keeps no state of its own: the views' logs and the topics'
// configs are the topics module's, the summaries the subjects module's.
// It uses those two modules below it and no other.
package views

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/subjects"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
)

// ModViews is the views module's name.
const ModViews core.Module = "views"

// SourceHeader is the header a view's record names its source record
// with; a produced record may not carry it (topics.SourceHeader).
const SourceHeader = topics.SourceHeader

// RegisterViews is the views module's registration function
// (buildRegistry): its hooks on the topics module's hook points.
func RegisterViews(h *topics.TopicHooks) {
	// After the key stream index (10) and the subject summaries (25):
	// they concern the source batch only.
	h.BatchAppended.Register(40, "view copies", ModViews, func(tm *topics.Topics, pr *topics.Producing, i int, b []byte, at int64) core.Result {
		if tm.BlockAppVersion() < topics.ViewsVersion {
			return core.Result{}
		}
		views := tm.ViewsOf(pr.T)
		if len(views) == 0 || !stableAt(pr, i, at) {
			return core.Result{} // copied when the transactions before it end
		}
		for _, v := range views {
			if !mayMatch(pr, i, v.Config.View.Pattern) {
				continue // not a record to decode
			}
			if err := copyBatch(tm, v, pr.T, pr.P, b); err != nil {
				return tm.LocalFault("copying %s-%d at %d into view %s: %w", pr.T.Name, pr.P.Index, at, v.Name, err)
			}
		}
		return core.Result{}
	})
	h.MarkerWritten.Register(40, "view copies of what a transaction's end made stable", ModViews, func(tm *topics.Topics, t *topics.Topic, p *topics.Partition, pid int64, commit bool, first, at int64) {
		if first < 0 || tm.BlockAppVersion() < topics.ViewsVersion {
			return
		}
		views := tm.ViewsOf(t)
		if len(views) == 0 {
			return
		}
		from, to := p.StableNow(-1), min(p.StableNow(pid), at)
		if err := copyStable(tm, views, t, p, from, to, pid, commit); err != nil {
			tm.LocalFault("copying %s-%d %d-%d into views: %w", t.Name, p.Index, from, to, err)
		}
	})
	h.LogTrimmed.Register(40, "view log starts", ModViews, func(tm *topics.Topics, t *topics.Topic, p *topics.Partition) {
		if topics.IsView(t) {
			return
		}
		for _, v := range tm.ViewsOf(t) {
			vi := p.Index
			if v.Config.View.Global {
				vi = 0
			}
			if int(vi) >= len(v.Partitions) {
				continue
			}
			if err := trimView(tm, v, v.Partitions[vi]); err != nil {
				tm.LocalFault("moving the log start of view %s-%d: %w", v.Name, vi, err)
			}
		}
	})
}

// stableAt reports whether the i-th batch of a produce, written at at,
// is stable as it is written: no transaction is open before it, in the
// partition or among the produce's earlier batches. A batch that is not
// waits for the marker that makes it stable (copyStable): each batch is
// copied once, when read_committed readers of its source can first read
// it.
func stableAt(pr *topics.Producing, i int, at int64) bool {
	if pr.Headers[i].Transactional() || pr.P.StableNow(-1) < at {
		return false
	}
	for j := 0; j < i; j++ {
		if pr.Headers[j].Transactional() && !pr.Dup[j] {
			return false
		}
	}
	return true
}

// mayMatch reports whether the i-th batch of a produce may hold a record
// matching pat: the produce counted its records' subjects (the same rule
// copyBatch applies), so a batch none of whose subjects match is not
// decoded again.
func mayMatch(pr *topics.Producing, i int, pat subject.Pattern) bool {
	if pr.Subjects == nil {
		return true // not counted (a benchmark's state machine without the key index)
	}
	if pr.Subjects[i] == nil {
		return false
	}
	for _, e := range pr.Subjects[i].Entries {
		if pat.Match(e.Subject) {
			return true
		}
	}
	return false
}

// copyStable copies into views the batches of p in [from, to), which the
// end of producer pid's transaction (a commit when commit) has made
// stable: every data batch but those of aborted transactions.
func copyStable(tm *topics.Topics, views []*topics.Topic, t *topics.Topic, p *topics.Partition, from, to, pid int64, commit bool) error {
	return p.EachBatch(from, to, func(h record.Header, b []byte) error {
		switch {
		case h.Control():
			return nil
		case h.Transactional() && h.ProducerID == pid:
			if !commit {
				return nil
			}
		case h.Transactional() && p.AbortedNow(h.ProducerID, h.BaseOffset):
			return nil
		}
		for _, v := range views {
			if err := copyBatch(tm, v, t, p, b); err != nil {
				return err
			}
		}
		return nil
	})
}

// copyBatch appends to view v the records of the stored batch b of
// source partition p of t whose subjects match v's pattern, as one batch
// (nothing when none matches).
func copyBatch(tm *topics.Topics, v, t *topics.Topic, p *topics.Partition, b []byte) error {
	pat := v.Config.View.Pattern
	src := topics.LocalName(t) + "/" + strconv.Itoa(int(p.Index)) + "/"
	var out []record.Record
	var counted subject.Counter
	minTs := int64(0)
	_, recs, err := record.Records(b)
	if err != nil {
		return err
	}
	for i := range recs {
		r := &recs[i]
		s := tm.RecordSubject(t, r.Headers, r.Value)
		if s == nil || !pat.Match(s) {
			continue
		}
		hs := make([]record.RecordHeader, 0, len(r.Headers)+2)
		hs = append(hs, r.Headers...)
		if t.Config.SubjectFrom != nil || t.Config.SubjectField != nil { // the view's record carries its subject
			hs = append(hs, record.RecordHeader{Key: subject.Header, Value: s})
		}
		hs = append(hs, record.RecordHeader{Key: SourceHeader, Value: []byte(src + strconv.FormatInt(r.Offset, 10))})
		counted.Add(s)
		if len(out) == 0 || r.Timestamp < minTs {
			minTs = r.Timestamp
		}
		out = append(out, record.Record{Key: r.Key, Value: r.Value, Headers: hs, OffsetDelta: int32(len(out)), Timestamp: r.Timestamp})
	}
	if len(out) == 0 {
		return nil
	}
	for i := range out {
		out[i].TimestampDelta = out[i].Timestamp - minTs
	}
	vi := p.Index
	if v.Config.View.Global {
		vi = 0
	} else if int(vi) >= len(v.Partitions) {
		if err := tm.GrowView(v, vi+1); err != nil {
			return err
		}
	}
	nb, err := record.Build(record.Header{FirstTimestamp: minTs, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, out)
	if err != nil {
		return err
	}
	vp := v.Partitions[vi]
	at := vp.Next
	if err := tm.AppendDerived(v, vp, nb); err != nil {
		return err
	}
	subjects.Summarized(tm.Machine, v, vi, at+int64(len(out)-1), &counted)
	return nil
}

// trimView moves the log start of view partition vp past its leading
// batches whose source records have left their sources.
func trimView(tm *topics.Topics, v *topics.Topic, vp *topics.Partition) error {
	start := vp.Start
	err := vp.EachBatch(start, vp.Next, func(h record.Header, b []byte) error {
		_, recs, err := record.Records(b)
		if err != nil {
			return err
		}
		if len(recs) == 0 || !gone(tm, v, recs[len(recs)-1].Headers) {
			return topics.ErrStopBatches
		}
		start = h.LastOffset() + 1
		return nil
	})
	if err != nil {
		return err
	}
	tm.MoveLogStart(v, vp, start)
	return nil
}

// gone reports whether the source record a view record's headers name is
// below its source partition's log start.
func gone(tm *topics.Topics, v *topics.Topic, hs []record.RecordHeader) bool {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key != SourceHeader {
			continue
		}
		topic, partition, offset, err := ParseSource(hs[i].Value)
		if err != nil {
			return false
		}
		t := tm.ByName[topics.SourceName(v, topic)]
		if t == nil || t.Deleted || int(partition) >= len(t.Partitions) {
			return true
		}
		return offset < t.Partitions[partition].Start
	}
	return false
}

// ParseSource reads a stele-source header's value: topic/partition/offset,
// the numbers in decimal as the module writes them (no sign, no leading
// zero).
func ParseSource(v []byte) (topic string, partition int32, offset int64, err error) {
	i := bytes.IndexByte(v, '/')
	j := bytes.LastIndexByte(v, '/')
	if i <= 0 || j <= i {
		return "", 0, 0, fmt.Errorf("%s %q is not topic/partition/offset", SourceHeader, v)
	}
	p, err := strconv.ParseInt(string(v[i+1:j]), 10, 32)
	if err != nil || p < 0 || strconv.FormatInt(p, 10) != string(v[i+1:j]) {
		return "", 0, 0, fmt.Errorf("%s %q: bad partition", SourceHeader, v)
	}
	o, err := strconv.ParseInt(string(v[j+1:]), 10, 64)
	if err != nil || o < 0 || strconv.FormatInt(o, 10) != string(v[j+1:]) {
		return "", 0, 0, fmt.Errorf("%s %q: bad offset", SourceHeader, v)
	}
	return string(v[:i]), int32(p), o, nil
}
