package cli

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
)

// stele tenant create|list|describe|delete|quota set (issue 18,
// docs/tenants.md): the tenants of a cluster over a broker's HTTP API
// (--http, /v1/tenants), as Kafka has no API for them. With --sign the
// changes are signed administration (sign.go), as stele.admin.signed=true
// requires.

func newTenantCmd(g *globalOptions) *cobra.Command {
	quota := newGroupCmd("quota", "Change a tenant's quotas", newTenantQuotaSetCmd(g))
	return newGroupCmd("tenant", "Manage tenants: isolated namespaces of topics, groups, transactional ids and users, with quotas",
		newTenantCreateCmd(g), newTenantListCmd(g), newTenantDescribeCmd(g), newTenantDeleteCmd(g), quota)
}

// parseTenantQuotas parses --quota KEY=VALUE flags.
func parseTenantQuotas(flags []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, usageErrorf("--quota %q: want KEY=VALUE (keys: %s)", f, strings.Join(fsm.TenantQuotaKeys(), ", "))
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, usageErrorf("--quota %s: %q is not a whole number", k, v)
		}
		if err := fsm.CheckTenantQuota(k, n); err != nil {
			return nil, usageErrorf("--quota: %v", err)
		}
		if _, dup := out[k]; dup {
			return nil, usageErrorf("--quota %s given twice", k)
		}
		out[k] = n
	}
	return out, nil
}

func tenantsURL(addr string, rest ...string) string {
	u := httpBase(addr) + "/v1/tenants"
	for _, r := range rest {
		u += "/" + url.PathEscape(r)
	}
	return u
}

func checkTenantArg(name string) error {
	if err := fsm.ValidTenantName(name); err != nil {
		return usageErrorf("%v", err)
	}
	return nil
}

func newTenantCreateCmd(g *globalOptions) *cobra.Command {
	var quotas []string
	var sign *adminSigning
	cmd := &cobra.Command{
		Use:   "create NAME [--quota KEY=VALUE ...]",
		Short: "Create a tenant, at once, with quotas",
		Long: `Create a tenant: one command in one block. NAME is 1 to 63 lowercase letters,
digits and '-'. --quota limits what the tenant may own (topics, partitions,
groups); a quota not given has no limit. Only the cluster administrator (ALTER
on the cluster) may; under stele.admin.signed=true, with --sign.`,
		Example: `  stele tenant create acme --quota topics=100 --quota partitions=1000
  stele tenant create acme --sign admin.key --principal admin`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTenantArg(args[0]); err != nil {
				return err
			}
			q, err := parseTenantQuotas(quotas)
			if err != nil {
				return err
			}
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			c := fsm.CreateTenant{Name: args[0]}
			for _, k := range slices.Sorted(maps.Keys(q)) {
				c.Quotas = append(c.Quotas, fsm.TenantQuota{Key: k, Value: q[k]})
			}
			if _, err := changeTenant(cmd, g, sign, c, "POST", nil, httpapi.TenantCreate{Name: args[0], Quotas: q}); err != nil {
				return fmt.Errorf("create tenant %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Created tenant %s.\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&quotas, "quota", nil, "a quota KEY=VALUE (keys: "+strings.Join(fsm.TenantQuotaKeys(), ", ")+"); repeat for several")
	sign = addTenantSignFlags(cmd)
	return cmd
}

func newTenantListCmd(g *globalOptions) *cobra.Command {
	var httpAddr string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the tenants, with their usage against their quotas",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := httpAddress(cmd, httpAddr)
			if err != nil {
				return err
			}
			var all []httpapi.Tenant
			if err := jsonRequest(cmd.Context(), g, "GET", tenantsURL(addr), nil, &all); err != nil {
				return fmt.Errorf("list tenants: %w", err)
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), all)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "TENANT\tTOPICS\tPARTITIONS\tGROUPS\tCREATED AT")
			for _, t := range all {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", t.Name, usageCell(t.Quotas[fsm.QuotaTopics]), usageCell(t.Quotas[fsm.QuotaPartitions]),
					usageCell(t.Quotas[fsm.QuotaGroups]), t.CreatedHeight)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}

// usageCell is "used/limit", or "used" without a limit.
func usageCell(u httpapi.TenantQuotaUsage) string {
	if u.Limit == nil {
		return strconv.FormatInt(u.Used, 10)
	}
	return fmt.Sprintf("%d/%d", u.Used, *u.Limit)
}

func newTenantDescribeCmd(g *globalOptions) *cobra.Command {
	var httpAddr string
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Describe a tenant: each quota, its limit and what is in use",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTenantArg(args[0]); err != nil {
				return err
			}
			addr, err := httpAddress(cmd, httpAddr)
			if err != nil {
				return err
			}
			var t httpapi.Tenant
			if err := jsonRequest(cmd.Context(), g, "GET", tenantsURL(addr, args[0]), nil, &t); err != nil {
				return fmt.Errorf("describe tenant %s: %w", args[0], err)
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), t)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Tenant %s, created at height %d.\n", t.Name, t.CreatedHeight)
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "QUOTA\tUSED\tLIMIT")
			for _, k := range slices.Sorted(maps.Keys(t.Quotas)) {
				u := t.Quotas[k]
				limit := "none"
				if u.Limit != nil {
					limit = strconv.FormatInt(*u.Limit, 10)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\n", k, u.Used, limit)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "(%s, %s, %s: each broker's; used is the answering broker's now, byte rates in bytes a second; %s used: its files)\n",
				fsm.QuotaTenantConnections, fsm.QuotaTenantProducerByteRate, fsm.QuotaTenantConsumerByteRate, fsm.QuotaStoredBytesKey)
			return err
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}

func newTenantDeleteCmd(g *globalOptions) *cobra.Command {
	var sign *adminSigning
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a tenant and everything it owns; print what was removed",
		Long: `Delete a tenant and, in the same block, everything it owns: its transactional ids
(open transactions are aborted), groups with their offsets, topics with their
data, users, the ACLs on its resources and for its users, its users' quotas
and producer keys, its schema registry and its share groups. Prints how many of each
were removed.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTenantArg(args[0]); err != nil {
				return err
			}
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			removed, err := changeTenant(cmd, g, sign, fsm.DeleteTenant{Name: args[0]}, "DELETE", []string{args[0]}, nil)
			if err != nil {
				return fmt.Errorf("delete tenant %s: %w", args[0], err)
			}
			if removed == nil {
				removed = map[string]int{}
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), struct {
					Tenant  string         `json:"tenant"`
					Removed map[string]int `json:"removed"`
				}{args[0], removed})
			}
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(removed)) {
				parts = append(parts, fmt.Sprintf("%d %s", removed[k], strings.ReplaceAll(k, "_", " ")))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Deleted tenant %s; removed %s.\n", args[0], strings.Join(parts, ", "))
			return nil
		},
	}
	sign = addTenantSignFlags(cmd)
	return cmd
}

func newTenantQuotaSetCmd(g *globalOptions) *cobra.Command {
	var quotas, remove []string
	var sign *adminSigning
	cmd := &cobra.Command{
		Use:   "set NAME [--quota KEY=VALUE ...] [--remove KEY ...]",
		Short: "Set and remove a tenant's quotas, all or nothing",
		Long: `Set (--quota KEY=VALUE) and remove (--remove KEY) a tenant's quotas, all or
nothing. Lowering a quota below what the tenant uses removes nothing: what
would add past it is refused from then on.`,
		Example: `  stele tenant quota set acme --quota groups=50 --remove partitions`,
		Args:    exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTenantArg(args[0]); err != nil {
				return err
			}
			q, err := parseTenantQuotas(quotas)
			if err != nil {
				return err
			}
			for _, k := range remove {
				if !slices.Contains(fsm.TenantQuotaKeys(), k) {
					return usageErrorf("--remove %q: keys are %s", k, strings.Join(fsm.TenantQuotaKeys(), ", "))
				}
				if _, both := q[k]; both {
					return usageErrorf("quota %s both set and removed", k)
				}
			}
			if len(q) == 0 && len(remove) == 0 {
				return usageErrorf("nothing to change: give --quota KEY=VALUE or --remove KEY")
			}
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			c := fsm.AlterTenantQuotas{Name: args[0]}
			for _, k := range slices.Sorted(maps.Keys(q)) {
				c.Ops = append(c.Ops, fsm.TenantQuotaOp{Key: k, Value: q[k]})
			}
			for _, k := range remove {
				c.Ops = append(c.Ops, fsm.TenantQuotaOp{Key: k, Remove: true})
			}
			if _, err := changeTenant(cmd, g, sign, c, "PUT", []string{args[0], "quotas"}, httpapi.TenantQuotasChange{Set: q, Remove: remove}); err != nil {
				return fmt.Errorf("set quotas of tenant %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Quotas of tenant %s changed.\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&quotas, "quota", nil, "a quota to set, KEY=VALUE; repeat for several")
	cmd.Flags().StringArrayVar(&remove, "remove", nil, "a quota to remove; repeat for several")
	sign = addTenantSignFlags(cmd)
	return cmd
}

// changeTenant makes a change to tenants: signed (c, through
// /v1/admin/signed) when --sign is given, else over the tenants' routes
// (method on /v1/tenants/path..., with body). It returns what a deletion
// removed.
func changeTenant(cmd *cobra.Command, g *globalOptions, sign *adminSigning, c fsm.Command, method string, path []string, body any) (map[string]int, error) {
	if sign.on() {
		res, err := sign.submitResult(cmd.Context(), g, c)
		return res.Removed, err
	}
	addr, err := httpAddress(cmd, sign.http)
	if err != nil {
		return nil, err
	}
	var res httpapi.TenantResult
	if err := jsonRequest(cmd.Context(), g, method, tenantsURL(addr, path...), body, &res); err != nil {
		return nil, err
	}
	return res.Removed, nil
}

// addTenantSignFlags adds --sign, --principal and --http (the broker's
// HTTP API, where the change goes signed or not).
func addTenantSignFlags(cmd *cobra.Command) *adminSigning {
	s := addSignFlags(cmd)
	cmd.Flags().Lookup("http").Usage = "a broker's HTTP API host:port (env " + httpEnv + "), where the change goes, signed (--sign) or not"
	return s
}
