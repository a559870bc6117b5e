// Package shares is the state machine's share groups module (issue 23,
// docs/share-groups.md): Kafka's share groups (KIP-932, queues for Kafka),
// where the records of a partition are acquired and acknowledged one by
// one, so a group can have more busy members than partitions, and Stele's
// key-ordered share groups, where a record is not acquired while an
// earlier record of the same key in its partition is in flight.
//
// Everything a share group decides is decided in apply, on block time,
// the same on every broker: members and their assignment (heartbeats),
// which records a member acquires (ShareAcquire: a ShareFetch's
// acquisition, with the acknowledgements it carries, or a
// ShareAcknowledge's), their acquisition locks, delivery counts and
// archiving, and each share partition's start offset (SPSO). A broker
// crash therefore loses no acknowledgement and never hands out an
// accepted record again: what was accepted is in the replicated state.
//
// A share partition keeps the window [Start, End) of its records: End is
// the next offset it has not yet looked at in the log; a record below End
// is either in flight (in Recs: available again, or acquired by a member
// until a deadline) or done (accepted, rejected, archived, or not a record
// to deliver: a transaction marker, an aborted record under
// read_committed). Start is the first in-flight offset, or End. The window
// holds at most share.partition.max.record.locks records in flight.
//
// Six commands, applied from app version 15 (Version):
// ShareGroupHeartbeat (join with epoch 0, leave with -1, subscriptions),
// ShareAcquire, SetShareGroupConfigs (the group's share.* configs,
// IncrementalAlterConfigs on a GROUP resource), and for empty groups
// DeleteShareGroup, AlterShareOffsets and DeleteShareOffsets (DeleteGroups
// and KIP-932's offsets admin APIs); from app version 16 (FilterVersion) a
// seventh, FilteredAcquire: a ShareAcquire taking only the records
// whose key or subject its filter matches. A block-end step expires
// members whose session timed out (their records are released) and locks
// whose deadline passed.
//
// It uses topics (the logs it reads, their deletions), groups (a share
// group's name may not be a consumer group's; it sets
// groups.IsShareGroup, so a consumer group may not take a share group's)
// and cluster (the app version). The tenants module removes a deleted
// tenant's share groups (RemoveTenantGroups).
//
// State, in the metadata store (a group's name carries its tenant):
//
//	f/g/<group>                                the group: epoch, members, configs
//	f/p/<group> 0x00 <topic> 0x00 <u32 part>   a share partition: start, end, records in flight
package shares

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/subject"
)

// ModShares is the share groups module.
const ModShares core.Module = "shares"

// The module's commands.
const (
	KindShareGroupHeartbeat  core.Kind = 42
	KindShareAcquire         core.Kind = 43
	KindSetShareGroupConfigs core.Kind = 44
	KindDeleteShareGroup     core.Kind = 45
	KindAlterShareOffsets    core.Kind = 46
	KindDeleteShareOffsets   core.Kind = 47
	// KindFilteredAcquire is a ShareAcquire with a Filter (app
	// version 16): version 15's binaries cannot decode the filter.
	KindFilteredAcquire core.Kind = 48
)

// Version is the app version from which share groups exist.
const Version = 15

// FilterVersion is the app version from which an acquisition takes only
// the records a filter matches (ShareAcquire.Filter).
const FilterVersion = 16

// Kafka's defaults of the broker's group.share.* configs, which a group's
// share.* configs override.
const (
	DefaultSessionTimeoutMs    = 45000
	DefaultHeartbeatIntervalMs = 5000
	DefaultRecordLockMs        = 30000
	DefaultDeliveryLimit       = 5
	DefaultMaxRecordLocks      = 2000
	// MaxRecordsPerAcquire bounds one acquisition, whatever it asks.
	MaxRecordsPerAcquire = 10000
)

// The acknowledgement types of KIP-932.
const (
	AckGap     int8 = 0
	AckAccept  int8 = 1
	AckRelease int8 = 2
	AckReject  int8 = 3
	AckRenew   int8 = 4
)

// Limits of what one command carries.
const (
	maxMemberID = 255
	maxTopics   = 10000
	maxParts    = 10000
	maxBatches  = 10000
	// maxKeyPrefix bounds a filter's key prefix.
	maxKeyPrefix = 1024
)

// ShareGroupHeartbeat is a member's heartbeat: epoch 0 joins (MemberID is
// the client's), -1 leaves.
type ShareGroupHeartbeat struct {
	Group, MemberID              string
	Epoch                        int32
	RackID, ClientID, ClientHost string
	// TopicsSet: the heartbeat carries its subscription (Topics, sorted
	// by the check); otherwise the subscription is unchanged.
	TopicsSet bool
	Topics    []string
}

// AckBatch acknowledges the offsets First..Last: with one type for all of
// them, or one type per offset.
type AckBatch struct {
	First, Last int64
	Types       []int8
}

// SharePart is one partition of a ShareAcquire: the acknowledgements it
// carries, and whether records are to be acquired from it.
type SharePart struct {
	Topic     string
	Partition int32
	Acquire   bool
	Acks      []AckBatch
}

// ShareAcquire is a member's ShareFetch (acknowledgements, then an
// acquisition of up to MaxRecords records over the parts marked Acquire)
// or ShareAcknowledge (no part marked Acquire). Renew allows renew
// acknowledgements (type 4). Close releases every record the member still
// holds of the parts named, after the acknowledgements: its share session
// on a broker, which fetched from those partitions, closed.
type ShareAcquire struct {
	Group, MemberID string
	MaxRecords      int32
	Renew, Close    bool
	Parts           []SharePart
}

// FilteredAcquire is a ShareAcquire that takes only the records Filter
// matches (the native HTTP API's acquisitions by key prefix or subject,
// app version 16): the records it passes over stay available to the
// group's other acquisitions.
type FilteredAcquire struct {
	ShareAcquire
	Filter Filter
}

// Filter is what records a filtered acquisition takes: those whose key
// starts with KeyPrefix (when it is not empty; a null key does not) and
// whose subject matches the pattern Subject (when it is not empty; a
// record without a subject does not). At least one of them is set.
type Filter struct {
	KeyPrefix []byte
	Subject   string
}

// ConfigEntry sets a group config (Delete: returns it to the default).
type ConfigEntry struct {
	Name, Value string
	Delete      bool
}

// SetShareGroupConfigs changes a group's share.* configs; the group is
// made when it does not exist, as Kafka keeps configs of groups not yet
// used.
type SetShareGroupConfigs struct {
	Group   string
	Configs []ConfigEntry
}

// DeleteShareGroup deletes an empty share group: its configs and share
// partitions (DeleteGroups).
type DeleteShareGroup struct{ Group string }

// ShareOffset is a share partition's new start offset.
type ShareOffset struct {
	Topic     string
	Partition int32
	Start     int64
}

// AlterShareOffsets sets share partitions' start offsets, forgetting
// what was in flight (AlterShareGroupOffsets); the group, made when it
// does not exist, must be empty.
type AlterShareOffsets struct {
	Group   string
	Offsets []ShareOffset
}

// DeleteShareOffsets forgets the share partitions of topics of an empty
// group (DeleteShareGroupOffsets): the group starts them again by its
// share.auto.offset.reset.
type DeleteShareOffsets struct {
	Group  string
	Topics []string
}

func (ShareGroupHeartbeat) Kind() core.Kind { return KindShareGroupHeartbeat }
func (DeleteShareGroup) Kind() core.Kind    { return KindDeleteShareGroup }
func (AlterShareOffsets) Kind() core.Kind   { return KindAlterShareOffsets }
func (DeleteShareOffsets) Kind() core.Kind  { return KindDeleteShareOffsets }

func (c DeleteShareGroup) Encode(w *core.Writer) { w.Str(c.Group) }

func decodeDeleteGroup(r *core.Reader) DeleteShareGroup { return DeleteShareGroup{Group: r.Str()} }

func (c AlterShareOffsets) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Count(len(c.Offsets))
	for _, o := range c.Offsets {
		w.Str(o.Topic)
		w.I32(o.Partition)
		w.I64(o.Start)
	}
}

func decodeAlterOffsets(r *core.Reader) AlterShareOffsets {
	c := AlterShareOffsets{Group: r.Str()}
	for i, n := 0, r.Count(13); i < n && r.E == nil; i++ {
		c.Offsets = append(c.Offsets, ShareOffset{Topic: r.Str(), Partition: r.I32(), Start: r.I64()})
	}
	return c
}

func (c DeleteShareOffsets) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Count(len(c.Topics))
	for _, t := range c.Topics {
		w.Str(t)
	}
}

func decodeDeleteOffsets(r *core.Reader) DeleteShareOffsets {
	c := DeleteShareOffsets{Group: r.Str()}
	for i, n := 0, r.Count(1); i < n && r.E == nil; i++ {
		c.Topics = append(c.Topics, r.Str())
	}
	return c
}

func (ShareAcquire) Kind() core.Kind    { return KindShareAcquire }
func (FilteredAcquire) Kind() core.Kind { return KindFilteredAcquire }

func (c FilteredAcquire) Encode(w *core.Writer) {
	c.ShareAcquire.Encode(w)
	w.Bytes(c.Filter.KeyPrefix)
	w.Str(c.Filter.Subject)
}
func (SetShareGroupConfigs) Kind() core.Kind { return KindSetShareGroupConfigs }

func (c ShareGroupHeartbeat) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Str(c.MemberID)
	w.I32(c.Epoch)
	w.Str(c.RackID)
	w.Str(c.ClientID)
	w.Str(c.ClientHost)
	w.Bool(c.TopicsSet)
	w.Count(len(c.Topics))
	for _, t := range c.Topics {
		w.Str(t)
	}
}

func decodeHeartbeat(r *core.Reader) ShareGroupHeartbeat {
	c := ShareGroupHeartbeat{Group: r.Str(), MemberID: r.Str(), Epoch: r.I32(), RackID: r.Str(), ClientID: r.Str(), ClientHost: r.Str(), TopicsSet: r.Bool()}
	for i, n := 0, r.Count(1); i < n && r.E == nil; i++ {
		c.Topics = append(c.Topics, r.Str())
	}
	return c
}

func (c ShareAcquire) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Str(c.MemberID)
	w.I32(c.MaxRecords)
	w.Bool(c.Renew)
	w.Bool(c.Close)
	w.Count(len(c.Parts))
	for _, p := range c.Parts {
		w.Str(p.Topic)
		w.I32(p.Partition)
		w.Bool(p.Acquire)
		w.Count(len(p.Acks))
		for _, a := range p.Acks {
			w.I64(a.First)
			w.I64(a.Last)
			w.Count(len(a.Types))
			for _, t := range a.Types {
				w.U8(uint8(t))
			}
		}
	}
}

func decodeAcquire(r *core.Reader) ShareAcquire {
	c := ShareAcquire{Group: r.Str(), MemberID: r.Str(), MaxRecords: r.I32(), Renew: r.Bool(), Close: r.Bool()}
	for i, n := 0, r.Count(7); i < n && r.E == nil; i++ {
		p := SharePart{Topic: r.Str(), Partition: r.I32(), Acquire: r.Bool()}
		for j, m := 0, r.Count(17); j < m && r.E == nil; j++ {
			a := AckBatch{First: r.I64(), Last: r.I64()}
			for k, l := 0, r.Count(1); k < l && r.E == nil; k++ {
				a.Types = append(a.Types, int8(r.U8()))
			}
			p.Acks = append(p.Acks, a)
		}
		c.Parts = append(c.Parts, p)
	}
	return c
}

func decodeAcquireFiltered(r *core.Reader) FilteredAcquire {
	return FilteredAcquire{ShareAcquire: decodeAcquire(r), Filter: Filter{KeyPrefix: r.BytesCopy(), Subject: r.Str()}}
}

func (c SetShareGroupConfigs) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Count(len(c.Configs))
	for _, e := range c.Configs {
		w.Str(e.Name)
		w.Str(e.Value)
		w.Bool(e.Delete)
	}
}

func decodeSetConfigs(r *core.Reader) SetShareGroupConfigs {
	c := SetShareGroupConfigs{Group: r.Str()}
	for i, n := 0, r.Count(3); i < n && r.E == nil; i++ {
		c.Configs = append(c.Configs, ConfigEntry{Name: r.Str(), Value: r.Str(), Delete: r.Bool()})
	}
	return c
}

func invalid(msg string) core.Result { return core.Fail(kerr.InvalidRequest.Code, msg) }

// checkCommand is the commands' stateless check.
func checkCommand(c core.Command) core.Result {
	var group, member string
	switch c := c.(type) {
	case ShareGroupHeartbeat:
		group, member = c.Group, c.MemberID
		switch {
		case c.MemberID == "" || len(c.MemberID) > maxMemberID:
			return invalid("a share group member needs an id of 1 to 255 bytes")
		case c.Epoch < -1:
			return invalid(fmt.Sprintf("member epoch %d: a share group member's epoch is -1 (leave), 0 (join) or positive", c.Epoch))
		case c.Epoch == 0 && len(c.Topics) == 0:
			return invalid("a member joins a share group with the topics it subscribes to")
		case len(c.Topics) > maxTopics:
			return invalid(fmt.Sprintf("a member subscribes to at most %d topics", maxTopics))
		case !slices.IsSorted(c.Topics) || len(slices.Compact(slices.Clone(c.Topics))) != len(c.Topics):
			return invalid("a subscription's topics are sorted and distinct")
		}
	case FilteredAcquire:
		if msg := checkFilter(c.Filter); msg != "" {
			return invalid(msg)
		}
		return checkCommand(c.ShareAcquire)
	case ShareAcquire:
		group, member = c.Group, c.MemberID
		if c.MemberID == "" || len(c.MemberID) > maxMemberID {
			return invalid("a share fetch names its member")
		}
		if len(c.Parts) > maxParts {
			return invalid(fmt.Sprintf("a share fetch names at most %d partitions", maxParts))
		}
		for _, p := range c.Parts {
			if len(p.Acks) > maxBatches {
				return invalid(fmt.Sprintf("a partition carries at most %d acknowledgement batches", maxBatches))
			}
			if msg := checkAcks(p.Acks, c.Renew); msg != "" {
				return invalid(fmt.Sprintf("%s-%d: %s", p.Topic, p.Partition, msg))
			}
		}
	case DeleteShareGroup:
		group = c.Group
	case AlterShareOffsets:
		group = c.Group
		if len(c.Offsets) > maxParts {
			return invalid(fmt.Sprintf("at most %d partitions at once", maxParts))
		}
		for _, o := range c.Offsets {
			if o.Start < 0 {
				return invalid(fmt.Sprintf("%s-%d: start offset %d: an offset is not negative", o.Topic, o.Partition, o.Start))
			}
		}
	case DeleteShareOffsets:
		group = c.Group
		if len(c.Topics) > maxTopics {
			return invalid(fmt.Sprintf("at most %d topics at once", maxTopics))
		}
	case SetShareGroupConfigs:
		group = c.Group
		for _, e := range c.Configs {
			if e.Delete {
				if _, ok := configDefs[e.Name]; !ok {
					return core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("unknown group config %q", e.Name))
				}
				continue
			}
			if err := checkConfig(e.Name, e.Value); err != nil {
				return core.Fail(kerr.InvalidConfig.Code, err.Error())
			}
		}
	}
	return groups.CheckGroupIDs(group, member, "")
}

// checkFilter says what is wrong with an acquisition's filter ("" when
// nothing is).
func checkFilter(f Filter) string {
	if len(f.KeyPrefix) == 0 && f.Subject == "" {
		return "a filter names a key prefix, a subject pattern or both"
	}
	if len(f.KeyPrefix) > maxKeyPrefix {
		return fmt.Sprintf("a key prefix has at most %d bytes", maxKeyPrefix)
	}
	if f.Subject != "" {
		if _, err := subject.ParsePattern(f.Subject); err != nil {
			return fmt.Sprintf("subject pattern %q: %v", f.Subject, err)
		}
	}
	return ""
}

// checkAcks says what is wrong with a partition's acknowledgement batches
// ("" when nothing is): ascending, not overlapping, each with one type or
// one per offset, of the types KIP-932 defines (renew only when allowed).
func checkAcks(acks []AckBatch, renew bool) string {
	prev := int64(-1)
	for _, a := range acks {
		switch {
		case a.First < 0 || a.Last < a.First:
			return fmt.Sprintf("acknowledgement batch %d-%d is not a range of offsets", a.First, a.Last)
		case a.First <= prev:
			return "acknowledgement batches are ascending and do not overlap"
		case len(a.Types) == 0 || (len(a.Types) != 1 && int64(len(a.Types)) != a.Last-a.First+1):
			return fmt.Sprintf("acknowledgement batch %d-%d has %d types: one, or one per offset", a.First, a.Last, len(a.Types))
		case a.Last-a.First >= MaxRecordsPerAcquire*10:
			return fmt.Sprintf("acknowledgement batch %d-%d is too long", a.First, a.Last)
		}
		for _, t := range a.Types {
			if t < AckGap || t > AckRenew || (t == AckRenew && !renew) {
				return fmt.Sprintf("acknowledgement type %d is not one of gap (0), accept (1), release (2), reject (3)%s", t, map[bool]string{true: " or renew (4)"}[renew])
			}
		}
		prev = a.Last
	}
	return ""
}

// Shares is the share groups module, its part of a state machine.
type Shares struct {
	*core.Machine
	topics  *topics.Topics
	groups  *groups.Coordinator
	cluster *cluster.Cluster

	byName map[string]*Group
	// due is the block time at which a member's session or a lock may
	// next expire (math.MaxInt64: none).
	due   int64
	dirty dirtySet
	view  viewPointer
}

// NewShares is the share groups module of the machine m.
func NewShares(m *core.Machine, t *topics.Topics, g *groups.Coordinator, c *cluster.Cluster) *Shares {
	return &Shares{Machine: m, topics: t, groups: g, cluster: c}
}

// sharesOf is the share groups module of the machine m.
func sharesOf(m *core.Machine) *Shares {
	return m.App.(interface{ SharesModule() *Shares }).SharesModule()
}

// RegisterShares registers the module: its commands, state, timers and
// its hook on topic deletion.
func RegisterShares(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleCommand(r, sharesOf, KindShareGroupHeartbeat, "ShareGroupHeartbeat", ModShares, decodeHeartbeat, checkCommand,
		func(f *Shares, c ShareGroupHeartbeat, _ core.CmdAt) core.Result {
			return f.gated(func() core.Result { return f.heartbeat(c) })
		}).Since = Version
	core.RegisterModuleCommand(r, sharesOf, KindShareAcquire, "ShareAcquire", ModShares, decodeAcquire, checkCommand,
		func(f *Shares, c ShareAcquire, _ core.CmdAt) core.Result {
			return f.gated(func() core.Result { return f.acquire(c, nil) })
		}).Since = Version
	core.RegisterModuleCommand(r, sharesOf, KindFilteredAcquire, "FilteredAcquire", ModShares, decodeAcquireFiltered, checkCommand,
		func(f *Shares, c FilteredAcquire, _ core.CmdAt) core.Result {
			return f.gated(func() core.Result { return f.acquire(c.ShareAcquire, &c.Filter) })
		}).Since = FilterVersion
	core.RegisterModuleCommand(r, sharesOf, KindSetShareGroupConfigs, "SetShareGroupConfigs", ModShares, decodeSetConfigs, checkCommand,
		func(f *Shares, c SetShareGroupConfigs, _ core.CmdAt) core.Result {
			return f.gated(func() core.Result { return f.setConfigs(c) })
		}).Since = Version
	core.RegisterModuleCommand(r, sharesOf, KindDeleteShareGroup, "DeleteShareGroup", ModShares, decodeDeleteGroup, checkCommand,
		func(f *Shares, c DeleteShareGroup, _ core.CmdAt) core.Result {
			return f.gated(func() core.Result { return f.deleteGroup(c) })
		}).Since = Version
	core.RegisterModuleCommand(r, sharesOf, KindAlterShareOffsets, "AlterShareOffsets", ModShares, decodeAlterOffsets, checkCommand,
		func(f *Shares, c AlterShareOffsets, _ core.CmdAt) core.Result {
			return f.gated(func() core.Result { return f.alterOffsets(c) })
		}).Since = Version
	core.RegisterModuleCommand(r, sharesOf, KindDeleteShareOffsets, "DeleteShareOffsets", ModShares, decodeDeleteOffsets, checkCommand,
		func(f *Shares, c DeleteShareOffsets, _ core.CmdAt) core.Result {
			return f.gated(func() core.Result { return f.deleteOffsets(c) })
		}).Since = Version
	core.RegisterModuleStep(r, sharesOf, core.ModuleStep[*Shares]{Rank: 139, Name: "share groups", Module: ModShares,
		Empty: emptyShares, Load: loadShares, Stage: stageShares, Publish: publishShares})
	core.RegisterModuleBlockEnd(r, sharesOf, core.ModuleBlockEnd[*Shares]{Rank: 15, Name: "share sessions and acquisition locks", Module: ModShares, Run: (*Shares).timers})
	h.TopicDeleted.Register(15, "share partitions of the topic", ModShares, func(tm *topics.Topics, t *topics.Topic) { sharesOf(tm.Machine).dropTopic(t.Name) })
}

// IsShareGroup reports whether name is a share group's, with members,
// configs or share partitions (the groups module's IsShareGroup).
func (f *Shares) IsShareGroup(name string) bool { return f.byName[name] != nil }

func (f *Shares) gated(do func() core.Result) core.Result {
	if v := f.cluster.Version; v < Version {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("share groups need app version %d; this chain runs %d (stele cluster upgrade)", Version, v))
	}
	return do()
}

// Group is a share group.
type Group struct {
	Name    string
	Epoch   int32
	Members map[string]*Member
	// Configs are the group's share.* configs set explicitly.
	Configs map[string]string
	Parts   map[partKey]*Part
}

// Member is a member of a share group.
type Member struct {
	ID, RackID, ClientID, ClientHost string
	Epoch                            int32
	Topics                           []string // sorted
	Assigned                         core.TopicPartitions
	LastSeenMs                       int64
	// Sent: the member was told its current assignment.
	Sent bool
}

type partKey struct {
	Topic     string
	Partition int32
}

func newGroup(name string) *Group {
	return &Group{Name: name, Members: map[string]*Member{}, Configs: map[string]string{}, Parts: map[partKey]*Part{}}
}

// State is the group's state as Kafka names a share group's.
func (g *Group) State() string {
	if len(g.Members) == 0 {
		return "Empty"
	}
	return "Stable"
}

func (f *Shares) heartbeat(c ShareGroupHeartbeat) core.Result {
	now := f.BlockTime
	if cg := f.groups.GroupsByName[c.Group]; cg != nil {
		return core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("group %s is a consumer group, not a share group", c.Group))
	}
	g := f.byName[c.Group]
	if g == nil {
		if c.Epoch != 0 {
			return core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("share group %s does not exist", c.Group))
		}
		g = newGroup(c.Group)
		f.byName[c.Group] = g
	}
	m := g.Members[c.MemberID]
	switch {
	case c.Epoch == -1:
		if m == nil {
			return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %s is not in share group %s", c.MemberID, c.Group))
		}
		f.removeMember(g, m)
		return core.Result{Group: &core.GroupResult{MemberID: m.ID, Generation: -1}}
	case c.Epoch == 0 && m == nil:
		m = &Member{ID: c.MemberID}
		g.Members[m.ID] = m
		g.Epoch++
	case m == nil:
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %s is not in share group %s", c.MemberID, c.Group))
	case c.Epoch > m.Epoch:
		// An older epoch is the member's before an assignment it has not
		// heard of yet (a share group revokes nothing, so it is not
		// fenced); a newer one it was never given.
		return core.Fail(kerr.FencedMemberEpoch.Code, fmt.Sprintf("member %s's epoch %d is newer than its %d", c.MemberID, c.Epoch, m.Epoch))
	case c.Epoch == 0:
		m.Sent = false // rejoins: it lost its assignment
	}
	m.RackID, m.ClientID, m.ClientHost, m.LastSeenMs = c.RackID, c.ClientID, c.ClientHost, now
	if c.TopicsSet && !slices.Equal(m.Topics, c.Topics) {
		m.Topics = slices.Clone(c.Topics)
		g.Epoch++
	}
	f.assign(g)
	f.due = min(f.due, now+int64(g.intConfig(cfgSessionTimeout)))
	f.dirty.group(g.Name)
	r := &core.GroupResult{MemberID: m.ID, Generation: m.Epoch}
	if !m.Sent || c.TopicsSet || c.Epoch != m.Epoch {
		r.SendAssignment, r.Assignment = true, m.Assigned.Clone()
		m.Sent = true
	}
	return core.Result{Group: r}
}

// assign is the group's assignor, Kafka's "simple" one in effect: each
// partition of the subscribed topics goes to as many members as the
// members outnumber the partitions (rounded up), the members taking
// turns, so every member has work when there are more members than
// partitions and every partition has a member when there are fewer. Every
// member whose assignment changed takes the group's epoch.
func (f *Shares) assign(g *Group) {
	ids := core.SortedKeys(g.Members)
	next := map[string]core.TopicPartitions{}
	for _, id := range ids {
		next[id] = core.TopicPartitions{}
	}
	subscribed := map[string][]string{} // topic → members, sorted
	for _, id := range ids {
		for _, t := range g.Members[id].Topics {
			subscribed[t] = append(subscribed[t], id)
		}
	}
	for _, name := range core.SortedKeys(subscribed) {
		t := f.topics.ByName[name]
		if t == nil || t.Deleted || len(t.Partitions) == 0 {
			continue
		}
		ms, n := subscribed[name], len(t.Partitions)
		if len(ms) <= n {
			for p := range n {
				next[ms[p%len(ms)]].Add(name, int32(p))
			}
			continue
		}
		for i, id := range ms {
			next[id].Add(name, int32(i%n))
		}
	}
	for _, id := range ids {
		m := g.Members[id]
		if !m.Assigned.Equal(next[id]) || m.Epoch == 0 {
			m.Assigned, m.Epoch, m.Sent = next[id], g.Epoch, false
		}
	}
}

// removeMember takes m out of g: its records are released, the others
// are assigned again.
func (f *Shares) removeMember(g *Group, m *Member) {
	for _, k := range sortedParts(g.Parts) {
		p := g.Parts[k]
		if p.releaseMember(m.ID, g.intConfig(cfgDeliveryLimit)) {
			f.dirty.part(g.Name, k)
		}
	}
	delete(g.Members, m.ID)
	g.Epoch++
	f.assign(g)
	f.dirty.group(g.Name)
}

func (f *Shares) setConfigs(c SetShareGroupConfigs) core.Result {
	if cg := f.groups.GroupsByName[c.Group]; cg != nil {
		return core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("group %s is a consumer group, not a share group", c.Group))
	}
	g := f.byName[c.Group]
	if g == nil {
		g = newGroup(c.Group)
		f.byName[c.Group] = g
	}
	for _, e := range c.Configs {
		if e.Delete {
			delete(g.Configs, e.Name)
		} else {
			g.Configs[e.Name] = e.Value
		}
	}
	f.dirty.group(g.Name)
	return core.Result{}
}

func (f *Shares) deleteGroup(c DeleteShareGroup) core.Result {
	g := f.byName[c.Group]
	switch {
	case g == nil:
		return core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("share group %s does not exist", c.Group))
	case len(g.Members) > 0:
		return core.Fail(kerr.NonEmptyGroup.Code, fmt.Sprintf("share group %s has %d members", c.Group, len(g.Members)))
	}
	for _, k := range sortedParts(g.Parts) {
		f.dirty.part(g.Name, k)
	}
	clear(g.Parts)
	clear(g.Configs)
	f.dirty.group(g.Name)
	return core.Result{}
}

// emptyGroup is the group a command on share offsets works on: made when
// missing when create says so, refused while it has members.
func (f *Shares) emptyGroup(name string, create bool) (*Group, core.Result) {
	if f.groups.GroupsByName[name] != nil {
		return nil, core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("group %s is a consumer group, not a share group", name))
	}
	g := f.byName[name]
	switch {
	case g == nil && !create:
		return nil, core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("share group %s does not exist", name))
	case g == nil:
		g = newGroup(name)
		f.byName[name] = g
	case len(g.Members) > 0:
		return nil, core.Fail(kerr.NonEmptyGroup.Code, fmt.Sprintf("share group %s has %d members: its offsets change only while it is empty", name, len(g.Members)))
	}
	return g, core.Result{}
}

func (f *Shares) alterOffsets(c AlterShareOffsets) core.Result {
	g, r := f.emptyGroup(c.Group, true)
	if g == nil {
		return r
	}
	res := &core.ShareResult{}
	for _, o := range c.Offsets {
		pr := core.SharePartResult{Topic: o.Topic, Partition: o.Partition}
		t := f.topics.ByName[o.Topic]
		if t == nil || t.Deleted || o.Partition < 0 || int(o.Partition) >= len(t.Partitions) {
			pr.Code = kerr.UnknownTopicOrPartition.Code
		} else {
			k := partKey{o.Topic, o.Partition}
			tp := t.Partitions[o.Partition]
			g.Parts[k] = &Part{End: min(max(o.Start, tp.Start), tp.Next)}
			f.dirty.part(g.Name, k)
		}
		res.Parts = append(res.Parts, pr)
	}
	f.dirty.group(g.Name)
	return core.Result{Share: res}
}

func (f *Shares) deleteOffsets(c DeleteShareOffsets) core.Result {
	g, r := f.emptyGroup(c.Group, false)
	if g == nil {
		return r
	}
	res := &core.ShareResult{}
	for _, topic := range c.Topics {
		pr := core.SharePartResult{Topic: topic, Partition: -1}
		found := false
		for _, k := range sortedParts(g.Parts) {
			if k.Topic == topic {
				delete(g.Parts, k)
				f.dirty.part(g.Name, k)
				found = true
			}
		}
		if !found {
			pr.Code = kerr.UnknownTopicOrPartition.Code
		}
		res.Parts = append(res.Parts, pr)
	}
	f.dirty.group(g.Name)
	return core.Result{Share: res}
}

// timers expires members whose session timed out and locks whose
// deadline passed, when one may have.
func (f *Shares) timers() (changes []core.Change) {
	now := f.BlockTime
	if now < f.due {
		return nil
	}
	due := int64(1<<63 - 1)
	for _, name := range core.SortedKeys(f.byName) {
		g := f.byName[name]
		timeout := int64(g.intConfig(cfgSessionTimeout))
		for _, id := range core.SortedKeys(g.Members) {
			m := g.Members[id]
			if m.LastSeenMs+timeout <= now {
				f.removeMember(g, m)
				changes = append(changes, core.Change{Kind: core.ChangeShareMemberExpired, Name: g.Name, Sub: id})
				continue
			}
			due = min(due, m.LastSeenMs+timeout)
		}
		limit := g.intConfig(cfgDeliveryLimit)
		for _, k := range sortedParts(g.Parts) {
			p := g.Parts[k]
			if n := p.expire(now, limit); n > 0 {
				f.dirty.part(g.Name, k)
				changes = append(changes, core.Change{Kind: core.ChangeShareLocksExpired, Name: g.Name, Sub: k.Topic, A: int64(k.Partition), B: int64(n)})
			}
			due = min(due, p.nextDeadline())
		}
	}
	f.due = due
	return changes
}

// dropTopic forgets the share partitions of a deleted topic and assigns
// again the groups that subscribed to it.
func (f *Shares) dropTopic(topic string) {
	for _, name := range core.SortedKeys(f.byName) {
		g := f.byName[name]
		changed := false
		for _, k := range sortedParts(g.Parts) {
			if k.Topic == topic {
				delete(g.Parts, k)
				f.dirty.part(g.Name, k)
				changed = true
			}
		}
		for _, m := range g.Members {
			if slices.Contains(m.Topics, topic) {
				changed = true
			}
		}
		if changed {
			g.Epoch++
			f.assign(g)
			f.dirty.group(g.Name)
		}
	}
}

func sortedParts[V any](m map[partKey]V) []partKey {
	out := make([]partKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b partKey) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// The group configs (share.*, Kafka's names; stele.share.key.ordering,
// Stele's) and their defaults.
const (
	cfgAutoOffsetReset   = "share.auto.offset.reset"
	cfgIsolationLevel    = "share.isolation.level"
	cfgRecordLock        = "share.record.lock.duration.ms"
	cfgDeliveryLimit     = "share.delivery.count.limit"
	cfgMaxRecordLocks    = "share.partition.max.record.locks"
	cfgSessionTimeout    = "share.session.timeout.ms"
	cfgHeartbeatInterval = "share.heartbeat.interval.ms"
	CfgKeyOrdering       = "stele.share.key.ordering"
)

type configDef struct {
	def      string
	min, max int64 // for numbers; both 0: not a number
	values   []string
}

var configDefs = map[string]configDef{
	cfgAutoOffsetReset:   {def: "latest", values: []string{"earliest", "latest"}},
	cfgIsolationLevel:    {def: "read_uncommitted", values: []string{"read_committed", "read_uncommitted"}},
	cfgRecordLock:        {def: strconv.Itoa(DefaultRecordLockMs), min: 1000, max: 3600000},
	cfgDeliveryLimit:     {def: strconv.Itoa(DefaultDeliveryLimit), min: 2, max: 10},
	cfgMaxRecordLocks:    {def: strconv.Itoa(DefaultMaxRecordLocks), min: 100, max: 10000},
	cfgSessionTimeout:    {def: strconv.Itoa(DefaultSessionTimeoutMs), min: 1000, max: 1800000},
	cfgHeartbeatInterval: {def: strconv.Itoa(DefaultHeartbeatIntervalMs), min: 1000, max: 900000},
	CfgKeyOrdering:       {def: "false", values: []string{"false", "true"}},
}

// BrokerDefault is one of Kafka's group.share.* broker configs: its
// value, fixed in Stele, which a group's share.* config overrides.
type BrokerDefault struct{ Name, Value, Doc string }

// BrokerDefaults are the group.share.* broker configs, by name.
func BrokerDefaults() []BrokerDefault {
	return []BrokerDefault{
		{"group.share.delivery.count.limit", strconv.Itoa(DefaultDeliveryLimit), "Deliveries of a record before it is archived; a group's share.delivery.count.limit overrides it."},
		{"group.share.heartbeat.interval.ms", strconv.Itoa(DefaultHeartbeatIntervalMs), "The heartbeat interval share group members are told; a group's share.heartbeat.interval.ms overrides it."},
		{"group.share.partition.max.record.locks", strconv.Itoa(DefaultMaxRecordLocks), "Records in flight per share partition; a group's share.partition.max.record.locks overrides it."},
		{"group.share.record.lock.duration.ms", strconv.Itoa(DefaultRecordLockMs), "How long an acquired record is locked to its member; a group's share.record.lock.duration.ms overrides it."},
		{"group.share.session.timeout.ms", strconv.Itoa(DefaultSessionTimeoutMs), "A share group member is removed after this long without a heartbeat; a group's share.session.timeout.ms overrides it."},
	}
}

// ConfigNames are the group configs, sorted.
func ConfigNames() []string { return core.SortedKeys(configDefs) }

// ConfigDefault is a group config's default.
func ConfigDefault(name string) (string, bool) {
	d, ok := configDefs[name]
	return d.def, ok
}

// checkConfig says why value cannot be name's.
func checkConfig(name, value string) error {
	d, ok := configDefs[name]
	if !ok {
		return fmt.Errorf("unknown group config %q; share groups take %v", name, ConfigNames())
	}
	if d.values != nil {
		if !slices.Contains(d.values, value) {
			return fmt.Errorf("group config %s=%q: one of %v", name, value, d.values)
		}
		return nil
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil || n < d.min || n > d.max {
		return fmt.Errorf("group config %s=%q: a number from %d to %d", name, value, d.min, d.max)
	}
	return nil
}

// config is g's value of name.
func (g *Group) config(name string) string {
	if v, ok := g.Configs[name]; ok {
		return v
	}
	return configDefs[name].def
}

func (g *Group) intConfig(name string) int {
	n, _ := strconv.Atoi(g.config(name))
	return n
}
