package schema

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/hamba/avro/v2"
)

// ErrPayload is wrapped by the errors of a payload its schema does not
// decode.
var ErrPayload = errors.New("stele/schema: the payload does not decode with its schema")

// maxDepth bounds how deep a payload's values nest.
const maxDepth = 128

// Validate checks that payload is exactly one value of s in Avro's binary
// encoding (Avro 1.11 specification, "Binary Encoding"), without building
// the value: it reads each datum's bytes as the schema says and refuses
// what no Avro writer writes (a boolean other than 0 or 1, an int out of
// range, an enum or union index out of range, a negative length, bytes
// left over). Its cost is bounded by the payload: every value it visits
// costs a byte of it or more, but for values of types that encode to
// nothing (null, an empty record), of which it visits at most 8 per
// payload byte and 64 more.
//
// The verdict is the same on every machine (no allocation depends on the
// payload's claims, no floating point is computed), so the state machine
// may decide with it.
//
// A JSON Schema's payload is one JSON value valid under it (json.go); a
// Protobuf schema's, message indexes and one message (protobuf.go).
func (s *Schema) Validate(payload []byte) error {
	if s.json != nil {
		return s.validateJSON(payload)
	}
	if s.proto != nil {
		return s.validateProto(payload)
	}
	if s.avro == nil {
		return fmt.Errorf("%w: no schema to validate with", ErrPayload)
	}
	v := &avroValidator{b: payload, budget: 8*len(payload) + 64}
	v.value(s.avro, 0)
	if v.err == nil && len(v.b) != 0 {
		v.fail("%d bytes left after the value", len(v.b))
	}
	return v.err
}

type avroValidator struct {
	b      []byte
	budget int // values that may still be visited
	err    error
}

func (v *avroValidator) fail(format string, args ...any) {
	if v.err == nil {
		v.err = fmt.Errorf("%w: %s", ErrPayload, fmt.Sprintf(format, args...))
	}
}

func (v *avroValidator) take(n int64, what string) {
	if v.err != nil {
		return
	}
	if n < 0 || n > int64(len(v.b)) {
		v.fail("%s of %d bytes, %d left", what, n, len(v.b))
		return
	}
	v.b = v.b[n:]
}

// long reads a zig-zag varint of at most 10 bytes.
func (v *avroValidator) long(what string) int64 {
	if v.err != nil {
		return 0
	}
	u, n := binary.Uvarint(v.b)
	if n <= 0 {
		v.fail("%s: not a varint", what)
		return 0
	}
	v.b = v.b[n:]
	return int64(u>>1) ^ -int64(u&1)
}

func (v *avroValidator) value(s avro.Schema, depth int) {
	if v.err != nil {
		return
	}
	if v.budget--; v.budget < 0 {
		v.fail("more values than its %d bytes can hold", len(v.b))
		return
	}
	if depth > maxDepth {
		v.fail("values nest deeper than %d", maxDepth)
		return
	}
	switch s := s.(type) {
	case *avro.RefSchema:
		v.value(s.Schema(), depth)
	case *avro.NullSchema:
	case *avro.PrimitiveSchema:
		v.primitive(s.Type())
	case *avro.RecordSchema:
		for _, f := range s.Fields() {
			v.value(f.Type(), depth+1)
		}
	case *avro.EnumSchema:
		if i := v.long("enum index"); v.err == nil && (i < 0 || i >= int64(len(s.Symbols()))) {
			v.fail("enum %s index %d: it has %d symbols", s.FullName(), i, len(s.Symbols()))
		}
	case *avro.FixedSchema:
		v.take(int64(s.Size()), "fixed "+s.FullName())
	case *avro.UnionSchema:
		i := v.long("union index")
		if v.err == nil && (i < 0 || i >= int64(len(s.Types()))) {
			v.fail("union index %d: the union has %d types", i, len(s.Types()))
			return
		}
		if v.err == nil {
			v.value(s.Types()[i], depth+1)
		}
	case *avro.ArraySchema:
		v.blocks(depth, func() { v.value(s.Items(), depth+1) })
	case *avro.MapSchema:
		v.blocks(depth, func() {
			v.take(v.long("map key length"), "map key")
			v.value(s.Values(), depth+1)
		})
	default:
		v.fail("schema type %s is not validated", s.Type())
	}
}

// blocks reads an array's or a map's blocks, each item with item.
func (v *avroValidator) blocks(depth int, item func()) {
	for v.err == nil {
		n := v.long("block count")
		if v.err != nil || n == 0 {
			return
		}
		if n < 0 {
			if n == math.MinInt64 {
				v.fail("block count %d", n)
				return
			}
			n = -n
			if size := v.long("block size"); v.err == nil && size < 0 {
				v.fail("block size %d", size)
				return
			}
		}
		for ; n > 0 && v.err == nil; n-- {
			if v.budget <= 0 {
				v.fail("a block of more items than its bytes can hold")
				return
			}
			item()
		}
	}
}

func (v *avroValidator) primitive(t avro.Type) {
	switch t {
	case avro.Null:
	case avro.Boolean:
		if len(v.b) == 0 {
			v.fail("boolean: no byte left")
			return
		}
		if v.b[0] > 1 {
			v.fail("boolean byte %d, not 0 or 1", v.b[0])
			return
		}
		v.b = v.b[1:]
	case avro.Int:
		if i := v.long("int"); v.err == nil && (i < math.MinInt32 || i > math.MaxInt32) {
			v.fail("int %d out of range", i)
		}
	case avro.Long:
		v.long("long")
	case avro.Float:
		v.take(4, "float")
	case avro.Double:
		v.take(8, "double")
	case avro.Bytes:
		v.take(v.long("bytes length"), "bytes")
	case avro.String:
		v.take(v.long("string length"), "string")
	default:
		v.fail("type %s is not validated", t)
	}
}

// decodeConfig bounds what decoding a payload may allocate: no more than
// the payload's own bytes for any bytes or string, and for any slice.
var decodeConfig = avro.Config{MaxByteSliceSize: 1 << 20, MaxSliceAllocSize: 1 << 20}.Freeze()

// DecodeJSON decodes payload, one value of s in Avro's binary encoding,
// into JSON: records as objects, maps as objects, arrays as arrays, a
// union's value as the value itself, bytes and fixed as base64 strings,
// enums as their symbols. It validates the payload first (Validate), so a
// payload claiming more than its bytes hold is refused before anything is
// allocated. A JSON Schema's payload is already JSON (compacted here); a
// Protobuf message takes Protobuf's JSON mapping (protojson).
func (s *Schema) DecodeJSON(payload []byte) (json.RawMessage, error) {
	if s.proto != nil {
		return s.protoJSON(payload)
	}
	if err := s.Validate(payload); err != nil {
		return nil, err
	}
	if s.json != nil {
		var b bytes.Buffer
		if err := json.Compact(&b, payload); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPayload, err)
		}
		return b.Bytes(), nil
	}
	var v any
	if err := decodeConfig.Unmarshal(s.avro, payload, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPayload, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: as JSON: %v", ErrPayload, err)
	}
	return b, nil
}
