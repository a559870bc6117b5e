package subject

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
)

// A batch's subject summary: what a partition keeps of the subjects of one
// batch, so that a read by pattern decides from it alone whether the batch
// may hold a match and skips it unread otherwise.
//
// While they are few (MaxSummaryEntries distinct subjects, MaxSummaryBytes
// of them), the summary is the batch's distinct subjects with their
// record counts. With more, it keeps only the subjects' first Depth tokens
// (the largest depth that fits; a subject with fewer tokens stays whole),
// which a pattern matches as a prefix (Pattern.MatchPrefix): never a
// match missed, sometimes a batch read that holds none. When not even the
// first tokens fit, the summary says "anything" (All).
//
// Encoding (EncodeSummary): a version byte (1), the depth (0: whole
// subjects; 0xff: All), where the subjects came from (0: the header; 1: a
// JSON Pointer, then its length as a uvarint and its bytes), a uvarint
// count of entries, then each entry as a uvarint length, the bytes and a
// uvarint record count, in byte order.

// Summary limits.
const (
	MaxSummaryEntries = 32
	MaxSummaryBytes   = 2048
)

// depthAll marks a summary that may match anything.
const depthAll = 0xff

// Summary is one batch's subjects.
type Summary struct {
	// Depth is 0 when the entries are the batch's whole subjects, else
	// how many first tokens each entry keeps.
	Depth int
	// All: the batch has too many subjects to summarise; it may hold any.
	All     bool
	Entries []Entry // in byte order of Subject
	// FromJSON: the records' subjects came from their JSON values at
	// Pointer (stele.subject.from=json:Pointer when the batch was
	// written), not from their subject header; a reader finds each
	// record's subject the same way (RecordSubject).
	FromJSON bool
	Pointer  string
	ptr      Pointer // Pointer parsed, by DecodeSummary
	// FromField: the records' subjects came from the field at Field (a
	// path of names joined by '.') of their schema-encoded values
	// (stele.subject.from=field:Field); a reader finds each record's
	// subject with the registry (RecordSubject's field).
	FromField bool
	Field     string
}

// FieldFunc finds the string at path in value, a schema-encoded value,
// with a registry.
type FieldFunc func(value []byte, path []string) (subject []byte, found bool, err error)

// Entry is a subject (or its first Depth tokens) and how many of the
// batch's records have it.
type Entry struct {
	Subject []byte
	Count   uint64
}

// ErrSummary is returned for bytes that are no summary.
var ErrSummary = errors.New("stele/subject: malformed subject summary")

// Counter counts a batch's records by subject, allocating once per
// distinct subject (not per record).
type Counter struct {
	index   map[string]int // subject → its entry
	Entries []Entry        // in the order first seen
}

// Add counts one record with subject s (s is copied when new).
func (c *Counter) Add(s []byte) {
	if j, ok := c.index[string(s)]; ok {
		c.Entries[j].Count++
		return
	}
	if c.index == nil {
		c.index = map[string]int{}
	}
	key := string(s)
	c.index[key] = len(c.Entries)
	c.Entries = append(c.Entries, Entry{Subject: []byte(key), Count: 1})
}

// Summarize makes the summary of a batch whose records have the subjects
// counted in counts (distinct subjects, in any order).
func Summarize(counts []Entry) Summary {
	entries := slices.Clone(counts)
	maxTokens := 0
	for _, e := range entries {
		maxTokens = max(maxTokens, bytes.Count(e.Subject, []byte{'.'})+1)
	}
	slices.SortFunc(entries, func(a, b Entry) int { return bytes.Compare(a.Subject, b.Subject) })
	if fits(entries) {
		return Summary{Entries: entries}
	}
	for d := maxTokens - 1; d >= 1; d-- {
		if cut := truncate(entries, d); fits(cut) {
			return Summary{Depth: d, Entries: cut}
		}
	}
	return Summary{All: true}
}

func fits(es []Entry) bool {
	if len(es) > MaxSummaryEntries {
		return false
	}
	n := 0
	for _, e := range es {
		n += len(e.Subject)
	}
	return n <= MaxSummaryBytes
}

// truncate keeps the first d tokens of each subject, merging those that
// become equal (es sorted; the result sorted).
func truncate(es []Entry, d int) []Entry {
	out := make([]Entry, 0, len(es))
	for _, e := range es {
		s := firstTokens(e.Subject, d)
		if n := len(out); n > 0 && bytes.Equal(out[n-1].Subject, s) {
			out[n-1].Count += e.Count
			continue
		}
		out = append(out, Entry{Subject: s, Count: e.Count})
	}
	slices.SortFunc(out, func(a, b Entry) int { return bytes.Compare(a.Subject, b.Subject) })
	// Sorting can bring equal prefixes together that were apart
	// ("a.b" < "a.b-c" < "a.b.d" cut to one token: a, a, a).
	merged := out[:0]
	for _, e := range out {
		if n := len(merged); n > 0 && bytes.Equal(merged[n-1].Subject, e.Subject) {
			merged[n-1].Count += e.Count
			continue
		}
		merged = append(merged, e)
	}
	return merged
}

// firstTokens is s cut after its d-th token (s whole when it has fewer).
func firstTokens(s []byte, d int) []byte {
	for i, c := range s {
		if c == '.' {
			d--
			if d == 0 {
				return s[:i]
			}
		}
	}
	return s
}

// Matches reports whether the batch may hold a record whose subject
// matches p.
func (s Summary) Matches(p Pattern) bool {
	if s.All {
		return true
	}
	for _, e := range s.Entries {
		if s.Depth > 0 && bytes.Count(e.Subject, []byte{'.'})+1 >= s.Depth {
			if p.MatchPrefix(e.Subject) {
				return true
			}
		} else if p.Match(e.Subject) {
			return true
		}
	}
	return false
}

// EncodeSummary appends s's encoding to dst.
func EncodeSummary(dst []byte, s Summary) []byte {
	depth := byte(s.Depth)
	if s.All {
		depth = depthAll
	}
	dst = append(dst, 1, depth)
	if s.FromJSON {
		dst = append(dst, 1)
		dst = binary.AppendUvarint(dst, uint64(len(s.Pointer)))
		dst = append(dst, s.Pointer...)
	} else if s.FromField {
		dst = append(dst, 2)
		dst = binary.AppendUvarint(dst, uint64(len(s.Field)))
		dst = append(dst, s.Field...)
	} else {
		dst = append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.Entries)))
	for _, e := range s.Entries {
		dst = binary.AppendUvarint(dst, uint64(len(e.Subject)))
		dst = append(dst, e.Subject...)
		dst = binary.AppendUvarint(dst, e.Count)
	}
	return dst
}

// DecodeSummary reads EncodeSummary's bytes. The entries alias b. What it
// allocates is bounded by len(b).
func DecodeSummary(b []byte) (Summary, error) {
	if len(b) < 4 || b[0] != 1 {
		return Summary{}, ErrSummary
	}
	var s Summary
	if b[1] == depthAll {
		s.All = true
	} else if b[1] > MaxLen/2+1 {
		return Summary{}, ErrSummary
	} else {
		s.Depth = int(b[1])
	}
	b = b[2:]
	switch b[0] {
	case 0:
		b = b[1:]
	case 1:
		l, k := binary.Uvarint(b[1:])
		if k <= 0 || l > uint64(len(b)-1-k) {
			return Summary{}, ErrSummary
		}
		s.FromJSON, s.Pointer = true, string(b[1+k:1+k+int(l)])
		ptr, err := ParsePointer(s.Pointer)
		if err != nil {
			return Summary{}, ErrSummary
		}
		s.ptr = ptr
		b = b[1+k+int(l):]
	case 2:
		l, k := binary.Uvarint(b[1:])
		if k <= 0 || l == 0 || l > uint64(len(b)-1-k) {
			return Summary{}, ErrSummary
		}
		s.FromField, s.Field = true, string(b[1+k:1+k+int(l)])
		b = b[1+k+int(l):]
	default:
		return Summary{}, ErrSummary
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) || (s.All && n != 0) {
		return Summary{}, ErrSummary
	}
	b = b[k:]
	s.Entries = make([]Entry, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) || l == 0 || l > MaxLen {
			return Summary{}, ErrSummary
		}
		sub := b[k : k+int(l)]
		b = b[k+int(l):]
		c, k2 := binary.Uvarint(b)
		if k2 <= 0 {
			return Summary{}, ErrSummary
		}
		b = b[k2:]
		s.Entries = append(s.Entries, Entry{Subject: sub, Count: c})
	}
	if len(b) != 0 {
		return Summary{}, ErrSummary
	}
	return s, nil
}

// RecordSubject is the subject of a record of the summarised batch, found
// as it was when the batch was written: header (the value of the record's
// first subject header, nil without one), the string at the JSON Pointer
// in value, or the string at the field path in the schema-encoded value,
// found with field (nil: none is found). It is nil when the record has
// none, or none valid.
func (s Summary) RecordSubject(header, value []byte, field FieldFunc) []byte {
	sub := header
	if s.FromField {
		if field == nil || value == nil {
			return nil
		}
		v, found, err := field(value, strings.Split(s.Field, "."))
		if err != nil || !found {
			return nil
		}
		sub = v
	} else if s.FromJSON {
		v, found, err := s.ptr.FromJSON(value)
		if err != nil || !found {
			return nil
		}
		sub = v
	}
	if sub == nil || Check(sub) != nil {
		return nil
	}
	return sub
}
