package cluster

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// The cluster module's dynamic broker configs: the connection limits Kafka
// can change at run time (SocketServer.ReconfigurableConfigs, applied by
// its ConnectionQuotas: max.connection.creation.rate, max.connections,
// max.connections.per.ip, max.connections.per.ip.overrides), set with AlterConfigs or
// IncrementalAlterConfigs on a BROKER resource: a broker id for that broker
// (DYNAMIC_BROKER_CONFIG) or the empty name for every broker
// (DYNAMIC_DEFAULT_BROKER_CONFIG). As in Kafka, where they are records of
// the metadata log, they are replicated state: the AlterBrokerConfigs
// command sets one resource's set, one authenticated leaf holds them all
// (m/broker-configs, below, read and written as the log defaults' is:
// loadLeaf and stageLeaf, persist.go), snapshots carry them, and every broker holds
// every broker's, so a restarted broker finds its own again. The state
// machine only stores and checks them; each broker's front-end reads its
// effective values from the committed BrokerConfigs after a commit (a
// broker's own value, else the cluster-wide default, else its static
// configuration, else Kafka's default) and reconfigures its acceptor.
// The state machine takes any broker id of at least 0 (membership is not
// its state): the front-end refuses an id that is not a member, with
// Kafka's "Unexpected broker id", before submitting.
//
// Checks are Kafka's (SocketServerConfigs' ConfigDef, KafkaConfig's
// validateValues, ListenerConnectionQuota.validateReconfiguration): each an
// int of at least 0 but max.connections at least 1 ("Invalid
// max.connections 0"; max.connection.creation.rate 0 is valid broker-wide,
// as in Kafka, where only the listener-prefixed form must be above 0); max.connections.per.ip 0 only when the resource,
// with the default under a broker's own values, has
// max.connections.per.ip.overrides: stricter than Kafka, which also counts
// the static file's overrides, since the state machine cannot know a
// broker's static file. A default changed so that a broker's set would
// break that rule is refused too. Not done: the listener-prefixed forms
// (listener.name.X.max.connections, listener.name.X.max.connection.creation.rate):
// Stele has one Kafka listener; the front-end refuses them as not
// changeable in Stele yet.
//
// One more config lives here, cluster-wide only (on the empty name):
// stele.admin.signed, which the state machine itself obeys rather than a
// front-end: the security module's gate (security/admin_signed.go) refuses the
// administrative commands applied unsigned while it is true, and any
// unsigned AlterBrokerConfigs that would change it.
//
// The log.* topic defaults set on the empty name are another command,
// AlterLogDefaults (log_defaults.go): the topics module applies them to
// every topic.

// KindAlterBrokerConfigs is the cluster module's command that changes the
// dynamic broker configs of one BROKER resource.
const KindAlterBrokerConfigs core.Kind = 24

// The dynamic broker configs the state machine keeps.
const (
	MaxConnectionCreationRateConfig    = "max.connection.creation.rate"
	MaxConnectionsConfig               = "max.connections"
	MaxConnectionsPerIPConfig          = "max.connections.per.ip"
	MaxConnectionsPerIPOverridesConfig = "max.connections.per.ip.overrides"
	// AdminSignedConfig makes administration signed: cluster-wide only
	// (the default BROKER resource); the security module enforces it
	// (security/admin_signed.go).
	AdminSignedConfig = "stele.admin.signed"
	// ValidatorDowntimeConfig demotes a validator that signed no block
	// for that long (downtime.go); cluster-wide only, from app version 7.
	ValidatorDowntimeConfig = "stele.validator.downtime.ms"
)

// maxBrokerConfigValue bounds one value, as the command and the stored
// leaf are read back with it.
const maxBrokerConfigValue = 1 << 16

// brokerConfigs is sorted by name; names, types and defaults are Kafka's.
var brokerConfigs = []topics.ConfigDef{
	{Name: MaxConnectionCreationRateConfig, Type: topics.TypeInt, Default: strconv.Itoa(math.MaxInt32), Enforced: true, Min: 0, Max: math.MaxInt32,
		Doc: "New connections beyond this many a second, measured over Kafka's quota window (11 samples of 1 s), wait before they are accepted; none is refused."},
	{Name: MaxConnectionsConfig, Type: topics.TypeInt, Default: strconv.Itoa(math.MaxInt32), Enforced: true, Min: 0, Max: math.MaxInt32,
		Doc: "While this many connections are open, no other is accepted until one closes; lowering it closes none of those open."},
	{Name: MaxConnectionsPerIPConfig, Type: topics.TypeInt, Default: strconv.Itoa(math.MaxInt32), Enforced: true, Min: 0, Max: math.MaxInt32,
		Doc: "A new connection from an address that already has this many open is closed at once; 0 only with max.connections.per.ip.overrides."},
	{Name: MaxConnectionsPerIPOverridesConfig, Type: topics.TypeString, Default: "", Enforced: true, Check: checkConnectionOverrides,
		Doc: "Per-address limits replacing max.connections.per.ip: host:count pairs, comma-separated; host names resolved when the value takes effect."},
	{Name: AdminSignedConfig, Type: topics.TypeBoolean, Default: "false", Enforced: true,
		Doc: "Cluster-wide only: when true, deleting topics or records, altering configs, deleting groups or resetting their offsets, and changing users, ACLs or client quotas must be signed by a principal the ACLs allow (stele --sign); changed only by a signed command."},
	{Name: ValidatorDowntimeConfig, Type: topics.TypeLong, Default: "0", Enforced: true, Min: 0, Max: math.MaxInt64,
		Doc: "Cluster-wide only, app version 7: a validator whose last block signature is older than this many ms of block time is demoted to a replica (stele cluster promote makes it a validator again), one a block, as long as the validators left that are signing hold more than 2/3 of the power. 0, the default, demotes none."},
}

// registerBrokerConfigs registers AlterBrokerConfigs and the dynamic
// broker configs' step (RegisterCluster calls it).
func registerBrokerConfigs(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleCommand(r, clusterOf, KindAlterBrokerConfigs, "AlterBrokerConfigs", ModCluster, decodeAlterBrokerConfigs, checkBrokerConfigs,
		func(f *Cluster, c AlterBrokerConfigs, _ core.CmdAt) core.Result { return f.alterBrokerConfigs(c) })
	core.RegisterModuleStep(r, clusterOf, core.ModuleStep[*Cluster]{Rank: 52, Name: "dynamic broker configs", Module: ModCluster,
		Load: loadBrokerConfigs, Stage: stageBrokerConfigs, Publish: publishBrokerConfigs})
}

// AlterBrokerConfigs changes the dynamic configs of one BROKER resource:
// Broker is a broker id in decimal, or "" for the cluster-wide default.
// With Incremental false the resource's set becomes exactly the SET
// changes given (the legacy AlterConfigs API).
type AlterBrokerConfigs struct {
	Broker      string
	Incremental bool
	Changes     []topics.ConfigChange
}

func (AlterBrokerConfigs) Kind() core.Kind { return KindAlterBrokerConfigs }

func (c AlterBrokerConfigs) Encode(w *core.Writer) {
	w.Str(c.Broker)
	topics.EncodeChanges(w, c.Incremental, c.Changes)
}

func decodeAlterBrokerConfigs(r *core.Reader) AlterBrokerConfigs {
	c := AlterBrokerConfigs{Broker: r.Str()}
	c.Incremental, c.Changes = topics.DecodeChanges(r)
	return c
}

// brokerConfigsState is the cluster module's state of the dynamic broker
// configs (embedded in clusterState).
type brokerConfigsState struct {
	// brokerCfgs holds each resource's set by resource name ("" the
	// default); a resource with none set is absent. Never nil once loaded.
	BrokerCfgs      map[string]map[string]string
	brokerCfgsDirty bool // changed in the block: staged at its end
	brokerCfgsNew   bool // changed since the last publish
	brokerCfgsView  atomic.Pointer[BrokerConfigs]
}

// BrokerConfigs is the committed dynamic broker configs, as readers see
// them. Do not modify it: a new one is published at each Commit that
// changed them.
type BrokerConfigs struct {
	ByResource map[string]map[string]string
}

// Of returns the dynamic configs of the named resource (a broker id, or ""
// for the cluster-wide default), by name; nil when none is set.
func (b *BrokerConfigs) Of(resource string) map[string]string {
	if b == nil {
		return nil
	}
	return b.ByResource[resource]
}

// Effective returns the named config of broker id as the dynamic layers
// give it: the broker's own value (perBroker true), else the cluster-wide
// default, else ok false (the broker's static value or Kafka's default
// applies).
func (b *BrokerConfigs) Effective(id int32, name string) (value string, perBroker, ok bool) {
	if v, ok := b.Of(strconv.Itoa(int(id)))[name]; ok {
		return v, true, true
	}
	v, ok := b.Of("")[name]
	return v, false, ok
}

// BrokerConfigs returns the committed dynamic broker configs.
func (f *Cluster) BrokerConfigs() *BrokerConfigs { return f.brokerCfgsView.Load() }

// BrokerConfigDefs returns the definitions of the dynamic broker configs
// the state machine keeps, by name.
func BrokerConfigDefs() []topics.ConfigDef { return brokerConfigs }

// LookupBrokerConfig returns the definition of the named dynamic broker
// config.
func LookupBrokerConfig(name string) (topics.ConfigDef, bool) {
	for _, d := range brokerConfigs {
		if d.Name == name {
			return d, true
		}
	}
	return topics.ConfigDef{}, false
}

// ValidateBrokerConfig checks one value of a dynamic broker config alone,
// with Kafka's messages.
func ValidateBrokerConfig(name, value string) error {
	d, ok := LookupBrokerConfig(name)
	if !ok {
		return fmt.Errorf("%s is not a broker config Stele can change at run time", name)
	}
	if len(value) > maxBrokerConfigValue {
		return fmt.Errorf("invalid value for configuration %s: longer than %d bytes", name, maxBrokerConfigValue)
	}
	if err := topics.ValidateValue(d, name, value); err != nil {
		return err
	}
	if name == MaxConnectionsConfig && strings.TrimSpace(value) == "0" {
		return fmt.Errorf("Invalid %s 0", name) // ListenerConnectionQuota's words
	}
	return nil
}

// ValidBrokerResource reports, with the words of Kafka's
// ControllerConfigurationValidator, why name cannot name a BROKER
// resource: it must be "" or a broker id of at least 0 in decimal.
func ValidBrokerResource(name string) error {
	if name == "" {
		return nil
	}
	id, err := strconv.ParseInt(name, 10, 32)
	switch {
	case err != nil || strconv.Itoa(int(id)) != name:
		return fmt.Errorf("Unable to parse broker name as a base 10 number.")
	case id < 0:
		return fmt.Errorf("Invalid negative broker ID.")
	}
	return nil
}

// ApplyBrokerConfigChanges returns what c's resource's set becomes once c
// is applied to current (the committed BrokerConfigs; nil is none), or
// the first value that cannot be: alone (in name order), or together
// (max.connections.per.ip 0 without overrides) for the resource and, when
// c changes the default, for every broker's set over it in id order. The
// state machine applies AlterBrokerConfigs with it; front-ends answer
// validate-only requests with it.
func ApplyBrokerConfigChanges(current *BrokerConfigs, c AlterBrokerConfigs) (map[string]string, error) {
	var all map[string]map[string]string
	if current != nil {
		all = current.ByResource
	}
	return ApplyBrokerChanges(all, c)
}

func ApplyBrokerChanges(all map[string]map[string]string, c AlterBrokerConfigs) (map[string]string, error) {
	next, err := topics.ApplyChanges(all[c.Broker], c.Incremental, c.Changes, LookupBrokerConfig, ValidateBrokerConfig)
	if err != nil {
		return nil, err
	}
	def := all[""]
	if c.Broker == "" {
		def = next
		if err := checkPerIPZero(nil, next); err != nil {
			return nil, err
		}
		for _, b := range core.SortedKeys(all) {
			if b != "" {
				if err := checkPerIPZero(all[b], next); err != nil {
					return nil, fmt.Errorf("broker %s: %w", b, err)
				}
			}
		}
		return next, nil
	}
	return next, checkPerIPZero(next, def)
}

// checkPerIPZero is KafkaConfig's rule that max.connections.per.ip may be 0
// only with overrides, for a broker's own set over the default.
func checkPerIPZero(own, def map[string]string) error {
	get := func(name string) (string, bool) {
		if v, ok := own[name]; ok {
			return v, true
		}
		v, ok := def[name]
		return v, ok
	}
	perIP, ok := get(MaxConnectionsPerIPConfig)
	if !ok || strings.TrimSpace(perIP) != "0" {
		return nil
	}
	if o, _ := get(MaxConnectionsPerIPOverridesConfig); strings.TrimSpace(o) != "" {
		return nil
	}
	return fmt.Errorf("%s can be set to zero only if %s property is set.", MaxConnectionsPerIPConfig, MaxConnectionsPerIPOverridesConfig)
}

// validOverrideHost is the characters Kafka accepts in a host of
// max.connections.per.ip.overrides (Utils.validHostPattern).
var validOverrideHost = regexp.MustCompile(`^[0-9a-zA-Z\-%._:]+$`)

// ParseConnectionOverrides parses max.connections.per.ip.overrides the way
// Kafka does: comma-separated host:count pairs, each split at its last
// colon (so "::1:50" is the IPv6 address ::1 with 50), spaces around
// either ignored, [::1]:50 too. A host is an IP address or a host name; a
// count is at least 0 (0 refuses every connection from that host). The
// empty string is no overrides. A host named twice is an error.
func ParseConnectionOverrides(s string) (map[string]int, error) {
	out := map[string]int{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		i := strings.LastIndexByte(pair, ':')
		if i < 0 {
			return nil, fmt.Errorf("max.connections.per.ip.overrides: %q is not host:count", pair)
		}
		host := strings.TrimSpace(pair[:i])
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if !validOverrideHost.MatchString(host) {
			return nil, fmt.Errorf("max.connections.per.ip.overrides: %q has no valid host (letters, digits and -%%._: only)", pair)
		}
		n, err := strconv.Atoi(strings.TrimSpace(pair[i+1:]))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("max.connections.per.ip.overrides: the count of %q is not a number of connections (0 or more)", pair)
		}
		if _, dup := out[host]; dup {
			return nil, fmt.Errorf("max.connections.per.ip.overrides names %q twice", host)
		}
		out[host] = n
	}
	return out, nil
}

func checkConnectionOverrides(v string) error {
	_, err := ParseConnectionOverrides(v)
	return err
}

// checkBrokerConfigs is AlterBrokerConfigs' stateless check. Refusals are
// INVALID_REQUEST, as Kafka answers a BROKER config it cannot apply
// (ConfigAdminManager, KAFKA-13609), but APPEND or SUBTRACT, which none of
// these (an int, an int, a string) takes: INVALID_CONFIG, as Kafka.
func checkBrokerConfigs(cmd core.Command) core.Result {
	c := cmd.(AlterBrokerConfigs)
	if err := ValidBrokerResource(c.Broker); err != nil {
		return core.Fail(kerr.InvalidRequest.Code, err.Error())
	}
	seen := map[string]bool{}
	for _, ch := range c.Changes {
		if seen[ch.Name] {
			return core.Fail(kerr.InvalidRequest.Code, "Error due to duplicate config keys")
		}
		seen[ch.Name] = true
		if _, ok := LookupBrokerConfig(ch.Name); !ok {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("%s is not a broker config Stele can change at run time", ch.Name))
		}
		if (ch.Name == AdminSignedConfig || ch.Name == ValidatorDowntimeConfig) && c.Broker != "" {
			return core.Fail(kerr.InvalidRequest.Code, ch.Name+" is cluster-wide: set it on the default BROKER resource (the empty name), not on broker "+c.Broker)
		}
		switch {
		case ch.Op == topics.OpSet:
			if err := ValidateBrokerConfig(ch.Name, ch.Value); err != nil {
				return core.Fail(kerr.InvalidRequest.Code, err.Error())
			}
		case ch.Op == topics.OpDelete && c.Incremental:
		case ch.Op == topics.OpAppend && c.Incremental:
			return core.Fail(kerr.InvalidConfig.Code, "Config value append is not allowed for config key: "+ch.Name)
		case ch.Op == topics.OpSubtract && c.Incremental:
			return core.Fail(kerr.InvalidConfig.Code, "Config value subtract is not allowed for config key: "+ch.Name)
		default:
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("Unknown operations type %d", ch.Op))
		}
	}
	return core.Result{}
}

// alterBrokerConfigs applies c: the resource's set is replaced by what
// ApplyBrokerConfigChanges makes of it.
func (f *Cluster) alterBrokerConfigs(c AlterBrokerConfigs) core.Result {
	if f.Version < MembershipVersion {
		for _, ch := range c.Changes {
			if ch.Name == ValidatorDowntimeConfig {
				// What the binaries before version 7 answer: they know no
				// such config.
				return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("%s is not a broker config Stele can change at run time before app version %d", ch.Name, MembershipVersion))
			}
		}
	}
	next, err := ApplyBrokerChanges(f.BrokerCfgs, c)
	if err != nil {
		return core.Fail(kerr.InvalidRequest.Code, err.Error())
	}
	if len(next) == 0 {
		delete(f.BrokerCfgs, c.Broker)
	} else {
		f.BrokerCfgs[c.Broker] = next
	}
	f.brokerCfgsDirty, f.brokerCfgsNew = true, true
	return core.Result{}
}

// keyBrokerConfigs is the dynamic broker configs' leaf in the state trie.
var KeyBrokerConfigs = []byte("m/broker-configs")

// encodeBrokerConfigs is m/broker-configs' value:
//
//	u8 version | count × (str resource | count × (str name | str value)),
//	resources and names in order
func EncodeBrokerConfigs(all map[string]map[string]string) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	resources := core.SortedKeys(all)
	w.Count(len(resources))
	for _, res := range resources {
		w.Str(res)
		names := core.SortedKeys(all[res])
		w.Count(len(names))
		for _, n := range names {
			w.Str(n)
			w.Str(all[res][n])
		}
	}
	return w.B
}

// decodeBrokerConfigs reads m/broker-configs. It holds what the state
// machine would store: valid resource names, each once and with at least
// one config, each config once with a valid value, and the sets together
// valid.
func DecodeBrokerConfigs(v []byte) (map[string]map[string]string, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: broker configs: state format %d not supported", ver)
	}
	all := map[string]map[string]string{}
	for i, n := 0, r.Count(2); i < n && r.E == nil; i++ {
		res := r.Str()
		if _, dup := all[res]; dup {
			r.Fail("broker configs of %q stored twice", res)
		}
		m := map[string]string{}
		for j, k := 0, r.Count(2); j < k && r.E == nil; j++ {
			name, value := r.Str(), r.Str()
			if _, dup := m[name]; dup {
				r.Fail("broker config %s of %q stored twice", name, res)
			}
			m[name] = value
		}
		if r.E == nil && len(m) == 0 {
			r.Fail("broker configs of %q: an empty set is stored", res)
		}
		all[res] = m
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("stele/fsm: reading the broker configs: %w", err)
	}
	for _, res := range core.SortedKeys(all) {
		bad := ValidBrokerResource(res)
		for _, n := range core.SortedKeys(all[res]) {
			if bad == nil {
				bad = ValidateBrokerConfig(n, all[res][n])
			}
		}
		if bad == nil && res != "" {
			bad = checkPerIPZero(all[res], all[""])
		}
		if bad == nil && res == "" {
			bad = checkPerIPZero(nil, all[""])
		}
		if bad != nil {
			return nil, fmt.Errorf("stele/fsm: reading the broker configs of %q: %w: %w", res, core.ErrMalformed, bad)
		}
	}
	return all, nil
}

// loadBrokerConfigs reads the configs at Open and after a snapshot's
// restore.
func loadBrokerConfigs(f *Cluster) error {
	f.BrokerCfgs, f.brokerCfgsNew = map[string]map[string]string{}, true
	return core.LoadLeaf(f.Machine, KeyBrokerConfigs, DecodeBrokerConfigs, &f.BrokerCfgs)
}

// stageBrokerConfigs writes the configs a block changed; none left deletes
// the leaf, so a cluster that never set one holds no key for them.
func stageBrokerConfigs(f *Cluster, b *core.StateBatch) error {
	core.StageLeaf(b, KeyBrokerConfigs, &f.brokerCfgsDirty, f.BrokerCfgs, len(f.BrokerCfgs) == 0, EncodeBrokerConfigs)
	return nil
}

// publishBrokerConfigs gives readers a copy of the configs when they
// changed (or were loaded) since the last publish.
func publishBrokerConfigs(f *Cluster, _ bool) {
	if !f.brokerCfgsNew && f.brokerCfgsView.Load() != nil {
		return
	}
	f.brokerCfgsNew = false
	cp := make(map[string]map[string]string, len(f.BrokerCfgs))
	for res, m := range f.BrokerCfgs {
		c := make(map[string]string, len(m))
		for k, v := range m {
			c[k] = v
		}
		cp[res] = c
	}
	f.brokerCfgsView.Store(&BrokerConfigs{ByResource: cp})
}

// AdminSigned reports whether stele.admin.signed is true (committed).
func (b *BrokerConfigs) AdminSigned() bool { return ConfigTrue(b.Of("")[AdminSignedConfig]) }

// configTrue reads a boolean config as Kafka does (case-insensitive).
func ConfigTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }
