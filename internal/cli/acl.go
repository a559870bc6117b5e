package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

// stele acl add|list|remove: Kafka's ACLs with kafka-acls.sh's flags
// (--allow-principal User:alice --operation Write --topic orders
// --resource-pattern-type prefixed), over CreateAcls, DescribeAcls and
// DeleteAcls. Each binding is every combination of the resources, the
// principals with their hosts, and the operations given, as kafka-acls.sh
// makes them.

// aclFlags are kafka-acls.sh's flags.
type aclFlags struct {
	allowPrincipals, denyPrincipals []string
	allowHosts, denyHosts           []string
	operations                      []string
	topics, groups, txnIDs          []string
	cluster                         bool
	pattern                         string
	principal                       string // list: the principal to list for
	producer, consumer, idempotent  bool
}

func (a *aclFlags) register(cmd *cobra.Command, list bool) {
	f := cmd.Flags()
	f.StringSliceVar(&a.topics, "topic", nil, "topic resource (repeatable; * for every topic)")
	f.StringSliceVar(&a.groups, "group", nil, "consumer group resource (repeatable)")
	f.StringSliceVar(&a.txnIDs, "transactional-id", nil, "transactional id resource (repeatable)")
	f.BoolVar(&a.cluster, "cluster", false, "the cluster resource")
	if list {
		f.StringVar(&a.pattern, "resource-pattern-type", "any", "literal, prefixed, match (the patterns that apply to the names given) or any")
		f.StringVar(&a.principal, "principal", "", "list only the ACLs of this principal (User:alice)")
		return
	}
	f.StringVar(&a.pattern, "resource-pattern-type", "literal", "literal or prefixed")
	f.StringSliceVar(&a.allowPrincipals, "allow-principal", nil, "principal to allow, User:name (repeatable)")
	f.StringSliceVar(&a.denyPrincipals, "deny-principal", nil, "principal to deny, User:name (repeatable)")
	f.StringSliceVar(&a.allowHosts, "allow-host", nil, "host the allowed principals may connect from (repeatable; default *)")
	f.StringSliceVar(&a.denyHosts, "deny-host", nil, "host the denied principals are denied from (repeatable; default *)")
	f.StringSliceVar(&a.operations, "operation", nil, "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All (repeatable)")
	f.BoolVar(&a.producer, "producer", false, "the ACLs of a producer: Write, Describe and Create on the topics (and Write, Describe on --transactional-id)")
	f.BoolVar(&a.consumer, "consumer", false, "the ACLs of a consumer: Read and Describe on the topics, Read on the groups")
	f.BoolVar(&a.idempotent, "idempotent", false, "with --producer: IdempotentWrite on the cluster")
}

func newACLCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("acl", "Manage ACLs (kafka-acls.sh)", newACLAddCmd(g), newACLListCmd(g), newACLRemoveCmd(g))
}

var aclOperations = map[string]kmsg.ACLOperation{
	"all": kmsg.ACLOperationAll, "read": kmsg.ACLOperationRead, "write": kmsg.ACLOperationWrite, "create": kmsg.ACLOperationCreate,
	"delete": kmsg.ACLOperationDelete, "alter": kmsg.ACLOperationAlter, "describe": kmsg.ACLOperationDescribe,
	"clusteraction": kmsg.ACLOperationClusterAction, "describeconfigs": kmsg.ACLOperationDescribeConfigs,
	"alterconfigs": kmsg.ACLOperationAlterConfigs, "idempotentwrite": kmsg.ACLOperationIdempotentWrite,
	"createtokens": kmsg.ACLOperationCreateTokens, "describetokens": kmsg.ACLOperationDescribeTokens,
}

func parseOperation(s string) (kmsg.ACLOperation, error) {
	op, ok := aclOperations[strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "_", ""))]
	if !ok {
		return 0, usageErrorf("--operation %q: want Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite or All", s)
	}
	return op, nil
}

func parsePattern(s string, filter bool) (kmsg.ACLResourcePatternType, error) {
	switch strings.ToLower(s) {
	case "literal":
		return kmsg.ACLResourcePatternTypeLiteral, nil
	case "prefixed":
		return kmsg.ACLResourcePatternTypePrefixed, nil
	case "match":
		if filter {
			return kmsg.ACLResourcePatternTypeMatch, nil
		}
	case "any":
		if filter {
			return kmsg.ACLResourcePatternTypeAny, nil
		}
	}
	if filter {
		return 0, usageErrorf("--resource-pattern-type %q: want literal, prefixed, match or any", s)
	}
	return 0, usageErrorf("--resource-pattern-type %q: want literal or prefixed", s)
}

// aclResourceSpec is one resource the flags name.
type aclResourceSpec struct {
	typ  kmsg.ACLResourceType
	name string
}

func (a *aclFlags) resources() []aclResourceSpec {
	var out []aclResourceSpec
	for _, t := range a.topics {
		out = append(out, aclResourceSpec{kmsg.ACLResourceTypeTopic, t})
	}
	for _, g := range a.groups {
		out = append(out, aclResourceSpec{kmsg.ACLResourceTypeGroup, g})
	}
	for _, x := range a.txnIDs {
		out = append(out, aclResourceSpec{kmsg.ACLResourceTypeTransactionalId, x})
	}
	if a.cluster {
		out = append(out, aclResourceSpec{kmsg.ACLResourceTypeCluster, "kafka-cluster"})
	}
	return out
}

// aclBinding is one ACL, as the commands print it.
type aclBinding struct {
	ResourceType string `json:"resource_type"`
	Name         string `json:"name"`
	Pattern      string `json:"pattern_type"`
	Principal    string `json:"principal"`
	Host         string `json:"host"`
	Operation    string `json:"operation"`
	Permission   string `json:"permission"`
}

// bindings makes the ACLs the add flags describe: every resource × every
// principal (with each of its hosts) × every operation, the --producer
// and --consumer sets expanded as kafka-acls.sh expands them.
func (a *aclFlags) bindings() ([]kmsg.CreateACLsRequestCreation, error) {
	pattern, err := parsePattern(a.pattern, false)
	if err != nil {
		return nil, err
	}
	if len(a.allowPrincipals)+len(a.denyPrincipals) == 0 {
		return nil, usageErrorf("give --allow-principal or --deny-principal")
	}
	type opsOn struct {
		res aclResourceSpec
		ops []kmsg.ACLOperation
	}
	var plan []opsOn
	switch {
	case a.producer || a.consumer:
		if len(a.operations) > 0 {
			return nil, usageErrorf("--producer and --consumer choose the operations: leave out --operation")
		}
		for _, t := range a.topics {
			r := aclResourceSpec{kmsg.ACLResourceTypeTopic, t}
			if a.producer {
				plan = append(plan, opsOn{r, []kmsg.ACLOperation{kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationCreate}})
			}
			if a.consumer {
				plan = append(plan, opsOn{r, []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe}})
			}
		}
		if a.consumer {
			if len(a.groups) == 0 {
				return nil, usageErrorf("--consumer needs --group")
			}
			for _, g := range a.groups {
				plan = append(plan, opsOn{aclResourceSpec{kmsg.ACLResourceTypeGroup, g}, []kmsg.ACLOperation{kmsg.ACLOperationRead}})
			}
		}
		if a.producer {
			for _, x := range a.txnIDs {
				plan = append(plan, opsOn{aclResourceSpec{kmsg.ACLResourceTypeTransactionalId, x}, []kmsg.ACLOperation{kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe}})
			}
			if a.idempotent {
				plan = append(plan, opsOn{aclResourceSpec{kmsg.ACLResourceTypeCluster, "kafka-cluster"}, []kmsg.ACLOperation{kmsg.ACLOperationIdempotentWrite}})
			}
		}
		if len(a.topics) == 0 {
			return nil, usageErrorf("--producer and --consumer need --topic")
		}
	default:
		if len(a.operations) == 0 {
			return nil, usageErrorf("give --operation (or --producer, --consumer)")
		}
		var ops []kmsg.ACLOperation
		for _, s := range a.operations {
			op, err := parseOperation(s)
			if err != nil {
				return nil, err
			}
			ops = append(ops, op)
		}
		for _, r := range a.resources() {
			plan = append(plan, opsOn{r, ops})
		}
		if len(plan) == 0 {
			return nil, usageErrorf("name a resource: --topic, --group, --transactional-id or --cluster")
		}
	}
	hostsOr := func(h []string) []string {
		if len(h) == 0 {
			return []string{"*"}
		}
		return h
	}
	var out []kmsg.CreateACLsRequestCreation
	for _, p := range plan {
		for _, perm := range []struct {
			who   []string
			hosts []string
			typ   kmsg.ACLPermissionType
		}{{a.allowPrincipals, hostsOr(a.allowHosts), kmsg.ACLPermissionTypeAllow}, {a.denyPrincipals, hostsOr(a.denyHosts), kmsg.ACLPermissionTypeDeny}} {
			for _, who := range perm.who {
				for _, host := range perm.hosts {
					for _, op := range p.ops {
						c := kmsg.NewCreateACLsRequestCreation()
						c.ResourceType, c.ResourceName, c.ResourcePatternType = p.res.typ, p.res.name, pattern
						c.Principal, c.Host, c.Operation, c.PermissionType = who, host, op, perm.typ
						out = append(out, c)
					}
				}
			}
		}
	}
	return out, nil
}

func bindingOf(rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType, principal, host string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) aclBinding {
	return aclBinding{ResourceType: rt.String(), Name: name, Pattern: pt.String(), Principal: principal, Host: host, Operation: op.String(), Permission: perm.String()}
}

func printBindings(g *globalOptions, cmd *cobra.Command, bs []aclBinding) error {
	if g.jsonOutput() {
		if bs == nil {
			bs = []aclBinding{}
		}
		return writeJSON(cmd.OutOrStdout(), bs)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RESOURCE\tNAME\tPATTERN\tPRINCIPAL\tHOST\tOPERATION\tPERMISSION")
	for _, b := range bs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.ResourceType, b.Name, b.Pattern, b.Principal, b.Host, b.Operation, b.Permission)
	}
	return w.Flush()
}

func newACLAddCmd(g *globalOptions) *cobra.Command {
	var a aclFlags
	var sign *adminSigning
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add ACLs (kafka-acls.sh --add)",
		Long: `Add ACLs, as kafka-acls.sh --add: every combination of the resources, the
principals (each with its --allow-host or --deny-host, * by default) and the
operations given. --producer and --consumer add kafka-acls.sh's sets.`,
		Example: `  stele acl add --allow-principal User:alice --operation Read --operation Describe --topic orders
  stele acl add --allow-principal User:svc --producer --topic logs- --resource-pattern-type prefixed
  stele acl add --allow-principal User:bob --consumer --topic orders --group billing
  stele acl add --deny-principal User:mallory --deny-host 10.0.0.9 --operation All --topic '*'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			creations, err := a.bindings()
			if err != nil {
				return err
			}
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			if sign.on() {
				var errs []error
				var added []aclBinding
				for _, c := range creations {
					b := bindingOf(c.ResourceType, c.ResourceName, c.ResourcePatternType, c.Principal, c.Host, c.Operation, c.PermissionType)
					cmdACL := fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: int8(c.ResourceType), ResourceName: c.ResourceName, PatternType: int8(c.ResourcePatternType),
						Principal: c.Principal, Host: c.Host, Operation: int8(c.Operation), Permission: int8(c.PermissionType)}}
					if err := sign.submit(cmd.Context(), g, cmdACL); err != nil {
						errs = append(errs, fmt.Errorf("add %s %s on %s %q for %s: %w", b.Permission, b.Operation, b.ResourceType, b.Name, b.Principal, err))
						continue
					}
					added = append(added, b)
				}
				if err := printBindings(g, cmd, added); err != nil {
					return err
				}
				return errors.Join(errs...)
			}
			req := kmsg.NewPtrCreateACLsRequest()
			req.Creations = creations
			raw, err := g.roundTrip(cmd, req)
			if err != nil {
				return fmt.Errorf("add ACLs: %w", err)
			}
			resp := raw.(*kmsg.CreateACLsResponse)
			var errs []error
			var added []aclBinding
			for i, r := range resp.Results {
				c := creations[i]
				b := bindingOf(c.ResourceType, c.ResourceName, c.ResourcePatternType, c.Principal, c.Host, c.Operation, c.PermissionType)
				if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("add %s %s on %s %q for %s: %w%s", b.Permission, b.Operation, b.ResourceType, b.Name, b.Principal, err, withMessage(r.ErrorMessage)))
					continue
				}
				added = append(added, b)
			}
			if err := printBindings(g, cmd, added); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
	a.register(cmd, false)
	sign = addSignFlags(cmd)
	return cmd
}

func withMessage(m *string) string {
	if m == nil || *m == "" {
		return ""
	}
	return ": " + *m
}

func newACLListCmd(g *globalOptions) *cobra.Command {
	var a aclFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List ACLs (kafka-acls.sh --list)",
		Long: `List ACLs, as kafka-acls.sh --list: every ACL, or those of the resources
given (--resource-pattern-type match: every ACL that applies to them), of
--principal.`,
		Example: `  stele acl list
  stele acl list --topic orders --resource-pattern-type match
  stele acl list --principal User:alice`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pattern, err := parsePattern(a.pattern, true)
			if err != nil {
				return err
			}
			filters := a.resources()
			if len(filters) == 0 {
				filters = []aclResourceSpec{{typ: kmsg.ACLResourceTypeAny}}
			}
			var out []aclBinding
			for _, f := range filters {
				req := kmsg.NewPtrDescribeACLsRequest()
				req.ResourceType, req.ResourcePatternType = f.typ, pattern
				req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
				if f.typ != kmsg.ACLResourceTypeAny {
					req.ResourceName = kmsg.StringPtr(f.name)
				}
				if a.principal != "" {
					req.Principal = kmsg.StringPtr(a.principal)
				}
				raw, err := g.roundTrip(cmd, req)
				if err != nil {
					return fmt.Errorf("list ACLs: %w", err)
				}
				resp := raw.(*kmsg.DescribeACLsResponse)
				if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
					return fmt.Errorf("list ACLs: %w%s", err, withMessage(resp.ErrorMessage))
				}
				for _, r := range resp.Resources {
					for _, e := range r.ACLs {
						out = append(out, bindingOf(r.ResourceType, r.ResourceName, r.ResourcePatternType, e.Principal, e.Host, e.Operation, e.PermissionType))
					}
				}
			}
			return printBindings(g, cmd, out)
		},
	}
	a.register(cmd, true)
	return cmd
}

func newACLRemoveCmd(g *globalOptions) *cobra.Command {
	var a aclFlags
	var sign *adminSigning
	cmd := &cobra.Command{
		Use:   "remove",
		Short: "Remove ACLs (kafka-acls.sh --remove)",
		Long: `Remove the ACLs the flags describe, as kafka-acls.sh --remove: those of the
resources given, for the principals, hosts and operations given (any when
not given), and prints what was removed.`,
		Example: `  stele acl remove --allow-principal User:alice --operation Read --topic orders
  stele acl remove --topic orders          # every ACL of the literal topic orders`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pattern, err := parsePattern(a.pattern, true)
			if err != nil {
				return err
			}
			resources := a.resources()
			if len(resources) == 0 {
				return usageErrorf("name a resource: --topic, --group, --transactional-id or --cluster")
			}
			ops := []kmsg.ACLOperation{kmsg.ACLOperationAny}
			if len(a.operations) > 0 {
				ops = nil
				for _, s := range a.operations {
					op, err := parseOperation(s)
					if err != nil {
						return err
					}
					ops = append(ops, op)
				}
			}
			type who struct {
				principal, host *string
				perm            kmsg.ACLPermissionType
			}
			var whos []who
			add := func(ps, hosts []string, perm kmsg.ACLPermissionType) {
				for _, p := range ps {
					if len(hosts) == 0 {
						whos = append(whos, who{kmsg.StringPtr(p), nil, perm})
					}
					for _, h := range hosts {
						whos = append(whos, who{kmsg.StringPtr(p), kmsg.StringPtr(h), perm})
					}
				}
			}
			add(a.allowPrincipals, a.allowHosts, kmsg.ACLPermissionTypeAllow)
			add(a.denyPrincipals, a.denyHosts, kmsg.ACLPermissionTypeDeny)
			if len(whos) == 0 {
				whos = []who{{perm: kmsg.ACLPermissionTypeAny}}
			}
			req := kmsg.NewPtrDeleteACLsRequest()
			for _, r := range resources {
				for _, w := range whos {
					for _, op := range ops {
						f := kmsg.NewDeleteACLsRequestFilter()
						f.ResourceType, f.ResourceName, f.ResourcePatternType = r.typ, kmsg.StringPtr(r.name), pattern
						f.Principal, f.Host, f.Operation, f.PermissionType = w.principal, w.host, op, w.perm
						req.Filters = append(req.Filters, f)
					}
				}
			}
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			if sign.on() {
				removed, err := removeACLsSigned(cmd, g, sign, req.Filters)
				if perr := printBindings(g, cmd, removed); perr != nil {
					return perr
				}
				return err
			}
			raw, err := g.roundTrip(cmd, req)
			if err != nil {
				return fmt.Errorf("remove ACLs: %w", err)
			}
			resp := raw.(*kmsg.DeleteACLsResponse)
			var errs []error
			var removed []aclBinding
			for _, r := range resp.Results {
				if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("remove ACLs: %w%s", err, withMessage(r.ErrorMessage)))
					continue
				}
				for _, m := range r.MatchingACLs {
					removed = append(removed, bindingOf(m.ResourceType, m.ResourceName, m.ResourcePatternType, m.Principal, m.Host, m.Operation, m.PermissionType))
				}
			}
			if err := printBindings(g, cmd, removed); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
	a.register(cmd, false)
	cmd.Flags().Lookup("resource-pattern-type").Usage = "literal, prefixed, match or any"
	sign = addSignFlags(cmd)
	return cmd
}

// removeACLsSigned removes, with one signed DeleteACLs, the ACLs the
// filters match now (listed with DescribeAcls): the state machine removes
// exactly those, and one created meanwhile stays.
func removeACLsSigned(cmd *cobra.Command, g *globalOptions, sign *adminSigning, filters []kmsg.DeleteACLsRequestFilter) ([]aclBinding, error) {
	var found []fsm.ACLBinding
	var out []aclBinding
	seen := map[fsm.ACLBinding]bool{}
	for _, f := range filters {
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType, req.ResourceName, req.ResourcePatternType = f.ResourceType, f.ResourceName, f.ResourcePatternType
		req.Principal, req.Host, req.Operation, req.PermissionType = f.Principal, f.Host, f.Operation, f.PermissionType
		raw, err := g.roundTrip(cmd, req)
		if err != nil {
			return nil, fmt.Errorf("remove ACLs: %w", err)
		}
		resp := raw.(*kmsg.DescribeACLsResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return nil, fmt.Errorf("remove ACLs: %w%s", err, withMessage(resp.ErrorMessage))
		}
		for _, r := range resp.Resources {
			for _, e := range r.ACLs {
				b := fsm.ACLBinding{ResourceType: int8(r.ResourceType), ResourceName: r.ResourceName, PatternType: int8(r.ResourcePatternType),
					Principal: e.Principal, Host: e.Host, Operation: int8(e.Operation), Permission: int8(e.PermissionType)}
				if seen[b] {
					continue
				}
				seen[b] = true
				found = append(found, b)
				out = append(out, bindingOf(r.ResourceType, r.ResourceName, r.ResourcePatternType, e.Principal, e.Host, e.Operation, e.PermissionType))
			}
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	if err := sign.submit(cmd.Context(), g, fsm.DeleteACLs{ACLs: found}); err != nil {
		return nil, fmt.Errorf("remove ACLs: %w", err)
	}
	return out, nil
}
