package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

// stele quota set|list|remove: client quotas per user and client id over
// Kafka's AlterClientQuotas and DescribeClientQuotas, as kafka-configs.sh
// --entity-type users|clients --alter --add-config 'producer_byte_rate=...'
// manages them.

// quotaEntityFlags name one quota entity: a user and/or a client id, each
// named or the default.
type quotaEntityFlags struct {
	user, clientID, ip                      string
	userDefault, clientIDDefault, ipDefault bool
}

func (q *quotaEntityFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&q.user, "user", "", "the user (kafka-configs.sh --entity-type users --entity-name)")
	f.StringVar(&q.clientID, "client-id", "", "the client id (--entity-type clients --entity-name)")
	f.BoolVar(&q.userDefault, "user-default", false, "every user without its own quota (--entity-default)")
	f.BoolVar(&q.clientIDDefault, "client-id-default", false, "every client id without its own quota")
	f.StringVar(&q.ip, "ip", "", "a client address, for connection_creation_rate (--entity-type ips --entity-name); never with --user or --client-id")
	f.BoolVar(&q.ipDefault, "ip-default", false, "every client address without its own connection_creation_rate")
}

// entity is the request's entity; an error when the flags name none or
// contradict.
func (q *quotaEntityFlags) entity() ([]kmsg.AlterClientQuotasRequestEntryEntity, error) {
	var out []kmsg.AlterClientQuotasRequestEntryEntity
	add := func(typ, name string, def bool, flag string) error {
		switch {
		case name != "" && def:
			return usageErrorf("--%s and --%s-default both name the %s: give one", flag, flag, typ)
		case name == "" && !def:
			return nil
		}
		e := kmsg.NewAlterClientQuotasRequestEntryEntity()
		e.Type = typ
		if !def {
			e.Name = kmsg.StringPtr(name)
		}
		out = append(out, e)
		return nil
	}
	if err := add("user", q.user, q.userDefault, "user"); err != nil {
		return nil, err
	}
	if err := add("client-id", q.clientID, q.clientIDDefault, "client-id"); err != nil {
		return nil, err
	}
	if err := add("ip", q.ip, q.ipDefault, "ip"); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, usageErrorf("name the entity: --user, --user-default, --client-id and/or --client-id-default, or --ip or --ip-default")
	}
	return out, nil
}

func newQuotaCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("quota", "Manage client quotas (kafka-configs.sh --entity-type users|clients)",
		newQuotaSetCmd(g), newQuotaListCmd(g), newQuotaRemoveCmd(g))
}

func alterQuotas(g *globalOptions, cmd *cobra.Command, q *quotaEntityFlags, sign *adminSigning, ops []kmsg.AlterClientQuotasRequestEntryOp) error {
	entity, err := q.entity()
	if err != nil {
		return err
	}
	if err := sign.ready(cmd, g); err != nil {
		return err
	}
	if sign.on() {
		var qops []fsm.QuotaOp
		for _, o := range ops {
			qops = append(qops, fsm.QuotaOp{Key: o.Key, Value: o.Value, Remove: o.Remove})
		}
		var c fsm.Command = fsm.AlterClientQuotas{Entity: fsm.QuotaEntity{
			User:     fsm.QuotaName{Set: q.user != "" || q.userDefault, Default: q.userDefault, Name: q.user},
			ClientID: fsm.QuotaName{Set: q.clientID != "" || q.clientIDDefault, Default: q.clientIDDefault, Name: q.clientID},
		}, Ops: qops}
		if q.ip != "" || q.ipDefault {
			if len(entity) != 1 {
				return usageErrorf("--ip and --ip-default name an address alone: not with --user or --client-id")
			}
			ip := ""
			if q.ip != "" {
				if ip, err = fsm.CanonicalQuotaIP(q.ip); err != nil {
					return usageErrorf("--ip: %v", err)
				}
			}
			c = fsm.AlterIPQuotas{IP: ip, Default: q.ipDefault, Ops: qops}
		}
		if err := sign.submit(cmd.Context(), g, c); err != nil {
			return fmt.Errorf("alter quotas: %w", err)
		}
		return nil
	}
	req := kmsg.NewPtrAlterClientQuotasRequest()
	e := kmsg.NewAlterClientQuotasRequestEntry()
	e.Entity, e.Ops = entity, ops
	req.Entries = append(req.Entries, e)
	raw, err := g.roundTrip(cmd, req)
	if err != nil {
		return fmt.Errorf("alter quotas: %w", err)
	}
	resp := raw.(*kmsg.AlterClientQuotasResponse)
	if err := kerr.ErrorForCode(resp.Entries[0].ErrorCode); err != nil {
		return fmt.Errorf("alter quotas: %w%s", err, withMessage(resp.Entries[0].ErrorMessage))
	}
	return nil
}

func newQuotaSetCmd(g *globalOptions) *cobra.Command {
	var q quotaEntityFlags
	var sign *adminSigning
	cmd := &cobra.Command{
		Use:   "set KEY=VALUE...",
		Short: "Set client and ip quotas (kafka-configs.sh --alter --add-config)",
		Long: `Set quotas of a user, a client id, or both (named or the default):
producer_byte_rate and consumer_byte_rate (bytes a second, enforced by
every broker on its own connections), controller_mutation_rate
(partitions created or deleted a second, enforced) and request_percentage
(the broker's time on the client's requests, percent of one thread,
enforced). The quota of a client
is the most specific entity's, in Kafka's order (docs/security.md).
--ip ADDR or --ip-default (alone) set connection_creation_rate: new Kafka
connections a second from the address, or from any address without its
own; every broker holds the ones beyond it, then closes them.`,
		Example: `  stele quota set --user alice producer_byte_rate=1048576 consumer_byte_rate=2097152
  stele quota set --ip 10.0.0.7 connection_creation_rate=5
  stele quota set --client-id-default producer_byte_rate=10485760
  stele quota set --user alice --client-id batch-loader producer_byte_rate=52428800`,
		Args: minArgs("KEY=VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ops []kmsg.AlterClientQuotasRequestEntryOp
			for _, a := range args {
				k, v, ok := strings.Cut(a, "=")
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if !ok || err != nil {
					return usageErrorf("%q is not KEY=VALUE with a number", a)
				}
				op := kmsg.NewAlterClientQuotasRequestEntryOp()
				op.Key, op.Value = strings.TrimSpace(k), f
				ops = append(ops, op)
			}
			if err := alterQuotas(g, cmd, &q, sign, ops); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Set %s.\n", strings.Join(args, ", "))
			return nil
		},
	}
	q.register(cmd)
	sign = addSignFlags(cmd)
	return cmd
}

func newQuotaRemoveCmd(g *globalOptions) *cobra.Command {
	var q quotaEntityFlags
	var sign *adminSigning
	cmd := &cobra.Command{
		Use:     "remove KEY...",
		Short:   "Remove client quotas (kafka-configs.sh --alter --delete-config)",
		Example: `  stele quota remove --user alice producer_byte_rate`,
		Args:    minArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ops []kmsg.AlterClientQuotasRequestEntryOp
			for _, k := range args {
				op := kmsg.NewAlterClientQuotasRequestEntryOp()
				op.Key, op.Remove = k, true
				ops = append(ops, op)
			}
			if err := alterQuotas(g, cmd, &q, sign, ops); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Removed %s.\n", strings.Join(args, ", "))
			return nil
		},
	}
	q.register(cmd)
	sign = addSignFlags(cmd)
	return cmd
}

// quotaRow is one quota of `quota list`.
type quotaRow struct {
	User     string  `json:"user,omitempty"`
	ClientID string  `json:"client_id,omitempty"`
	IP       string  `json:"ip,omitempty"`
	Key      string  `json:"key"`
	Value    float64 `json:"value"`
}

func newQuotaListCmd(g *globalOptions) *cobra.Command {
	var q quotaEntityFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List client quotas (kafka-configs.sh --describe --entity-type users|clients)",
		Long: `List client quotas: every entity's, or those of the user and client id
given (--user-default, --client-id-default: the defaults'). A default side
prints as <default>.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := kmsg.NewPtrDescribeClientQuotasRequest()
			for _, side := range []struct {
				typ, name string
				def       bool
			}{{"user", q.user, q.userDefault}, {"client-id", q.clientID, q.clientIDDefault}, {"ip", q.ip, q.ipDefault}} {
				c := kmsg.NewDescribeClientQuotasRequestComponent()
				c.EntityType = side.typ
				switch {
				case side.name != "":
					c.MatchType, c.Match = 0, kmsg.StringPtr(side.name)
				case side.def:
					c.MatchType = 1
				default:
					continue
				}
				req.Components = append(req.Components, c)
			}
			raw, err := g.roundTrip(cmd, req)
			if err != nil {
				return fmt.Errorf("list quotas: %w", err)
			}
			resp := raw.(*kmsg.DescribeClientQuotasResponse)
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				return fmt.Errorf("list quotas: %w%s", err, withMessage(resp.ErrorMessage))
			}
			rows := []quotaRow{}
			for _, e := range resp.Entries {
				var row quotaRow
				for _, en := range e.Entity {
					name := "<default>"
					if en.Name != nil {
						name = *en.Name
					}
					switch en.Type {
					case "user":
						row.User = name
					case "ip":
						row.IP = name
					default:
						row.ClientID = name
					}
				}
				for _, v := range e.Values {
					r := row
					r.Key, r.Value = v.Key, v.Value
					rows = append(rows, r)
				}
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "USER\tCLIENT-ID\tIP\tQUOTA\tVALUE")
			for _, r := range rows {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", orDash(r.User), orDash(r.ClientID), orDash(r.IP), r.Key, strconv.FormatFloat(r.Value, 'f', -1, 64))
			}
			return w.Flush()
		},
	}
	q.register(cmd)
	return cmd
}
