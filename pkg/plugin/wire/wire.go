// Package wire is how a Stele broker and a plugin's WebAssembly module
// pass records to each other (issue 24): the host encodes a hook's input
// into the module's memory, the module answers with its output, and both
// sides decode with this package, which has no dependencies so that it
// builds for GOOS=wasip1.
//
// All integers are little-endian. A string is a u32 length and its bytes;
// a nullable byte string an i32 length (-1: null) and its bytes.
//
//	Input:  u32 version (1), u32 config count, (string key, string value)...,
//	        string topic, i32 partition, records
//	Output: u8 verdict: 0 (the records to store follow) or 1 (the batch is
//	        rejected: a string message follows)
//	records: u32 count, then each: i64 timestamp, nullable key, nullable
//	        value, u32 header count, (string key, nullable value)...
//
// The fetch hook's input and output are the same but for a principal after
// the partition and each record's offset before it:
//
//	FetchInput:  u32 version (1), u32 config count, (string key, string
//	        value)..., string topic, i32 partition, string principal,
//	        fetch records
//	FetchOutput: u8 verdict: 0 (fetch records follow) or 1 (a string
//	        message follows)
//	fetch records: u32 count, then each: i64 offset, then a record as above
//
// A decoder refuses what the bytes after a count could not hold, so no
// input makes it allocate more than the input's size allows.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Version is the version of the input encoding.
const Version = 1

// ErrMalformed wraps every reason a decoder refuses its input.
var ErrMalformed = errors.New("stele/plugin/wire: malformed")

// Record is a record as a hook sees it. A nil Key or Value is null.
type Record struct {
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Header is a record header; a nil Value is null.
type Header struct {
	Key   string
	Value []byte
}

// Input is what a produce hook is given: its plugin's config, the
// partition, and the batch's records.
type Input struct {
	Config    []Config // in the order deployed
	Topic     string
	Partition int32
	Records   []Record
}

// Config is one key=value of a plugin's config.
type Config struct{ Key, Value string }

// Output is what a produce hook answers: the records to store, or a
// rejection with its message.
type Output struct {
	Reject  bool
	Message string
	Records []Record
}

// FetchRecord is a stored record as the fetch hook sees it: its offset and
// the record.
type FetchRecord struct {
	Offset int64
	Record
}

// FetchInput is what a fetch hook is given: its plugin's config, the
// partition, the principal of the consumer (User:alice, User:ANONYMOUS
// where clients are not authenticated) and the records of the fetch, in
// offset order.
type FetchInput struct {
	Config    []Config
	Topic     string
	Partition int32
	Principal string
	Records   []FetchRecord
}

// FetchOutput is what a fetch hook answers: the records to send in place
// of the input's (each with the offset of the input record it stands for),
// or a refusal with its message.
type FetchOutput struct {
	Reject  bool
	Message string
	Records []FetchRecord
}

// AppendFetchInput appends the encoding of in to b.
func AppendFetchInput(b []byte, in FetchInput) []byte {
	b = binary.LittleEndian.AppendUint32(b, Version)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(in.Config)))
	for _, c := range in.Config {
		b = appendString(b, c.Key)
		b = appendString(b, c.Value)
	}
	b = appendString(b, in.Topic)
	b = binary.LittleEndian.AppendUint32(b, uint32(in.Partition))
	b = appendString(b, in.Principal)
	return appendFetchRecords(b, in.Records)
}

// AppendFetchOutput appends the encoding of out to b.
func AppendFetchOutput(b []byte, out FetchOutput) []byte {
	if out.Reject {
		return appendString(append(b, 1), out.Message)
	}
	return appendFetchRecords(append(b, 0), out.Records)
}

func appendFetchRecords(b []byte, rs []FetchRecord) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rs)))
	for _, r := range rs {
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Offset))
		b = appendRecord(b, r.Record)
	}
	return b
}

// AppendInput appends the encoding of in to b.
func AppendInput(b []byte, in Input) []byte {
	b = binary.LittleEndian.AppendUint32(b, Version)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(in.Config)))
	for _, c := range in.Config {
		b = appendString(b, c.Key)
		b = appendString(b, c.Value)
	}
	b = appendString(b, in.Topic)
	b = binary.LittleEndian.AppendUint32(b, uint32(in.Partition))
	return appendRecords(b, in.Records)
}

// AppendOutput appends the encoding of out to b.
func AppendOutput(b []byte, out Output) []byte {
	if out.Reject {
		return appendString(append(b, 1), out.Message)
	}
	return appendRecords(append(b, 0), out.Records)
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendNullable(b []byte, v []byte) []byte {
	if v == nil {
		return binary.LittleEndian.AppendUint32(b, math.MaxUint32) // -1
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

func appendRecords(b []byte, rs []Record) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rs)))
	for _, r := range rs {
		b = appendRecord(b, r)
	}
	return b
}

func appendRecord(b []byte, r Record) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Timestamp))
	b = appendNullable(b, r.Key)
	b = appendNullable(b, r.Value)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Headers)))
	for _, h := range r.Headers {
		b = appendString(b, h.Key)
		b = appendNullable(b, h.Value)
	}
	return b
}

// DecodeInput decodes an input; the result shares no bytes with b.
func DecodeInput(b []byte) (Input, error) {
	d := decoder{b: b}
	var in Input
	if v := d.u32(); d.err == nil && v != Version {
		return in, fmt.Errorf("%w: input version %d, this decoder reads %d", ErrMalformed, v, Version)
	}
	n := d.count(8)
	for i := 0; i < n && d.err == nil; i++ {
		in.Config = append(in.Config, Config{Key: d.string(), Value: d.string()})
	}
	in.Topic = d.string()
	in.Partition = int32(d.u32())
	in.Records = d.records()
	return in, d.done()
}

// DecodeFetchInput decodes a fetch hook's input; the result shares no
// bytes with b.
func DecodeFetchInput(b []byte) (FetchInput, error) {
	d := decoder{b: b}
	var in FetchInput
	if v := d.u32(); d.err == nil && v != Version {
		return in, fmt.Errorf("%w: input version %d, this decoder reads %d", ErrMalformed, v, Version)
	}
	n := d.count(8)
	for i := 0; i < n && d.err == nil; i++ {
		in.Config = append(in.Config, Config{Key: d.string(), Value: d.string()})
	}
	in.Topic = d.string()
	in.Partition = int32(d.u32())
	in.Principal = d.string()
	in.Records = d.fetchRecords()
	return in, d.done()
}

// DecodeFetchOutput decodes a fetch hook's output; the result shares no
// bytes with b.
func DecodeFetchOutput(b []byte) (FetchOutput, error) {
	d := decoder{b: b}
	var out FetchOutput
	switch v := d.u8(); {
	case d.err != nil:
	case v == 0:
		out.Records = d.fetchRecords()
	case v == 1:
		out.Reject, out.Message = true, d.string()
	default:
		d.fail("verdict %d", v)
	}
	return out, d.done()
}

// DecodeOutput decodes an output; the result shares no bytes with b.
func DecodeOutput(b []byte) (Output, error) {
	d := decoder{b: b}
	var out Output
	switch v := d.u8(); {
	case d.err != nil:
	case v == 0:
		out.Records = d.records()
	case v == 1:
		out.Reject, out.Message = true, d.string()
	default:
		d.fail("verdict %d", v)
	}
	return out, d.done()
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("%d bytes wanted, %d left", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

// count reads a count of entries of at least min bytes each, which the
// bytes left must hold.
func (d *decoder) count(min int) int {
	n := d.u32()
	if d.err == nil && uint64(n)*uint64(min) > uint64(len(d.b)) {
		d.fail("a count of %d with %d bytes left", n, len(d.b))
		return 0
	}
	return int(n)
}

func (d *decoder) string() string { return string(d.take(int(d.u32()))) }

func (d *decoder) nullable() []byte {
	n := d.u32()
	if n == math.MaxUint32 || d.err != nil {
		return nil
	}
	v := d.take(int(n))
	if v == nil {
		return nil
	}
	return append([]byte{}, v...)
}

func (d *decoder) records() []Record {
	n := d.count(20) // timestamp, two lengths, a header count
	rs := make([]Record, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		rs = append(rs, d.record())
	}
	return slices.Clip(rs)
}

func (d *decoder) fetchRecords() []FetchRecord {
	n := d.count(28) // an offset, then a record's 20
	rs := make([]FetchRecord, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		off := int64(d.u64())
		rs = append(rs, FetchRecord{Offset: off, Record: d.record()})
	}
	return slices.Clip(rs)
}

func (d *decoder) record() Record {
	r := Record{Timestamp: int64(d.u64()), Key: d.nullable(), Value: d.nullable()}
	for j, m := 0, d.count(8); j < m && d.err == nil; j++ {
		r.Headers = append(r.Headers, Header{Key: d.string(), Value: d.nullable()})
	}
	return r
}

func (d *decoder) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the end", len(d.b))
	}
	return d.err
}
