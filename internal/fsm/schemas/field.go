package schemas

import (
	"fmt"
	"sync"

	"github.com/stele-io/stele/internal/schema"
)

// A record's subject from a field of its value
// (stele.subject.from=field:PATH, docs/subjects.md): the value is in
// Confluent's wire format, its id names a schema of the topic's tenant's
// registry, and the field at PATH of the decoded value is a string.

// SubjectOfField finds the field at path of value with tenant's registry
// as the block being applied has it (topics.Topics.SubjectOfField): the
// produce's check and the views' copies use it, so every broker finds the
// same subject.
func (f *Schemas) SubjectOfField(tenant string, value []byte, path []string) ([]byte, bool, error) {
	id, payload, err := schema.ParseWire(value)
	if err != nil {
		return nil, false, err
	}
	g := f.regs[tenant]
	var st *Stored
	if g != nil {
		st = g.schemas[id]
	}
	if st == nil {
		return nil, false, fmt.Errorf("schema id %d is not registered", id)
	}
	s, err := f.parsed(g, st)
	if err != nil {
		return nil, false, fmt.Errorf("schema id %d does not parse: %v", id, err)
	}
	return s.Field(payload, path)
}

// CommittedSubjectOfField finds the field at path of value with tenant's
// committed registry, for reads by subject (subjects.Subjects'
// CommittedSubjectOfField). A schema deleted for good since the record
// was written leaves the record without a subject.
func (f *Schemas) CommittedSubjectOfField(tenant string, value []byte, path []string) ([]byte, bool, error) {
	id, payload, err := schema.ParseWire(value)
	if err != nil {
		return nil, false, err
	}
	tv := f.SchemasView().Tenant(tenant)
	st, ok := tv.Schema(id)
	if !ok {
		return nil, false, fmt.Errorf("schema id %d is not registered", id)
	}
	s, err := f.reads.parse(tenant, tv, st)
	if err != nil {
		return nil, false, err
	}
	return s.Field(payload, path)
}

// readParses keeps the schemas parsed for reads, by tenant and id (and the
// stored schema they were parsed from).
type readParses struct {
	mu sync.Mutex
	m  map[parsedKey]readParse
}

type readParse struct {
	from Stored
	s    *schema.Schema
	err  error
}

func (r *readParses) parse(tenant string, tv *TenantView, st *Stored) (*schema.Schema, error) {
	k := parsedKey{tenant, st.ID}
	r.mu.Lock()
	e, ok := r.m[k]
	r.mu.Unlock()
	if ok && e.from.Canonical == st.Canonical && e.from.Text == st.Text {
		return e.s, e.err
	}
	s, err := schema.Parse(st.Def(), tv.Resolver())
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxParsed {
		r.m = map[parsedKey]readParse{}
	}
	r.m[k] = readParse{from: *st, s: s, err: err}
	return s, err
}
