package shares

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
)

// Part is a share partition: the window of its records a group has looked
// at, [Start, End), and those of them in flight.
type Part struct {
	End int64
	// Recs are the records in flight below End, by offset: acquired by a
	// member until a deadline, or available again (released, or under key
	// ordering waiting for an earlier record of their key). A record below
	// End that is not here is done.
	Recs []rec
}

type rec struct {
	Off        int64
	Acquired   bool
	Deliveries int16
	Member     string
	Deadline   int64
	// Key is a digest of the record's key under key ordering (HasKey:
	// the record has a key).
	HasKey bool
	Key    uint64
}

// Start is the share-partition start offset (SPSO): the first offset in
// flight, or End.
func (p *Part) Start() int64 {
	if len(p.Recs) > 0 {
		return p.Recs[0].Off
	}
	return p.End
}

// find is the index of offset o in p.Recs, or -1.
func (p *Part) find(o int64) int {
	i, ok := slices.BinarySearchFunc(p.Recs, o, func(r rec, o int64) int {
		switch {
		case r.Off < o:
			return -1
		case r.Off > o:
			return 1
		}
		return 0
	})
	if !ok {
		return -1
	}
	return i
}

// release makes r available again, or archives it (returns false) once
// its deliveries reached the limit.
func (r *rec) release(limit int) bool {
	r.Acquired, r.Member, r.Deadline = false, "", 0
	return int(r.Deliveries) < limit
}

// expire releases the records whose lock expired by now; it returns how
// many.
func (p *Part) expire(now int64, limit int) int {
	n := 0
	out := p.Recs[:0]
	for _, r := range p.Recs {
		if r.Acquired && r.Deadline <= now {
			n++
			if !r.release(limit) {
				continue
			}
		}
		out = append(out, r)
	}
	clear(p.Recs[len(out):])
	p.Recs = out
	return n
}

// releaseMember releases every record member holds; it reports whether
// there was one.
func (p *Part) releaseMember(member string, limit int) bool {
	changed := false
	out := p.Recs[:0]
	for _, r := range p.Recs {
		if r.Acquired && r.Member == member {
			changed = true
			if !r.release(limit) {
				continue
			}
		}
		out = append(out, r)
	}
	clear(p.Recs[len(out):])
	p.Recs = out
	return changed
}

// nextDeadline is the earliest lock deadline, or math.MaxInt64.
func (p *Part) nextDeadline() int64 {
	d := int64(1<<63 - 1)
	for _, r := range p.Recs {
		if r.Acquired {
			d = min(d, r.Deadline)
		}
	}
	return d
}

// follow moves the window past records the log no longer holds (its start
// moved by retention or DeleteRecords); it reports whether it did.
func (p *Part) follow(logStart int64) bool {
	changed := false
	if p.End < logStart {
		p.End, changed = logStart, true
	}
	i := 0
	for i < len(p.Recs) && p.Recs[i].Off < logStart {
		i++
	}
	if i > 0 {
		p.Recs = slices.Delete(p.Recs, 0, i)
		changed = true
	}
	return changed
}

// ack applies member's acknowledgements, all or none: every offset
// acknowledged must be acquired by member with its lock still held (a gap
// may also name an offset that holds no record), else
// INVALID_RECORD_STATE; an offset at or past End, which nobody acquired,
// is INVALID_REQUEST.
func (p *Part) ack(member string, acks []AckBatch, now, lockMs int64, limit int) int16 {
	for _, a := range acks {
		if a.Last >= p.End {
			return kerr.InvalidRequest.Code
		}
		for o := a.First; o <= a.Last; o++ {
			t := typeAt(a, o)
			i := p.find(o)
			if i < 0 && t == AckGap {
				continue
			}
			if i < 0 || !p.Recs[i].Acquired || p.Recs[i].Member != member || p.Recs[i].Deadline <= now {
				return kerr.InvalidRecordState.Code
			}
		}
	}
	done := map[int64]bool{}
	for _, a := range acks {
		for o := a.First; o <= a.Last; o++ {
			i := p.find(o)
			if i < 0 {
				continue
			}
			r := &p.Recs[i]
			switch typeAt(a, o) {
			case AckGap, AckAccept, AckReject:
				done[o] = true
			case AckRelease:
				if !r.release(limit) {
					done[o] = true
				}
			case AckRenew:
				r.Deadline = now + lockMs
			}
		}
	}
	if len(done) > 0 {
		p.Recs = slices.DeleteFunc(p.Recs, func(r rec) bool { return done[r.Off] })
	}
	return 0
}

func typeAt(a AckBatch, o int64) int8 {
	if len(a.Types) == 1 {
		return a.Types[0]
	}
	return a.Types[o-a.First]
}

// keyDigest is what key ordering compares keys by.
func keyDigest(k []byte) uint64 {
	d := sha256.Sum256(k)
	return binary.BigEndian.Uint64(d[:8])
}

// acquisition is what one partition's acquisition asks for.
type acquisition struct {
	member    string
	max       int   // records at most
	maxLocks  int   // records in flight at most
	deadline  int64 // of the locks taken
	keyed     bool
	committed bool
	// match, when set, is the acquisition's filter: a record it does not
	// match is passed over, and one past End enters the window available.
	match func(*record.Record) bool
}

// errFull ends a walk of the log once the acquisition has what it may take.
var errFull = errors.New("stele/fsm/shares: acquisition full")

// acquire takes up to a.max records for a.member: first those in flight
// and available, in offset order, then new ones from the log past End, up
// to the high watermark (read_uncommitted) or the last stable offset
// (read_committed, without control records and aborted transactions' records). Under
// key ordering a record is taken only when no earlier record of its key is
// in flight; a new one that is not waits in the window, available. It
// returns the offsets taken, ascending.
func (p *Part) acquire(tp *topics.Partition, a acquisition) ([]int64, error) {
	var got []int64
	blocked := map[uint64]bool{}
	var matched map[int64]bool
	if a.match != nil {
		var err error
		if matched, err = p.matchAvailable(tp, a.match); err != nil {
			return nil, err
		}
	}
	take := func(r *rec) {
		r.Acquired, r.Member, r.Deadline = true, a.member, a.deadline
		r.Deliveries++
		got = append(got, r.Off)
		if a.keyed && r.HasKey {
			blocked[r.Key] = true
		}
	}
	for i := range p.Recs {
		if len(got) >= a.max {
			break
		}
		r := &p.Recs[i]
		if a.keyed && r.HasKey && blocked[r.Key] {
			continue
		}
		if r.Acquired || (a.match != nil && !matched[r.Off]) {
			if a.keyed && r.HasKey {
				blocked[r.Key] = true
			}
			continue
		}
		take(r)
	}
	readTo := tp.Next
	if a.committed {
		readTo = min(readTo, tp.StableNow(-1))
	}
	room := func() bool { return len(got) < a.max && len(p.Recs) < a.maxLocks }
	if !room() || p.End >= readTo {
		return got, nil
	}
	err := tp.EachBatch(p.End, readTo, func(h record.Header, b []byte) error {
		if h.LastOffset() < p.End {
			return nil
		}
		if h.Control() || (a.committed && h.Transactional() && tp.AbortedNow(h.ProducerID, h.BaseOffset)) {
			p.End = h.LastOffset() + 1 // nothing to deliver
			return nil
		}
		if !a.keyed && a.match == nil {
			// By offsets, without decoding: an offset compaction emptied
			// is acquired too, and the client acknowledges it as a gap.
			for o := max(p.End, h.BaseOffset); o <= h.LastOffset(); o++ {
				if !room() {
					return errFull
				}
				p.Recs = append(p.Recs, rec{Off: o})
				take(&p.Recs[len(p.Recs)-1])
				p.End = o + 1
			}
			return nil
		}
		_, err := record.Each(b, func(r *record.Record) error {
			if r.Offset < p.End {
				return nil
			}
			if !room() {
				return errFull
			}
			n := rec{Off: r.Offset}
			if a.keyed && r.Key != nil {
				n.HasKey, n.Key = true, keyDigest(r.Key)
			}
			p.Recs = append(p.Recs, n)
			p.End = r.Offset + 1
			switch {
			case a.match != nil && !a.match(r), n.HasKey && blocked[n.Key]:
				// Left available, in the window, for another
				// acquisition; under key ordering it holds back the
				// later records of its key.
				if n.HasKey {
					blocked[n.Key] = true
				}
			case len(got) < a.max:
				take(&p.Recs[len(p.Recs)-1])
			}
			return nil
		})
		if err != nil {
			return err
		}
		p.End = h.LastOffset() + 1 // past records compaction removed
		return nil
	})
	if errors.Is(err, errFull) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s-%d from %d: %w", tp.Topic, tp.Index, p.End, err)
	}
	return got, nil
}

// matchAvailable reads the records available in the window from the log
// and says which of them match: a filtered acquisition's test of the
// records in flight, whose keys and subjects the state does not keep.
func (p *Part) matchAvailable(tp *topics.Partition, match func(*record.Record) bool) (map[int64]bool, error) {
	avail := map[int64]bool{}
	first, last := int64(-1), int64(-1)
	for _, r := range p.Recs {
		if !r.Acquired {
			avail[r.Off] = false
			if first < 0 {
				first = r.Off
			}
			last = r.Off
		}
	}
	if first < 0 {
		return avail, nil
	}
	err := tp.EachBatch(first, last+1, func(h record.Header, b []byte) error {
		if h.LastOffset() < first || h.Control() {
			return nil
		}
		_, err := record.Each(b, func(r *record.Record) error {
			if _, ok := avail[r.Offset]; ok && match(r) {
				avail[r.Offset] = true
			}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s-%d from %d: %w", tp.Topic, tp.Index, first, err)
	}
	return avail, nil
}

// ranges turns offsets taken, ascending, into acquired ranges of one
// delivery count each.
func (p *Part) ranges(offs []int64) []core.AcquiredRange {
	var out []core.AcquiredRange
	for _, o := range offs {
		i := p.find(o)
		if i < 0 {
			continue
		}
		d := p.Recs[i].Deliveries
		if n := len(out); n > 0 && out[n-1].Last == o-1 && out[n-1].Deliveries == d {
			out[n-1].Last = o
			continue
		}
		out = append(out, core.AcquiredRange{First: o, Last: o, Deliveries: d})
	}
	return out
}

// acquire applies a ShareAcquire: the acknowledgements of every part, then
// the acquisitions, in the order of the parts, until MaxRecords, of the
// records flt matches (nil: every record).
func (f *Shares) acquire(c ShareAcquire, flt *Filter) core.Result {
	if f.groups.GroupsByName[c.Group] != nil {
		return core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("group %s is a consumer group, not a share group", c.Group))
	}
	g := f.byName[c.Group]
	if g == nil {
		return core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("share group %s does not exist", c.Group))
	}
	m := g.Members[c.MemberID]
	if m == nil {
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %s is not in share group %s", c.MemberID, c.Group))
	}
	now := f.BlockTime
	lockMs, limit := int64(g.intConfig(cfgRecordLock)), g.intConfig(cfgDeliveryLimit)
	res := &core.ShareResult{LockMs: int32(lockMs)}
	parts := make([]*Part, len(c.Parts))
	tps := make([]*topics.Partition, len(c.Parts))
	tops := make([]*topics.Topic, len(c.Parts))
	for i, cp := range c.Parts {
		pr := core.SharePartResult{Topic: cp.Topic, Partition: cp.Partition}
		t := f.topics.ByName[cp.Topic]
		if t == nil || t.Deleted || cp.Partition < 0 || int(cp.Partition) >= len(t.Partitions) {
			pr.Code = kerr.UnknownTopicOrPartition.Code
			if len(cp.Acks) > 0 {
				pr.AckCode = pr.Code
			}
			res.Parts = append(res.Parts, pr)
			continue
		}
		tp := t.Partitions[cp.Partition]
		tops[i] = t
		k := partKey{cp.Topic, cp.Partition}
		p := g.Parts[k]
		changed := false
		if p == nil && (cp.Acquire || len(cp.Acks) > 0) && !c.Close {
			p = &Part{End: tp.Next}
			if g.config(cfgAutoOffsetReset) == "earliest" {
				p.End = tp.Start
			}
			g.Parts[k], changed = p, true
		}
		if p == nil { // named with nothing to do
			res.Parts = append(res.Parts, pr)
			continue
		}
		changed = p.follow(tp.Start) || changed
		if n := p.expire(now, limit); n > 0 {
			res.Expired += int32(n)
			changed = true
		}
		if len(cp.Acks) > 0 {
			pr.AckCode = p.ack(c.MemberID, cp.Acks, now, lockMs, limit)
			changed = changed || pr.AckCode == 0
		}
		if changed { // an acquisition that finds nothing changes nothing
			f.dirty.part(g.Name, k)
		}
		parts[i], tps[i] = p, tp
		res.Parts = append(res.Parts, pr)
	}
	if c.Close { // the member's share session closed: what it holds of its partitions goes back
		for i, cp := range c.Parts {
			if p := parts[i]; p != nil && p.releaseMember(c.MemberID, limit) {
				f.dirty.part(g.Name, partKey{cp.Topic, cp.Partition})
			}
		}
	}
	left := int(c.MaxRecords)
	if left <= 0 || left > MaxRecordsPerAcquire {
		left = MaxRecordsPerAcquire
	}
	a := acquisition{member: c.MemberID, deadline: now + lockMs, keyed: g.config(CfgKeyOrdering) == "true",
		committed: g.config(cfgIsolationLevel) == "read_committed", maxLocks: g.intConfig(cfgMaxRecordLocks)}
	for i, cp := range c.Parts {
		p := parts[i]
		if p == nil || !cp.Acquire || c.Close || left == 0 {
			continue
		}
		a.max = left
		a.match = f.matcher(flt, tops[i])
		end := p.End
		offs, err := p.acquire(tps[i], a)
		if err != nil {
			return f.LocalFault("share group %s: %w", g.Name, err)
		}
		if len(offs) > 0 || p.End != end {
			f.dirty.part(g.Name, partKey{cp.Topic, cp.Partition})
		}
		left -= len(offs)
		res.Parts[i].Acquired = p.ranges(offs)
		if len(offs) > 0 {
			f.due = min(f.due, a.deadline)
		}
	}
	return core.Result{Share: res}
}

// matcher is flt's test of a record of topic t (nil: no filter).
func (f *Shares) matcher(flt *Filter, t *topics.Topic) func(*record.Record) bool {
	if flt == nil {
		return nil
	}
	var pat subject.Pattern
	if flt.Subject != "" {
		pat, _ = subject.ParsePattern(flt.Subject) // the check parsed it
	}
	return func(r *record.Record) bool {
		if len(flt.KeyPrefix) > 0 && (r.Key == nil || !bytes.HasPrefix(r.Key, flt.KeyPrefix)) {
			return false
		}
		if flt.Subject != "" {
			s := f.topics.RecordSubject(t, r.Headers, r.Value)
			if s == nil || !pat.Match(s) {
				return false
			}
		}
		return true
	}
}
