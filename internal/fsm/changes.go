package fsm

import "fmt"

// change is one effect of the block-time timers or of housekeeping (a
// member expired, retention moved a log start offset, ...). The block
// digest records it as structured fields (encode), never as text, so
// rewording how a change is described for people cannot fork the chain.
type change struct {
	kind    changeKind
	name    string // topic, group or transactional id
	sub     string // member id, or the topic of a group's offset
	a, b, c int64  // partition, offsets, times, generation, producer id
}

// changeKind says what a change is. The values are hashed: never renumber
// one, only add new ones (and bump proof.AppHashFormat).
type changeKind uint8

const (
	changeRetention         changeKind = iota + 1 // name topic, a partition, b new log start offset
	changeCompact                                 // name topic, a partition, b cleaned up to, c delete horizon
	changeGroupInitialDelay                       // name group, a deadline
	changeMemberExpired                           // name group, sub member (classic or KIP-848)
	changeSyncTimedOut                            // name group
	changeGeneration                              // name group, a generation
	changeOffsetExpired                           // name group, sub topic, a partition
	changeGroupRemoved                            // name group
	changeTxnTimedOut                             // name transactional id
	changeTxnIDExpired                            // name transactional id
	changeMemberFenced                            // name group, sub member (KIP-848 revocation timed out)
	changeProducerExpired                         // name topic, a partition, b producer id
	changeRegexResolved                           // name group, sub regex, a topics it resolved to
)

// encode appends the change's hashed form:
//
//	u8 kind | str name | str sub | i64 a | i64 b | i64 c
func (c change) encode(w *writer) {
	w.u8(uint8(c.kind))
	w.str(c.name)
	w.str(c.sub)
	w.i64(c.a)
	w.i64(c.b)
	w.i64(c.c)
}

// String describes the change for people (logs); it is not hashed.
func (c change) String() string {
	switch c.kind {
	case changeRetention:
		return fmt.Sprintf("retention moved %s-%d's log start offset to %d", c.name, c.a, c.b)
	case changeCompact:
		return fmt.Sprintf("compaction of %s-%d decided up to offset %d (delete horizon %d)", c.name, c.a, c.b, c.c)
	case changeGroupInitialDelay:
		return fmt.Sprintf("group %s waits for members until %d", c.name, c.a)
	case changeMemberExpired:
		return fmt.Sprintf("group %s: member %s's session expired", c.name, c.sub)
	case changeSyncTimedOut:
		return fmt.Sprintf("group %s: sync timed out", c.name)
	case changeGeneration:
		return fmt.Sprintf("group %s: generation %d", c.name, c.a)
	case changeOffsetExpired:
		return fmt.Sprintf("group %s: offset of %s-%d expired", c.name, c.sub, c.a)
	case changeGroupRemoved:
		return fmt.Sprintf("group %s removed", c.name)
	case changeTxnTimedOut:
		return fmt.Sprintf("transaction %s timed out", c.name)
	case changeTxnIDExpired:
		return fmt.Sprintf("transactional id %s expired", c.name)
	case changeMemberFenced:
		return fmt.Sprintf("group %s: member %s fenced, revocation timed out", c.name, c.sub)
	case changeRegexResolved:
		return fmt.Sprintf("group %s: regex %q resolved to %d topics", c.name, c.sub, c.a)
	case changeProducerExpired:
		return fmt.Sprintf("producer %d expired in %s-%d", c.b, c.name, c.a)
	}
	return fmt.Sprintf("change %d %s %s %d %d %d", c.kind, c.name, c.sub, c.a, c.b, c.c)
}
