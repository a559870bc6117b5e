package cli

// stele consume --format json (issue 22, docs/schemas.md "Typed reads"):
// each record as a JSON line, as --output json prints it, with its key and
// value decoded when they are in Confluent's wire format: key_typed and
// value_typed hold the schema id and the decoded JSON (or why it could not
// be decoded). The schemas come from the brokers' registry (--http), each
// fetched once.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/stele-io/stele/internal/schema"
)

// formatJSON is the --format value that prints typed JSON lines.
const formatJSON = "json"

// typedRecord is a consumed record with its key and value decoded.
type typedRecord struct {
	consumedRecord
	KeyTyped   *typedField `json:"key_typed,omitempty"`
	ValueTyped *typedField `json:"value_typed,omitempty"`
}

// typedField is a key or value decoded with its schema.
type typedField struct {
	SchemaID int32           `json:"schema_id"`
	JSON     json.RawMessage `json:"json,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// typedEmitter prints records as typed JSON lines.
type typedEmitter struct {
	ctx    context.Context
	cl     *sr.Client
	mu     sync.Mutex
	parsed map[int32]typedSchema
}

type typedSchema struct {
	s   *schema.Schema
	err error
}

func newTypedEmitter(ctx context.Context, cl *sr.Client) *typedEmitter {
	return &typedEmitter{ctx: ctx, cl: cl, parsed: map[int32]typedSchema{}}
}

// schema is the registry's schema id, parsed with its references.
func (e *typedEmitter) schema(id int32) (*schema.Schema, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.parsed[id]; ok {
		return p.s, p.err
	}
	s, err := e.fetch(id)
	e.parsed[id] = typedSchema{s, err}
	return s, err
}

func (e *typedEmitter) fetch(id int32) (*schema.Schema, error) {
	got, err := e.cl.SchemaByID(e.ctx, int(id))
	if err != nil {
		return nil, schemaError(fmt.Sprintf("schema id %d", id), err)
	}
	resolve := func(subject string, version int32) (schema.Def, bool) {
		ss, err := e.cl.SchemaByVersion(e.ctx, subject, int(version))
		if err != nil {
			return schema.Def{}, false
		}
		return defOf(ss.Schema), true
	}
	return schema.Parse(defOf(got), resolve)
}

func defOf(s sr.Schema) schema.Def {
	d := schema.Def{Type: s.Type.String(), Text: s.Schema}
	for _, r := range s.References {
		d.Refs = append(d.Refs, schema.Ref{Name: r.Name, Subject: r.Subject, Version: int32(r.Version)})
	}
	return d
}

// typed decodes b, or returns nil when it is not in the wire format.
func (e *typedEmitter) typed(b []byte) *typedField {
	id, payload, err := schema.ParseWire(b)
	if err != nil {
		return nil
	}
	f := &typedField{SchemaID: id}
	s, err := e.schema(id)
	if err == nil {
		f.JSON, err = s.DecodeJSON(payload)
	}
	if err != nil {
		f.Error = err.Error()
	}
	return f
}

func (e *typedEmitter) emit(w *bufio.Writer, r *kgo.Record) error {
	tr := typedRecord{consumedRecord: consumedOf(r)}
	if r.Key != nil {
		tr.KeyTyped = e.typed(r.Key)
	}
	if r.Value != nil {
		tr.ValueTyped = e.typed(r.Value)
	}
	b, err := json.Marshal(tr)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
