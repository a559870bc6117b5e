// Package schema is what Stele knows of schemas as a schema registry does
// (issue 22, docs/schemas.md): parsing a schema with the schemas it
// references, the form under which two schemas are the same one, and
// whether a schema is compatible with earlier ones under each of
// Confluent's compatibility levels.
//
// The state machine's schemas module (internal/fsm/schemas) decides with
// it inside the deterministic apply, and the HTTP front-end with the same
// functions for lookups, so both must give every broker the same answer:
// nothing here reads the clock, randomness or the environment, and no
// result depends on map order. Each parse uses a schema cache of its own
// (never hamba/avro's process-wide one), so what one schema defines never
// leaks into another's parse. Verdicts are booleans and codes; the
// messages that explain them are for people and are never hashed.
//
// Formats: Avro (github.com/hamba/avro/v2), JSON Schema
// (github.com/santhosh-tekuri/jsonschema/v6, json.go) and Protobuf
// (github.com/bufbuild/protocompile, protobuf.go).
//
// schema imports no package of Stele's.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The schema types, as Confluent's registry names them.
const (
	TypeAvro     = "AVRO"
	TypeJSON     = "JSON"
	TypeProtobuf = "PROTOBUF"
)

// Types are the schema types served, as GET /schemas/types lists them.
var Types = []string{TypeAvro, TypeJSON, TypeProtobuf}

// Limits on what one schema may be: they bound the cost of parsing it in
// the deterministic apply.
const (
	// MaxText bounds a schema's text.
	MaxText = 256 << 10
	// MaxRefs bounds the references one schema names.
	MaxRefs = 64
	// MaxRefDepth bounds how deep references nest.
	MaxRefDepth = 8
	// MaxRefTotal bounds the schemas one parse reads through references,
	// counted with repeats.
	MaxRefTotal = 256
)

// ErrInvalid is wrapped by every error that says a schema is not one.
var ErrInvalid = errors.New("stele/schema: invalid schema")

// ErrReference is wrapped by the errors of a reference that names no
// schema.
var ErrReference = errors.New("stele/schema: reference not found")

// Ref is a reference from a schema to another: Name as the referring
// schema uses it (for Avro, the full name of a type the referenced schema
// defines), and the subject and version the referenced schema is
// registered under.
type Ref struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int32  `json:"version"`
}

// Def is a schema as it is registered: its type, its text and its
// references.
type Def struct {
	Type string
	Text string
	Refs []Ref
}

// Resolver finds the schema registered under subject at version, for
// references.
type Resolver func(subject string, version int32) (Def, bool)

// Schema is a parsed schema.
type Schema struct {
	Def
	// Canonical is the form under which two schemas of one type are the
	// same: the schema's JSON with whitespace, key order and (for Avro)
	// number spellings made uniform (defaults, docs and other attributes
	// kept, as Confluent's registry keeps them when it compares); a
	// Protobuf file's tokens without layout or comments (protoCanonical).
	Canonical string
	avro      avro.Schema
	json      *jsonSchema
	proto     protoreflect.FileDescriptor
}

// NormalizeType is the type a registration names, "" read as AVRO (as
// Confluent's registry reads it).
func NormalizeType(t string) string {
	if t == "" {
		return TypeAvro
	}
	return strings.ToUpper(t)
}

// Parse parses d, reading the schemas it references through resolve.
//
// A panic of the parsing library is an invalid schema: every broker meets
// the same one on the same input, so the verdict is the same everywhere,
// and a crafted schema cannot stop the chain.
func Parse(d Def, resolve Resolver) (s *Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%w: the schema breaks the parser (%v)", ErrInvalid, r)
		}
	}()
	d.Type = NormalizeType(d.Type)
	if !slices.Contains(Types, d.Type) {
		return nil, fmt.Errorf("%w: unknown schema type %q; this registry serves %v", ErrInvalid, d.Type, Types)
	}
	if len(d.Text) > MaxText {
		return nil, fmt.Errorf("%w: %d bytes; a schema is at most %d", ErrInvalid, len(d.Text), MaxText)
	}
	if !utf8.ValidString(d.Text) {
		return nil, fmt.Errorf("%w: a schema is UTF-8 text", ErrInvalid)
	}
	if len(d.Refs) > MaxRefs {
		return nil, fmt.Errorf("%w: %d references; a schema names at most %d", ErrInvalid, len(d.Refs), MaxRefs)
	}
	p := &parser{resolve: resolve, cache: &avro.SchemaCache{}}
	switch d.Type {
	case TypeJSON:
		return p.jsonParse(d)
	case TypeProtobuf:
		return p.protoParse(d)
	}
	if err := p.refs(d.Refs, 0); err != nil {
		return nil, err
	}
	as, err := avro.ParseWithCache(d.Text, "", p.cache)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	canon, err := json.Marshal(as)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &Schema{Def: d, Canonical: string(canon), avro: as}, nil
}

// parser reads a schema's references into one cache.
type parser struct {
	resolve Resolver
	cache   *avro.SchemaCache
	read    int
}

// reference is the schema r names, of type typ, at depth (the schema
// being parsed is at 0), within the limits on references.
func (p *parser) reference(r Ref, depth int, typ string) (Def, error) {
	if depth >= MaxRefDepth {
		return Def{}, fmt.Errorf("%w: references nest deeper than %d", ErrInvalid, MaxRefDepth)
	}
	if r.Name == "" || r.Subject == "" {
		return Def{}, fmt.Errorf("%w: a reference needs a name and a subject", ErrInvalid)
	}
	if p.read++; p.read > MaxRefTotal {
		return Def{}, fmt.Errorf("%w: more than %d schemas read through references", ErrInvalid, MaxRefTotal)
	}
	d, ok := p.resolve(r.Subject, r.Version)
	if !ok {
		return Def{}, fmt.Errorf("%w: subject %q version %d (reference %q)", ErrReference, r.Subject, r.Version, r.Name)
	}
	if NormalizeType(d.Type) != typ {
		return Def{}, fmt.Errorf("%w: reference %q is a %s schema, not %s", ErrInvalid, r.Name, NormalizeType(d.Type), typ)
	}
	return d, nil
}

func (p *parser) refs(refs []Ref, depth int) error {
	for _, r := range refs {
		d, err := p.reference(r, depth, TypeAvro)
		if err != nil {
			return err
		}
		if err := p.refs(d.Refs, depth+1); err != nil {
			return err
		}
		if _, err := avro.ParseWithCache(d.Text, "", p.cache); err != nil {
			return fmt.Errorf("%w: reference %q: %v", ErrInvalid, r.Name, err)
		}
	}
	return nil
}

// Compact is text with the whitespace between JSON tokens removed, as the
// registry stores and returns a schema; text itself when it is not JSON.
func Compact(text string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(text)) != nil {
		return text
	}
	return b.String()
}

// RecordName is the name RecordNameStrategy gives the schema's subject:
// an Avro named type's full name, a JSON schema's title, a Protobuf
// file's first message's full name.
func (s *Schema) RecordName() (string, bool) { return s.RecordNameOf(nil) }

// RecordNameOf is the name RecordNameStrategy gives the subject of
// payload, written with s: RecordName, but for Protobuf the full name of
// the message payload's indexes name.
func (s *Schema) RecordNameOf(payload []byte) (string, bool) {
	if s.proto != nil {
		return s.protoRecordName(payload)
	}
	if s.json != nil {
		if m, ok := s.json.docs[mainURL].(map[string]any); ok {
			if t, ok := m["title"].(string); ok && t != "" {
				return t, true
			}
		}
		return "", false
	}
	if n, ok := s.avro.(avro.NamedSchema); ok {
		return n.FullName(), true
	}
	return "", false
}

// Avro returns the parsed Avro schema (nil for other types).
func (s *Schema) Avro() avro.Schema { return s.avro }
