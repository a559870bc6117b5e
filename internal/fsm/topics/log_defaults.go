package topics

import (
	"fmt"
	"reflect"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
)

// The topics module's cluster-wide log defaults: Kafka's dynamic
// broker-level defaults of topic configs (DynamicLogConfig), set on the
// BROKER resource with the empty name (kafka-configs.sh --entity-type
// brokers --entity-default). Each is named by its broker config
// (log.retention.ms, log.segment.bytes, message.max.bytes, ...; the
// primary synonym of a topic config, ServerTopicConfigSynonyms) and gives
// every topic that does not set the topic config its value: a topic's
// effective config is its own value, else the cluster-wide default, else
// Kafka's default (resolveConfig). As in Kafka the set is Kafka's
// DynamicLogConfig.ReconfigurableConfigs: the primary synonyms only
// (log.retention.hours and log.roll.hours stay read-only) and not
// log.message.format.version.
//
// Every broker holds every partition and applies the same blocks, so the
// defaults are replicated state: the AlterLogDefaults command sets them,
// one authenticated leaf holds them (m/log-defaults, below, read and
// written as the broker configs' is: loadLeaf and stageLeaf, persist.go) and so
// snapshots carry them; a change re-resolves every topic's config at once,
// as Kafka's DynamicLogConfig.reconfigure updates every log. Per-broker
// values (a broker id as the resource name) cannot exist here: every
// broker must apply the same blocks alike; the front-end refuses them.

// KindAlterLogDefaults is the topics module's command that changes the
// cluster-wide log defaults.
const KindAlterLogDefaults core.Kind = 23

// maxLogDefaultValue bounds one default's value, as the stored leaf and the
// command are read back with it.
const maxLogDefaultValue = 1 << 16

// registerLogDefaults registers AlterLogDefaults and the log defaults'
// step (RegisterTopics calls it).
func registerLogDefaults(r *core.Registry) {
	core.RegisterModuleCommand(r, topicsOf, KindAlterLogDefaults, "AlterLogDefaults", ModTopics, decodeAlterLogDefaults, checkLogDefaults,
		func(f *Topics, c AlterLogDefaults, _ core.CmdAt) core.Result { return f.alterLogDefaults(c) })
	core.RegisterModuleStep(r, topicsOf, core.ModuleStep[*Topics]{Rank: 55, Name: "cluster-wide log defaults", Module: ModTopics, Load: loadLogDefaults, Stage: stageLogDefaults})
}

// AlterLogDefaults changes the cluster-wide log defaults, named by their
// broker configs. With Incremental false the defaults become exactly the
// SET changes given (the legacy AlterConfigs API replaces the resource's
// dynamic configs whole).
type AlterLogDefaults struct {
	Incremental bool
	Changes     []ConfigChange
}

func (AlterLogDefaults) Kind() core.Kind { return KindAlterLogDefaults }

func (c AlterLogDefaults) Encode(w *core.Writer) { EncodeChanges(w, c.Incremental, c.Changes) }

func decodeAlterLogDefaults(r *core.Reader) AlterLogDefaults {
	var c AlterLogDefaults
	c.Incremental, c.Changes = DecodeChanges(r)
	return c
}

// logDefaults is the topics module's state of the cluster-wide defaults.
type logDefaults struct {
	configs map[string]string // by broker config name; never nil
	dirty   bool              // changed in the block: staged at its end
}

// BrokerSynonym is the broker config that gives a topic config its default
// in Kafka (the first of ServerTopicConfigSynonyms), or "" if none does.
func BrokerSynonym(topicConfig string) string {
	switch topicConfig {
	case "cleanup.policy":
		return "log.cleanup.policy"
	case "compression.type", "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
		"min.insync.replicas", "unclean.leader.election.enable":
		return topicConfig
	case "local.retention.bytes", "local.retention.ms", "message.format.version",
		"message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
		"message.timestamp.difference.max.ms", "message.timestamp.type",
		"message.downconversion.enable", "preallocate", "retention.bytes",
		"retention.ms", "segment.bytes", "index.interval.bytes":
		return "log." + topicConfig
	case "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms":
		return "log.cleaner." + topicConfig
	case "file.delete.delay.ms":
		return "log.segment.delete.delay.ms"
	case "flush.messages":
		return "log.flush.interval.messages"
	case "flush.ms":
		return "log.flush.interval.ms"
	case "max.message.bytes":
		return "message.max.bytes"
	case "min.cleanable.dirty.ratio":
		return "log.cleaner.min.cleanable.ratio"
	case "segment.index.bytes":
		return "log.index.size.max.bytes"
	case "segment.jitter.ms":
		return "log.roll.jitter.ms"
	case "segment.ms":
		return "log.roll.ms"
	}
	return ""
}

// LookupLogDefault returns the topic config whose cluster-wide default the
// named broker config is, if that default can be changed at run time
// (DynamicLogConfig.ReconfigurableConfigs).
func LookupLogDefault(broker string) (ConfigDef, bool) {
	for _, d := range TopicConfigs {
		if d.Name != "message.format.version" && BrokerSynonym(d.Name) == broker && broker != "" {
			return d, true
		}
	}
	return ConfigDef{}, false
}

// ValidateLogDefault checks one cluster-wide default's value as the topic
// config it stands for is checked, naming the broker config.
func ValidateLogDefault(broker, value string) error {
	d, ok := LookupLogDefault(broker)
	if !ok {
		return fmt.Errorf("%s is not a cluster-wide log default that can be changed at run time", broker)
	}
	if len(value) > maxLogDefaultValue {
		return fmt.Errorf("invalid value for configuration %s: longer than %d bytes", broker, maxLogDefaultValue)
	}
	return ValidateValue(d, broker, value)
}

// ApplyLogDefaultChanges returns what the cluster-wide defaults become once
// c is applied (without changing current), or the first invalid value.
// APPEND and SUBTRACT start from Kafka's default when the list is unset,
// as Kafka's ConfigAdminManager.prepareIncrementalConfigs does. The state
// machine applies AlterLogDefaults with it; front-ends answer
// validate-only requests with it.
func ApplyLogDefaultChanges(current map[string]string, c AlterLogDefaults) (map[string]string, error) {
	return ApplyChanges(current, c.Incremental, c.Changes, LookupLogDefault, ValidateLogDefault)
}

// checkLogDefaults is AlterLogDefaults' stateless check. Refusals are
// INVALID_REQUEST, as Kafka answers a BROKER config it cannot apply
// (ConfigAdminManager, KAFKA-13609), but for APPEND or SUBTRACT on a
// config that is not a list: INVALID_CONFIG, as Kafka.
func checkLogDefaults(cmd core.Command) core.Result {
	c := cmd.(AlterLogDefaults)
	seen := map[string]bool{}
	for _, ch := range c.Changes {
		if seen[ch.Name] {
			return core.Fail(kerr.InvalidRequest.Code, "Error due to duplicate config keys")
		}
		seen[ch.Name] = true
		d, ok := LookupLogDefault(ch.Name)
		if !ok {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("%s is not a cluster-wide log default that can be changed at run time", ch.Name))
		}
		switch {
		case ch.Op == OpSet:
			if err := ValidateLogDefault(ch.Name, ch.Value); err != nil {
				return core.Fail(kerr.InvalidRequest.Code, err.Error())
			}
		case ch.Op == OpDelete && c.Incremental:
		case (ch.Op == OpAppend || ch.Op == OpSubtract) && c.Incremental:
			if d.Type != TypeList {
				what := "append"
				if ch.Op == OpSubtract {
					what = "subtract"
				}
				return core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("Config value %s is not allowed for config key: %s", what, ch.Name))
			}
			if len(ch.Value) > maxLogDefaultValue {
				return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("invalid value for configuration %s: longer than %d bytes", ch.Name, maxLogDefaultValue))
			}
		default:
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("Unknown operations type %d", ch.Op))
		}
	}
	return core.Result{}
}

// alterLogDefaults applies c and re-resolves the config of every topic, in
// name order, as Kafka's DynamicLogConfig.updateLogsConfig does: a topic
// whose effective config changed runs the config-changed hooks and gives
// its partition logs the new segment settings.
func (f *Topics) alterLogDefaults(c AlterLogDefaults) core.Result {
	next, err := ApplyLogDefaultChanges(f.logDefaults.configs, c)
	if err != nil {
		return core.Fail(kerr.InvalidRequest.Code, err.Error())
	}
	f.logDefaults.configs, f.logDefaults.dirty = next, true
	f.MetaChanged = true
	for _, name := range SortedNames(f.ByName) {
		t := f.ByName[name]
		was := t.Config
		t.Config = resolveConfig(t.Configs, next)
		if SameConfig(was, t.Config) {
			continue
		}
		for _, h := range f.hooks.ConfigChanged.Hooks {
			if r := h.Fn(f, t, was); r.Code != 0 {
				return r
			}
		}
		for _, p := range t.Partitions {
			if err := p.Log.SetConfig(logConfig(t.Config)); err != nil {
				return f.LocalFault("applying the log defaults to %s-%d: %w", t.Name, p.Index, err)
			}
		}
	}
	return core.Result{}
}

// SameConfig reports whether two resolved configs are equal.
func SameConfig(a, b TopicConfig) bool { return reflect.DeepEqual(a, b) }

// KeyLogDefaults is the cluster-wide log defaults' leaf in the state trie.
var KeyLogDefaults = []byte("m/log-defaults")

// EncodeLogDefaults is m/log-defaults' value:
//
//	u8 version | count × (str broker config name | str value), by name
func EncodeLogDefaults(m map[string]string) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	names := core.SortedKeys(m)
	w.Count(len(names))
	for _, n := range names {
		w.Str(n)
		w.Str(m[n])
	}
	return w.B
}

// DecodeLogDefaults reads m/log-defaults. Each default must be one that can
// be set, once, with a valid value: what the state machine would store.
func DecodeLogDefaults(v []byte) (map[string]string, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: log defaults: state format %d not supported", ver)
	}
	m := map[string]string{}
	for i, n := 0, r.Count(2); i < n && r.E == nil; i++ {
		name, value := r.Str(), r.Str()
		if _, dup := m[name]; dup {
			r.Fail("log default %s stored twice", name)
		}
		m[name] = value
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("stele/fsm: reading the log defaults: %w", err)
	}
	for _, n := range core.SortedKeys(m) {
		if err := ValidateLogDefault(n, m[n]); err != nil {
			return nil, fmt.Errorf("stele/fsm: reading the log defaults: %w: %w", core.ErrMalformed, err)
		}
	}
	return m, nil
}

// loadLogDefaults reads the defaults before the topics' load (rank 60)
// resolves any topic's config with them.
func loadLogDefaults(f *Topics) error {
	f.logDefaults = logDefaults{configs: map[string]string{}}
	return core.LoadLeaf(f.Machine, KeyLogDefaults, DecodeLogDefaults, &f.logDefaults.configs)
}

// stageLogDefaults writes the defaults a block changed; none left deletes
// the leaf, so a cluster that never set one holds no key for them.
func stageLogDefaults(f *Topics, b *core.StateBatch) error {
	core.StageLeaf(b, KeyLogDefaults, &f.logDefaults.dirty, f.logDefaults.configs, len(f.logDefaults.configs) == 0, EncodeLogDefaults)
	return nil
}
