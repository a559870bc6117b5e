package kafka

// DescribeConfigs: v0-4
// AlterConfigs: v0-2
// IncrementalAlterConfigs: v0-1
// Behavior:
//  * GROUP resources: share groups' configs (share_configs.go).
//  * Authorization (acls.go): DESCRIBE_CONFIGS to describe, ALTER_CONFIGS
//    to alter, on the topic for a TOPIC resource
//    (TOPIC_AUTHORIZATION_FAILED, whether it exists or not) and on the
//    cluster for BROKER and BROKER_LOGGER ones
//    (CLUSTER_AUTHORIZATION_FAILED).
//  * TOPIC resources: every topic config Stele knows (fsm.TopicConfigDefs,
//    Kafka's names, types and defaults) is described; explicitly set ones
//    with source DYNAMIC_TOPIC_CONFIG, those inheriting a cluster-wide log
//    default DYNAMIC_DEFAULT_BROKER_CONFIG, the others DEFAULT_CONFIG. v1+
//    with include_synonyms lists the topic value, the cluster-wide default
//    and Kafka's default, both under the broker name (retention.ms ->
//    log.retention.ms), as Kafka's ConfigHelper. v3+ reports
//    config types, and documentation when asked; configs Stele accepts but
//    does not enforce say so in their documentation.
//  * BROKER resources: the broker's own id describes read-only configs
//    derived from its options (broker.id, node.id, auto.create.topics.enable,
//    num.partitions, default.replication.factor, socket.request.max.bytes,
//    log.dirs) as STATIC_BROKER_CONFIG; the connection limits
//    (max.connections, max.connections.per.ip[.overrides],
//    max.connection.creation.rate, not read-only)
//    from their first layer set, DYNAMIC_BROKER_CONFIG,
//    DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG or DEFAULT_CONFIG,
//    the others as synonyms; and the broker-level names of the
//    topic defaults (log.retention.ms, log.segment.bytes, message.max.bytes,
//    ...) as DEFAULT_CONFIG, or DYNAMIC_DEFAULT_BROKER_CONFIG when set
//    cluster-wide (those are not read-only). The empty name describes the
//    cluster-wide dynamic configs set, another member's id its dynamic
//    configs (broker_configs.go); a non-member's id gets INVALID_REQUEST
//    "Unexpected broker id", as in Kafka.
//  * AlterConfigs replaces a topic's explicit configs with exactly those
//    given. IncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT
//    (the last two to list configs only; on an unset list they start from
//    the default). Both submit one AlterConfigs command per topic, all in
//    one Submit; validate_only checks the resulting configs against the
//    committed state and changes nothing.
//  * Errors: unknown topic UNKNOWN_TOPIC_OR_PARTITION; unknown config name
//    or invalid value INVALID_CONFIG with Kafka's message; a null value
//    (other than for DELETE), a config named twice or a resource named
//    twice INVALID_REQUEST; other resource types INVALID_REQUEST.
//  * BROKER and BROKER_LOGGER changes: broker_configs.go; BROKER_LOGGER
//    describes this broker's loggers and their levels.
// Not done: dynamic BROKER configs beyond the log defaults and connection limits (broker_configs.go), CLIENT_METRICS and
// GROUP resources; sensitive configs (there are none); alter policies.

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

// configEntry is one config as DescribeConfigs and CreateTopics report it.
type configEntry struct {
	name, value string
	source      kmsg.ConfigSource
	readOnly    bool
	sensitive   bool
	typ         kmsg.ConfigType
	doc         string
	synonyms    []configSynonym
}

// configSynonym is where else a config's value could come from, in order
// of precedence (KIP-226).
type configSynonym struct {
	name, value string
	source      kmsg.ConfigSource
}

// alterResource is one resource of an AlterConfigs or
// IncrementalAlterConfigs request, reduced to what both have in common.
type alterResource struct {
	typ     kmsg.ConfigResourceType
	name    string
	changes []fsm.ConfigChange
	nulls   []string // configs given a null value where one is needed
	dupKeys bool     // a config named more than once
}

func handleDescribeConfigs(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DescribeConfigsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	view := c.s.b.View()
	for _, rr := range r.Resources {
		res := kmsg.NewDescribeConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		entries, p := c.s.describeResource(c, view, rr.ResourceType, rr.ResourceName)
		if denied := c.configDenied(rr.ResourceType, rr.ResourceName, kmsg.ACLOperationDescribeConfigs); denied.failed() {
			p = denied
		}
		if p.failed() {
			res.ErrorCode, res.ErrorMessage = p.code, p.message()
			resp.Resources = append(resp.Resources, res)
			continue
		}
		want := map[string]bool{}
		for _, n := range rr.ConfigNames {
			want[n] = true
		}
		for _, e := range entries {
			if len(want) > 0 && !want[e.name] {
				continue
			}
			rc := kmsg.NewDescribeConfigsResponseResourceConfig()
			rc.Name, rc.Value = e.name, kmsg.StringPtr(e.value)
			rc.ReadOnly, rc.IsSensitive = e.readOnly, e.sensitive
			rc.IsDefault = e.source == kmsg.ConfigSourceDefaultConfig
			rc.Source, rc.ConfigType = e.source, e.typ
			if r.IncludeSynonyms {
				for _, s := range e.synonyms {
					syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
					syn.Name, syn.Value, syn.Source = s.name, kmsg.StringPtr(s.value), s.source
					rc.ConfigSynonyms = append(rc.ConfigSynonyms, syn)
				}
			}
			if r.IncludeDocumentation && e.doc != "" {
				rc.Documentation = kmsg.StringPtr(e.doc)
			}
			res.Configs = append(res.Configs, rc)
		}
		resp.Resources = append(resp.Resources, res)
	}
	return done(resp), nil
}

// describeResource returns every config of one resource.
func (s *Server) describeResource(c *conn, view *fsm.View, typ kmsg.ConfigResourceType, name string) ([]configEntry, problem) {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		if err := c.validTopicName(name); err != nil {
			return nil, newProblem(kerr.InvalidTopicException, err.Error())
		}
		t := view.Topic(name)
		if t == nil {
			return nil, newProblem(kerr.UnknownTopicOrPartition, fmt.Sprintf("topic '%s' does not exist", name))
		}
		return topicConfigEntries(t.Configs, view.LogDefaults(), s.b.Upgrade().Version), problem{}
	case kmsg.ConfigResourceTypeBroker:
		bc := s.b.BrokerConfigs()
		if name == "" {
			return dynamicConfigEntries(view.LogDefaults(), bc, ""), problem{}
		}
		if p := s.checkBrokerName(name); p.failed() {
			return nil, p
		}
		if name != strconv.Itoa(int(s.opts.NodeID)) {
			return dynamicConfigEntries(view.LogDefaults(), bc, name), problem{}
		}
		return s.brokerConfigEntries(view.LogDefaults(), bc), problem{}
	case kmsg.ConfigResourceTypeBrokerLogger:
		if p := s.checkNodeName(name); p.failed() {
			return nil, p
		}
		return s.loggerConfigEntries(), problem{}
	case kmsg.ConfigResourceTypeGroupConfig:
		return s.groupConfigEntries(name)
	}
	return nil, newProblem(kerr.InvalidRequest, fmt.Sprintf("unsupported resource type %s", typ))
}

// checkBrokerName accepts the id of a broker of the cluster. Kafka
// accepts its own id only, as its clients send a broker's resource to that
// broker; Stele's brokers all hold every broker's dynamic configs, so any
// of them answers for a member (a Kafka client never asks). Another id
// gets Kafka's INVALID_REQUEST "Unexpected broker id".
func (s *Server) checkBrokerName(name string) problem {
	id, err := strconv.ParseInt(name, 10, 32)
	if err != nil || strconv.Itoa(int(id)) != name {
		return newProblem(kerr.InvalidRequest, fmt.Sprintf("Broker id must be an integer, but it is: %s", name))
	}
	all, _ := s.members()
	ids := make([]string, 0, len(all))
	for _, m := range all {
		if m.NodeID == int32(id) {
			return problem{}
		}
		ids = append(ids, strconv.Itoa(int(m.NodeID)))
	}
	want := strings.Join(ids, ", ")
	if len(ids) > 1 {
		want = "one of " + want
	}
	return newProblem(kerr.InvalidRequest, fmt.Sprintf("Unexpected broker id, expected %s or empty string, but received %s", want, name))
}

// topicConfigEntries describes every topic config given a topic's explicit
// ones and the cluster-wide log defaults, sorted by name. As in Kafka's
// ConfigHelper, a config's value and source are those of the first of its
// synonyms: the topic's own value, the cluster-wide default under its
// broker name (DYNAMIC_DEFAULT_BROKER_CONFIG), Kafka's default. A config
// added by an app version above the chain's (ConfigDef.Since) is left
// out, as the binaries before it describe none such.
func topicConfigEntries(explicit, logDefaults map[string]string, appVersion uint32) []configEntry {
	defs := fsm.TopicConfigDefs()
	out := make([]configEntry, 0, len(defs))
	isView := explicit["stele.view.from"] != "" // a view's configs are fixed (docs/subjects.md)
	for _, d := range defs {
		if d.Since > appVersion {
			continue // unknown to the chain's version, as to the binaries before it
		}
		def := configSynonym{name: d.Name, value: d.Default, source: kmsg.ConfigSourceDefaultConfig}
		b := fsm.BrokerSynonym(d.Name)
		if b != "" {
			def.name = b
		}
		e := configEntry{typ: kmsg.ConfigType(d.Type), doc: configDoc(d), readOnly: isView || strings.HasPrefix(d.Name, "stele.view.")}
		if v, ok := explicit[d.Name]; ok {
			e.synonyms = append(e.synonyms, configSynonym{name: d.Name, value: v, source: kmsg.ConfigSourceDynamicTopicConfig})
		}
		if v, ok := logDefaults[b]; ok && b != "" {
			e.synonyms = append(e.synonyms, configSynonym{name: b, value: v, source: kmsg.ConfigSourceDynamicDefaultBrokerConfig})
		}
		e.synonyms = append(e.synonyms, def)
		e.name, e.value, e.source = d.Name, e.synonyms[0].value, e.synonyms[0].source
		out = append(out, e)
	}
	return out
}

// defaultConfigEntries describes the cluster-wide log defaults set (the
// BROKER resource with the empty name), sorted by name: each as
// DYNAMIC_DEFAULT_BROKER_CONFIG, its one synonym itself, as Kafka
// describes the default resource's dynamic configs.
func defaultConfigEntries(logDefaults map[string]string) []configEntry {
	out := make([]configEntry, 0, len(logDefaults))
	for _, d := range fsm.TopicConfigDefs() {
		name := fsm.BrokerSynonym(d.Name)
		v, ok := logDefaults[name]
		if !ok || name == "" {
			continue
		}
		src := kmsg.ConfigSourceDynamicDefaultBrokerConfig
		out = append(out, configEntry{name: name, value: v, source: src, typ: kmsg.ConfigType(d.Type),
			doc:      fmt.Sprintf("The default of the topic config %s. %s", d.Name, configDoc(d)),
			synonyms: []configSynonym{{name: name, value: v, source: src}}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func configDoc(d fsm.ConfigDef) string {
	if d.Enforced {
		return d.Doc
	}
	note := "Accepted for compatibility; Stele does not enforce it."
	if d.Doc == "" {
		return note
	}
	return d.Doc + ". " + note
}

// brokerConfigEntries describes this broker's configs, sorted by name.
// The log.* defaults that can be changed at run time are not read-only
// and show a cluster-wide value as DYNAMIC_DEFAULT_BROKER_CONFIG, with
// Kafka's default as its next synonym; the others are read-only.
func (s *Server) brokerConfigEntries(logDefaults map[string]string, bc *fsm.BrokerConfigs) []configEntry {
	static := func(name, value string, typ kmsg.ConfigType, doc string) configEntry {
		return configEntry{name: name, value: value, source: kmsg.ConfigSourceStaticBrokerConfig, readOnly: true, typ: typ, doc: doc}
	}
	id := strconv.Itoa(int(s.opts.NodeID))
	out := []configEntry{
		static("broker.id", id, kmsg.ConfigTypeInt, "This broker's node id."),
		static("node.id", id, kmsg.ConfigTypeInt, "This broker's node id."),
		static("auto.create.topics.enable", strconv.FormatBool(s.opts.AutoCreateTopics), kmsg.ConfigTypeBoolean,
			"Whether Metadata and Produce create unknown topics."),
		static("num.partitions", strconv.Itoa(int(s.opts.DefaultPartitions)), kmsg.ConfigTypeInt,
			"Partitions of auto-created topics and of CreateTopics with -1 partitions."),
		static("default.replication.factor", strconv.Itoa(int(s.brokerCount())), kmsg.ConfigTypeInt,
			"Every broker holds every partition: the replication factor is the number of brokers."),
		static("socket.request.max.bytes", strconv.Itoa(int(s.opts.MaxRequestBytes)), kmsg.ConfigTypeInt,
			"Largest request frame accepted; larger ones close the connection."),
		{name: "delete.topic.enable", value: "true", source: kmsg.ConfigSourceDefaultConfig, readOnly: true,
			typ: kmsg.ConfigTypeBoolean, doc: "Topics can always be deleted."},
	}
	// Share groups' broker defaults (Kafka's group.share.*), which a
	// group's share.* configs override (docs/share-groups.md).
	for _, d := range fsm.ShareBrokerDefaults() {
		out = append(out, configEntry{name: d.Name, value: d.Value, source: kmsg.ConfigSourceDefaultConfig, readOnly: true,
			typ: kmsg.ConfigTypeInt, doc: d.Doc})
	}
	if s.opts.DataDir != "" {
		dir := s.opts.DataDir
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		out = append(out, static("log.dirs", dir, kmsg.ConfigTypeString, "The directory holding this broker's data."))
	}
	for i := range out {
		out[i].synonyms = []configSynonym{{name: out[i].name, value: out[i].value, source: out[i].source}}
	}
	out = append(out, s.connectionConfigEntries(bc)...)
	for _, d := range fsm.TopicConfigDefs() {
		name := fsm.BrokerSynonym(d.Name)
		if name == "" {
			continue
		}
		_, dynamic := fsm.LookupLogDefault(name)
		e := configEntry{name: name, value: d.Default, source: kmsg.ConfigSourceDefaultConfig, readOnly: !dynamic,
			typ: kmsg.ConfigType(d.Type), doc: fmt.Sprintf("The default of the topic config %s. %s", d.Name, configDoc(d))}
		if v, ok := logDefaults[name]; ok {
			e.value, e.source = v, kmsg.ConfigSourceDynamicDefaultBrokerConfig
			e.synonyms = append(e.synonyms, configSynonym{name: name, value: v, source: e.source})
		}
		e.synonyms = append(e.synonyms, configSynonym{name: name, value: d.Default, source: kmsg.ConfigSourceDefaultConfig})
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func handleAlterConfigs(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.AlterConfigsRequest)
	resp := r.ResponseKind().(*kmsg.AlterConfigsResponse)
	rs := make([]alterResource, len(r.Resources))
	for i, rr := range r.Resources {
		a := alterResource{typ: rr.ResourceType, name: rr.ResourceName}
		seen := map[string]bool{}
		for _, rc := range rr.Configs {
			a.dupKeys = a.dupKeys || seen[rc.Name]
			seen[rc.Name] = true
			if rc.Value == nil {
				a.nulls = append(a.nulls, rc.Name)
				continue
			}
			a.changes = append(a.changes, fsm.ConfigChange{Op: fsm.OpSet, Name: rc.Name, Value: *rc.Value})
		}
		rs[i] = a
	}
	for i, p := range c.alterConfigs(rs, false, r.ValidateOnly) {
		res := kmsg.NewAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName = rs[i].typ, rs[i].name
		res.ErrorCode, res.ErrorMessage = p.code, p.message()
		resp.Resources = append(resp.Resources, res)
	}
	return done(resp), nil
}

func handleIncrementalAlterConfigs(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.IncrementalAlterConfigsRequest)
	resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	rs := make([]alterResource, len(r.Resources))
	for i, rr := range r.Resources {
		a := alterResource{typ: rr.ResourceType, name: rr.ResourceName}
		seen := map[string]bool{}
		for _, rc := range rr.Configs {
			a.dupKeys = a.dupKeys || seen[rc.Name]
			seen[rc.Name] = true
			ch := fsm.ConfigChange{Op: fsm.ConfigOp(rc.Op), Name: rc.Name}
			switch {
			case rc.Value != nil:
				ch.Value = *rc.Value
			case rc.Op != kmsg.IncrementalAlterConfigOpDelete:
				a.nulls = append(a.nulls, rc.Name)
			}
			a.changes = append(a.changes, ch)
		}
		rs[i] = a
	}
	for i, p := range c.alterConfigs(rs, true, r.ValidateOnly) {
		res := kmsg.NewIncrementalAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName = rs[i].typ, rs[i].name
		res.ErrorCode, res.ErrorMessage = p.code, p.message()
		resp.Resources = append(resp.Resources, res)
	}
	return done(resp), nil
}

// alterConfigs checks each resource, submits the topic changes that pass
// together (unless validateOnly) and returns each resource's outcome.
// AlterConfigs has no timeout field, so the default one applies.
func (c *conn) alterConfigs(rs []alterResource, incremental, validateOnly bool) []problem {
	view := c.s.b.View()
	type key struct {
		typ  kmsg.ConfigResourceType
		name string
	}
	named := map[key]int{}
	for _, r := range rs {
		named[key{r.typ, r.name}]++
	}
	out := make([]problem, len(rs))
	var (
		cmds  []fsm.Command
		slots []int
	)
	for i, r := range rs {
		var p problem
		switch {
		case named[key{r.typ, r.name}] > 1:
			p = newProblem(kerr.InvalidRequest, fmt.Sprintf("Duplicate resource: %s %q is named more than once.", r.typ, r.name))
		case c.configDenied(r.typ, r.name, kmsg.ACLOperationAlterConfigs).failed():
			p = c.configDenied(r.typ, r.name, kmsg.ACLOperationAlterConfigs)
		case r.typ != kmsg.ConfigResourceTypeTopic && r.typ != kmsg.ConfigResourceTypeBroker && r.typ != kmsg.ConfigResourceTypeBrokerLogger && r.typ != kmsg.ConfigResourceTypeGroupConfig:
			p = newProblem(kerr.InvalidRequest, fmt.Sprintf("unsupported resource type %s", r.typ))
		case r.dupKeys:
			p = newProblem(kerr.InvalidRequest, "Error due to duplicate config keys")
		case len(r.nulls) > 0:
			p = newProblem(kerr.InvalidRequest, "Null value not supported for : "+strings.Join(r.nulls, ", "))
		case r.typ == kmsg.ConfigResourceTypeBroker:
			var bcmds []fsm.Command
			if p, bcmds = c.s.alterBroker(view, c.s.b.BrokerConfigs(), r, incremental); !p.failed() && !validateOnly {
				for _, cmd := range bcmds {
					cmds = append(cmds, cmd)
					slots = append(slots, i)
				}
			}
		case r.typ == kmsg.ConfigResourceTypeBrokerLogger:
			p = c.s.alterLoggers(r, incremental, validateOnly)
		case r.typ == kmsg.ConfigResourceTypeGroupConfig:
			var cmd fsm.SetShareGroupConfigs
			if cmd, p = alterGroupConfigs(r, incremental); !p.failed() && !validateOnly {
				cmds = append(cmds, cmd)
				slots = append(slots, i)
			}
		default:
			cmd := fsm.AlterConfigs{Topic: r.name, Incremental: incremental, Changes: r.changes}
			if p = checkAlterConfigs(c, view, cmd); !p.failed() && !validateOnly {
				cmds = append(cmds, cmd)
				slots = append(slots, i)
			}
		}
		out[i] = p
	}
	if len(cmds) > 0 {
		for i, o := range c.submit(0, cmds...) {
			// A BROKER resource may take two commands (log defaults and
			// connection limits): the first that failed answers for it.
			if p := fromOutcome(o); !out[slots[i]].failed() {
				out[slots[i]] = p
			}
		}
	}
	return out
}

// configDenied is the answer to a principal without op (DESCRIBE_CONFIGS
// or ALTER_CONFIGS) on a config resource, as Kafka checks it: a topic's on
// the topic (TOPIC_AUTHORIZATION_FAILED), a broker's and the loggers' on
// the cluster (CLUSTER_AUTHORIZATION_FAILED); nothing when allowed.
func (c *conn) configDenied(typ kmsg.ConfigResourceType, name string, op kmsg.ACLOperation) problem {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		if !c.authorize(op, kmsg.ACLResourceTypeTopic, name) {
			return newProblem(kerr.TopicAuthorizationFailed, "")
		}
	case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
		if !c.clusterAllowed(op) {
			return newProblem(kerr.ClusterAuthorizationFailed, "")
		}
	case kmsg.ConfigResourceTypeGroupConfig:
		if !c.groupAllowed(op, name) {
			return newProblem(kerr.GroupAuthorizationFailed, "")
		}
	}
	return problem{}
}

// checkAlterConfigs says why cmd cannot apply to the committed view: the
// topic must exist and every resulting config must be valid.
func checkAlterConfigs(c *conn, view *fsm.View, cmd fsm.AlterConfigs) problem {
	if err := c.validTopicName(cmd.Topic); err != nil {
		return newProblem(kerr.InvalidTopicException, err.Error())
	}
	t := view.Topic(cmd.Topic)
	if t == nil {
		return newProblem(kerr.UnknownTopicOrPartition, fmt.Sprintf("topic '%s' does not exist", cmd.Topic))
	}
	if p := checked(cmd); p.failed() {
		return p
	}
	if _, err := fsm.ApplyConfigChanges(t.Configs, cmd); err != nil {
		return newProblem(kerr.InvalidConfig, err.Error())
	}
	return problem{}
}

// connectionOverrides is the static max.connections.per.ip.overrides
// (the option, host names resolved at start): address:count, by address.
func (s *Server) connectionOverrides() string {
	return formatOverrides(s.opts.MaxConnectionsPerIPOverrides)
}
