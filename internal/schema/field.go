package schema

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/hamba/avro/v2"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// MaxFieldPath bounds the fields a path (stele.subject.from=field:PATH)
// names.
const MaxFieldPath = 16

// Field is the string at path in payload, a value of s: path names a
// field of a record (Avro), a member of an object (JSON Schema) or a field
// of a message by its name in the .proto file (Protobuf), then a field of
// that, and so on. found is false when the payload has no such field or
// it is null (Avro's null branch of a union, JSON's null, an unset
// Protobuf message field); a field that is not a string, and a payload s
// does not decode, are errors. The payload is decoded whole (Validate's
// bounds hold), so the cost is a decode's.
func (s *Schema) Field(payload []byte, path []string) (v []byte, found bool, err error) {
	if s.proto != nil {
		return s.protoField(payload, path)
	}
	if s.avro != nil {
		return s.avroField(payload, path)
	}
	js, err := s.DecodeJSON(payload)
	if err != nil {
		return nil, false, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrPayload, err)
	}
	for _, name := range path {
		obj, ok := doc.(map[string]any)
		if !ok {
			return nil, false, nil // the path goes on into a scalar or an array
		}
		if doc, ok = obj[name]; !ok {
			return nil, false, nil
		}
	}
	switch d := doc.(type) {
	case string:
		return []byte(d), true, nil
	case nil:
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("the field %s is a %s, not a string", joinPath(path), jsonKind(doc))
}

func joinPath(path []string) string {
	var b bytes.Buffer
	for i, p := range path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "record"
	case []any:
		return "list"
	case bool:
		return "boolean"
	}
	return "number"
}

// protoField walks a decoded message's fields by their names in the .proto
// file; a field not set (a proto3 string left empty too) is not found.
func (s *Schema) protoField(payload []byte, path []string) ([]byte, bool, error) {
	m, err := s.protoDecode(payload)
	if err != nil {
		return nil, false, err
	}
	msg := protoreflect.Message(m)
	for i, name := range path {
		fd := msg.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil || !msg.Has(fd) {
			return nil, false, nil
		}
		last := i == len(path)-1
		switch {
		case fd.IsList() || fd.IsMap():
			if last {
				return nil, false, fmt.Errorf("the field %s is a list, not a string", joinPath(path))
			}
			return nil, false, nil
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if last {
				return nil, false, fmt.Errorf("the field %s is a message, not a string", joinPath(path))
			}
			msg = msg.Get(fd).Message()
		case !last:
			return nil, false, nil // the path goes on into a scalar
		case fd.Kind() != protoreflect.StringKind:
			return nil, false, fmt.Errorf("the field %s is a %s, not a string", joinPath(path), fd.Kind())
		default:
			return []byte(msg.Get(fd).String()), true, nil
		}
	}
	return nil, false, nil
}

// avroField walks a decoded Avro value by its record fields' names, into
// the branch a union holds (the decoder wraps a union's value in its
// branch's name: {"Customer": {...}}).
func (s *Schema) avroField(payload []byte, path []string) ([]byte, bool, error) {
	if err := s.Validate(payload); err != nil {
		return nil, false, err
	}
	var v any
	if err := decodeConfig.Unmarshal(s.avro, payload, &v); err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrPayload, err)
	}
	sch := s.avro
	for _, name := range path {
		sch, v = avroBranch(sch, v)
		rec, ok := sch.(*avro.RecordSchema)
		m, isMap := v.(map[string]any)
		if !ok || !isMap {
			return nil, false, nil // the path goes on into a value that is not a record
		}
		var next avro.Schema
		for _, f := range rec.Fields() {
			if f.Name() == name {
				next = f.Type()
			}
		}
		if next == nil {
			return nil, false, nil
		}
		sch, v = next, m[name]
	}
	sch, v = avroBranch(sch, v)
	switch d := v.(type) {
	case string:
		return []byte(d), true, nil
	case nil:
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("the field %s is of Avro type %s, not a string", joinPath(path), sch.Type())
}

// avroBranch is the branch of union sch that v holds, and v unwrapped;
// sch and v themselves when sch is not a union.
func avroBranch(sch avro.Schema, v any) (avro.Schema, any) {
	u, ok := sch.(*avro.UnionSchema)
	if !ok || v == nil {
		return sch, v
	}
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for _, t := range u.Types() {
			name := string(t.Type())
			if n, ok := t.(avro.NamedSchema); ok {
				name = n.FullName()
			}
			if inner, ok := m[name]; ok {
				return t, inner
			}
		}
	}
	return sch, v
}
