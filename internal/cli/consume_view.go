package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
	"github.com/stele-io/stele/pkg/proof"
	"github.com/stele-io/stele/pkg/verified"
)

// sourceProver proves each record of a view (docs/subjects.md), already
// proven as the view's, as the source record its stele-source header
// names too: `stele consume VIEW --verify`. The source record is read
// through the same untrusted broker and proven against the same
// validators; the view's record must be it (key, value, timestamp, its
// headers in order) with nothing added but the view's own headers
// (stele-source, and stele-subject where the source takes its subjects
// from JSON). A source record no longer in its source (retention,
// DeleteRecords, compaction) cannot be read: it is counted (gone) and
// the view's record stays proven as the view's only.
type sourceProver struct {
	broker *kgo.Broker
	proofs *proof.Client
	last   map[string]*provenBatch // by topic/partition: the last source batch proven
	gone   int
}

// provenBatch is a proven source batch's records.
type provenBatch struct {
	base, last int64
	recs       []record.Record
}

// isView reports whether topic is a view (its stele.view.from config).
func isView(ctx context.Context, adm *kadm.Client, topic string) (bool, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return false, err
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return false, err
	}
	if rc.Err != nil {
		return false, rc.Err
	}
	for _, c := range rc.Configs {
		if c.Key == viewFromConfig && c.Value != nil && *c.Value != "" {
			return true, nil
		}
	}
	return false, nil
}

// check proves every record of the view's proven batch as its source's.
func (s *sourceProver) check(ctx context.Context, view string, vp int32, batch []byte) error {
	h, recs, err := record.Records(batch)
	if err != nil {
		return err
	}
	for _, r := range recs {
		var src []byte
		for _, hd := range r.Headers {
			if hd.Key == fsm.ViewSourceHeader {
				src = hd.Value // the view's own header is the last
			}
		}
		at := fmt.Sprintf("%s-%d at offset %d", view, vp, h.BaseOffset+int64(r.OffsetDelta))
		topic, p, off, err := fsm.ParseViewSource(src)
		if err != nil {
			return fmt.Errorf("%w: %s names no source record: %v", proof.ErrUnproven, at, err)
		}
		sr, err := s.record(ctx, topic, p, off)
		if errors.Is(err, errSourceGone) {
			s.gone++
			continue
		}
		if err != nil {
			return fmt.Errorf("proving the source record %s of %s: %w", src, at, err)
		}
		if !sameAsSource(r, sr) {
			return fmt.Errorf("%w: %s is not the source record %s it names", proof.ErrUnproven, at, src)
		}
	}
	return nil
}

// errSourceGone: the source record is below its partition's log start.
var errSourceGone = errors.New("the source record is no longer in its source")

// record is the proven record at off of topic's partition p.
func (s *sourceProver) record(ctx context.Context, topic string, p int32, off int64) (record.Record, error) {
	key := topic + "/" + strconv.Itoa(int(p))
	if b := s.last[key]; b == nil || off < b.base || off > b.last {
		r := &verified.Reader{Broker: s.broker, Proofs: s.proofs, Topic: topic, Partition: p, Next: off, AllowGaps: true, MaxWaitMs: 100}
		bs, err := r.Poll(ctx)
		if errors.Is(err, kerr.OffsetOutOfRange) {
			return record.Record{}, errSourceGone
		}
		if len(bs) == 0 {
			if err == nil {
				err = fmt.Errorf("%w: the broker returned no batch of %s-%d at offset %d", proof.ErrUnproven, topic, p, off)
			}
			return record.Record{}, err
		}
		_, recs, err := record.Records(bs[0].Batch)
		if err != nil {
			return record.Record{}, err
		}
		s.last[key] = &provenBatch{bs[0].BaseOffset, bs[0].LastOffset, recs}
	}
	for _, r := range s.last[key].recs {
		if r.Offset == off {
			return r, nil
		}
	}
	return record.Record{}, errSourceGone // compacted away: no proof shows it was there
}

// sameAsSource reports whether the view's record v is the source record
// src with only the view's headers added after the source's.
func sameAsSource(v, src record.Record) bool {
	if !bytes.Equal(v.Key, src.Key) || (v.Key == nil) != (src.Key == nil) ||
		!bytes.Equal(v.Value, src.Value) || (v.Value == nil) != (src.Value == nil) ||
		v.Timestamp != src.Timestamp || len(v.Headers) < len(src.Headers) {
		return false
	}
	for i, h := range src.Headers {
		if v.Headers[i].Key != h.Key || !bytes.Equal(v.Headers[i].Value, h.Value) {
			return false
		}
	}
	for _, h := range v.Headers[len(src.Headers):] {
		if h.Key != fsm.ViewSourceHeader && h.Key != subject.Header {
			return false
		}
	}
	return true
}
