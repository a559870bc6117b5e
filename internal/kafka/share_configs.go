package kafka

// Group configs (GROUP config resources of DescribeConfigs, AlterConfigs
// and IncrementalAlterConfigs, KIP-848's and KIP-932's): a share group's
// share.* configs with Kafka's names and defaults, and Stele's
// stele.share.key.ordering (docs/share-groups.md).
// Behavior:
//   - Any group name may be described or altered, used or not, as in
//     Kafka; setting a config of a group not yet used makes an empty share
//     group that holds it. A consumer group's name gets GROUP_ID_NOT_FOUND
//     when altered.
//   - Set configs are described with source GROUP_CONFIG, the others
//     with DEFAULT_CONFIG.
//   - IncrementalAlterConfigs takes SET and DELETE (APPEND and SUBTRACT
//     are for lists: INVALID_CONFIG); AlterConfigs replaces the set
//     configs with those given.
//   - Authorization: DESCRIBE_CONFIGS or ALTER_CONFIGS on the group
//     (GROUP_AUTHORIZATION_FAILED).
// Not done: the consumer group configs of KIP-848
// (consumer.session.timeout.ms, consumer.heartbeat.interval.ms) are not
// served; a consumer group uses Kafka's defaults.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

// groupConfigEntries describes group name's configs.
func (s *Server) groupConfigEntries(name string) ([]configEntry, problem) {
	if name == "" {
		return nil, newProblem(kerr.InvalidGroupID, "a group config resource names a group")
	}
	g := s.b.ShareGroups().Group(name)
	var out []configEntry
	for _, n := range fsm.ShareGroupConfigNames() {
		def, _ := fsm.ShareGroupConfigDefault(n)
		e := configEntry{name: n, value: def, source: kmsg.ConfigSourceDefaultConfig, typ: shareConfigType(def)}
		if g != nil {
			if v, set := g.Config(n); set {
				e.value, e.source = v, kmsg.ConfigSourceGroupConfig
			}
		}
		out = append(out, e)
	}
	return out, problem{}
}

func shareConfigType(def string) kmsg.ConfigType {
	switch def {
	case "true", "false":
		return kmsg.ConfigTypeBoolean
	case "latest", "read_uncommitted":
		return kmsg.ConfigTypeString
	}
	return kmsg.ConfigTypeInt
}

// alterGroupConfigs is the command an alteration of group r's configs
// submits.
func alterGroupConfigs(r alterResource, incremental bool) (fsm.SetShareGroupConfigs, problem) {
	cmd := fsm.SetShareGroupConfigs{Group: r.name}
	if r.name == "" {
		return cmd, newProblem(kerr.InvalidGroupID, "a group config resource names a group")
	}
	given := map[string]bool{}
	for _, ch := range r.changes {
		given[ch.Name] = true
		switch {
		case incremental && ch.Op == fsm.ConfigOp(kmsg.IncrementalAlterConfigOpDelete):
			cmd.Configs = append(cmd.Configs, fsm.ShareConfigEntry{Name: ch.Name, Delete: true})
		case incremental && ch.Op != fsm.ConfigOp(kmsg.IncrementalAlterConfigOpSet):
			return cmd, newProblem(kerr.InvalidConfig, fmt.Sprintf("group config %s is not a list: SET or DELETE it", ch.Name))
		default:
			cmd.Configs = append(cmd.Configs, fsm.ShareConfigEntry{Name: ch.Name, Value: ch.Value})
		}
	}
	if !incremental { // AlterConfigs: what is not given returns to its default
		for _, n := range fsm.ShareGroupConfigNames() {
			if !given[n] {
				cmd.Configs = append(cmd.Configs, fsm.ShareConfigEntry{Name: n, Delete: true})
			}
		}
	}
	return cmd, checked(cmd)
}
