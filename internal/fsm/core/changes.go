package core

import "fmt"

// Change is one effect of the block-time timers or of housekeeping (a
// member expired, retention moved a log start offset, ...). The block
// digest records it as structured fields (encode), never as text, so
// rewording how a change is described for people cannot fork the chain.
type Change struct {
	Kind    changeKind
	Name    string // topic, group or transactional id
	Sub     string // member id, or the topic of a group's offset
	A, B, C int64  // partition, offsets, times, generation, producer id
}

// changeKind says what a change is. The values are hashed: never renumber
// one, only add new ones (and bump proof.AppHashFormat).
type changeKind uint8

const (
	ChangeRetention          changeKind = iota + 1 // name topic, a partition, b new log start offset
	ChangeCompact                                  // name topic, a partition, b cleaned up to, c delete horizon
	ChangeGroupInitialDelay                        // name group, a deadline
	ChangeMemberExpired                            // name group, sub member (classic or KIP-848)
	ChangeSyncTimedOut                             // name group
	ChangeGeneration                               // name group, a generation
	ChangeOffsetExpired                            // name group, sub topic, a partition
	ChangeGroupRemoved                             // name group
	ChangeTxnTimedOut                              // name transactional id
	ChangeTxnIDExpired                             // name transactional id
	ChangeMemberFenced                             // name group, sub member (KIP-848 revocation timed out)
	ChangeProducerExpired                          // name topic, a partition, b producer id
	ChangeRegexResolved                            // name group, sub regex, a topics it resolved to
	ChangeShareMemberExpired                       // name share group, sub member
	ChangeShareLocksExpired                        // name share group, sub topic, a partition, b locks
)

// Encode appends the change's hashed form:
//
//	u8 kind | str name | str sub | i64 a | i64 b | i64 c
func (c Change) Encode(w *Writer) {
	w.U8(uint8(c.Kind))
	w.Str(c.Name)
	w.Str(c.Sub)
	w.I64(c.A)
	w.I64(c.B)
	w.I64(c.C)
}

// String describes the change for people (logs); it is not hashed.
func (c Change) String() string {
	switch c.Kind {
	case ChangeRetention:
		return fmt.Sprintf("retention moved %s-%d's log start offset to %d", c.Name, c.A, c.B)
	case ChangeCompact:
		return fmt.Sprintf("compaction of %s-%d decided up to offset %d (delete horizon %d)", c.Name, c.A, c.B, c.C)
	case ChangeGroupInitialDelay:
		return fmt.Sprintf("group %s waits for members until %d", c.Name, c.A)
	case ChangeMemberExpired:
		return fmt.Sprintf("group %s: member %s's session expired", c.Name, c.Sub)
	case ChangeSyncTimedOut:
		return fmt.Sprintf("group %s: sync timed out", c.Name)
	case ChangeGeneration:
		return fmt.Sprintf("group %s: generation %d", c.Name, c.A)
	case ChangeOffsetExpired:
		return fmt.Sprintf("group %s: offset of %s-%d expired", c.Name, c.Sub, c.A)
	case ChangeGroupRemoved:
		return fmt.Sprintf("group %s removed", c.Name)
	case ChangeTxnTimedOut:
		return fmt.Sprintf("transaction %s timed out", c.Name)
	case ChangeTxnIDExpired:
		return fmt.Sprintf("transactional id %s expired", c.Name)
	case ChangeMemberFenced:
		return fmt.Sprintf("group %s: member %s fenced, revocation timed out", c.Name, c.Sub)
	case ChangeRegexResolved:
		return fmt.Sprintf("group %s: regex %q resolved to %d topics", c.Name, c.Sub, c.A)
	case ChangeShareMemberExpired:
		return fmt.Sprintf("share group %s: member %s's session expired", c.Name, c.Sub)
	case ChangeShareLocksExpired:
		return fmt.Sprintf("share group %s: %d acquisition locks of %s-%d expired", c.Name, c.B, c.Sub, c.A)
	case ChangeProducerExpired:
		return fmt.Sprintf("producer %d expired in %s-%d", c.B, c.Name, c.A)
	}
	return fmt.Sprintf("change %d %s %s %d %d %d", c.Kind, c.Name, c.Sub, c.A, c.B, c.C)
}
