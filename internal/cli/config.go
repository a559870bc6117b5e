package cli

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

// newConfigCmd returns `stele config`, the counterpart of kafka-configs.sh.
func newConfigCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("config", "Describe and alter topic and broker configs",
		newConfigDescribeCmd(g),
		newConfigAlterCmd(g),
	)
}

// configResource is the target of a config command: a topic or a broker.
type configResource struct {
	kind kmsg.ConfigResourceType
	name string // topic name, or the broker id in decimal
}

// resourceFlags are --topic, --broker, --broker-default and --group,
// exactly one of which is needed.
type resourceFlags struct {
	topic         string
	broker        int32
	brokerDefault bool
	group         string
}

func (r *resourceFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&r.topic, "topic", "", "the topic")
	c.Flags().Int32Var(&r.broker, "broker", -1, "the broker id")
	c.Flags().BoolVar(&r.brokerDefault, "broker-default", false,
		"the cluster-wide broker defaults (kafka-configs.sh --entity-type brokers --entity-default)")
	c.Flags().StringVar(&r.group, "group", "", "a share group (kafka-configs.sh --entity-type groups): its share.* configs")
}

// resolve checks that exactly one of --topic, --broker and
// --broker-default was given.
func (r *resourceFlags) resolve(c *cobra.Command) (configResource, error) {
	hasTopic, hasBroker := c.Flags().Changed("topic"), c.Flags().Changed("broker")
	if c.Flags().Changed("group") {
		switch {
		case hasTopic || hasBroker || r.brokerDefault:
			return configResource{}, usageErrorf("give one of --topic, --broker, --broker-default and --group")
		case r.group == "":
			return configResource{}, usageErrorf("--group needs a group name")
		}
		return configResource{kind: kmsg.ConfigResourceTypeGroupConfig, name: r.group}, nil
	}
	switch {
	case r.brokerDefault && (hasTopic || hasBroker):
		return configResource{}, usageErrorf("give one of --topic, --broker and --broker-default")
	case r.brokerDefault:
		return configResource{kind: kmsg.ConfigResourceTypeBroker, name: ""}, nil
	case hasTopic && hasBroker:
		return configResource{}, usageErrorf("give either --topic or --broker, not both")
	case hasTopic && r.topic == "":
		return configResource{}, usageErrorf("--topic needs a topic name")
	case hasTopic:
		return configResource{kind: kmsg.ConfigResourceTypeTopic, name: r.topic}, nil
	case hasBroker && r.broker < 0:
		return configResource{}, usageErrorf("invalid --broker %d: broker ids are 0 or more", r.broker)
	case hasBroker:
		return configResource{kind: kmsg.ConfigResourceTypeBroker, name: strconv.Itoa(int(r.broker))}, nil
	default:
		return configResource{}, usageErrorf("say which configs: --topic NAME, --broker ID, --broker-default or --group NAME")
	}
}

// String names the resource for people.
func (r configResource) String() string {
	switch {
	case r.kind == kmsg.ConfigResourceTypeTopic:
		return fmt.Sprintf("topic %q", r.name)
	case r.kind == kmsg.ConfigResourceTypeGroupConfig:
		return fmt.Sprintf("group %q", r.name)
	case r.name == "":
		return "the cluster-wide broker defaults"
	}
	return "broker " + r.name
}

func (r configResource) kindName() string {
	switch r.kind {
	case kmsg.ConfigResourceTypeTopic:
		return "topic"
	case kmsg.ConfigResourceTypeGroupConfig:
		return "group"
	}
	return "broker"
}

// configEntry is the JSON form of one config in `config describe`. Value is
// null for sensitive configs and for configs without a value.
type configEntry struct {
	Name      string  `json:"name"`
	Value     *string `json:"value"`
	Source    string  `json:"source"`
	ReadOnly  bool    `json:"read_only"`
	Sensitive bool    `json:"sensitive"`
	Default   bool    `json:"default"`
}

// configsDescribed is the JSON form of `config describe`.
type configsDescribed struct {
	Resource string        `json:"resource"`
	Name     string        `json:"name"`
	Configs  []configEntry `json:"configs"`
}

func newConfigDescribeCmd(g *globalOptions) *cobra.Command {
	var (
		res resourceFlags
		all bool
	)
	c := &cobra.Command{
		Use:   "describe (--topic NAME | --broker ID | --broker-default | --group NAME) [--all]",
		Short: "Describe the configs of a topic or a broker (kafka-configs.sh --describe)",
		Long: `Describe the configs of a topic or a broker (kafka-configs.sh --describe).

Without --all only dynamic overrides are shown, as kafka-configs.sh does:
source DYNAMIC_TOPIC_CONFIG for a topic, DYNAMIC_BROKER_CONFIG for a broker,
DYNAMIC_DEFAULT_BROKER_CONFIG for the cluster-wide defaults (--broker-default),
GROUP_CONFIG for a share group (--group, docs/share-groups.md).
With --all every config is shown with its source, and whether it is read-only
or sensitive (sensitive values are never sent by the broker).`,
		Example: `  stele config describe --topic orders
  stele config describe --broker 0 --all --output json
  stele config describe --broker-default`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := res.resolve(cmd)
			if err != nil {
				return err
			}
			cl, err := g.newClient()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			entries, err := describeConfigs(ctx, cl, r)
			if err != nil {
				return err
			}
			out := configsDescribed{Resource: r.kindName(), Name: r.name, Configs: []configEntry{}}
			for _, e := range entries {
				if all || e.Source == dynamicSource(r).String() {
					out.Configs = append(out.Configs, e)
				}
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tVALUE\tSOURCE\tREAD-ONLY\tSENSITIVE")
			for _, e := range out.Configs {
				v := "-"
				switch {
				case e.Sensitive:
					v = "(sensitive)"
				case e.Value != nil:
					v = *e.Value
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%t\n", e.Name, v, e.Source, e.ReadOnly, e.Sensitive)
			}
			return tw.Flush()
		},
	}
	res.register(c)
	c.Flags().BoolVar(&all, "all", false, "show every config, not only dynamic overrides")
	return c
}

// dynamicSource is the source of the overrides kafka-configs.sh shows
// without --all for a resource.
func dynamicSource(r configResource) kmsg.ConfigSource {
	switch {
	case r.kind == kmsg.ConfigResourceTypeBroker && r.name == "":
		return kmsg.ConfigSourceDynamicDefaultBrokerConfig
	case r.kind == kmsg.ConfigResourceTypeBroker:
		return kmsg.ConfigSourceDynamicBrokerConfig
	case r.kind == kmsg.ConfigResourceTypeGroupConfig:
		return kmsg.ConfigSourceGroupConfig
	}
	return kmsg.ConfigSourceDynamicTopicConfig
}

// describeConfigs issues DescribeConfigs for one resource, sorted by name.
// It uses the request directly rather than kadm.DescribeTopicConfigs /
// DescribeBrokerConfigs because kadm drops the read-only flag; kgo still
// routes a broker resource to that broker, as kadm does.
func describeConfigs(ctx context.Context, cl *kgo.Client, r configResource) ([]configEntry, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType = r.kind
	rr.ResourceName = r.name
	req.Resources = append(req.Resources, rr)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("describe configs of %s: %w", r, err)
	}
	if len(resp.Resources) != 1 {
		return nil, fmt.Errorf("describe configs of %s: the broker answered for %d resources, want 1", r, len(resp.Resources))
	}
	res := resp.Resources[0]
	if err := kerr.ErrorForCode(res.ErrorCode); err != nil {
		if isUnknownTopic(err) && r.kind == kmsg.ConfigResourceTypeTopic {
			return nil, topicNotFoundError{r.name}
		}
		msg := ""
		if res.ErrorMessage != nil {
			msg = *res.ErrorMessage
		}
		return nil, brokerError("describe configs of "+r.String(), err, msg)
	}
	out := make([]configEntry, 0, len(res.Configs))
	for _, c := range res.Configs {
		e := configEntry{
			Name: c.Name, Value: c.Value, Source: c.Source.String(),
			ReadOnly: c.ReadOnly, Sensitive: c.IsSensitive,
			Default: c.Source == kmsg.ConfigSourceDefaultConfig || c.Source == kmsg.ConfigSourceStaticBrokerConfig,
		}
		if c.IsSensitive {
			e.Value = nil
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// configsAltered is the JSON form of `config alter`.
type configsAltered struct {
	Resource string            `json:"resource"`
	Name     string            `json:"name"`
	Set      map[string]string `json:"set,omitempty"`
	Deleted  []string          `json:"deleted,omitempty"`
}

func newConfigAlterCmd(g *globalOptions) *cobra.Command {
	var (
		res                    resourceFlags
		sets, deletes          []string
		kafkaAdds, kafkaDelete []string
		sign                   *adminSigning
	)
	c := &cobra.Command{
		Use:   "alter (--topic NAME | --broker ID | --broker-default | --group NAME) [--set k=v ...] [--delete k ...]",
		Short: "Change configs of a topic, a broker or the cluster-wide broker defaults (kafka-configs.sh --alter)",
		Long: `Change configs of a topic or a broker with an incremental alter
(IncrementalAlterConfigs): configs not named are left as they are.

--set k=v and --delete k take one config each and may be repeated. The
kafka-configs.sh spellings are accepted too, with their syntax:
--add-config 'k1=v1,k2=[a,b]' (comma-separated, brackets around list values)
and --delete-config 'k1,k2'.

--broker-default changes the cluster-wide broker defaults (kafka-configs.sh
--entity-type brokers --entity-default): on Stele the log.* topic defaults
(log.retention.ms, log.segment.bytes, message.max.bytes, ...), replicated to
every broker and applied to every topic that does not set the config itself,
and the connection limits (max.connections, max.connections.per.ip,
max.connections.per.ip.overrides, max.connection.creation.rate) of every
broker that does not set its own.
--broker ID changes one broker's connection limits (kafka-configs.sh
--entity-type brokers --entity-name ID). Both are replicated state: they
apply at once, without a restart, and survive restarts; a limit lowered
closes no connection already open.
--group NAME changes a share group's configs (kafka-configs.sh --entity-type
groups): share.auto.offset.reset, share.record.lock.duration.ms,
stele.share.key.ordering and the others of docs/share-groups.md; the group
need not exist yet.

Under stele.admin.signed=true every alteration must be signed: --sign FILE
--principal NAME signs it with the principal's producer key and submits it
over --http, and every broker checks the signature and the principal's ACLs
(docs/security.md#signed-administration). The setting itself changes only
this way, on and off.`,
		Example: `  stele config alter --topic orders --set retention.ms=3600000 --delete cleanup.policy
  stele config alter --topic orders --add-config 'retention.ms=3600000,cleanup.policy=[compact,delete]'
  stele config alter --broker-default --set log.retention.ms=86400000
  stele config alter --broker 0 --set max.connections.per.ip=100
  stele config alter --broker-default --set max.connection.creation.rate=50
  stele config alter --broker-default --set stele.admin.signed=true --sign admin.key --principal admin
  stele config alter --group workers --set share.auto.offset.reset=earliest --set stele.share.key.ordering=true`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := res.resolve(cmd)
			if err != nil {
				return err
			}
			allSets := append([]string(nil), sets...)
			for _, s := range kafkaAdds {
				kv, err := parseKafkaAddConfig(s)
				if err != nil {
					return err
				}
				allSets = append(allSets, kv...)
			}
			allDeletes := append([]string(nil), deletes...)
			for _, s := range kafkaDelete {
				allDeletes = append(allDeletes, strings.Split(s, ",")...)
			}
			if len(allSets) == 0 && len(allDeletes) == 0 {
				return usageErrorf("nothing to alter: give --set k=v or --delete k")
			}
			ops, err := alterOps(allSets, "--set", allDeletes, "--delete")
			if err != nil {
				return err
			}
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			if sign.on() && r.kind == kmsg.ConfigResourceTypeGroupConfig {
				return usageErrorf("a share group's configs are not signed administration: alter them without --sign")
			}
			if sign.on() {
				if err := alterSigned(cmd, g, sign, r, ops); err != nil {
					return err
				}
			} else if err := alterOverKafka(cmd, g, r, res.broker, ops); err != nil {
				return err
			}
			out := configsAltered{Resource: r.kindName(), Name: r.name}
			out.Set, out.Deleted = summarizeOps(ops)
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Altered configs of %s%s.\n", r,
				describeAlteration(topicAltered{Set: out.Set, Deleted: out.Deleted}))
			return err
		},
	}
	sign = addSignFlags(c)
	res.register(c)
	f := c.Flags()
	f.StringArrayVar(&sets, "set", nil, "set a config key=value (repeatable)")
	f.StringArrayVar(&deletes, "delete", nil, "remove a config, back to its default (repeatable)")
	f.StringArrayVar(&kafkaAdds, "add-config", nil, "kafka-configs.sh form of --set: 'k1=v1,k2=[a,b]'")
	f.StringArrayVar(&kafkaDelete, "delete-config", nil, "kafka-configs.sh form of --delete: 'k1,k2'")
	return c
}

// alterSigned makes an alteration as signed commands: a topic's as one
// AlterConfigs; a broker's or the cluster-wide defaults' as one
// AlterBrokerConfigs for the dynamic broker configs and, for the
// defaults, one AlterLogDefaults for the log.* topic defaults (two
// commands, each applied whole).
func alterSigned(cmd *cobra.Command, g *globalOptions, sign *adminSigning, r configResource, ops []kadm.AlterConfig) error {
	var changes, logChanges []fsm.ConfigChange
	for _, o := range ops {
		ch := fsm.ConfigChange{Op: fsm.ConfigOp(o.Op), Name: o.Name}
		if o.Value != nil {
			ch.Value = *o.Value
		}
		if _, ok := fsm.LookupLogDefault(o.Name); ok && r.kind != kmsg.ConfigResourceTypeTopic {
			if r.name != "" {
				return usageErrorf("%s is a cluster-wide log default: alter it with --broker-default", o.Name)
			}
			logChanges = append(logChanges, ch)
			continue
		}
		changes = append(changes, ch)
	}
	var cmds []fsm.Command
	switch {
	case r.kind == kmsg.ConfigResourceTypeTopic:
		cmds = append(cmds, fsm.AlterConfigs{Topic: r.name, Incremental: true, Changes: changes})
	default:
		if len(logChanges) > 0 {
			cmds = append(cmds, fsm.AlterLogDefaults{Incremental: true, Changes: logChanges})
		}
		if len(changes) > 0 {
			cmds = append(cmds, fsm.AlterBrokerConfigs{Broker: r.name, Incremental: true, Changes: changes})
		}
	}
	for _, c := range cmds {
		if err := sign.submit(cmd.Context(), g, c); err != nil {
			return fmt.Errorf("alter configs of %s: %w", r, err)
		}
	}
	return nil
}

// alterOverKafka makes an alteration with IncrementalAlterConfigs.
func alterOverKafka(cmd *cobra.Command, g *globalOptions, r configResource, broker int32, ops []kadm.AlterConfig) error {
	adm, cl, err := g.newAdmin()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := g.requestContext(cmd)
	defer cancel()
	if r.kind == kmsg.ConfigResourceTypeGroupConfig {
		return alterGroupConfigs(ctx, cl, r, ops)
	}
	if r.kind == kmsg.ConfigResourceTypeTopic {
		rs, err := adm.AlterTopicConfigs(ctx, ops, r.name)
		err = alterConfigsError(r.String(), r.name, rs, err)
		if err != nil {
			return err
		}
	} else {
		var brokers []int32 // none: the cluster-wide defaults
		if r.name != "" {
			brokers = []int32{broker}
		}
		rs, err := adm.AlterBrokerConfigs(ctx, ops, brokers...)
		err = alterConfigsError(r.String(), r.name, rs, err)
		if err != nil {
			return err
		}
	}
	return nil
}

// alterGroupConfigs makes an alteration of a group's configs with
// IncrementalAlterConfigs (kadm has no helper for GROUP resources).
func alterGroupConfigs(ctx context.Context, cl *kgo.Client, r configResource, ops []kadm.AlterConfig) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = r.kind, r.name
	for _, o := range ops {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = o.Name, kmsg.IncrementalAlterConfigOp(o.Op), o.Value
		rr.Configs = append(rr.Configs, c)
	}
	req.Resources = append(req.Resources, rr)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("alter configs of %s: %w", r, err)
	}
	if len(resp.Resources) != 1 {
		return fmt.Errorf("alter configs of %s: the broker answered for %d resources, want 1", r, len(resp.Resources))
	}
	if err := kerr.ErrorForCode(resp.Resources[0].ErrorCode); err != nil {
		msg := ""
		if m := resp.Resources[0].ErrorMessage; m != nil {
			msg = *m
		}
		return brokerError("alter configs of "+r.String(), err, msg)
	}
	return nil
}

// parseKafkaAddConfig parses kafka-configs.sh's --add-config syntax:
// comma-separated key=value pairs, where a value holding commas is written
// in brackets ("cleanup.policy=[compact,delete]"). It returns k=v strings
// with the brackets removed, as kafka-configs.sh does.
func parseKafkaAddConfig(s string) ([]string, error) {
	var out []string
	for _, pair := range splitOutsideBrackets(s, ',') {
		kv := splitOutsideBrackets(pair, '=')
		if len(kv) != 2 || strings.TrimSpace(kv[0]) == "" {
			return nil, usageErrorf("invalid --add-config %q: every config must be key=val or key=[val1,val2]", s)
		}
		v := strings.NewReplacer("[", "", "]", "").Replace(strings.TrimSpace(kv[1]))
		out = append(out, strings.TrimSpace(kv[0])+"="+v)
	}
	return out, nil
}

// splitOutsideBrackets splits s at every sep that is not inside [ ].
func splitOutsideBrackets(s string, sep byte) []string {
	var (
		out   []string
		depth int
		start int
	)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			if depth > 0 {
				depth--
			}
		case sep:
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}
