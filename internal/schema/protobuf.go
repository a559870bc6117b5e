package schema

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Protobuf schemas (github.com/bufbuild/protocompile): a schema is the
// text of one .proto file. Its imports are its references, each named by
// the import path the file uses (Confluent's convention), and Google's
// well-known types (google/protobuf/*.proto), which need no reference.
// The compiler reads only the schema and the schemas its references name,
// through an accessor over them, never a file or the network.

// protoMain is the name the schema being parsed has among its imports.
const protoMain = "stele/registered.proto"

// MaxIndexes bounds the message indexes a Protobuf payload's header
// holds: how deep the message it names is nested.
const MaxIndexes = 64

// protoRecursion bounds how deep a Protobuf payload's messages nest.
const protoRecursion = maxDepth

func (p *parser) protoParse(d Def) (*Schema, error) {
	srcs := map[string]string{protoMain: d.Text}
	if err := p.protoRefs(srcs, d.Refs, 0); err != nil {
		return nil, err
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(srcs),
		}),
		MaxParallelism: 1,
		SourceInfoMode: protocompile.SourceInfoNone,
	}
	files, err := c.Compile(context.Background(), protoMain)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, oneLine(err.Error()))
	}
	return &Schema{Def: d, Canonical: protoCanonical(d.Text), proto: files[0]}, nil
}

// protoRefs adds the texts of refs (and of theirs) to srcs by import path.
func (p *parser) protoRefs(srcs map[string]string, refs []Ref, depth int) error {
	for _, r := range refs {
		d, err := p.reference(r, depth, TypeProtobuf)
		if err != nil {
			return err
		}
		if r.Name == protoMain {
			return fmt.Errorf("%w: a reference may not be named %q", ErrInvalid, protoMain)
		}
		if old, ok := srcs[r.Name]; ok && old != d.Text {
			return fmt.Errorf("%w: two references named %q are different schemas", ErrInvalid, r.Name)
		}
		srcs[r.Name] = d.Text
		if err := p.protoRefs(srcs, d.Refs, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// protoCanonical is a .proto text as a sequence of tokens: comments
// dropped, each punctuation mark a token of its own, one space between
// tokens and a line break after each ';', '{' and '}'. Two texts that
// differ only in layout and comments have the same form, which is itself
// the same .proto file.
func protoCanonical(text string) string {
	var b strings.Builder
	var tok strings.Builder
	lineEnd := true
	emit := func(s string) {
		if b.Len() > 0 {
			if lineEnd {
				b.WriteByte('\n')
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(s)
		lineEnd = s == ";" || s == "{" || s == "}"
	}
	flush := func() {
		if tok.Len() > 0 {
			emit(tok.String())
			tok.Reset()
		}
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '/' && i+1 < len(text) && text[i+1] == '/':
			flush()
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(text) && text[i+1] == '*':
			flush()
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				i = len(text)
			} else {
				i += 2 + end + 1
			}
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(text) && text[j] != c {
				if text[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(text) {
				j = len(text) - 1
			}
			tok.WriteString(text[i : j+1])
			i = j
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			flush()
		case strings.IndexByte("{}[]()<>;=,:", c) >= 0:
			flush()
			emit(string(c))
		default:
			tok.WriteByte(c)
		}
	}
	flush()
	return b.String()
}

// ProtoIndexes splits a Protobuf payload (what follows the schema id in
// Confluent's wire format) into its message indexes and the message: a
// count, then that many indexes, each a zigzag varint; a count of 0 stands
// for the one index 0 (the first message of the file).
func ProtoIndexes(b []byte) ([]int, []byte, error) {
	n, k := binary.Varint(b)
	switch {
	case k <= 0:
		return nil, nil, fmt.Errorf("%w: no Protobuf message indexes", ErrWire)
	case n == 0:
		return []int{0}, b[k:], nil
	case n < 0 || n > MaxIndexes:
		return nil, nil, fmt.Errorf("%w: %d Protobuf message indexes; at most %d", ErrWire, n, MaxIndexes)
	}
	b = b[k:]
	idx := make([]int, n)
	for i := range idx {
		v, k := binary.Varint(b)
		if k <= 0 || v < 0 || v > 1<<30 {
			return nil, nil, fmt.Errorf("%w: Protobuf message index %d of %d is not a small varint", ErrWire, i+1, n)
		}
		idx[i], b = int(v), b[k:]
	}
	return idx, b, nil
}

// AppendProtoIndexes appends the message indexes of Confluent's wire
// format to b ([0] as its shortcut, a count of 0).
func AppendProtoIndexes(b []byte, idx []int) []byte {
	if len(idx) == 1 && idx[0] == 0 {
		return append(b, 0)
	}
	b = binary.AppendVarint(b, int64(len(idx)))
	for _, i := range idx {
		b = binary.AppendVarint(b, int64(i))
	}
	return b
}

// messages are a file's or a message's messages as Confluent numbers
// them: in declaration order, without the entries Protobuf makes for maps.
func messages(ms protoreflect.MessageDescriptors) []protoreflect.MessageDescriptor {
	out := make([]protoreflect.MessageDescriptor, 0, ms.Len())
	for i := 0; i < ms.Len(); i++ {
		if m := ms.Get(i); !m.IsMapEntry() {
			out = append(out, m)
		}
	}
	return out
}

// protoMessage is the message idx names in s.
func (s *Schema) protoMessage(idx []int) (protoreflect.MessageDescriptor, error) {
	ms := messages(s.proto.Messages())
	var m protoreflect.MessageDescriptor
	for i, x := range idx {
		if x >= len(ms) {
			return nil, fmt.Errorf("%w: message index %d at depth %d names no message (there are %d)", ErrPayload, x, i, len(ms))
		}
		m = ms[x]
		ms = messages(m.Messages())
	}
	return m, nil
}

// CheckIndexes checks that a Protobuf payload (what follows the id)
// opens with message indexes that name a message of s; it is nil for the
// other types, whose wire format has no indexes.
func (s *Schema) CheckIndexes(payload []byte) error {
	if s.proto == nil {
		return nil
	}
	idx, _, err := ProtoIndexes(payload)
	if err != nil {
		return err
	}
	if m, err := s.protoMessage(idx); err != nil || m == nil {
		return fmt.Errorf("%w: message indexes %v name no message", ErrWire, idx)
	}
	return nil
}

// protoDecode reads payload's message indexes and decodes its message.
func (s *Schema) protoDecode(payload []byte) (*dynamicpb.Message, error) {
	idx, msg, err := ProtoIndexes(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPayload, err)
	}
	md, err := s.protoMessage(idx)
	if err != nil {
		return nil, err
	}
	m := dynamicpb.NewMessage(md)
	if err := (proto.UnmarshalOptions{RecursionLimit: protoRecursion}).Unmarshal(msg, m); err != nil {
		return nil, fmt.Errorf("%w: as %s: %v", ErrPayload, md.FullName(), err)
	}
	return m, nil
}

// validateProto checks that payload is message indexes naming a message
// of s, then one such message in Protobuf's binary encoding: well-formed
// tags, varints and lengths, valid UTF-8 in proto3's strings, proto2's
// required fields present. Fields the schema does not know, and fields
// whose wire type is not their kind's, are unknown fields, which every
// Protobuf reader keeps and skips, so they are valid.
func (s *Schema) validateProto(payload []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: the payload breaks the decoder (%v)", ErrPayload, r)
		}
	}()
	_, err = s.protoDecode(payload)
	return err
}

// protoJSON decodes payload to Protobuf's JSON mapping.
func (s *Schema) protoJSON(payload []byte) (json.RawMessage, error) {
	m, err := s.protoDecode(payload)
	if err != nil {
		return nil, err
	}
	// An Any holding one of the schema's types (or a well-known one) has a
	// JSON form; an Any of another type has none.
	out, err := protojson.MarshalOptions{Resolver: dynamicpb.NewTypes(s.protoFiles())}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: as JSON: %v", ErrPayload, err)
	}
	// protojson varies its spacing on purpose; compact it.
	var b bytes.Buffer
	if err := json.Compact(&b, out); err != nil {
		return nil, fmt.Errorf("%w: as JSON: %v", ErrPayload, err)
	}
	return b.Bytes(), nil
}

// protoFiles is the schema's file and those it imports, as a registry.
func (s *Schema) protoFiles() *protoregistry.Files {
	files := new(protoregistry.Files)
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if _, err := files.FindFileByPath(fd.Path()); err == nil {
			return
		}
		imps := fd.Imports()
		for i := 0; i < imps.Len(); i++ {
			add(imps.Get(i).FileDescriptor)
		}
		_ = files.RegisterFile(fd) // a conflict leaves that file's types out of Any's JSON
	}
	add(s.proto)
	return files
}

// protoRecordName is the full name of the message payload's indexes name,
// or of the file's first message without a payload.
func (s *Schema) protoRecordName(payload []byte) (string, bool) {
	idx := []int{0}
	if payload != nil {
		var err error
		if idx, _, err = ProtoIndexes(payload); err != nil {
			return "", false
		}
	}
	md, err := s.protoMessage(idx)
	if err != nil || md == nil {
		return "", false
	}
	return string(md.FullName()), true
}

// Proto returns the parsed Protobuf file (nil for other types).
func (s *Schema) Proto() protoreflect.FileDescriptor { return s.proto }
