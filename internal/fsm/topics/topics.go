// Package topics is the state machine's topics module: topics, their
// configs and partitions, the cluster-wide log defaults of those configs
// (log_defaults.go), the partition logs and their housekeeping (retention,
// compaction), Produce and the Stele record headers it reads, LogAppendTime's
// clock (append_clock.go), and what a log keeps of its producers:
// idempotent producers' sequences, the transaction markers, the last
// stable offset and the aborted transactions (Kafka's ProducerStateManager
// is a part of its log too).
//
// It is the bottom module: it imports the core (package core) and no
// other module. The modules above it reach it through its exported types
// and the hook points it offers (TopicHooks, topic_hooks.go), which they
// register at from their registration functions; RegisterTopics makes
// them. Its code works on Topics, the module's part of a state machine,
// which the application (package fsm) makes with NewTopics and hands
// over through TopicsModule (TopicsOf).
package topics

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/storage"
)

// ModTopics is the topics module's name.
const ModTopics core.Module = "topics"

// Topics is the topics module of a state machine: the core's machine it
// runs on, its options, the hook points the modules above it registered
// at, and its state.
type Topics struct {
	*core.Machine
	opts  TopicOptions
	hooks *TopicHooks
	topicsState

	// SubjectOfField finds a field of a schema-encoded value with the
	// tenant's registry, for stele.subject.from=field:PATH (set by the
	// schemas module; nil: none).
	SubjectOfField func(tenant string, value []byte, path []string) ([]byte, bool, error)
}

// fieldSubject is how records of t find a subject in a field of their
// value (nil when nothing can).
func (f *Topics) fieldSubject(t *Topic) FieldSubject {
	if f.SubjectOfField == nil {
		return nil
	}
	tenant, _ := core.SplitTenant(t.Name)
	return func(value []byte, path []string) ([]byte, bool, error) { return f.SubjectOfField(tenant, value, path) }
}

// TopicOptions are the options of the topics module (Options').
type TopicOptions struct {
	// Dir holds the partition logs (Dir/logs).
	Dir                    string
	HousekeepingIntervalMs int64
	CompactionWorkers      int
	WithoutKeyIndex        bool
	Logger                 *slog.Logger
	PassHookForTest        func(topic string, partition int32)
}

// NewTopics is the topics module of the machine m, with the hook points h.
func NewTopics(m *core.Machine, h *TopicHooks, o TopicOptions) *Topics {
	return &Topics{Machine: m, hooks: h, opts: o}
}

// topicsOf is the topics module of the machine m.
func topicsOf(m *core.Machine) *Topics {
	return m.App.(interface{ TopicsModule() *Topics }).TopicsModule()
}

// MaxPartitions bounds the partitions of one topic: each is a directory of
// files on every broker.
const MaxPartitions = 10_000

// ValidTopicName reports, with Kafka's wording, why name cannot be a topic name.
func ValidTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("topic name is illegal, it can't be empty")
	case name == "." || name == "..":
		return fmt.Errorf("topic name cannot be \".\" or \"..\"")
	case len(name) > 249:
		return fmt.Errorf("topic name is illegal, it can't be longer than 249 characters, topic name: %s", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("topic name %s is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'", name)
		}
	}
	return nil
}

// ValidStateTopicName reports why name cannot be a topic's name in the
// state: a valid topic name of the default tenant, or tenant~topic for a
// valid tenant name and topic name (core/names.go) of 249 characters in
// all, the limit of a partition directory's name.
func ValidStateTopicName(name string) error {
	t, local := core.SplitTenant(name)
	if t == "" {
		return ValidTopicName(name)
	}
	if err := ValidTopicName(local); err != nil {
		return err
	}
	if len(name) > 249 {
		return fmt.Errorf("topic name is illegal, it can't be longer than %d characters in tenant %s, topic name: %s", 249-len(t)-1, t, local)
	}
	return nil
}

func (f *Topics) createTopic(c CreateTopic, txIndex, cmdIndex int) core.Result {
	if t, ok := f.ByName[c.Name]; ok && !t.Deleted {
		return core.Fail(kerr.TopicAlreadyExists.Code, fmt.Sprintf("topic '%s' already exists", c.Name))
	}
	for _, t := range f.deleted {
		if t.Name == c.Name {
			return core.Fail(kerr.TopicAlreadyExists.Code, fmt.Sprintf("topic '%s' is marked for deletion", c.Name))
		}
	}
	if collides := f.collidingTopic(c.Name); collides != "" {
		return core.Fail(kerr.InvalidTopicException.Code, fmt.Sprintf("topic '%s' collides with existing topic: %s", c.Name, collides))
	}
	if f.BlockAppVersion() >= ViewsVersion {
		var r core.Result
		if c, r = f.checkView(c); r.Code != 0 {
			return r
		}
	}
	t := &Topic{
		Name:              c.Name,
		ID:                f.topicID(c.Name, txIndex, cmdIndex),
		ReplicationFactor: c.ReplicationFactor,
		Configs:           map[string]string{},
	}
	for _, e := range c.Configs {
		t.Configs[e.Name] = e.Value
	}
	t.Config = resolveConfig(t.Configs, f.logDefaults.configs)
	assign(t, 0, c.Assignments)
	if err := f.addPartitions(t, c.Partitions); err != nil {
		for _, p := range t.Partitions {
			p.Log.Remove()
		}
		return f.LocalFault("creating the partitions of %s: %w", t.Name, err)
	}
	f.ByName[t.Name] = t
	f.ByID[t.ID] = t
	f.indexTopic(t)
	f.DirtyTopics[t.Name] = true
	f.MetaChanged = true
	return core.Result{TopicID: t.ID}
}

// collidingTopic returns an existing topic whose name differs from name only
// by '.' versus '_' (Kafka forbids these: their metric names collide).
func (f *Topics) collidingTopic(name string) string {
	if !strings.ContainsAny(name, "._") {
		return ""
	}
	norm := strings.ReplaceAll(name, ".", "_")
	for _, other := range SortedNames(f.ByName) {
		if other != name && strings.ReplaceAll(other, ".", "_") == norm {
			return other
		}
	}
	return ""
}

// topicID derives a topic's UUID from the chain: the previous app hash, the
// height and the command's position make it unique and the same everywhere.
func (f *Topics) topicID(name string, txIndex, cmdIndex int) core.TopicID {
	h := sha256.New()
	h.Write([]byte("stele/topic-id"))
	h.Write(f.AppHash)
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(f.Height))
	binary.BigEndian.PutUint32(b[8:12], uint32(txIndex))
	binary.BigEndian.PutUint32(b[12:], uint32(cmdIndex))
	h.Write(b[:])
	h.Write([]byte(name))
	var id core.TopicID
	copy(id[:], h.Sum(nil))
	id[6] = id[6]&0x0f | 0x40 // an RFC 4122 version 4 layout, as Kafka's own
	id[8] = id[8]&0x3f | 0x80
	return id
}

// addPartitions creates partitions up to count, with empty logs.
func (f *Topics) addPartitions(t *Topic, count int32) error {
	for i := int32(len(t.Partitions)); i < count; i++ {
		p := NewPartition(t.Name, i)
		if err := f.openPartitionLog(t, p, true); err != nil {
			return err
		}
		t.Partitions = append(t.Partitions, p)
		f.dirtyParts[p] = true
	}
	return nil
}

func (f *Topics) partitionDir(topic string, index int32) string {
	return filepath.Join(f.opts.Dir, "logs", fmt.Sprintf("%s-%d", topic, index))
}

// openPartitionLog opens p's log; fresh means the partition is being created
// now, so leftovers of an uncommitted earlier attempt are wiped first.
func (f *Topics) openPartitionLog(t *Topic, p *Partition, fresh bool) error {
	dir := f.partitionDir(t.Name, p.Index)
	if fresh {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	l, err := storage.OpenLog(dir, logConfig(t.Config))
	if err != nil {
		return err
	}
	p.Log = l
	if fresh {
		return writePartitionMetadata(dir, t.ID)
	}
	return nil
}

func logConfig(c TopicConfig) storage.LogConfig {
	return storage.LogConfig{SegmentBytes: c.SegmentBytes, SegmentMs: c.SegmentMs, IndexIntervalBytes: c.IndexIntervalBytes}
}

// writePartitionMetadata writes Kafka's partition.metadata file naming the
// topic ID the directory belongs to.
func writePartitionMetadata(dir string, id core.TopicID) error {
	body := fmt.Sprintf("version: 0\ntopic_id: %s\n", base64.RawURLEncoding.EncodeToString(id[:]))
	return os.WriteFile(filepath.Join(dir, "partition.metadata"), []byte(body), 0o644)
}

func readPartitionMetadata(dir string) (core.TopicID, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "partition.metadata"))
	if err != nil {
		return core.TopicID{}, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "topic_id: "); ok {
			raw, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(v))
			if err != nil || len(raw) != 16 {
				return core.TopicID{}, false
			}
			var id core.TopicID
			copy(id[:], raw)
			return id, true
		}
	}
	return core.TopicID{}, false
}

func (f *Topics) lookup(name string, id core.TopicID) (*Topic, core.Result) {
	if !id.IsZero() {
		t := f.ByID[id]
		if t == nil || t.Deleted {
			return nil, core.Fail(kerr.UnknownTopicID.Code, fmt.Sprintf("topic id %s does not exist", id))
		}
		return t, core.Result{}
	}
	t := f.ByName[name]
	if t == nil || t.Deleted {
		return nil, core.Fail(kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("topic '%s' does not exist", name))
	}
	return t, core.Result{}
}

func (f *Topics) deleteTopic(c DeleteTopic) core.Result {
	t, r := f.lookup(c.Name, c.ID)
	if t == nil {
		return r
	}
	t.Deleted = true
	delete(f.ByName, t.Name)
	delete(f.ByID, t.ID)
	f.unindexTopic(t)
	for _, p := range t.Partitions {
		delete(f.dirtyParts, p)
	}
	f.deleted = append(f.deleted, t)
	for _, h := range f.hooks.TopicDeleted.Hooks {
		h.Fn(f, t)
	}
	f.DirtyTopics[t.Name] = true
	f.MetaChanged = true
	return core.Result{TopicID: t.ID}
}

func (f *Topics) createPartitions(c CreatePartitions) core.Result {
	t, r := f.lookup(c.Name, core.TopicID{})
	if t == nil {
		return r
	}
	if IsView(t) {
		return viewRefusal(t, "its partitions follow its sources")
	}
	if have := int32(len(t.Partitions)); c.Count <= have {
		return core.Fail(kerr.InvalidPartitions.Code, fmt.Sprintf("topic currently has %d partitions, which is higher than or equal to the requested %d", have, c.Count))
	}
	if len(c.Assignments) > 0 {
		if add := int(c.Count) - len(t.Partitions); len(c.Assignments) != add {
			return core.Fail(kerr.InvalidReplicaAssignment.Code, fmt.Sprintf("Attempted to add %d additional partition(s), but only %d assignment(s) were specified.", add, len(c.Assignments)))
		}
		if r := CheckAssignments(c.Assignments, assignedReplicas(t)); r.Code != 0 {
			return r
		}
	}
	from := len(t.Partitions)
	if err := f.addPartitions(t, c.Count); err != nil {
		return f.LocalFault("adding partitions to %s: %w", t.Name, err)
	}
	assign(t, from, c.Assignments)
	f.DirtyTopics[t.Name] = true
	f.MetaChanged = true
	return core.Result{}
}

func (f *Topics) alterConfigs(c AlterConfigs) core.Result {
	t, r := f.lookup(c.Topic, core.TopicID{})
	if t == nil {
		return r
	}
	if r := viewConfigRefusal(t, c); r.Code != 0 {
		return r
	}
	next, err := ApplyConfigChanges(t.Configs, c)
	if err != nil {
		return core.Fail(kerr.InvalidConfig.Code, err.Error())
	}
	was := t.Config
	t.Configs = next
	t.Config = resolveConfig(next, f.logDefaults.configs)
	for _, h := range f.hooks.ConfigChanged.Hooks {
		if r := h.Fn(f, t, was); r.Code != 0 {
			return r
		}
	}
	f.DirtyTopics[t.Name] = true
	f.MetaChanged = true
	for _, p := range t.Partitions {
		if err := p.Log.SetConfig(logConfig(t.Config)); err != nil {
			return f.LocalFault("applying configs to %s-%d: %w", t.Name, p.Index, err)
		}
	}
	return core.Result{}
}

// ApplyConfigChanges returns what a topic's explicit configs become once c
// is applied (without changing current), or the first invalid value. The
// state machine applies AlterConfigs with it; front-ends use it to answer
// validate-only requests the same way.
func ApplyConfigChanges(current map[string]string, c AlterConfigs) (map[string]string, error) {
	return ApplyChanges(current, c.Incremental, c.Changes, LookupConfig, ValidateConfig)
}

// ApplyChanges returns what a resource's dynamic configs become once
// changes are applied to current (without changing it), or the first
// invalid value in name order. With incremental false the result holds
// only the SET changes (the legacy AlterConfigs API replaces a resource's
// configs whole). APPEND and SUBTRACT start from the config's default
// (lookup) when the list is unset, as Kafka's
// ConfigAdminManager.prepareIncrementalConfigs does; validate checks every
// value of the result.
func ApplyChanges(current map[string]string, incremental bool, changes []ConfigChange,
	lookup func(string) (ConfigDef, bool), validate func(name, value string) error) (map[string]string, error) {
	next := map[string]string{}
	if incremental {
		for k, v := range current {
			next[k] = v
		}
	}
	for _, ch := range changes {
		switch ch.Op {
		case OpSet:
			next[ch.Name] = ch.Value
		case OpDelete:
			delete(next, ch.Name)
		case OpAppend, OpSubtract:
			d, _ := lookup(ch.Name)
			cur, ok := next[ch.Name]
			if !ok {
				cur = d.Default
			}
			next[ch.Name] = editList(cur, ch.Value, ch.Op == OpAppend)
		}
	}
	for _, name := range core.SortedKeys(next) {
		if err := validate(name, next[name]); err != nil {
			return nil, err
		}
	}
	return next, nil
}

// editList appends to or removes from a comma-separated list the values in change.
func editList(cur, change string, add bool) string {
	items := splitList(cur)
	for _, v := range splitList(change) {
		if add {
			if !contains(items, v) {
				items = append(items, v)
			}
			continue
		}
		kept := items[:0]
		for _, it := range items {
			if it != v {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	return strings.Join(items, ",")
}

// RegisterTopics is the topics module's registration function
// (buildRegistry, registry.go). It makes the module's hook points first:
// buildRegistry calls it before every module above it, as those register
// hooks there. Then its files' registrations, each of what that file
// defines.
func RegisterTopics(r *core.Registry) *TopicHooks {
	h := newTopicHooks()          // topic_hooks.go
	registerTopicState(r)         // topic_state.go
	registerTopicCommands(r)      // topic_cmds.go
	registerConfigVersions(r)     // config_versions.go
	registerLogDefaults(r)        // log_defaults.go
	registerAppendClock(r)        // append_clock.go
	registerHousekeeping(r)       // housekeeping.go
	registerPartitionProducers(r) // partition_producers.go
	registerPartitionTxns(r)      // partition_txns.go
	registerTopicSnapshot(r)      // topic_snapshot.go
	return h
}
