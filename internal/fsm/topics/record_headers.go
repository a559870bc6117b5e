package topics

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
	"github.com/stele-io/stele/pkg/proof"
)

// The Stele record headers a produce reads, in its one pass over each
// batch's records (with the record's validation, as Kafka's LogValidator
// makes one pass): what they say is handed to the modules that act on it
// (keys: expected versions, snapshots; trust: signatures) through the
// produce's hooks (topic_hooks.go); and each record's subject
// (subject.Header, the JSON Pointer of stele.subject.from, or the field
// of its schema-encoded value that field:PATH names), checked
// here from app version 11 (SubjectsVersion) and summed up per batch for
// the subjects module.

// SnapshotHeader marks a snapshot record: its value summarises its key up
// to and including itself, so cleanup.policy=snapshot may remove the
// key's older records, and a reader may start from it (docs/keys.md). The
// header's value is not looked at.
const SnapshotHeader = "stele-snapshot"

// ExpectedVersionHeader is the record header with which a producer states
// the version (offset) it expects to be the latest of the record's key in
// the partition it writes to, or "-1" for "the key has no event yet":
// optimistic concurrency per key. The value is the version in ASCII
// decimal. A batch holding a record whose expectation does not hold is
// refused whole with INVALID_RECORD, nothing of it written.
const ExpectedVersionHeader = "stele-expected-version"

// SourceHeader names, on a view's record, the source record it is a copy
// of (topic/partition/offset, views.go). From app version 12 a produced
// record may not carry it: a reader of a view must be able to trust it.
const SourceHeader = "stele-source"

// sourceHeaderProblem says why a produced record's headers are refused
// from app version 12 (ViewsVersion): they hold SourceHeader.
func sourceHeaderProblem(hs []record.RecordHeader) error {
	for _, h := range hs {
		if h.Key == SourceHeader {
			return fmt.Errorf("header %s is written by views only (docs/subjects.md)", SourceHeader)
		}
	}
	return nil
}

// NoExpectation marks a record without ExpectedVersionHeader.
const NoExpectation = int64(-2)

// KeyAt is a keyed record of a batch being produced.
type KeyAt struct {
	Delta    int32
	Key      []byte
	Expect   int64 // the version it expects, -1: none yet, noExpectation
	Snapshot bool  // it carries SnapshotHeader
}

// keyHeaders reads a record's Stele headers in one pass: the version its
// ExpectedVersionHeader states (noExpectation without one), whether it
// carries SnapshotHeader, and whether it carries a signature
// (proof.SignatureHeader, checked by checkSignatures).
func keyHeaders(key []byte, hs []record.RecordHeader) (expect int64, snapshot, signed bool, err error) {
	expect = NoExpectation
	for _, h := range hs {
		switch h.Key {
		case proof.SignatureHeader:
			signed = true
		case SnapshotHeader:
			snapshot = true
		case ExpectedVersionHeader:
			if expect != NoExpectation {
				return 0, false, false, fmt.Errorf("header %s given twice", ExpectedVersionHeader)
			}
			v, err := strconv.ParseInt(string(h.Value), 10, 64)
			if err != nil || v < -1 || strconv.FormatInt(v, 10) != string(h.Value) {
				return 0, false, false, fmt.Errorf("header %s is %q: want an offset, or -1 for a key with no event yet", ExpectedVersionHeader, h.Value)
			}
			expect = v
		}
	}
	if expect != NoExpectation && key == nil {
		return 0, false, false, fmt.Errorf("header %s on a record without a key", ExpectedVersionHeader)
	}
	return expect, snapshot, signed, nil
}

// FieldSubject finds the string at path in value, a key or value in
// Confluent's wire format, with the schema its id names in a tenant's
// registry (set by the schemas module: Topics.SubjectOfField).
type FieldSubject func(value []byte, path []string) (subject []byte, found bool, err error)

// recordSubject is a record's subject under the topic's config (header:
// the value of its subject.Header; json: the pointer's string in its
// value; field: the string at the path in its schema-encoded value, found
// with field), checked: nil when it has none, an error when it is invalid
// or missing where the topic requires one. (A second pass over the
// headers, made from app version 11 only: keyHeaders' results stay what
// they were under every version.)
func recordSubject(cfg *TopicConfig, hs []record.RecordHeader, value []byte, field FieldSubject) ([]byte, error) {
	var s []byte
	if cfg.SubjectField != nil {
		var found bool
		var err error
		if value != nil {
			if field == nil {
				return nil, fmt.Errorf("no subject at field %s (stele.subject.from): no schema registry", strings.Join(cfg.SubjectField, "."))
			}
			s, found, err = field(value, cfg.SubjectField)
		}
		if err != nil {
			return nil, fmt.Errorf("no subject at field %s (stele.subject.from): %v", strings.Join(cfg.SubjectField, "."), err)
		}
		if !found {
			s = nil
		}
	} else if cfg.SubjectFrom == nil {
		for _, h := range hs {
			if h.Key != subject.Header {
				continue
			}
			if s != nil {
				return nil, fmt.Errorf("header %s given twice", subject.Header)
			}
			s = h.Value
			if s == nil {
				s = []byte{} // a null value: an empty subject, refused below
			}
		}
	} else {
		var found bool
		var err error
		s, found, err = cfg.SubjectFrom.FromJSON(value)
		if err != nil {
			return nil, fmt.Errorf("no subject at %q (stele.subject.from): %v", cfg.SubjectFrom.String(), err)
		}
		if !found {
			s = nil
		}
	}
	if s == nil {
		if cfg.SubjectRequired {
			if cfg.SubjectField != nil {
				return nil, fmt.Errorf("no subject: the value has no string at field %s, and the topic requires a subject (stele.subject.required=true)", strings.Join(cfg.SubjectField, "."))
			}
			if cfg.SubjectFrom != nil {
				return nil, fmt.Errorf("no subject: the value has no string at %q, and the topic requires a subject (stele.subject.required=true)", cfg.SubjectFrom.String())
			}
			return nil, fmt.Errorf("no subject: the record has no %s header, and the topic requires a subject (stele.subject.required=true)", subject.Header)
		}
		return nil, nil
	}
	if err := subject.Check(s); err != nil {
		return nil, err
	}
	return s, nil
}
