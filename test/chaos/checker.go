package chaos

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Anomaly kinds Check reports, named as in Jepsen's Kafka workload.
const (
	// LostWrite: an acknowledged write (an ok send, or an ok txn that was to
	// commit) whose value is not in the final committed log. Counted per
	// value.
	LostWrite = "lost-write"
	// Duplicate: a value stored at more than one place in the final
	// committed log, or read by one consumer session at two places. Counted
	// per value.
	Duplicate = "duplicate"
	// InconsistentOffsets: two different values claimed for one (partition,
	// offset) by the final log, a send's acknowledgement or a poll; or an
	// acked value stored in the final log only at other offsets while its
	// acked offset holds nothing. Counted per place (or per misplaced
	// value).
	InconsistentOffsets = "inconsistent-offsets"
	// AbortedRead: a read_committed poll handed a value that never
	// committed (G1a), or such a value in the final committed log. Counted
	// per value.
	AbortedRead = "aborted-read"
	// PrecommittedRead: a read_committed poll that completed before the
	// commit of the transaction that wrote the value was invoked. Counted
	// per value.
	PrecommittedRead = "precommitted-read"
	// PollSkip: one consumer session read offsets a then b of a partition,
	// a < b, with a committed record in between. Counted per pair of reads.
	PollSkip = "poll-skip"
	// NonmonotonicPoll: one consumer session read offset b of a partition
	// right after offset a, with b <= a. Counted per pair of reads.
	NonmonotonicPoll = "nonmonotonic-poll"
	// NonmonotonicSend: one producer's ok send, invoked after another of
	// its ok sends to the same partition completed, got an offset no larger
	// than the earlier one's. Counted per later send.
	NonmonotonicSend = "nonmonotonic-send"
	// Unseen: a value in the final committed log of a topic some poll read
	// that no poll ever handed out. Counted per value.
	Unseen = "unseen"
	// GarbageRead: a poll handed a value no operation wrote and the final
	// log does not hold. Counted per value.
	GarbageRead = "garbage-read"
	// ShareAcceptedAgain: a share group member was handed a record by a
	// poll invoked after an acknowledgement accepting that record was
	// confirmed (an ok share-ack): an accepted record delivered again.
	// Counted per poll and value.
	ShareAcceptedAgain = "share-accepted-again"
	// ShareUnseen: a value in the final committed log of a topic share
	// group members polled that no share poll ever handed out: a record
	// never delivered. Counted per value.
	ShareUnseen = "share-unseen"
	// ShareKeyOrder: a member of a key-ordered share group was handed a
	// record while an earlier record of its key in its partition was
	// still in flight: no acknowledgement of the earlier one had been
	// sent when the poll completed, and it had not been handed out
	// ShareDeliveryLimit times (after which it may have been archived).
	// Counted per poll and value.
	ShareKeyOrder = "share-key-order"
)

// ShareDeliveryLimit is the share.delivery.count.limit the workload sets
// for its key-ordered share group. A record is archived after that many
// deliveries, and some deliveries are never seen (a ShareFetch whose
// answer a fault lost): a false share-key-order would take that many
// lost deliveries of one record, each waiting out a 30 s lock.
const ShareDeliveryLimit = 10

// maxExamples is how many examples a Report keeps per anomaly kind.
const maxExamples = 5

// AnomalyKinds returns every kind Check reports, in the order a Summary
// prints them.
func AnomalyKinds() []string {
	return []string{
		LostWrite, Duplicate, InconsistentOffsets, AbortedRead, PrecommittedRead,
		PollSkip, NonmonotonicPoll, NonmonotonicSend, Unseen, GarbageRead,
		ShareAcceptedAgain, ShareUnseen, ShareKeyOrder,
	}
}

// Report is what Check found.
type Report struct {
	Seed uint64
	// Ops counts operations by "type/outcome", e.g. "send/ok".
	Ops map[string]int
	// Faults counts injected faults by kind.
	Faults map[string]int
	// Counts holds every kind of AnomalyKinds with its count, zeros included.
	Counts map[string]int
	// Examples holds up to five descriptions per kind found, in a
	// deterministic order.
	Examples map[string][]string
}

// OK reports whether no anomaly was found.
func (r Report) OK() bool {
	for _, n := range r.Counts {
		if n != 0 {
			return false
		}
	}
	return true
}

// Summary prints the operations by type and outcome, the faults by kind and
// every anomaly kind with its count (zeros included, so a reader sees each
// was checked) and its examples.
func (r Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\n", r.Seed)
	writeCounts(&b, "operations", r.Ops)
	writeCounts(&b, "faults", r.Faults)
	total := 0
	for _, n := range r.Counts {
		total += n
	}
	fmt.Fprintf(&b, "anomalies: %d\n", total)
	for _, kind := range AnomalyKinds() {
		fmt.Fprintf(&b, "  %-22s %d\n", kind, r.Counts[kind])
		for _, ex := range r.Examples[kind] {
			fmt.Fprintf(&b, "      e.g. %s\n", ex)
		}
	}
	return b.String()
}

// writeCounts prints a titled total and its parts in key order.
func writeCounts(b *strings.Builder, title string, m map[string]int) {
	keys := make([]string, 0, len(m))
	total := 0
	for k, n := range m {
		keys = append(keys, k)
		total += n
	}
	sort.Strings(keys)
	fmt.Fprintf(b, "%s: %d\n", title, total)
	for _, k := range keys {
		fmt.Fprintf(b, "  %-22s %d\n", k, m[k])
	}
}

// Check reads a history and the final state of the brokers and reports the
// anomalies of AnomalyKinds. It is deterministic: the same input gives the
// same Report, examples included.
//
// Ops whose Outcome is neither OutcomeOK nor OutcomeFail count as
// OutcomeInfo. Records with a negative Offset take part only in the checks
// on values. Every poll op's records are reads, whatever its outcome.
func Check(h History, f Final) Report {
	c := newChecker(h, f)
	c.lostWrites()
	c.duplicates()
	c.inconsistentOffsets()
	c.abortedReads()
	c.precommittedReads()
	c.pollOrder()
	c.nonmonotonicSends()
	c.unseen()
	c.garbageReads()
	c.shareChecks()
	return c.report
}

// place is one (partition, offset).
type place struct {
	tp  TP
	off int64
}

func (p place) String() string { return fmt.Sprintf("%s@%d", p.tp, p.off) }

func (p place) less(o place) bool {
	if p.tp != o.tp {
		return p.tp.less(o.tp)
	}
	return p.off < o.off
}

// read is one record a poll handed to a consumer.
type read struct {
	op  int // index of the poll in History.Ops
	rec Rec
}

// checker holds the indexes Check builds once and the report it fills.
type checker struct {
	h History
	f Final

	tps     []TP               // partitions of f.Committed, sorted
	offsets map[TP][]int64     // committed offsets per partition, sorted
	stored  map[string][]place // value → its places in f.Committed, sorted
	writer  map[string]int     // value → first send or txn op writing it
	reads   []read             // every read, in op then hand-out order

	report Report
}

func newChecker(h History, f Final) *checker {
	c := &checker{
		h:       h,
		f:       f,
		offsets: map[TP][]int64{},
		stored:  map[string][]place{},
		writer:  map[string]int{},
		report: Report{
			Seed:     h.Seed,
			Ops:      map[string]int{},
			Faults:   map[string]int{},
			Counts:   map[string]int{},
			Examples: map[string][]string{},
		},
	}
	for _, kind := range AnomalyKinds() {
		c.report.Counts[kind] = 0
	}
	c.tps = sortedTPs(f.Committed)
	for _, tp := range c.tps {
		offs := sortedOffsets(f.Committed[tp])
		c.offsets[tp] = offs
		for _, off := range offs {
			v := f.Committed[tp][off]
			c.stored[v] = append(c.stored[v], place{tp, off})
		}
	}
	for i, op := range h.Ops {
		c.report.Ops[op.Type+"/"+outcome(op)]++
		switch op.Type {
		case TypeSend, TypeTxn:
			for _, r := range op.Records {
				if _, ok := c.writer[r.Value]; !ok {
					c.writer[r.Value] = i
				}
			}
		case TypePoll:
			for _, r := range op.Records {
				c.reads = append(c.reads, read{op: i, rec: r})
			}
		}
	}
	for _, fr := range h.Faults {
		c.report.Faults[fr.Kind]++
	}
	return c
}

// add counts one anomaly of kind and keeps its example if there is room.
func (c *checker) add(kind, format string, args ...any) {
	c.report.Counts[kind]++
	if len(c.report.Examples[kind]) < maxExamples {
		c.report.Examples[kind] = append(c.report.Examples[kind], fmt.Sprintf(format, args...))
	}
}

// outcome returns op's outcome, OutcomeInfo for anything unrecognised.
func outcome(op Op) string {
	if op.Outcome == OutcomeOK || op.Outcome == OutcomeFail {
		return op.Outcome
	}
	return OutcomeInfo
}

// acknowledged reports whether op is a write the cluster acknowledged as
// committed: an ok send, or an ok txn that was to commit.
func acknowledged(op Op) bool {
	return outcome(op) == OutcomeOK && (op.Type == TypeSend || (op.Type == TypeTxn && op.Commit))
}

// describe names the op at index i for an example.
func (c *checker) describe(i int) string {
	op := c.h.Ops[i]
	switch op.Type {
	case TypePoll:
		return fmt.Sprintf("process %d session %d %s poll (op %d)", op.Process, op.Session, isolation(op), i)
	case TypeTxn:
		verb := "abort"
		if op.Commit {
			verb = "commit"
		}
		return fmt.Sprintf("process %d txn to %s, %s (op %d)", op.Process, verb, outcome(op), i)
	default:
		return fmt.Sprintf("process %d %s, %s (op %d)", op.Process, op.Type, outcome(op), i)
	}
}

// isolation returns ReadCommitted or ReadUncommitted for a poll.
func isolation(op Op) string {
	if op.Isolation == ReadCommitted {
		return ReadCommitted
	}
	return ReadUncommitted
}

// places prints a list of places.
func places(ps []place) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// lostWrites reports acknowledged values missing from the final log.
func (c *checker) lostWrites() {
	for i, op := range c.h.Ops {
		if !acknowledged(op) {
			continue
		}
		for _, r := range op.Records {
			if len(c.stored[r.Value]) > 0 {
				continue
			}
			acked := ""
			if r.Offset >= 0 {
				acked = " acked at " + place{r.TP(), r.Offset}.String()
			}
			c.add(LostWrite, "%s wrote %q%s: not in the final committed log", c.describe(i), r.Value, acked)
		}
	}
}

// sessionKey names one consumer session.
type sessionKey struct{ process, session int }

func (k sessionKey) less(o sessionKey) bool {
	if k.process != o.process {
		return k.process < o.process
	}
	return k.session < o.session
}

// duplicates reports values stored at more than one place of the final log
// or read by one consumer session at more than one place, once per value.
func (c *checker) duplicates() {
	type sessionValue struct {
		s sessionKey
		v string
	}
	readAt := map[sessionValue][]place{}
	var order []sessionValue
	for _, rd := range c.reads {
		if rd.rec.Offset < 0 {
			continue
		}
		op := c.h.Ops[rd.op]
		k := sessionValue{sessionKey{op.Process, op.Session}, rd.rec.Value}
		p := place{rd.rec.TP(), rd.rec.Offset}
		ps, seen := readAt[k]
		if !seen {
			order = append(order, k)
		}
		if !containsPlace(ps, p) {
			readAt[k] = append(ps, p)
		}
	}
	evidence := map[string][]string{}
	for v, ps := range c.stored {
		if len(ps) > 1 {
			evidence[v] = append(evidence[v], "stored at "+places(ps))
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].s.less(order[j].s) })
	for _, k := range order {
		if ps := readAt[k]; len(ps) > 1 {
			evidence[k.v] = append(evidence[k.v],
				fmt.Sprintf("read by process %d session %d at %s", k.s.process, k.s.session, places(ps)))
		}
	}
	for _, v := range slices.Sorted(maps.Keys(evidence)) {
		c.add(Duplicate, "value %q %s", v, strings.Join(evidence[v], "; "))
	}
}

// inconsistentOffsets reports places claimed for two values (by the final
// log, an acknowledgement or a read) and acknowledged values stored only
// elsewhere while their acked place holds nothing.
func (c *checker) inconsistentOffsets() {
	type claim struct{ value, by string }
	claims := map[place][]claim{}
	note := func(p place, v, by string) {
		for _, cl := range claims[p] {
			if cl.value == v {
				return
			}
		}
		claims[p] = append(claims[p], claim{v, by})
	}
	for _, tp := range c.tps {
		for _, off := range c.offsets[tp] {
			note(place{tp, off}, c.f.Committed[tp][off], "the final log")
		}
	}
	for i, op := range c.h.Ops {
		if acknowledged(op) {
			for _, r := range op.Records {
				if r.Offset >= 0 {
					note(place{r.TP(), r.Offset}, r.Value, "the ack of "+c.describe(i))
				}
			}
		}
	}
	for _, rd := range c.reads {
		if rd.rec.Offset >= 0 {
			note(place{rd.rec.TP(), rd.rec.Offset}, rd.rec.Value, c.describe(rd.op))
		}
	}
	var conflicts []place
	for p, cls := range claims {
		if len(cls) > 1 {
			conflicts = append(conflicts, p)
		}
	}
	sort.Slice(conflicts, func(i, j int) bool { return conflicts[i].less(conflicts[j]) })
	for _, p := range conflicts {
		parts := make([]string, len(claims[p]))
		for i, cl := range claims[p] {
			parts[i] = fmt.Sprintf("%q by %s", cl.value, cl.by)
		}
		c.add(InconsistentOffsets, "%s holds %s", p, strings.Join(parts, ", "))
	}
	for i, op := range c.h.Ops {
		if !acknowledged(op) {
			continue
		}
		for _, r := range op.Records {
			p := place{r.TP(), r.Offset}
			ps := c.stored[r.Value]
			if r.Offset < 0 || len(ps) == 0 || containsPlace(ps, p) || len(claims[p]) > 1 {
				continue
			}
			if _, held := c.f.Committed[p.tp][p.off]; held {
				continue
			}
			c.add(InconsistentOffsets, "%s got %q acked at %s, which the final log leaves empty; it stores the value at %s",
				c.describe(i), r.Value, p, places(ps))
		}
	}
}

// neverCommitted returns the values that must never be visible to
// read_committed, each with the reason: those the final state lists as
// aborted, those of an ok deliberate abort and those of a txn whose commit
// definitely failed.
func (c *checker) neverCommitted() map[string]string {
	out := map[string]string{}
	for i, op := range c.h.Ops {
		if op.Type != TypeTxn {
			continue
		}
		var why string
		switch {
		case !op.Commit && outcome(op) == OutcomeOK:
			why = "written by " + c.describe(i) + ", deliberately aborted"
		case op.Commit && outcome(op) == OutcomeFail:
			why = "written by " + c.describe(i) + ", whose commit failed"
		default:
			continue
		}
		for _, r := range op.Records {
			if _, ok := out[r.Value]; !ok {
				out[r.Value] = why
			}
		}
	}
	for v, aborted := range c.f.Aborted {
		if _, ok := out[v]; aborted && !ok {
			out[v] = "listed as aborted in the final state"
		}
	}
	return out
}

// abortedReads reports values that never committed but were read under
// read_committed or stored in the final committed log, once per value.
func (c *checker) abortedReads() {
	never := c.neverCommitted()
	found := map[string]bool{}
	for _, rd := range c.reads {
		v := rd.rec.Value
		why, bad := never[v]
		if !bad || found[v] || isolation(c.h.Ops[rd.op]) != ReadCommitted {
			continue
		}
		found[v] = true
		c.add(AbortedRead, "%s read %q at %s; it is %s", c.describe(rd.op), v, place{rd.rec.TP(), rd.rec.Offset}, why)
	}
	for _, v := range slices.Sorted(maps.Keys(c.stored)) {
		why, bad := never[v]
		if !bad || found[v] {
			continue
		}
		found[v] = true
		c.add(AbortedRead, "the final committed log holds %q at %s; it is %s", v, places(c.stored[v]), why)
	}
}

// precommittedReads reports values a read_committed poll returned before
// the commit of the transaction that wrote them was invoked.
func (c *checker) precommittedReads() {
	found := map[string]bool{}
	for _, rd := range c.reads {
		v := rd.rec.Value
		poll := c.h.Ops[rd.op]
		w, ok := c.writer[v]
		if !ok || found[v] || isolation(poll) != ReadCommitted {
			continue
		}
		txn := c.h.Ops[w]
		if txn.Type != TypeTxn || !txn.Commit || outcome(txn) == OutcomeFail || poll.Complete >= txn.Invoke {
			continue
		}
		found[v] = true
		c.add(PrecommittedRead, "%s read %q at %s, completing at %d ns, before %s was invoked at %d ns",
			c.describe(rd.op), v, place{rd.rec.TP(), rd.rec.Offset}, poll.Complete, c.describe(w), txn.Invoke)
	}
}

// pollOrder walks each consumer session's reads in order, per partition,
// and reports backward or repeated reads (nonmonotonic-poll) and forward
// reads past a committed record (poll-skip).
func (c *checker) pollOrder() {
	sessions := map[sessionKey][]int{}
	for i, op := range c.h.Ops {
		if op.Type == TypePoll {
			k := sessionKey{op.Process, op.Session}
			sessions[k] = append(sessions[k], i)
		}
	}
	keys := make([]sessionKey, 0, len(sessions))
	for k := range sessions {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	for _, k := range keys {
		polls := sessions[k]
		sort.SliceStable(polls, func(i, j int) bool {
			a, b := c.h.Ops[polls[i]], c.h.Ops[polls[j]]
			if a.Invoke != b.Invoke {
				return a.Invoke < b.Invoke
			}
			return a.Complete < b.Complete
		})
		last := map[TP]Rec{}
		for _, i := range polls {
			for _, r := range c.h.Ops[i].Records {
				if r.Offset < 0 {
					continue
				}
				prev, ok := last[r.TP()]
				last[r.TP()] = r
				if !ok {
					continue
				}
				if r.Offset <= prev.Offset {
					c.add(NonmonotonicPoll, "process %d session %d %s: read %q @%d after %q @%d (op %d)",
						k.process, k.session, r.TP(), r.Value, r.Offset, prev.Value, prev.Offset, i)
					continue
				}
				if n, first := c.committedBetween(r.TP(), prev.Offset, r.Offset); n > 0 {
					c.add(PollSkip, "process %d session %d %s: read %q @%d then %q @%d (op %d), skipping %d committed record(s) from %q @%d",
						k.process, k.session, r.TP(), prev.Value, prev.Offset, r.Value, r.Offset, i,
						n, c.f.Committed[r.TP()][first], first)
				}
			}
		}
	}
}

// committedBetween returns how many committed records tp holds at offsets
// strictly between a and b, and the first of those offsets.
func (c *checker) committedBetween(tp TP, a, b int64) (int, int64) {
	offs := c.offsets[tp]
	lo := sort.Search(len(offs), func(i int) bool { return offs[i] > a })
	hi := sort.Search(len(offs), func(i int) bool { return offs[i] >= b })
	if lo >= hi {
		return 0, 0
	}
	return hi - lo, offs[lo]
}

// nonmonotonicSends reports, per producer and partition, an ok send
// invoked after another ok send completed that got an offset no larger.
func (c *checker) nonmonotonicSends() {
	type key struct {
		process int
		tp      TP
	}
	type send struct {
		op  int
		rec Rec
	}
	groups := map[key][]send{}
	for i, op := range c.h.Ops {
		if op.Type != TypeSend || outcome(op) != OutcomeOK {
			continue
		}
		for _, r := range op.Records {
			if r.Offset >= 0 {
				k := key{op.Process, r.TP()}
				groups[k] = append(groups[k], send{i, r})
			}
		}
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].process != keys[j].process {
			return keys[i].process < keys[j].process
		}
		return keys[i].tp.less(keys[j].tp)
	})
	for _, k := range keys {
		byInvoke := groups[k]
		byComplete := append([]send(nil), byInvoke...)
		sort.SliceStable(byInvoke, func(i, j int) bool { return c.h.Ops[byInvoke[i].op].Invoke < c.h.Ops[byInvoke[j].op].Invoke })
		sort.SliceStable(byComplete, func(i, j int) bool {
			return c.h.Ops[byComplete[i].op].Complete < c.h.Ops[byComplete[j].op].Complete
		})
		// best is the largest offset among sends completed before the
		// current send's invocation.
		j, best := 0, -1
		for _, s := range byInvoke {
			inv := c.h.Ops[s.op].Invoke
			for ; j < len(byComplete) && c.h.Ops[byComplete[j].op].Complete < inv; j++ {
				if best < 0 || byComplete[j].rec.Offset > byComplete[best].rec.Offset {
					best = j
				}
			}
			if best < 0 || byComplete[best].op == s.op || byComplete[best].rec.Offset < s.rec.Offset {
				continue
			}
			b := byComplete[best]
			c.add(NonmonotonicSend, "process %d %s: send %q acked @%d (op %d, invoked at %d ns) after send %q acked @%d (op %d, completed at %d ns)",
				k.process, k.tp, s.rec.Value, s.rec.Offset, s.op, inv, b.rec.Value, b.rec.Offset, b.op, c.h.Ops[b.op].Complete)
		}
	}
}

// unseen reports values of the final log that no poll handed out, in
// topics some poll read from, once per value.
func (c *checker) unseen() {
	readValues := map[string]bool{}
	topics := map[string]bool{}
	for _, rd := range c.reads {
		readValues[rd.rec.Value] = true
		topics[rd.rec.Topic] = true
	}
	counted := map[string]bool{}
	for _, tp := range c.tps {
		if !topics[tp.Topic] {
			continue
		}
		for _, off := range c.offsets[tp] {
			v := c.f.Committed[tp][off]
			if readValues[v] || counted[v] {
				continue
			}
			counted[v] = true
			who := "no operation of the history"
			if w, ok := c.writer[v]; ok {
				who = c.describe(w)
			}
			c.add(Unseen, "%q at %s, written by %s, was never read", v, place{tp, off}, who)
		}
	}
}

// garbageReads reports values handed to a consumer that neither an
// operation wrote nor the final log holds, once per value.
func (c *checker) garbageReads() {
	found := map[string]bool{}
	for _, rd := range c.reads {
		v := rd.rec.Value
		if _, written := c.writer[v]; written || len(c.stored[v]) > 0 || found[v] {
			continue
		}
		found[v] = true
		c.add(GarbageRead, "%s read %q at %s, which no operation wrote", c.describe(rd.op), v, place{rd.rec.TP(), rd.rec.Offset})
	}
}

// containsPlace reports whether ps holds p.
func containsPlace(ps []place, p place) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// shareChecks reports the anomalies of share groups, group by group (a
// member's group is its polls'): a record handed to a member by a poll
// invoked after an acknowledgement of its group accepting it was
// confirmed (ShareAcceptedAgain), a record of a topic a group's members
// polled that none of them was handed (ShareUnseen), and under key
// ordering a record handed while an earlier record of its key was in
// flight (ShareKeyOrder). An acknowledgement whose outcome is unknown
// (info) proves nothing: it may not have been applied, and the record
// comes again.
func (c *checker) shareChecks() {
	type gv struct{ group, value string }
	groupOf := map[int]string{} // process → its share group
	keyed := map[string]bool{}
	for _, op := range c.h.Ops {
		if op.Type == TypeSharePoll {
			groupOf[op.Process] = op.Group
			keyed[op.Group] = keyed[op.Group] || op.KeyOrdered
		}
	}
	accepted := map[gv]int64{} // the earliest completion of an ok share-ack
	acked := map[gv]int64{}    // the earliest invocation of any share-ack
	handed := map[gv][]int64{} // the invocations of the polls handing it
	seen := map[gv]bool{}
	topics := map[string]map[string]bool{} // group → the topics its members polled
	for _, op := range c.h.Ops {
		g := groupOf[op.Process]
		switch {
		case op.Type == TypeShareAck:
			for _, r := range op.Records {
				k := gv{g, r.Value}
				if t, ok := acked[k]; !ok || op.Invoke < t {
					acked[k] = op.Invoke
				}
				if outcome(op) != OutcomeOK {
					continue
				}
				if t, ok := accepted[k]; !ok || op.Complete < t {
					accepted[k] = op.Complete
				}
			}
		case op.Type == TypeSharePoll:
			if topics[g] == nil {
				topics[g] = map[string]bool{}
			}
			for _, r := range op.Records {
				k := gv{g, r.Value}
				seen[k] = true
				handed[k] = append(handed[k], op.Invoke)
				topics[g][r.Topic] = true
			}
		}
	}
	// byKey[tp][key]: the committed offsets of the key's records, ascending.
	byKey := map[TP]map[string][]int64{}
	for _, tp := range c.tps {
		byKey[tp] = map[string][]int64{}
		for _, off := range c.offsets[tp] {
			k := RecordKey(c.f.Committed[tp][off])
			byKey[tp][k] = append(byKey[tp][k], off)
		}
	}
	for i, op := range c.h.Ops {
		if op.Type != TypeSharePoll {
			continue
		}
		for _, r := range op.Records {
			if t, ok := accepted[gv{op.Group, r.Value}]; ok && op.Invoke > t {
				c.add(ShareAcceptedAgain, "process %d's share poll (op %d) handed %q at %s, accepted (confirmed) %.3fs before the poll began",
					op.Process, i, r.Value, place{r.TP(), r.Offset}, float64(op.Invoke-t)/1e9)
			}
			if !keyed[op.Group] {
				continue
			}
			for _, off := range byKey[r.TP()][RecordKey(r.Value)] {
				if off >= r.Offset {
					break
				}
				prev := gv{op.Group, c.f.Committed[r.TP()][off]}
				if t, ok := acked[prev]; ok && t < op.Complete {
					continue
				}
				n := 0
				for _, inv := range handed[prev] {
					if inv < op.Complete {
						n++
					}
				}
				if n >= ShareDeliveryLimit {
					continue
				}
				c.add(ShareKeyOrder, "process %d's share poll (op %d) of key-ordered group %s handed %q at %s while %q at %s of its key was in flight (handed %d times, no acknowledgement sent)",
					op.Process, i, op.Group, r.Value, place{r.TP(), r.Offset}, prev.value, place{r.TP(), off}, n)
				break
			}
		}
	}
	for _, g := range slices.Sorted(maps.Keys(topics)) {
		for _, tp := range c.tps {
			if !topics[g][tp.Topic] {
				continue
			}
			for _, off := range c.offsets[tp] {
				if v := c.f.Committed[tp][off]; !seen[gv{g, v}] {
					c.add(ShareUnseen, "%q at %s was never handed to a member of share group %q", v, place{tp, off}, g)
				}
			}
		}
	}
}
