package httpapi

// Typed reads (issue 22, docs/schemas.md "Typed reads"): with ?format=json
// a read by subject decodes each record's key and value that are in
// Confluent's wire format with a schema of the topic's tenant's registry
// into JSON beside their bytes (key_typed, value_typed: the schema id and
// the JSON); one in the wire format it cannot decode says why (an unknown
// id, a payload its schema does not decode); bytes not in the wire format
// get nothing. The bytes stay, so a record can still be proven.

import (
	"encoding/json"
	"sync"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/schema"
)

// maxTypedCache bounds the parsed schemas a broker keeps for typed reads.
const maxTypedCache = 1024

// typedDecoder decodes records with the registry's schemas, keeping the
// schemas it parsed.
type typedDecoder struct {
	mu struct {
		sync.Mutex
		parsed map[typedKey]typedEntry
	}
}

type typedKey struct {
	tenant string
	id     int32
}

type typedEntry struct {
	from *fsm.StoredSchema
	s    *schema.Schema
	err  error
}

// Typed is what a typed read adds to a key or a value.
type Typed struct {
	SchemaID int32           `json:"schema_id,omitempty"`
	JSON     json.RawMessage `json:"json,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// decode decodes b (a key or a value) of a topic of tenant with reg (the
// tenant's committed registry): nil for nil bytes.
func (d *typedDecoder) decode(reg *fsm.SchemaRegistryView, tenant string, b []byte) *Typed {
	if b == nil {
		return nil
	}
	id, payload, err := schema.ParseWire(b)
	if err != nil {
		return nil // not schema-encoded: its bytes say it all
	}
	st, ok := reg.Schema(id)
	if !ok {
		return &Typed{SchemaID: id, Error: "schema id not registered"}
	}
	s, err := d.parsed(reg, tenant, st)
	if err != nil {
		return &Typed{SchemaID: id, Error: err.Error()}
	}
	js, err := s.DecodeJSON(payload)
	if err != nil {
		return &Typed{SchemaID: id, Error: err.Error()}
	}
	return &Typed{SchemaID: id, JSON: js}
}

func (d *typedDecoder) parsed(reg *fsm.SchemaRegistryView, tenant string, st *fsm.StoredSchema) (*schema.Schema, error) {
	k := typedKey{tenant, st.ID}
	d.mu.Lock()
	e, ok := d.mu.parsed[k]
	d.mu.Unlock()
	if ok && e.from.Canonical == st.Canonical && e.from.Text == st.Text {
		return e.s, e.err
	}
	s, err := reg.Parse(st)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.parsed == nil || len(d.mu.parsed) >= maxTypedCache {
		d.mu.parsed = map[typedKey]typedEntry{}
	}
	d.mu.parsed[k] = typedEntry{from: st, s: s, err: err}
	return s, err
}

// typeRecord adds the typed key and value to out, a record of topic.
func (d *typedDecoder) typeRecord(opts Options, topic string, out *SubjectRecord) {
	tenant, _ := fsm.SplitTenant(topic)
	reg := opts.Broker.Schemas().Tenant(tenant)
	if out.Key != nil {
		out.KeyTyped = d.decode(reg, tenant, *out.Key)
	}
	if out.Value != nil {
		out.ValueTyped = d.decode(reg, tenant, *out.Value)
	}
}
