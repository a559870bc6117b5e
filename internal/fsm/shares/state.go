package shares

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/stele-io/stele/internal/fsm/core"
)

// The module's keys in the metadata store (the package comment).
const (
	groupPrefix = "f/g/"
	partPrefix  = "f/p/"
)

func groupKey(name string) []byte { return append([]byte(groupPrefix), name...) }

func partKeyBytes(group string, k partKey) []byte {
	b := append([]byte(partPrefix), group...)
	b = append(b, 0)
	b = append(b, k.Topic...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint32(b, uint32(k.Partition))
}

// dirtySet is what a block changed, to be staged and published.
type dirtySet struct {
	groups map[string]bool
	parts  map[string]map[partKey]bool
}

func (d *dirtySet) group(name string) {
	if d.groups == nil {
		d.groups = map[string]bool{}
	}
	d.groups[name] = true
}

func (d *dirtySet) part(group string, k partKey) {
	d.group(group)
	if d.parts == nil {
		d.parts = map[string]map[partKey]bool{}
	}
	if d.parts[group] == nil {
		d.parts[group] = map[partKey]bool{}
	}
	d.parts[group][k] = true
}

// encodeGroup is a group's f/g/ value:
//
//	u8 version | i32 epoch | count n | n × (str name | str value)
//	| count m | m × member
//
// member: str id | str rack | str client id | str client host | i32 epoch
// | count t | t × str topic | topic partitions assigned | i64 last seen | bool sent
func encodeGroup(g *Group) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.I32(g.Epoch)
	names := core.SortedKeys(g.Configs)
	w.Count(len(names))
	for _, n := range names {
		w.Str(n)
		w.Str(g.Configs[n])
	}
	ids := core.SortedKeys(g.Members)
	w.Count(len(ids))
	for _, id := range ids {
		m := g.Members[id]
		w.Str(m.ID)
		w.Str(m.RackID)
		w.Str(m.ClientID)
		w.Str(m.ClientHost)
		w.I32(m.Epoch)
		w.Count(len(m.Topics))
		for _, t := range m.Topics {
			w.Str(t)
		}
		core.EncodeTopicPartitions(w, m.Assigned)
		w.I64(m.LastSeenMs)
		w.Bool(m.Sent)
	}
	return w.B
}

// DecodeGroup reads group name's f/g/ value (encodeGroup).
func DecodeGroup(name string, v []byte) (*Group, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: share group %s: state format %d not supported", name, ver)
	}
	g := newGroup(name)
	g.Epoch = r.I32()
	for i, n := 0, r.Count(2); i < n && r.E == nil; i++ {
		k := r.Str()
		g.Configs[k] = r.Str()
	}
	for i, n := 0, r.Count(8); i < n && r.E == nil; i++ {
		m := &Member{ID: r.Str(), RackID: r.Str(), ClientID: r.Str(), ClientHost: r.Str(), Epoch: r.I32()}
		for j, t := 0, r.Count(1); j < t && r.E == nil; j++ {
			m.Topics = append(m.Topics, r.Str())
		}
		m.Assigned = core.DecodeTopicPartitions(r)
		m.LastSeenMs, m.Sent = r.I64(), r.Bool()
		g.Members[m.ID] = m
	}
	return g, r.Done()
}

// encodePart is a share partition's f/p/ value:
//
//	u8 version | i64 end | count n | n × record
//
// record: i64 offset | bool acquired | i16 deliveries | str member |
// i64 deadline | bool has key [| u64 key digest]
func encodePart(p *Part) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.I64(p.End)
	w.Count(len(p.Recs))
	for _, r := range p.Recs {
		w.I64(r.Off)
		w.Bool(r.Acquired)
		w.I16(r.Deliveries)
		w.Str(r.Member)
		w.I64(r.Deadline)
		w.Bool(r.HasKey)
		if r.HasKey {
			w.I64(int64(r.Key))
		}
	}
	return w.B
}

// DecodePart reads a share partition's f/p/ value (encodePart).
func DecodePart(v []byte) (*Part, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: share partition: state format %d not supported", ver)
	}
	p := &Part{End: r.I64()}
	for i, n := 0, r.Count(21); i < n && r.E == nil; i++ {
		x := rec{Off: r.I64(), Acquired: r.Bool(), Deliveries: r.I16(), Member: r.Str(), Deadline: r.I64(), HasKey: r.Bool()}
		if x.HasKey {
			x.Key = uint64(r.I64())
		}
		p.Recs = append(p.Recs, x)
	}
	return p, r.Done()
}

func emptyShares(f *Shares) {
	f.byName = map[string]*Group{}
	f.due = 1<<63 - 1
	f.dirty = dirtySet{}
	f.view.Store(&View{groups: map[string]*GroupView{}, due: f.due})
}

func loadShares(f *Shares) error {
	emptyShares(f)
	err := f.Store.Scan([]byte(groupPrefix), func(k, v []byte) error {
		g, err := DecodeGroup(string(k[len(groupPrefix):]), v)
		if err != nil {
			return err
		}
		f.byName[g.Name] = g
		f.dirty.group(g.Name)
		return nil
	})
	if err == nil {
		err = f.Store.Scan([]byte(partPrefix), func(k, v []byte) error {
			rest := k[len(partPrefix):]
			i, j := bytes.IndexByte(rest, 0), len(rest)-5
			if i < 0 || j <= i || rest[j] != 0 {
				return fmt.Errorf("stele/fsm: %w: share partition key %q", core.ErrMalformed, k)
			}
			g := f.byName[string(rest[:i])]
			if g == nil {
				return fmt.Errorf("stele/fsm: %w: share partition %q of no group", core.ErrMalformed, k)
			}
			p, err := DecodePart(v)
			if err != nil {
				return err
			}
			g.Parts[partKey{Topic: string(rest[i+1 : j]), Partition: int32(binary.BigEndian.Uint32(rest[j+1:]))}] = p
			return nil
		})
	}
	if err != nil {
		return err
	}
	f.due = f.BlockTime // the timers look at everything once
	clear(f.dirty.parts)
	return nil
}

// stageShares writes what the block changed. A group with neither
// members, configs nor partitions is removed.
func stageShares(f *Shares, b *core.StateBatch) error {
	for _, name := range core.SortedKeys(f.dirty.groups) {
		g := f.byName[name]
		if g != nil && len(g.Members) == 0 && len(g.Configs) == 0 && len(g.Parts) == 0 {
			delete(f.byName, name)
			g = nil
		}
		if g == nil {
			b.Delete(groupKey(name))
		} else {
			b.Set(groupKey(name), encodeGroup(g))
		}
		for _, k := range sortedParts(f.dirty.parts[name]) {
			var p *Part
			if g != nil {
				p = g.Parts[k]
			}
			if p == nil {
				b.Delete(partKeyBytes(name, k))
			} else {
				b.Set(partKeyBytes(name, k), encodePart(p))
			}
		}
	}
	clear(f.dirty.parts)
	return nil
}

// publishShares publishes the groups the block changed.
func publishShares(f *Shares, _ bool) {
	old := f.view.Load()
	if len(f.dirty.groups) == 0 && old.due == f.due {
		return
	}
	v := &View{groups: maps.Clone(old.groups), due: f.due}
	for _, name := range core.SortedKeys(f.dirty.groups) {
		g := f.byName[name]
		if g == nil {
			delete(v.groups, name)
			continue
		}
		v.groups[name] = g.snapshot()
	}
	clear(f.dirty.groups)
	f.view.Store(v)
}

type viewPointer = atomic.Pointer[View]

// View is the committed share groups, for readers.
type View struct {
	groups map[string]*GroupView
	due    int64
}

// GroupView is a committed share group.
type GroupView struct {
	Name    string
	Epoch   int32
	State   string
	Members []MemberView // by id
	Configs map[string]string
	Parts   []PartView // by topic and partition
}

// MemberView is a committed share group member.
type MemberView struct {
	ID, RackID, ClientID, ClientHost string
	Epoch                            int32
	Topics                           []string
	Assigned                         core.TopicPartitions
}

// PartView is a committed share partition: its start offset (SPSO), the
// end of its window, and how many records are in flight, acquired, and
// acquirable now (available, and under key ordering not waiting for an
// earlier record of their key).
type PartView struct {
	Topic                          string
	Partition                      int32
	Start, End                     int64
	InFlight, Acquired, Acquirable int
}

func (g *Group) snapshot() *GroupView {
	gv := &GroupView{Name: g.Name, Epoch: g.Epoch, State: g.State(), Configs: maps.Clone(g.Configs)}
	for _, id := range core.SortedKeys(g.Members) {
		m := g.Members[id]
		gv.Members = append(gv.Members, MemberView{ID: m.ID, RackID: m.RackID, ClientID: m.ClientID, ClientHost: m.ClientHost,
			Epoch: m.Epoch, Topics: slices.Clone(m.Topics), Assigned: m.Assigned.Clone()})
	}
	keyed := g.config(CfgKeyOrdering) == "true"
	for _, k := range sortedParts(g.Parts) {
		p := g.Parts[k]
		pv := PartView{Topic: k.Topic, Partition: k.Partition, Start: p.Start(), End: p.End, InFlight: len(p.Recs)}
		blocked := map[uint64]bool{}
		for _, r := range p.Recs {
			if keyed && r.HasKey {
				if blocked[r.Key] {
					continue
				}
				blocked[r.Key] = true
			}
			if r.Acquired {
				pv.Acquired++
			} else {
				pv.Acquirable++
			}
		}
		gv.Parts = append(gv.Parts, pv)
	}
	return gv
}

// Config is g's value of a group config, and whether it was set.
func (g *GroupView) Config(name string) (string, bool) {
	if v, ok := g.Configs[name]; ok {
		return v, true
	}
	return configDefs[name].def, false
}

// ShareGroups is the committed share groups.
func (f *Shares) ShareGroups() *View { return f.view.Load() }

// ShareTimerDue is the block time (ms) at which a share group's member
// session or lock of the committed state may next expire.
func (f *Shares) ShareTimerDue() int64 { return f.view.Load().due }

// Group is the committed share group name, or nil.
func (v *View) Group(name string) *GroupView { return v.groups[name] }

// Groups are the committed share groups, by name.
func (v *View) Groups() []*GroupView {
	out := make([]*GroupView, 0, len(v.groups))
	for _, n := range core.SortedKeys(v.groups) {
		out = append(out, v.groups[n])
	}
	return out
}
