package kafka

// Dynamic broker configs: AlterConfigs and IncrementalAlterConfigs on
// BROKER and BROKER_LOGGER resources (configs.go routes them here).
// Behavior:
//  * BROKER_LOGGER (IncrementalAlterConfigs only, as in Kafka; the legacy
//    AlterConfigs answers "Unknown resource type 8"): this broker's id
//    only; SET gives a logger (root, or a component: kafka, broker, fsm,
//    cometbft, ...) one of Kafka's levels, DELETE makes a component follow
//    the root again. The change is local to the broker asked and lasts
//    until it restarts, as in Kafka. Errors are RuntimeLoggerManager's: an
//    unknown logger or level INVALID_CONFIG, deleting the root's level or
//    APPEND/SUBTRACT INVALID_REQUEST. DescribeConfigs lists every logger
//    with its effective level as DYNAMIC_BROKER_LOGGER_CONFIG.
//  * BROKER "" (the cluster-wide default): the log.* topic defaults Kafka
//    can change at run time (DynamicLogConfig: the first broker synonym of
//    each topic config, fsm.LookupLogDefault) become one AlterLogDefaults
//    command, replicated state every broker applies to every topic that
//    does not set the config itself. Checked here against the committed
//    view as the state machine checks it (validate_only stops there): a
//    bad value INVALID_REQUEST (Kafka's code for a BROKER config it cannot
//    apply, KAFKA-13609), APPEND/SUBTRACT on a non-list INVALID_CONFIG;
//    the legacy AlterConfigs replaces the whole set.
//  * BROKER, a broker id or "": the connection limits (max.connections,
//    max.connections.per.ip, max.connections.per.ip.overrides,
//    max.connection.creation.rate; Kafka's DynamicConnectionQuota) become one AlterBrokerConfigs command,
//    replicated state every broker holds for every broker; each broker
//    applies its effective values (its own, else the cluster-wide
//    default, else its static option, else Kafka's default) to its
//    acceptor after each commit (quotas.go), closing no open connection.
//    Checked here against the committed state as the state machine checks
//    it (fsm/cluster/broker_configs.go: Kafka's ranges, "Invalid max.connections
//    0", per-ip 0 only with dynamic overrides) with INVALID_REQUEST,
//    APPEND/SUBTRACT INVALID_CONFIG. A request on "" touching log defaults
//    and connection limits submits both commands; the first failure
//    answers. Any member's id is accepted (Kafka accepts only its own:
//    its clients send a broker's resource to that broker); another id
//    gets "Unexpected broker id".
//  * BROKER, a broker id: a log.* default gets INVALID_REQUEST saying
//    to set it cluster-wide (every broker applies the same blocks, so no
//    broker can log differently).
//  * Either name: a config Kafka cannot change at run time (log.dirs,
//    broker.id, num.partitions, log.retention.hours, ...) gets
//    INVALID_REQUEST "Cannot update these configs dynamically: Set(...)",
//    as Kafka answers; one Kafka can change at run time but Stele cannot
//    yet (listener certificates, quotas and throttles, thread pools,
//    the listener-prefixed connection limits, the log cleaner's own
//    settings) gets INVALID_REQUEST saying so. A request changing nothing
//    succeeds.
// Not done: the listener-prefixed connection limits
// (listener.name.X.max.connections, listener.name.X.max.connection.creation.rate:
// Stele has one Kafka listener) and the per-IP connection_creation_rate,
// a client quota (AlterClientQuotas, issue 17); listener certificates come with issue 17's TLS and
// quota defaults with its quotas; Kafka's check of log.local.retention.*
// against log.retention.* (no remote tier).

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/loglevel"
)

// loggerConfigEntries describes this broker's loggers.
func (s *Server) loggerConfigEntries() []configEntry {
	var out []configEntry
	for _, l := range s.opts.LogLevels.Loggers() {
		out = append(out, configEntry{name: l.Name, value: l.Level, source: kmsg.ConfigSourceDynamicBrokerLoggerConfig,
			typ: kmsg.ConfigTypeString})
	}
	return out
}

// alterLoggers checks and (unless validateOnly) applies BROKER_LOGGER
// changes, all or none.
func (s *Server) alterLoggers(r alterResource, incremental, validateOnly bool) problem {
	if !incremental {
		return newProblem(kerr.InvalidRequest, fmt.Sprintf("Unknown resource type %d", kmsg.ConfigResourceTypeBrokerLogger))
	}
	if p := s.checkNodeName(r.name); p.failed() {
		return p
	}
	levels := s.opts.LogLevels
	for _, ch := range r.changes {
		switch ch.Op {
		case fsm.OpSet:
			if !levels.Exists(ch.Name) {
				return newProblem(kerr.InvalidConfig, fmt.Sprintf("Logger %s does not exist!", ch.Name))
			}
			if _, err := loglevel.ParseLevel(ch.Value); err != nil {
				return newProblem(kerr.InvalidConfig, fmt.Sprintf("Cannot set the log level of %s to %s as it is not a supported log level. Valid log levels are %s",
					ch.Name, ch.Value, loglevel.ValidLevels))
			}
		case fsm.OpDelete:
			if !levels.Exists(ch.Name) {
				return newProblem(kerr.InvalidConfig, fmt.Sprintf("Logger %s does not exist!", ch.Name))
			}
			if ch.Name == loglevel.Root {
				return newProblem(kerr.InvalidRequest, "Removing the log level of the root logger is not allowed")
			}
		case fsm.OpAppend:
			return newProblem(kerr.InvalidRequest, "APPEND operation is not allowed for the BROKER_LOGGER resource")
		case fsm.OpSubtract:
			return newProblem(kerr.InvalidRequest, "SUBTRACT operation is not allowed for the BROKER_LOGGER resource")
		default:
			return newProblem(kerr.InvalidRequest, fmt.Sprintf("Unknown operation type %d is not allowed for the BROKER_LOGGER resource", ch.Op))
		}
	}
	if validateOnly {
		return problem{}
	}
	for _, ch := range r.changes {
		if ch.Op == fsm.OpSet {
			levels.SetLevel(ch.Name, ch.Value) // checked above
			s.opts.Logger.Warn("updated the log level", "logger", ch.Name, "level", ch.Value)
		} else {
			levels.Unset(ch.Name)
			s.opts.Logger.Warn("unset the log level", "logger", ch.Name)
		}
	}
	return problem{}
}

// checkNodeName is RuntimeLoggerManager's check of a BROKER_LOGGER name.
func (s *Server) checkNodeName(name string) problem {
	var id int32
	if _, err := fmt.Sscan(name, &id); err != nil || fmt.Sprint(id) != name {
		return newProblem(kerr.InvalidRequest, "Node id must be an integer, but it is: "+name)
	}
	if id != s.opts.NodeID {
		return newProblem(kerr.InvalidRequest, fmt.Sprintf("Unexpected node id. Expected %d, but received %s", s.opts.NodeID, name))
	}
	return problem{}
}

// alterBroker checks BROKER changes, all or none, and returns the commands
// that make them: the cluster-wide log defaults (the empty name) as an
// AlterLogDefaults command, the connection limits (either name) as an
// AlterBrokerConfigs command, each checked here against the committed
// state as the state machine will check it. Kafka answers a BROKER config
// it cannot apply with INVALID_REQUEST (ConfigAdminManager; KAFKA-13609),
// and so does this.
func (s *Server) alterBroker(view *fsm.View, bc *fsm.BrokerConfigs, r alterResource, incremental bool) (problem, []fsm.Command) {
	if r.name != "" {
		if p := s.checkBrokerName(r.name); p.failed() {
			return p, nil
		}
	}
	var static, notYet, perBroker []string
	var logChanges, connChanges []fsm.ConfigChange
	for _, ch := range r.changes {
		if ch.Op != fsm.OpSet && ch.Op != fsm.OpDelete && ch.Op != fsm.OpAppend && ch.Op != fsm.OpSubtract {
			return newProblem(kerr.InvalidRequest, fmt.Sprintf("Unknown operations type %d", ch.Op)), nil
		}
		_, logDefault := fsm.LookupLogDefault(ch.Name)
		_, conn := fsm.LookupBrokerConfig(ch.Name)
		switch {
		case logDefault && r.name != "":
			perBroker = append(perBroker, ch.Name)
		case logDefault:
			logChanges = append(logChanges, ch)
		case conn:
			connChanges = append(connChanges, ch)
		case kafkaDynamicBrokerConfig(ch.Name):
			notYet = append(notYet, ch.Name)
		default:
			static = append(static, ch.Name)
		}
	}
	switch {
	case len(static) > 0:
		return newProblem(kerr.InvalidRequest, "Cannot update these configs dynamically: "+scalaSet(static)), nil
	case len(perBroker) > 0:
		return newProblem(kerr.InvalidRequest, "Cannot update these configs for one broker in Stele, as every broker applies the same log settings; "+
			"set them as the cluster-wide default instead (the BROKER resource with an empty name, kafka-configs.sh --entity-default): "+scalaSet(perBroker)), nil
	case len(notYet) > 0:
		return newProblem(kerr.InvalidRequest, "Cannot update these configs dynamically in Stele yet (set them in the broker's configuration and restart it): "+scalaSet(notYet)), nil
	}
	var cmds []fsm.Command
	// The legacy AlterConfigs replaces the resource's dynamic configs
	// whole: a set of either kind that exists is replaced too.
	if r.name == "" && (len(logChanges) > 0 || !incremental && len(view.LogDefaults()) > 0) {
		cmd := fsm.AlterLogDefaults{Incremental: incremental, Changes: logChanges}
		if p := checked(cmd); p.failed() {
			return p, nil
		}
		if _, err := fsm.ApplyLogDefaultChanges(view.LogDefaults(), cmd); err != nil {
			return newProblem(kerr.InvalidRequest, err.Error()), nil
		}
		cmds = append(cmds, cmd)
	}
	if len(connChanges) > 0 || !incremental && len(bc.Of(r.name)) > 0 {
		cmd := fsm.AlterBrokerConfigs{Broker: r.name, Incremental: incremental, Changes: connChanges}
		if p := checked(cmd); p.failed() {
			return p, nil
		}
		if _, err := fsm.ApplyBrokerConfigChanges(bc, cmd); err != nil {
			return newProblem(kerr.InvalidRequest, err.Error()), nil
		}
		cmds = append(cmds, cmd)
	}
	return problem{}, cmds
}

// connectionConfigEntries describes this broker's connection limits, each
// as the first of its synonyms that is set (KIP-226's order): the
// broker's own dynamic value (DYNAMIC_BROKER_CONFIG), the cluster-wide one
// (DYNAMIC_DEFAULT_BROKER_CONFIG), the static option given to stele serve
// (STATIC_BROKER_CONFIG), Kafka's default (DEFAULT_CONFIG).
func (s *Server) connectionConfigEntries(bc *fsm.BrokerConfigs) []configEntry {
	statics := map[string]string{
		fsm.MaxConnectionsConfig:               strconv.Itoa(s.opts.MaxConnections),
		fsm.MaxConnectionsPerIPConfig:          strconv.Itoa(s.opts.MaxConnectionsPerIP),
		fsm.MaxConnectionsPerIPOverridesConfig: s.connectionOverrides(),
		fsm.MaxConnectionCreationRateConfig:    strconv.Itoa(s.opts.MaxConnectionCreationRate),
	}
	own := bc.Of(strconv.Itoa(int(s.opts.NodeID)))
	var out []configEntry
	for _, d := range fsm.BrokerConfigDefs() {
		e := configEntry{name: d.Name, typ: kmsg.ConfigType(d.Type), doc: d.Doc}
		if v, ok := own[d.Name]; ok {
			e.synonyms = append(e.synonyms, configSynonym{d.Name, v, kmsg.ConfigSourceDynamicBrokerConfig})
		}
		if v, ok := bc.Of("")[d.Name]; ok {
			e.synonyms = append(e.synonyms, configSynonym{d.Name, v, kmsg.ConfigSourceDynamicDefaultBrokerConfig})
		}
		if v, ok := statics[d.Name]; ok && v != d.Default {
			e.synonyms = append(e.synonyms, configSynonym{d.Name, v, kmsg.ConfigSourceStaticBrokerConfig})
		}
		e.synonyms = append(e.synonyms, configSynonym{d.Name, d.Default, kmsg.ConfigSourceDefaultConfig})
		e.value, e.source = e.synonyms[0].value, e.synonyms[0].source
		out = append(out, e)
	}
	return out
}

// dynamicConfigEntries describes the dynamic configs of a BROKER resource
// as every broker holds them: for a broker id, its own connection limits
// (DYNAMIC_BROKER_CONFIG) and what it inherits from the cluster-wide
// default (DYNAMIC_DEFAULT_BROKER_CONFIG), log defaults included; for the
// empty name, the cluster-wide default. Sorted by name.
func dynamicConfigEntries(logDefaults map[string]string, bc *fsm.BrokerConfigs, name string) []configEntry {
	out := defaultConfigEntries(logDefaults)
	for _, d := range fsm.BrokerConfigDefs() {
		e := configEntry{name: d.Name, typ: kmsg.ConfigType(d.Type), doc: d.Doc}
		if v, ok := bc.Of(name)[d.Name]; ok && name != "" {
			e.synonyms = append(e.synonyms, configSynonym{d.Name, v, kmsg.ConfigSourceDynamicBrokerConfig})
		}
		if v, ok := bc.Of("")[d.Name]; ok {
			e.synonyms = append(e.synonyms, configSynonym{d.Name, v, kmsg.ConfigSourceDynamicDefaultBrokerConfig})
		}
		if len(e.synonyms) == 0 {
			continue
		}
		e.value, e.source = e.synonyms[0].value, e.synonyms[0].source
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// scalaSet formats names as Kafka's messages print a Scala Set.
func scalaSet(names []string) string {
	sort.Strings(names)
	return "Set(" + strings.Join(names, ", ") + ")"
}

// kafkaDynamicBrokerConfig reports whether Kafka 3.9 can change the named
// broker config at run time (DynamicBrokerConfig.AllDynamicConfigs:
// security and listener configs, the log cleaner, the log.* topic
// defaults, thread pools, socket server limits, replication throttles,
// metric reporters, remote log settings). The log.* defaults are the
// primary synonyms only (DynamicLogConfig.ReconfigurableConfigs):
// log.retention.hours, log.retention.minutes and log.roll.hours are not.
func kafkaDynamicBrokerConfig(name string) bool {
	for _, p := range []string{"ssl.", "sasl.", "listener.name.", "log.cleaner.", "remote.log."} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	switch name {
	case "listeners", "advertised.listeners", "listener.security.protocol.map",
		"num.io.threads", "num.network.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir", "background.threads",
		"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connection.creation.rate",
		"leader.replication.throttled.rate", "follower.replication.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second",
		"metric.reporters", "principal.builder.class", "producer.id.expiration.ms", "transaction.partition.verification.enable":
		return true
	}
	_, logDefault := fsm.LookupLogDefault(name)
	return logDefault
}
