package schemas

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/schema"
)

// registry is one tenant's registry.
type registry struct {
	tenant string
	nextID int32  // the id the next new schema gets; ids start at 1
	level  string // the registry's compatibility level ("": schema.DefaultLevel)
	mode   string // ModeReadWrite or ModeReadOnly ("": ModeReadWrite)

	schemas  map[int32]*Stored
	byCanon  map[string]int32 // identity (Stored.identity) → id
	subjects map[string]*Subject
}

// Stored is one schema as the state holds it.
type Stored struct {
	ID   int32
	Type string
	// Text is the schema as registered, its JSON whitespace removed (or
	// its canonical form, when registered with Normalize).
	Text string
	Refs []schema.Ref
	// Canonical is its canonical form when it was registered.
	Canonical string
}

// identity is what makes two schemas of a tenant one id: type,
// canonical form and references.
func (s *Stored) identity() string {
	var b strings.Builder
	b.WriteString(s.Type)
	b.WriteByte(0)
	b.WriteString(s.Canonical)
	for _, r := range s.Refs {
		fmt.Fprintf(&b, "\x00%s\x00%s\x00%d", r.Name, r.Subject, r.Version)
	}
	return b.String()
}

// Def is the schema's definition, for parsing.
func (s *Stored) Def() schema.Def { return schema.Def{Type: s.Type, Text: s.Text, Refs: s.Refs} }

// Subject is one subject: its level and its versions, in order.
type Subject struct {
	Name     string
	Level    string // "": the registry's
	Versions []Version
}

// Version is one version of a subject.
type Version struct {
	Version int32
	ID      int32
	Deleted bool // soft-deleted
}

// live is the subject's versions not soft-deleted.
func (s *Subject) live() []Version {
	var out []Version
	for _, v := range s.Versions {
		if !v.Deleted {
			out = append(out, v)
		}
	}
	return out
}

// find returns the index of version v (Latest: the latest live one), or -1.
func (s *Subject) find(v int32) int {
	if v == Latest {
		for i := len(s.Versions) - 1; i >= 0; i-- {
			if !s.Versions[i].Deleted {
				return i
			}
		}
		return -1
	}
	return slices.IndexFunc(s.Versions, func(x Version) bool { return x.Version == v })
}

func newRegistry(tenant string) *registry {
	return &registry{tenant: tenant, nextID: 1, schemas: map[int32]*Stored{}, byCanon: map[string]int32{}, subjects: map[string]*Subject{}}
}

// empty reports whether g holds nothing a command set: what newRegistry
// makes.
func (g *registry) empty() bool {
	return g.nextID == 1 && g.level == "" && g.mode == "" && len(g.schemas) == 0 && len(g.subjects) == 0
}

// resolver finds the schemas g's references name: a live or soft-deleted
// version of a subject (Latest: its latest live one).
func (g *registry) resolver() schema.Resolver {
	return func(subject string, version int32) (schema.Def, bool) {
		s := g.subjects[subject]
		if s == nil {
			return schema.Def{}, false
		}
		i := s.find(version)
		if i < 0 {
			return schema.Def{}, false
		}
		st := g.schemas[s.Versions[i].ID]
		if st == nil {
			return schema.Def{}, false
		}
		return st.Def(), true
	}
}

// levelOf is subject's compatibility level: its own, else the registry's.
func (g *registry) levelOf(s *Subject) string {
	if s != nil && s.Level != "" {
		return s.Level
	}
	if g.level != "" {
		return g.level
	}
	return schema.DefaultLevel
}

func (f *Schemas) readOnly(g *registry) (core.Result, bool) {
	if g.mode == ModeReadOnly {
		return fail(kerr.InvalidRequest.Code, ErrOperationNotPermitted, "the registry is in READONLY mode"), true
	}
	return core.Result{}, false
}

func (f *Schemas) register(g *registry, c RegisterSchema) core.Result {
	if r, ro := f.readOnly(g); ro {
		return r
	}
	refs := slices.Clone(c.Refs)
	for i, r := range refs {
		if r.Version == Latest {
			// A reference to "latest" names the version it is now.
			if s := g.subjects[r.Subject]; s != nil {
				if j := s.find(Latest); j >= 0 {
					refs[i].Version = s.Versions[j].Version
				}
			}
		}
	}
	if schema.NormalizeType(c.Type) == schema.TypeProtobuf && f.cluster.Version < ProtobufVersion {
		// Version 13's binaries refuse Protobuf as a type they do not
		// serve, with the same codes.
		return fail(kerr.InvalidRecord.Code, ErrInvalidSchema, fmt.Sprintf("Protobuf schemas need app version %d; this chain runs %d (stele cluster upgrade)", ProtobufVersion, f.cluster.Version))
	}
	parsed, err := schema.Parse(schema.Def{Type: c.Type, Text: c.Text, Refs: refs}, g.resolver())
	if err != nil {
		return fail(kerr.InvalidRecord.Code, ErrInvalidSchema, err.Error())
	}
	text := c.Text
	if parsed.Type != schema.TypeProtobuf {
		text = schema.Compact(text) // JSON's whitespace, as Confluent's registry stores it
	}
	if c.Normalize {
		text = parsed.Canonical
	}
	st := &Stored{Type: parsed.Type, Text: text, Refs: refs, Canonical: parsed.Canonical}
	sub := g.subjects[c.Subject]
	id, known := g.byCanon[st.identity()]
	if sub != nil && known {
		for _, v := range sub.Versions {
			if v.ID == id && !v.Deleted {
				return core.Result{Schema: &core.SchemaResult{ID: id, Version: v.Version}}
			}
		}
	}
	if sub != nil && len(sub.Versions) >= MaxVersions {
		return fail(kerr.PolicyViolation.Code, ErrOperationNotPermitted, fmt.Sprintf("subject %q has %d versions: at most %d; delete some permanently", c.Subject, len(sub.Versions), MaxVersions))
	}
	// Only the versions the level checks against are parsed (each once:
	// f.parsed keeps them): the latest live one, or every live one for the
	// _TRANSITIVE levels.
	level := g.levelOf(sub)
	var earlier []*schema.Schema
	if sub != nil && level != schema.None {
		live := sub.live()
		if !schema.Transitive(level) && len(live) > 1 {
			live = live[len(live)-1:]
		}
		for _, v := range live {
			old, err := f.parsed(g, g.schemas[v.ID])
			if err != nil {
				// Every broker parses it alike: a verdict, not a fault.
				return fail(kerr.InvalidRecord.Code, ErrInvalidSchema, fmt.Sprintf("version %d of subject %q (schema %d) does not parse, so nothing can be checked against it: %v", v.Version, c.Subject, v.ID, err))
			}
			earlier = append(earlier, old)
		}
	}
	if problems := schema.Compatible(level, parsed, earlier); len(problems) > 0 {
		return fail(kerr.InvalidRecord.Code, ErrIncompatible, fmt.Sprintf("Schema being registered is incompatible with an earlier schema for subject %q, details: %s", c.Subject, strings.Join(problems, "; ")))
	}
	if !known {
		id = g.nextID
		g.nextID++
		st.ID = id
		g.schemas[id] = st
		g.byCanon[st.identity()] = id
		f.dirty.schema(g.tenant, id)
		f.dirty.meta(g.tenant)
	}
	if sub == nil {
		sub = &Subject{Name: c.Subject}
		g.subjects[c.Subject] = sub
	}
	next := int32(1)
	if n := len(sub.Versions); n > 0 {
		next = sub.Versions[n-1].Version + 1
	}
	sub.Versions = append(sub.Versions, Version{Version: next, ID: id})
	f.dirty.subject(g.tenant, c.Subject)
	f.touch(g.tenant)
	return core.Result{Schema: &core.SchemaResult{ID: id, Version: next}}
}

// referenced reports whether a schema of g references subject's version v.
func (g *registry) referenced(subject string, v int32) bool {
	for _, id := range slices.Sorted(maps.Keys(g.schemas)) {
		for _, r := range g.schemas[id].Refs {
			if r.Subject == subject && r.Version == v && g.inUse(id) {
				return true
			}
		}
	}
	return false
}

// inUse reports whether a version of a subject, deleted softly or not,
// has schema id.
func (g *registry) inUse(id int32) bool {
	for _, name := range core.SortedKeys(g.subjects) {
		for _, v := range g.subjects[name].Versions {
			if v.ID == id {
				return true
			}
		}
	}
	return false
}

func (f *Schemas) deleteVersion(g *registry, c DeleteSchemaVersion) core.Result {
	if r, ro := f.readOnly(g); ro {
		return r
	}
	sub := g.subjects[c.Subject]
	if sub == nil || len(sub.Versions) == 0 {
		return fail(kerr.ResourceNotFound.Code, ErrSubjectNotFound, fmt.Sprintf("Subject '%s' not found.", c.Subject))
	}
	i := sub.find(c.Version)
	if i < 0 {
		return fail(kerr.ResourceNotFound.Code, ErrVersionNotFound, fmt.Sprintf("Version %d not found.", c.Version))
	}
	v := sub.Versions[i]
	switch {
	case !c.Permanent && v.Deleted:
		return fail(kerr.InvalidRequest.Code, ErrVersionSoftDeleted, fmt.Sprintf("Subject '%s' Version %d was soft deleted. Set permanent=true to delete permanently", c.Subject, v.Version))
	case c.Permanent && !v.Deleted:
		return fail(kerr.InvalidRequest.Code, ErrVersionNotSoftDeleted, fmt.Sprintf("Subject '%s' Version %d was not deleted first before being permanently deleted", c.Subject, v.Version))
	case g.referenced(c.Subject, v.Version):
		return fail(kerr.InvalidRequest.Code, ErrReferenceExists, fmt.Sprintf("One or more references exist to the schema {subject=%s,version=%d}", c.Subject, v.Version))
	}
	if c.Permanent {
		sub.Versions = slices.Delete(sub.Versions, i, i+1)
		f.forget(g, v.ID)
		if len(sub.Versions) == 0 {
			delete(g.subjects, c.Subject)
		}
	} else {
		sub.Versions[i].Deleted = true
	}
	f.dirty.subject(g.tenant, c.Subject)
	f.touch(g.tenant)
	return core.Result{Schema: &core.SchemaResult{ID: v.ID, Version: v.Version, Versions: []int32{v.Version}}}
}

// forget removes schema id when no version of any subject has it.
func (f *Schemas) forget(g *registry, id int32) {
	if g.inUse(id) {
		return
	}
	if st := g.schemas[id]; st != nil {
		delete(g.byCanon, st.identity())
		delete(g.schemas, id)
		f.dirty.schema(g.tenant, id)
	}
}

func (f *Schemas) deleteSubject(g *registry, c DeleteSchemaSubject) core.Result {
	if r, ro := f.readOnly(g); ro {
		return r
	}
	sub := g.subjects[c.Subject]
	if sub == nil || len(sub.Versions) == 0 {
		return fail(kerr.ResourceNotFound.Code, ErrSubjectNotFound, fmt.Sprintf("Subject '%s' not found.", c.Subject))
	}
	live := sub.live()
	switch {
	case !c.Permanent && len(live) == 0:
		return fail(kerr.InvalidRequest.Code, ErrSubjectSoftDeleted, fmt.Sprintf("Subject '%s' was soft deleted.Set permanent=true to delete permanently", c.Subject))
	case c.Permanent && len(live) > 0:
		return fail(kerr.InvalidRequest.Code, ErrSubjectNotSoftDeleted, fmt.Sprintf("Subject '%s' was not deleted first before being permanently deleted", c.Subject))
	}
	for _, v := range sub.Versions {
		if g.referenced(c.Subject, v.Version) {
			return fail(kerr.InvalidRequest.Code, ErrReferenceExists, fmt.Sprintf("One or more references exist to the schema {subject=%s,version=%d}", c.Subject, v.Version))
		}
	}
	res := &core.SchemaResult{}
	if c.Permanent {
		for _, v := range sub.Versions {
			res.Versions = append(res.Versions, v.Version)
		}
		delete(g.subjects, c.Subject)
		for _, v := range sub.Versions {
			f.forget(g, v.ID)
		}
	} else {
		for i := range sub.Versions {
			if !sub.Versions[i].Deleted {
				sub.Versions[i].Deleted = true
				res.Versions = append(res.Versions, sub.Versions[i].Version)
			}
		}
	}
	f.dirty.subject(g.tenant, c.Subject)
	f.touch(g.tenant)
	return core.Result{Schema: res}
}

func (f *Schemas) setConfig(g *registry, c SetSchemaConfig) core.Result {
	if c.Subject == "" {
		if c.Remove {
			g.level = ""
		} else {
			g.level = c.Level
		}
		f.dirty.meta(g.tenant)
		f.touch(g.tenant)
		return core.Result{Schema: &core.SchemaResult{}}
	}
	sub := g.subjects[c.Subject]
	if c.Remove {
		if sub == nil || sub.Level == "" {
			return fail(kerr.ResourceNotFound.Code, ErrSubjectLevelNotSet, fmt.Sprintf("Subject '%s' does not have subject-level compatibility configured", c.Subject))
		}
		sub.Level = ""
		if len(sub.Versions) == 0 {
			delete(g.subjects, c.Subject)
		}
	} else {
		if sub == nil {
			// A level may be set before the subject's first version,
			// as Confluent's registry allows.
			sub = &Subject{Name: c.Subject}
			g.subjects[c.Subject] = sub
		}
		sub.Level = c.Level
	}
	f.dirty.subject(g.tenant, c.Subject)
	f.touch(g.tenant)
	return core.Result{Schema: &core.SchemaResult{}}
}

func (f *Schemas) setMode(g *registry, c SetSchemaMode) core.Result {
	g.mode = c.Mode
	f.dirty.meta(g.tenant)
	f.touch(g.tenant)
	return core.Result{Schema: &core.SchemaResult{}}
}

// RemoveTenant removes tenant's registry (the tenants module deletes a
// tenant): it returns how many schemas it held.
func (f *Schemas) RemoveTenant(tenant string) int {
	g := f.regs[tenant]
	if g == nil {
		return 0
	}
	n := len(g.schemas)
	for _, id := range slices.Sorted(maps.Keys(g.schemas)) {
		f.dirty.schema(tenant, id)
	}
	for _, s := range core.SortedKeys(g.subjects) {
		f.dirty.subject(tenant, s)
	}
	f.dirty.meta(tenant)
	delete(f.regs, tenant)
	f.touch(tenant)
	return n
}
