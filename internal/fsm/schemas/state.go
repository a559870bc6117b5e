package schemas

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/stele-io/stele/internal/fsm/core"
)

// The registry's keys in the metadata store (the package comment).
const (
	metaPrefix    = "h/m/"
	schemaPrefix  = "h/i/"
	subjectPrefix = "h/s/"
)

func metaKey(tenant string) []byte { return append([]byte(metaPrefix), tenant...) }

// SchemaKey is the key of tenant's schema id (pkg/proof's SchemaKey).
func SchemaKey(tenant string, id int32) []byte { return schemaKey(tenant, id) }

func schemaKey(tenant string, id int32) []byte {
	k := append([]byte(schemaPrefix), tenant...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(id))
}

func subjectKey(tenant, subject string) []byte {
	k := append([]byte(subjectPrefix), tenant...)
	k = append(k, 0)
	return append(k, subject...)
}

// splitKey splits rest (a key after its prefix) at its first 0 byte.
func splitKey(rest []byte) (tenant string, name []byte, err error) {
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return "", nil, fmt.Errorf("stele/fsm: %w: schema registry key without a tenant", core.ErrMalformed)
	}
	if err := checkTenant(string(rest[:i])); err != nil {
		return "", nil, fmt.Errorf("stele/fsm: %w: schema registry key: %v", core.ErrMalformed, err)
	}
	return string(rest[:i]), rest[i+1:], nil
}

// dirtySet is what a block changed, to be staged: registries' meta,
// schemas and subjects, each by key.
type dirtySet struct {
	keys map[string]bool // string(key)
}

func (d *dirtySet) add(k []byte) {
	if d.keys == nil {
		d.keys = map[string]bool{}
	}
	d.keys[string(k)] = true
}

func (d *dirtySet) meta(tenant string)             { d.add(metaKey(tenant)) }
func (d *dirtySet) schema(tenant string, id int32) { d.add(schemaKey(tenant, id)) }
func (d *dirtySet) subject(tenant, s string)       { d.add(subjectKey(tenant, s)) }

// touch marks tenant's registry changed for the next publish.
func (f *Schemas) touch(tenant string) {
	if f.fresh == nil {
		f.fresh = map[string]bool{}
	}
	f.fresh[tenant] = true
}

// encodeMeta is a registry's h/m/ value:
//
//	u8 version | i32 next id | str level | str mode
func encodeMeta(g *registry) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.I32(g.nextID)
	w.Str(g.level)
	w.Str(g.mode)
	return w.B
}

// encodeSchema is a schema's h/i/ value:
//
//	u8 version | str type | str text | refs | str canonical
func encodeSchema(s *Stored) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.Str(s.Type)
	w.Str(s.Text)
	encodeRefs(w, s.Refs)
	w.Str(s.Canonical)
	return w.B
}

// encodeSubject is a subject's h/s/ value:
//
//	u8 version | str level | count n | n × (i32 version | i32 id | bool deleted)
func encodeSubject(s *Subject) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.Str(s.Level)
	w.Count(len(s.Versions))
	for _, v := range s.Versions {
		w.I32(v.Version)
		w.I32(v.ID)
		w.Bool(v.Deleted)
	}
	return w.B
}

func reader(what string, v []byte) (*core.Reader, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: schema registry %s: state format %d not supported", what, ver)
	}
	return r, nil
}

func emptySchemas(f *Schemas) {
	f.regs = map[string]*registry{}
	f.dirty = dirtySet{}
	f.fresh = map[string]bool{}
	f.view.Store(&View{byTenant: map[string]*TenantView{}})
}

func (f *Schemas) reg(tenant string) *registry {
	g := f.regs[tenant]
	if g == nil {
		g = newRegistry(tenant)
		f.regs[tenant] = g
	}
	return g
}

// RegistryMeta is a registry's h/m/ value: the id its next new schema
// gets, its level and its mode.
type RegistryMeta struct {
	NextID      int32
	Level, Mode string
}

// DecodeRegistryMeta reads a registry's h/m/ value (encodeMeta).
func DecodeRegistryMeta(v []byte) (RegistryMeta, error) {
	r, err := reader("registry", v)
	if err != nil {
		return RegistryMeta{}, err
	}
	m := RegistryMeta{NextID: r.I32(), Level: r.Str(), Mode: r.Str()}
	return m, r.Done()
}

// DecodeStoredSchema reads schema id's h/i/ value (encodeSchema).
func DecodeStoredSchema(id int32, v []byte) (*Stored, error) {
	r, err := reader("schema", v)
	if err != nil {
		return nil, err
	}
	s := &Stored{ID: id, Type: r.Str(), Text: r.Str(), Refs: decodeRefs(r), Canonical: r.Str()}
	return s, r.Done()
}

// DecodeSubject reads subject name's h/s/ value (encodeSubject).
func DecodeSubject(name string, v []byte) (*Subject, error) {
	r, err := reader("subject", v)
	if err != nil {
		return nil, err
	}
	s := &Subject{Name: name, Level: r.Str()}
	for i, n := 0, r.Count(9); i < n && r.E == nil; i++ {
		s.Versions = append(s.Versions, Version{Version: r.I32(), ID: r.I32(), Deleted: r.Bool()})
	}
	return s, r.Done()
}

func loadSchemas(f *Schemas) error {
	emptySchemas(f)
	err := f.Store.Scan([]byte(metaPrefix), func(k, v []byte) error {
		tenant := string(k[len(metaPrefix):])
		if err := checkTenant(tenant); err != nil {
			return fmt.Errorf("stele/fsm: %w: schema registry of %q: %v", core.ErrMalformed, tenant, err)
		}
		m, err := DecodeRegistryMeta(v)
		if err != nil {
			return err
		}
		g := f.reg(tenant)
		g.nextID, g.level, g.mode = m.NextID, m.Level, m.Mode
		return nil
	})
	if err == nil {
		err = f.Store.Scan([]byte(schemaPrefix), func(k, v []byte) error {
			tenant, rest, err := splitKey(k[len(schemaPrefix):])
			if err != nil || len(rest) != 4 {
				return fmt.Errorf("stele/fsm: %w: schema key %q", core.ErrMalformed, k)
			}
			s, err := DecodeStoredSchema(int32(binary.BigEndian.Uint32(rest)), v)
			if err != nil {
				return err
			}
			g := f.reg(tenant)
			g.schemas[s.ID] = s
			g.byCanon[s.identity()] = s.ID
			return nil
		})
	}
	if err == nil {
		err = f.Store.Scan([]byte(subjectPrefix), func(k, v []byte) error {
			tenant, name, err := splitKey(k[len(subjectPrefix):])
			if err != nil {
				return err
			}
			s, err := DecodeSubject(string(name), v)
			if err != nil {
				return err
			}
			f.reg(tenant).subjects[s.Name] = s
			return nil
		})
	}
	if err != nil {
		return err
	}
	f.fresh = map[string]bool{}
	for t := range f.regs {
		f.fresh[t] = true
	}
	return nil
}

// stageSchemas writes what the block changed: each dirty key's value as
// the registries now hold it, or its deletion.
func stageSchemas(f *Schemas, b *core.StateBatch) error {
	for _, k := range core.SortedKeys(f.dirty.keys) {
		key := []byte(k)
		var v []byte
		switch {
		case bytes.HasPrefix(key, []byte(metaPrefix)):
			if g := f.regs[k[len(metaPrefix):]]; g != nil {
				v = encodeMeta(g)
			}
		case bytes.HasPrefix(key, []byte(schemaPrefix)):
			tenant, rest, _ := splitKey(key[len(schemaPrefix):])
			if g := f.regs[tenant]; g != nil {
				if s := g.schemas[int32(binary.BigEndian.Uint32(rest))]; s != nil {
					v = encodeSchema(s)
				}
			}
		case bytes.HasPrefix(key, []byte(subjectPrefix)):
			tenant, name, _ := splitKey(key[len(subjectPrefix):])
			if g := f.regs[tenant]; g != nil {
				if s := g.subjects[string(name)]; s != nil {
					v = encodeSubject(s)
				}
			}
		}
		if v != nil {
			b.Set(key, v)
		} else {
			b.Delete(key)
		}
	}
	clear(f.dirty.keys)
	return nil
}

// publishSchemas publishes the registries changed since the last publish,
// copied; the others' views are kept.
func publishSchemas(f *Schemas, _ bool) {
	if len(f.fresh) == 0 {
		return
	}
	old := f.view.Load()
	v := &View{byTenant: maps.Clone(old.byTenant)}
	for _, t := range core.SortedKeys(f.fresh) {
		g := f.regs[t]
		if g == nil {
			delete(v.byTenant, t)
			continue
		}
		v.byTenant[t] = g.snapshot()
	}
	clear(f.fresh)
	f.view.Store(v)
}

// snapshot is a copy of g for readers.
func (g *registry) snapshot() *TenantView {
	tv := &TenantView{Tenant: g.tenant, Level: g.level, Mode: g.mode,
		schemas: make(map[int32]*Stored, len(g.schemas)), byCanon: maps.Clone(g.byCanon), subjects: make(map[string]*Subject, len(g.subjects))}
	for id, s := range g.schemas {
		c := *s
		c.Refs = slices.Clone(s.Refs)
		tv.schemas[id] = &c
	}
	for name, s := range g.subjects {
		tv.subjects[name] = &Subject{Name: s.Name, Level: s.Level, Versions: slices.Clone(s.Versions)}
	}
	return tv
}
