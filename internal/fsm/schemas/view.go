package schemas

import (
	"maps"
	"slices"
	"sync/atomic"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/schema"
)

// viewPointer holds the published View.
type viewPointer = atomic.Pointer[View]

// View is the committed registries, as readers see them. Nothing in it
// changes once published.
type View struct {
	byTenant map[string]*TenantView
}

// SchemasView returns the committed registries.
func (f *Schemas) SchemasView() *View { return f.view.Load() }

// Tenant returns tenant's registry ("" the default tenant's): an empty
// one when it has none yet.
func (v *View) Tenant(tenant string) *TenantView {
	if v != nil {
		if tv := v.byTenant[tenant]; tv != nil {
			return tv
		}
	}
	return &TenantView{Tenant: tenant}
}

// TenantView is one tenant's committed registry.
type TenantView struct {
	Tenant string
	// Level and Mode are the registry's own ("": not set; see
	// EffectiveLevel).
	Level, Mode string

	schemas  map[int32]*Stored
	byCanon  map[string]int32
	subjects map[string]*Subject
}

// EffectiveLevel is the compatibility level subject's versions are checked
// at ("" for the registry's).
func (tv *TenantView) EffectiveLevel(subject string) string {
	if s := tv.subjects[subject]; s != nil && s.Level != "" {
		return s.Level
	}
	if tv.Level != "" {
		return tv.Level
	}
	return schema.DefaultLevel
}

// EffectiveMode is the registry's mode.
func (tv *TenantView) EffectiveMode() string {
	if tv.Mode == "" {
		return ModeReadWrite
	}
	return tv.Mode
}

// SubjectLevel is subject's own level ("" when it has none).
func (tv *TenantView) SubjectLevel(subject string) string {
	if s := tv.subjects[subject]; s != nil {
		return s.Level
	}
	return ""
}

// Subjects lists the subjects with a live version (with deleted, those
// with a soft-deleted one too), sorted.
func (tv *TenantView) Subjects(deleted bool) []string {
	var out []string
	for _, name := range core.SortedKeys(tv.subjects) {
		s := tv.subjects[name]
		if len(s.Versions) > 0 && (deleted || len(s.live()) > 0) {
			out = append(out, name)
		}
	}
	return out
}

// Versions lists subject's versions (with deleted, the soft-deleted ones
// too); ok is false when the subject has none to list.
func (tv *TenantView) Versions(subject string, deleted bool) (vs []Version, ok bool) {
	s := tv.subjects[subject]
	if s == nil {
		return nil, false
	}
	for _, v := range s.Versions {
		if deleted || !v.Deleted {
			vs = append(vs, v)
		}
	}
	return vs, len(vs) > 0
}

// HasSubject reports whether subject has any version, deleted or not.
func (tv *TenantView) HasSubject(subject string) bool {
	s := tv.subjects[subject]
	return s != nil && len(s.Versions) > 0
}

// Version returns subject's version v (Latest: its latest live one); a
// soft-deleted version only with deleted.
func (tv *TenantView) Version(subject string, v int32, deleted bool) (Version, *Stored, bool) {
	s := tv.subjects[subject]
	if s == nil {
		return Version{}, nil, false
	}
	i := s.find(v)
	if v == Latest && i < 0 && deleted && len(s.Versions) > 0 {
		i = len(s.Versions) - 1
	}
	if i < 0 || (s.Versions[i].Deleted && !deleted) {
		return Version{}, nil, false
	}
	st := tv.schemas[s.Versions[i].ID]
	return s.Versions[i], st, st != nil
}

// Schema returns the schema with id.
func (tv *TenantView) Schema(id int32) (*Stored, bool) {
	s, ok := tv.schemas[id]
	return s, ok
}

// IDs lists the ids of the registry's schemas, sorted.
func (tv *TenantView) IDs() []int32 { return slices.Sorted(maps.Keys(tv.schemas)) }

// SubjectVersion is a subject and one of its versions.
type SubjectVersion struct {
	Subject string `json:"subject"`
	Version int32  `json:"version"`
}

// Uses lists the subject versions that have schema id (with deleted, the
// soft-deleted ones too), by subject then version.
func (tv *TenantView) Uses(id int32, deleted bool) []SubjectVersion {
	var out []SubjectVersion
	for _, name := range core.SortedKeys(tv.subjects) {
		for _, v := range tv.subjects[name].Versions {
			if v.ID == id && (deleted || !v.Deleted) {
				out = append(out, SubjectVersion{Subject: name, Version: v.Version})
			}
		}
	}
	return out
}

// Resolver finds the schemas references name, as the registry's apply
// does.
func (tv *TenantView) Resolver() schema.Resolver {
	return func(subject string, version int32) (schema.Def, bool) {
		_, st, ok := tv.Version(subject, version, true)
		if !ok {
			return schema.Def{}, false
		}
		return st.Def(), true
	}
}

// Lookup finds s under subject: the live version whose schema is the same
// one (the same type, canonical form and references).
func (tv *TenantView) Lookup(subject string, s *schema.Schema, deleted bool) (Version, *Stored, bool) {
	st := &Stored{Type: s.Type, Canonical: s.Canonical, Refs: s.Refs}
	id, ok := tv.byCanon[st.identity()]
	if !ok {
		return Version{}, nil, false
	}
	sub := tv.subjects[subject]
	if sub == nil {
		return Version{}, nil, false
	}
	for i := len(sub.Versions) - 1; i >= 0; i-- {
		if v := sub.Versions[i]; v.ID == id && (deleted || !v.Deleted) {
			return v, tv.schemas[id], true
		}
	}
	return Version{}, nil, false
}

// Parse parses the schema st (with the references it names) as the apply
// parsed it when it was registered.
func (tv *TenantView) Parse(st *Stored) (*schema.Schema, error) {
	return schema.Parse(st.Def(), tv.Resolver())
}
