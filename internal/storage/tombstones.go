package storage

import "math"

// Which tombstones a compaction pass removes: one rule, used by the pass
// itself (CompactionPass.Run, cleanBatch) and by the state machine, which
// drops the table leaves (internal/fsm/keys/tables.go) of the tombstones a
// decided pass will remove before the pass runs. If the two restated the
// rule apart, the authenticated leaves and the compacted logs could part
// ways; so both call these.
//
// A pass with cleanup.policy=compact (CompactOptions.Latest) removes a
// tombstone (a key's latest committed record, null value) when
//
//   - its segment is cleaned: a sealed segment, in log order, ending at or
//     below the pass's UpTo and at or below the first offset of the oldest
//     open transaction; the first segment that does not qualify stops the
//     pass (CleansSegment), so the cleaned segments are those below a bound
//     (TombstoneRule.Bound);
//   - its batch's MaxTimestamp is below the delete horizon (block time
//     minus delete.retention.ms).

// CleansSegment reports whether a pass bounded by upTo cleans the segment
// [base, next) when the oldest open transaction starts at firstUnstable
// (a negative firstUnstable: no transaction is open). Segments are taken
// in log order and the first that is not cleaned ends the pass.
func CleansSegment(base, next, upTo, firstUnstable int64) bool {
	if firstUnstable < 0 {
		firstUnstable = math.MaxInt64
	}
	return base < upTo && next <= upTo && next <= firstUnstable
}

// TombstoneRule is which tombstones one pass removes: those below Bound
// (the end of the last segment it cleans; 0: it cleans none) whose batch's
// MaxTimestamp is below Horizon.
type TombstoneRule struct {
	Bound, Horizon int64
}

// NewTombstoneRule is the rule of a pass over segs (the log's segments, in
// order, the active one last) bounded by upTo, with the oldest open
// transaction at firstUnstable (negative: none) and delete horizon horizon.
func NewTombstoneRule(segs []SegmentInfo, upTo, firstUnstable, horizon int64) TombstoneRule {
	r := TombstoneRule{Horizon: horizon}
	for _, s := range segs {
		if !CleansSegment(s.BaseOffset, s.NextOffset, upTo, firstUnstable) {
			break
		}
		r.Bound = s.NextOffset
	}
	return r
}

// Removes reports whether the pass removes a tombstone, the latest record
// of its key, at offset in a batch whose MaxTimestamp is batchMaxTimestamp.
func (r TombstoneRule) Removes(offset, batchMaxTimestamp int64) bool {
	return offset < r.Bound && tombstoneExpired(batchMaxTimestamp, r.Horizon)
}

// tombstoneExpired reports whether a tombstone in a batch with that
// MaxTimestamp is past the delete horizon, in a segment a pass cleans.
func tombstoneExpired(batchMaxTimestamp, horizon int64) bool {
	return batchMaxTimestamp < horizon
}
