package storage

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// LogConfig holds the topic settings a partition log obeys. The zero value of
// a field means its default (Kafka's). Every field is part of the replicated
// topic configuration, so every broker decides the same rolls from it.
type LogConfig struct {
	// SegmentBytes is segment.bytes: a segment rolls before a batch would
	// take it past this size. Default 1 GiB; at most 2^31-1, because index
	// entries hold 32-bit positions.
	SegmentBytes int64
	// SegmentMs is segment.ms: a segment rolls once the batch being appended
	// is this much newer than the segment's first timestamp. Default 7 days.
	SegmentMs int64
	// IndexIntervalBytes is index.interval.bytes: the offset index gets an
	// entry once more than this many log bytes follow the last one. Default
	// 4096.
	IndexIntervalBytes int32
	// MaxIndexBytes is segment.index.bytes: a segment rolls when its offset
	// or time index reaches this size. Default 10 MiB.
	MaxIndexBytes int32
}

// Kafka's defaults.
const (
	DefaultSegmentBytes       = 1 << 30
	DefaultSegmentMs          = 7 * 24 * 60 * 60 * 1000
	DefaultIndexIntervalBytes = 4096
	DefaultMaxIndexBytes      = 10 << 20
)

// WithDefaults returns c with every zero field set to its default.
func (c LogConfig) WithDefaults() LogConfig {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.SegmentMs == 0 {
		c.SegmentMs = DefaultSegmentMs
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if c.MaxIndexBytes == 0 {
		c.MaxIndexBytes = DefaultMaxIndexBytes
	}
	return c
}

// Validate reports the first field out of range, after defaults are applied.
func (c LogConfig) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.SegmentBytes < 1 || c.SegmentBytes > math.MaxInt32:
		return fmt.Errorf("%w: segment.bytes %d is not in [1, %d]", ErrConfig, c.SegmentBytes, math.MaxInt32)
	case c.SegmentMs < 1:
		return fmt.Errorf("%w: segment.ms %d must be positive", ErrConfig, c.SegmentMs)
	case c.IndexIntervalBytes < 0:
		return fmt.Errorf("%w: index.interval.bytes %d must not be negative", ErrConfig, c.IndexIntervalBytes)
	case c.MaxIndexBytes < timeEntrySize:
		return fmt.Errorf("%w: segment.index.bytes %d is below %d, one time index entry", ErrConfig, c.MaxIndexBytes, timeEntrySize)
	}
	return nil
}

// Clamp returns c with defaults applied and every field forced into the
// range Validate accepts, so that a log always has a workable config.
func (c LogConfig) Clamp() LogConfig {
	c = c.WithDefaults()
	c.SegmentBytes = min(max(c.SegmentBytes, 1), math.MaxInt32)
	c.SegmentMs = max(c.SegmentMs, 1)
	c.IndexIntervalBytes = max(c.IndexIntervalBytes, 0)
	c.MaxIndexBytes = max(c.MaxIndexBytes, timeEntrySize)
	return c
}

// String returns c in the form ParseLogConfig reads: Kafka's setting names,
// space separated, e.g. "segment.bytes=1073741824 segment.ms=604800000
// index.interval.bytes=4096 segment.index.bytes=10485760".
func (c LogConfig) String() string {
	return fmt.Sprintf("segment.bytes=%d segment.ms=%d index.interval.bytes=%d segment.index.bytes=%d",
		c.SegmentBytes, c.SegmentMs, c.IndexIntervalBytes, c.MaxIndexBytes)
}

// ParseLogConfig reads the form String writes. Settings may come in any
// order; a missing one stays zero (its default).
func ParseLogConfig(s string) (LogConfig, error) {
	var c LogConfig
	for _, f := range strings.Fields(s) {
		name, val, ok := strings.Cut(f, "=")
		if !ok {
			return LogConfig{}, fmt.Errorf("%w: %q is not name=value", ErrConfig, f)
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return LogConfig{}, fmt.Errorf("%w: %s: %v", ErrConfig, name, err)
		}
		switch name {
		case "segment.bytes":
			c.SegmentBytes = n
		case "segment.ms":
			c.SegmentMs = n
		case "index.interval.bytes", "segment.index.bytes":
			if n < math.MinInt32 || n > math.MaxInt32 {
				return LogConfig{}, fmt.Errorf("%w: %s %d does not fit 32 bits", ErrConfig, name, n)
			}
			if name == "index.interval.bytes" {
				c.IndexIntervalBytes = int32(n)
			} else {
				c.MaxIndexBytes = int32(n)
			}
		default:
			return LogConfig{}, fmt.Errorf("%w: unknown setting %q", ErrConfig, name)
		}
	}
	return c, nil
}
