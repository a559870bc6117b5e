package topics

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/stele-io/stele/internal/subject"
	"github.com/stele-io/stele/pkg/proof"
)

// ConfigType is the type of a topic config's value, as DescribeConfigs
// reports it (KIP-569 uses the same names).
type ConfigType int8

// Config types, numbered as Kafka's DescribeConfigs v3+ reports them.
const (
	TypeBoolean ConfigType = 1
	TypeString  ConfigType = 2
	TypeInt     ConfigType = 3
	TypeLong    ConfigType = 5
	TypeDouble  ConfigType = 6
	TypeList    ConfigType = 7
)

// ConfigDef describes one topic config: its default, how a value is checked,
// and whether Stele enforces it. Names, types and defaults are Apache Kafka's.
type ConfigDef struct {
	Name    string
	Type    ConfigType
	Default string
	// Enforced is false for configs Stele accepts and reports for
	// compatibility but that change nothing here (replication and flush
	// settings, for instance: every broker holds every partition and
	// durability comes from consensus). docs/kafka-api.md lists them.
	Enforced bool
	Doc      string
	Min, Max int64
	valid    []string // for strings and lists: the allowed values
	// Check validates a value beyond its type and range: each element of
	// a list whose values are open, a string with no fixed set of values
	// (valid is then unused), or a number or boolean Kafka checks further.
	Check func(string) error
	// Since is the app version that added the config (0: every version):
	// under an older one it is unknown, as to the binaries that predate it
	// (config_versions.go).
	Since uint32
}

const maxLong = math.MaxInt64

// TopicConfigs is sorted by name.
var TopicConfigs = []ConfigDef{
	{Name: "cleanup.policy", Type: TypeList, Default: "delete", Enforced: true, valid: []string{"compact", "delete", "snapshot"},
		Doc: "delete: drop old segments by retention.ms/retention.bytes; compact: keep the latest record per key; snapshot (Stele): drop a key's records older than its latest snapshot record (docs/keys.md)"},
	{Name: "compression.gzip.level", Type: TypeInt, Default: "-1", Min: -1, Max: 9, Check: gzipLevel,
		Doc: "batches are stored as the producer compressed them; the broker never recompresses"},
	{Name: "compression.lz4.level", Type: TypeInt, Default: "9", Min: 1, Max: 17,
		Doc: "batches are stored as the producer compressed them; the broker never recompresses"},
	{Name: "compression.type", Type: TypeString, Default: "producer", valid: []string{"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"},
		Doc: "batches are stored as the producer compressed them whatever the value"},
	{Name: "compression.zstd.level", Type: TypeInt, Default: "3", Min: -131072, Max: 22,
		Doc: "batches are stored as the producer compressed them; the broker never recompresses"},
	{Name: "delete.retention.ms", Type: TypeLong, Default: "86400000", Enforced: true, Min: 0, Max: maxLong,
		Doc: "how long tombstones stay in a compacted topic"},
	{Name: "file.delete.delay.ms", Type: TypeLong, Default: "60000", Min: 0, Max: maxLong},
	{Name: "flush.messages", Type: TypeLong, Default: "9223372036854775807", Min: 1, Max: maxLong,
		Doc: "durability comes from consensus; the log is fsynced at every commit"},
	{Name: "flush.ms", Type: TypeLong, Default: "9223372036854775807", Min: 0, Max: maxLong,
		Doc: "durability comes from consensus; the log is fsynced at every commit"},
	{Name: "follower.replication.throttled.replicas", Type: TypeList, Default: "", Check: throttledReplica,
		Doc: "brokers do not replicate by fetching from a leader; nothing is throttled"},
	{Name: "index.interval.bytes", Type: TypeInt, Default: "4096", Enforced: true, Min: 0, Max: math.MaxInt32},
	{Name: "leader.replication.throttled.replicas", Type: TypeList, Default: "", Check: throttledReplica,
		Doc: "brokers do not replicate by fetching from a leader; nothing is throttled"},
	{Name: "local.retention.bytes", Type: TypeLong, Default: "-2", Min: -2, Max: maxLong,
		Doc: "tiered storage: there is no remote tier yet"},
	{Name: "local.retention.ms", Type: TypeLong, Default: "-2", Min: -2, Max: maxLong,
		Doc: "tiered storage: there is no remote tier yet"},
	{Name: "max.compaction.lag.ms", Type: TypeLong, Default: "9223372036854775807", Min: 1, Max: maxLong},
	{Name: "max.message.bytes", Type: TypeInt, Default: "1048588", Enforced: true, Min: 0, Max: math.MaxInt32,
		Doc: "largest record batch the topic accepts"},
	{Name: "message.downconversion.enable", Type: TypeBoolean, Default: "true",
		Doc: "deprecated in Kafka; Fetch below v4 (the only versions that down-convert) is not served"},
	{Name: "message.format.version", Type: TypeString, Default: "3.0-IV1", Check: MessageFormatVersion,
		Doc: "deprecated in Kafka 3.0 and ignored by it since; batches are always RecordBatch v2"},
	{Name: "message.timestamp.after.max.ms", Type: TypeLong, Default: "9223372036854775807", Min: 0, Max: maxLong,
		Doc: "not checked yet: only message.timestamp.difference.max.ms bounds timestamps"},
	{Name: "message.timestamp.before.max.ms", Type: TypeLong, Default: "9223372036854775807", Min: 0, Max: maxLong,
		Doc: "not checked yet: only message.timestamp.difference.max.ms bounds timestamps"},
	{Name: "message.timestamp.difference.max.ms", Type: TypeLong, Default: "9223372036854775807", Enforced: true, Min: 0, Max: maxLong,
		Doc: "largest difference allowed between a CreateTime timestamp and the block time"},
	{Name: "message.timestamp.type", Type: TypeString, Default: "CreateTime", Enforced: true, valid: []string{"CreateTime", "LogAppendTime"},
		Doc: "LogAppendTime stamps batches with the block time"},
	{Name: "min.cleanable.dirty.ratio", Type: TypeDouble, Default: "0.5", Enforced: true,
		Doc: "compact once this share of the log has not been compacted yet"},
	{Name: "min.compaction.lag.ms", Type: TypeLong, Default: "0", Min: 0, Max: maxLong},
	{Name: "min.insync.replicas", Type: TypeInt, Default: "1", Min: 1, Max: math.MaxInt32,
		Doc: "every broker holds every partition; a write is acknowledged once committed by consensus"},
	{Name: "preallocate", Type: TypeBoolean, Default: "false"},
	{Name: "remote.log.copy.disable", Type: TypeBoolean, Default: "false",
		Doc: "tiered storage: there is no remote tier yet"},
	{Name: "remote.log.delete.on.disable", Type: TypeBoolean, Default: "false",
		Doc: "tiered storage: there is no remote tier yet"},
	{Name: "remote.storage.enable", Type: TypeBoolean, Default: "false", Enforced: true, Check: remoteStorage,
		Doc: "tiered storage is not available: true is refused, as by a Kafka broker with remote.log.storage.system.enable=false"},
	{Name: "retention.bytes", Type: TypeLong, Default: "-1", Enforced: true, Min: -1, Max: maxLong},
	{Name: "retention.ms", Type: TypeLong, Default: "604800000", Enforced: true, Min: -1, Max: maxLong},
	{Name: "segment.bytes", Type: TypeInt, Default: "1073741824", Enforced: true, Min: 14, Max: math.MaxInt32},
	{Name: "segment.index.bytes", Type: TypeInt, Default: "10485760", Min: 4, Max: math.MaxInt32},
	{Name: "segment.jitter.ms", Type: TypeLong, Default: "0", Min: 0, Max: maxLong},
	{Name: "segment.ms", Type: TypeLong, Default: "604800000", Enforced: true, Min: 1, Max: maxLong},
	{Name: "stele.key.schema.validation", Type: TypeString, Default: "none", Enforced: true, valid: SchemaValidations, Since: SchemaValidationVersion,
		Doc: "Stele: what each record's key must be: none; id (Confluent's wire format with a schema id registered under the key's subject); full (also a value of that schema) (docs/schemas.md)"},
	{Name: "stele.key.subject.name.strategy", Type: TypeString, Default: "TopicNameStrategy", Enforced: true, Check: SubjectNameStrategy, Since: SchemaValidationVersion,
		Doc: "Stele: the registry subject a key's schema id must be registered under: TopicNameStrategy (<topic>-key), RecordNameStrategy (the record's full name) or TopicRecordNameStrategy (<topic>-<full name>) (docs/schemas.md)"},
	{Name: "stele.signed.by", Type: TypeList, Default: "", Enforced: true, Check: proof.ValidPrincipal,
		Doc: "Stele: principals whose signed records the topic takes, and no others; empty: signatures optional, verified when present (docs/signed-producers.md)"},
	{Name: "stele.subject.from", Type: TypeString, Default: "header", Enforced: true, Check: SubjectFrom, Since: SubjectsVersion,
		Doc: "Stele: where a record's subject comes from: header (the stele-subject header) or json:/pointer (a JSON Pointer into the record's JSON value) (docs/subjects.md)"},
	{Name: "stele.subject.required", Type: TypeBoolean, Default: "false", Enforced: true, Since: SubjectsVersion,
		Doc: "Stele: a record without a subject is refused with its batch (docs/subjects.md)"},
	{Name: "stele.value.schema.validation", Type: TypeString, Default: "none", Enforced: true, valid: SchemaValidations, Since: SchemaValidationVersion,
		Doc: "Stele: what each record's value must be: none; id (Confluent's wire format with a schema id registered under the value's subject); full (also a value of that schema); a null value passes (docs/schemas.md)"},
	{Name: "stele.value.subject.name.strategy", Type: TypeString, Default: "TopicNameStrategy", Enforced: true, Check: SubjectNameStrategy, Since: SchemaValidationVersion,
		Doc: "Stele: the registry subject a value's schema id must be registered under: TopicNameStrategy (<topic>-value), RecordNameStrategy or TopicRecordNameStrategy (docs/schemas.md)"},
	{Name: "stele.view.from", Type: TypeList, Default: "", Enforced: true, Check: ValidTopicName, Since: ViewsVersion,
		Doc: "Stele: the topic is a view of these topics' records whose subject matches stele.view.subject; set when the view is created, never changed (docs/subjects.md)"},
	{Name: "stele.view.order", Type: TypeString, Default: "partition", Enforced: true, valid: []string{"global", "partition"}, Since: ViewsVersion,
		Doc: "Stele: a view's order: partition (source partition p feeds view partition p) or global (one view partition in the chain's order) (docs/subjects.md)"},
	{Name: "stele.view.subject", Type: TypeString, Default: ">", Enforced: true, Check: viewPattern, Since: ViewsVersion,
		Doc: "Stele: the subject pattern a view's records match (docs/subjects.md)"},
	{Name: "unclean.leader.election.enable", Type: TypeBoolean, Default: "false"},
}

// TopicConfigDefs returns the definitions of every topic config, by name.
func TopicConfigDefs() []ConfigDef { return TopicConfigs }

// LookupConfig returns the definition of the named topic config.
func LookupConfig(name string) (ConfigDef, bool) {
	i := sort.Search(len(TopicConfigs), func(i int) bool { return TopicConfigs[i].Name >= name })
	if i < len(TopicConfigs) && TopicConfigs[i].Name == name {
		return TopicConfigs[i], true
	}
	return ConfigDef{}, false
}

// ValidateConfig checks one topic config value, with the messages Kafka gives.
func ValidateConfig(name, value string) error {
	d, ok := LookupConfig(name)
	if !ok {
		return fmt.Errorf("unknown topic config name: %s", name)
	}
	return ValidateValue(d, name, value)
}

// ValidateValue checks value against d; name is what the messages call
// the config (the topic config's name, or its broker-level synonym for a
// cluster-wide default, log_defaults.go).
func ValidateValue(d ConfigDef, name, value string) error {
	switch d.Type {
	case TypeBoolean:
		if !strings.EqualFold(value, "true") && !strings.EqualFold(value, "false") {
			return fmt.Errorf("invalid value %s for configuration %s: expected value to be either true or false", value, name)
		}
	case TypeInt, TypeLong:
		v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil || (d.Type == TypeInt && (v < math.MinInt32 || v > math.MaxInt32)) {
			return fmt.Errorf("invalid value %s for configuration %s: not a number of type %s", value, name, typeName(d.Type))
		}
		if v < d.Min {
			return fmt.Errorf("invalid value %s for configuration %s: value must be at least %d", value, name, d.Min)
		}
		if v > d.Max {
			return fmt.Errorf("invalid value %s for configuration %s: value must be no more than %d", value, name, d.Max)
		}
	case TypeDouble:
		if _, err := parseRatio(value); err != nil {
			return fmt.Errorf("invalid value %s for configuration %s: %v", value, name, err)
		}
	case TypeString:
		if d.Check != nil {
			break // checked below
		}
		if !contains(d.valid, value) {
			return fmt.Errorf("invalid value %s for configuration %s: string must be one of: %s", value, name, strings.Join(d.valid, ", "))
		}
	case TypeList:
		for _, v := range splitList(value) {
			if d.Check != nil {
				if err := d.Check(v); err != nil {
					return fmt.Errorf("invalid value %s for configuration %s: %v", value, name, err)
				}
				continue
			}
			if !contains(d.valid, v) {
				return fmt.Errorf("invalid value %s for configuration %s: list contains invalid value %q; valid values are %s", value, name, v, strings.Join(d.valid, ", "))
			}
		}
		return nil
	}
	if d.Check != nil {
		if err := d.Check(strings.TrimSpace(value)); err != nil {
			return fmt.Errorf("invalid value %s for configuration %s: %v", value, name, err)
		}
	}
	return nil
}

// gzipLevel is Kafka's check of compression.gzip.level: 1 to 9, or -1
// for the library's default.
func gzipLevel(v string) error {
	if n, _ := strconv.Atoi(v); n == 0 {
		return fmt.Errorf("Value must be between 1 and 9 or equal to -1")
	}
	return nil
}

// throttledReplica is Kafka's check of one element of
// leader/follower.replication.throttled.replicas: partition:broker, or a
// lone "*" for every replica.
func throttledReplica(v string) error {
	if v == "*" {
		return nil
	}
	p, b, ok := strings.Cut(v, ":")
	if ok && digits(p) && digits(b) {
		return nil
	}
	return fmt.Errorf("must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// remoteStorage refuses remote.storage.enable=true with the message of a
// Kafka broker whose remote.log.storage.system.enable is false: Stele has
// no remote tier yet.
func remoteStorage(v string) error {
	if strings.EqualFold(v, "true") {
		return fmt.Errorf("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.")
	}
	return nil
}

// messageFormatVersions are the versions Kafka 3.9's MetadataVersion knows,
// as message.format.version accepts them: each IBP version and, for the
// releases, the release alone ("2.8" for "2.8-IV1").
var messageFormatVersions = func() map[string]bool {
	m := map[string]bool{"0.8.0": true, "0.8.1": true, "0.8.2": true, "0.9.0": true}
	for _, rel := range []struct {
		release string
		ivs     int
	}{
		{"0.10.0", 2}, {"0.10.1", 3}, {"0.10.2", 1}, {"0.11.0", 3}, {"1.0", 1}, {"1.1", 1},
		{"2.0", 2}, {"2.1", 3}, {"2.2", 2}, {"2.3", 2}, {"2.4", 2}, {"2.5", 1}, {"2.6", 1},
		{"2.7", 3}, {"2.8", 2}, {"3.0", 2}, {"3.1", 1}, {"3.2", 1}, {"3.3", 4}, {"3.4", 1},
		{"3.5", 3}, {"3.6", 3}, {"3.7", 5}, {"3.8", 1}, {"3.9", 1},
	} {
		m[rel.release] = true
		for i := range rel.ivs {
			m[fmt.Sprintf("%s-IV%d", rel.release, i)] = true
		}
	}
	return m
}()

// MessageFormatVersion is Kafka's MetadataVersion.fromVersionString: a
// version is looked up by its first three dot-separated parts if it begins
// with "0.", its first two otherwise, so "2.8.1" is "2.8".
func MessageFormatVersion(v string) error {
	n := 2
	if strings.HasPrefix(v, "0.") {
		n = 3
	}
	key := v
	if parts := strings.Split(v, "."); len(parts) > n {
		key = strings.Join(parts[:n], ".")
	}
	if !messageFormatVersions[key] {
		return fmt.Errorf("Version %s is not a valid version", v)
	}
	return nil
}

func typeName(t ConfigType) string {
	switch t {
	case TypeInt:
		return "INT"
	case TypeLong:
		return "LONG"
	}
	return "STRING"
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ratioScale is the fixed-point scale of ratios: the state machine does no
// floating point, so "0.5" is held as 500000 parts per million.
const ratioScale = 1_000_000

// parseRatio parses a decimal between 0 and 1 into parts per million without
// floating point.
func parseRatio(s string) (int64, error) {
	s = strings.TrimSpace(s)
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" {
		return 0, fmt.Errorf("not a number")
	}
	w, err := strconv.ParseInt(orZero(whole), 10, 64)
	if err != nil || w < 0 || w > 1 {
		return 0, fmt.Errorf("value must be between 0 and 1")
	}
	if len(frac) > 6 {
		frac = frac[:6]
	}
	f, err := strconv.ParseInt(orZero(frac+strings.Repeat("0", 6-len(frac))), 10, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("not a number")
	}
	v := w*ratioScale + f
	if v > ratioScale {
		return 0, fmt.Errorf("value must be between 0 and 1")
	}
	return v, nil
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// TopicConfig is a topic's effective configuration, resolved once when it
// changes so the produce path reads plain fields.
type TopicConfig struct {
	Compact, Delete             bool
	Snapshot                    bool // cleanup.policy=snapshot (keys.go)
	DeleteRetentionMs           int64
	IndexIntervalBytes          int32
	MaxMessageBytes             int32
	LogAppendTime               bool
	TimestampDifferenceMaxMs    int64
	MinCleanableDirtyRatioPPM   int64
	RetentionBytes, RetentionMs int64
	SegmentBytes                int64
	SegmentMs                   int64
	SignedBy                    []string // stele.signed.by (signed.go)
	// SubjectFrom is stele.subject.from: nil for the stele-subject header,
	// else the JSON Pointer into the record's value (record_headers.go).
	SubjectFrom *subject.Pointer
	// SubjectField is stele.subject.from's field:PATH: the path of the
	// field of the record's schema-encoded value that is its subject
	// (nil for the other rules).
	SubjectField    []string
	SubjectRequired bool // stele.subject.required
	// View is what the stele.view.* configs make of a view (views.go);
	// nil for a topic that is not one.
	View *ViewDef
	// KeySchema and ValueSchema are stele.key.* and stele.value.*'s
	// schema validation (schema_configs.go).
	KeySchema, ValueSchema SchemaCheck
}

// resolveConfig computes the effective config from a topic's explicit
// configs (already validated) over the cluster-wide log defaults (by
// broker config name, log_defaults.go) over Kafka's defaults.
func resolveConfig(explicit, logDefaults map[string]string) TopicConfig {
	get := func(name string) string {
		if v, ok := explicit[name]; ok {
			return v
		}
		if b := BrokerSynonym(name); b != "" {
			if v, ok := logDefaults[b]; ok {
				return v
			}
		}
		d, _ := LookupConfig(name)
		return d.Default
	}
	num := func(name string) int64 {
		v, _ := strconv.ParseInt(strings.TrimSpace(get(name)), 10, 64)
		return v
	}
	var c TopicConfig
	for _, p := range splitList(get("cleanup.policy")) {
		c.Compact = c.Compact || p == "compact"
		c.Delete = c.Delete || p == "delete"
		c.Snapshot = c.Snapshot || p == "snapshot"
	}
	c.DeleteRetentionMs = num("delete.retention.ms")
	c.IndexIntervalBytes = int32(num("index.interval.bytes"))
	c.MaxMessageBytes = int32(num("max.message.bytes"))
	c.LogAppendTime = get("message.timestamp.type") == "LogAppendTime"
	c.TimestampDifferenceMaxMs = num("message.timestamp.difference.max.ms")
	c.MinCleanableDirtyRatioPPM, _ = parseRatio(get("min.cleanable.dirty.ratio"))
	c.RetentionBytes = num("retention.bytes")
	c.RetentionMs = num("retention.ms")
	c.SegmentBytes = num("segment.bytes")
	c.SegmentMs = num("segment.ms")
	c.SignedBy = splitList(get("stele.signed.by"))
	if ptr, ok := strings.CutPrefix(get("stele.subject.from"), "json:"); ok {
		if p, err := subject.ParsePointer(ptr); err == nil {
			c.SubjectFrom = &p
		}
	}
	if path, ok := strings.CutPrefix(get("stele.subject.from"), "field:"); ok {
		c.SubjectField, _ = ParseFieldPath(path)
	}
	c.SubjectRequired = strings.EqualFold(get("stele.subject.required"), "true")
	c.KeySchema = schemaCheck(get("stele.key.schema.validation"), get("stele.key.subject.name.strategy"))
	c.ValueSchema = schemaCheck(get("stele.value.schema.validation"), get("stele.value.subject.name.strategy"))
	if from := splitList(explicit["stele.view.from"]); len(from) > 0 {
		if pat, err := subject.ParsePattern(get("stele.view.subject")); err == nil {
			c.View = &ViewDef{From: from, Pattern: pat, Global: get("stele.view.order") == "global"}
		}
	}
	return c
}
