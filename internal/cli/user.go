package cli

import (
	"errors"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/internal/sasl"
	"github.com/stele-io/stele/internal/server"
)

// stele user create|list|delete: SASL users over Kafka's
// AlterUserScramCredentials and DescribeUserScramCredentials, as
// kafka-configs.sh --entity-type users --alter --add-config
// 'SCRAM-SHA-512=[password=...]' manages them. The password is salted and
// hashed by this command (kadm): neither it nor the salted password
// leaves the machine, only what the broker needs to check a login.

func newUserCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("user", "Manage SASL users and their SCRAM credentials",
		newUserCreateCmd(g), newUserListCmd(g), newUserDeleteCmd(g))
}

// userCredential is the JSON form of one credential of `user list`.
type userCredential struct {
	User       string `json:"user"`
	Mechanism  string `json:"mechanism"`
	Iterations int32  `json:"iterations"`
}

// tenantUserName is NAME as a user of tenant (NAME@tenant), after asking
// the broker's HTTP API (addr) that the tenant exists; NAME itself
// without a tenant.
func tenantUserName(cmd *cobra.Command, g *globalOptions, addr, tenant, name string) (string, error) {
	if tenant == "" {
		return name, nil
	}
	if err := fsm.ValidTenantName(tenant); err != nil {
		return "", usageErrorf("--tenant: %v", err)
	}
	a, err := httpAddress(cmd, addr)
	if err != nil {
		return "", err
	}
	var t httpapi.Tenant
	if err := jsonRequest(cmd.Context(), g, "GET", tenantsURL(a, tenant), nil, &t); err != nil {
		return "", fmt.Errorf("--tenant %s: %w", tenant, err)
	}
	return fsm.QualifyUser(tenant, name), nil
}

// tenantAdminACLs are the ACLs that make user (NAME@tenant) an
// administrator of tenant (docs/tenants.md): ALL on the tenant's own
// CLUSTER resource (its users and ACLs, creating its topics) and on every
// topic, group and transactional id of the tenant's.
func tenantAdminACLs(tenant, user string) []fsm.ACLBinding {
	allow := func(rt int8, name string, pt int8) fsm.ACLBinding {
		return fsm.ACLBinding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: "User:" + user, Host: "*",
			Operation: fsm.ACLOpAll, Permission: fsm.ACLPermissionAllow}
	}
	prefix := tenant + string(fsm.TenantSep)
	return []fsm.ACLBinding{
		allow(fsm.ACLResourceCluster, fsm.TenantCluster(tenant), fsm.ACLPatternLiteral),
		allow(fsm.ACLResourceTopic, prefix, fsm.ACLPatternPrefixed),
		allow(fsm.ACLResourceGroup, prefix, fsm.ACLPatternPrefixed),
		allow(fsm.ACLResourceTransactionalID, prefix, fsm.ACLPatternPrefixed),
	}
}

func newUserCreateCmd(g *globalOptions) *cobra.Command {
	var passwordFile, tenant string
	var tenantAdmin bool
	var mechanisms []string
	var iterations int32
	var sign *adminSigning
	cmd := &cobra.Command{
		Use:   "create NAME --password-file FILE",
		Short: "Create a user, or set a new password for one (kafka-configs.sh --alter --add-config SCRAM-SHA-512=[password=...])",
		Long: `Create a user, or set a new password for one, with SCRAM credentials
(SCRAM-SHA-256 and SCRAM-SHA-512 unless --mechanism says one). The user then
logs in with SASL SCRAM or PLAIN (PLAIN is checked against the same
credentials). The password is read from a file (one trailing newline is
dropped) and salted and hashed here: the broker never sees it. Only a super
user may manage users on a broker whose listeners authenticate.`,
		Example: `  stele user create alice --password-file alice.password
  stele user create svc --password-file svc.pw --mechanism SCRAM-SHA-512 --command-config admin.properties
  stele user create alice --tenant acme --password-file alice.password   # logs in as alice@acme
  stele user create root --tenant acme --tenant-admin --password-file root.password`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if passwordFile == "" {
				return usageErrorf("--password-file is required")
			}
			// A tenant's administrator signing makes its own tenant's
			// users (sign_tenant.go qualifies the names it signs).
			lookup := tenant
			if st := signerTenant(sign.principal); sign.on() && st != "" {
				if tenant != "" && tenant != st {
					return usageErrorf("--tenant %s: %s signs for tenant %s only", tenant, sign.principal, st)
				}
				tenant, lookup = st, ""
			}
			if tenantAdmin && tenant == "" {
				return usageErrorf("--tenant-admin needs --tenant: the tenant NAME administers")
			}
			name, err := tenantUserName(cmd, g, sign.http, lookup, args[0])
			if err != nil {
				return err
			}
			args = []string{name}
			pw, err := server.ReadPasswordFile(passwordFile)
			if err != nil {
				return fmt.Errorf("--password-file: %w", err)
			}
			var ups []kadm.UpsertSCRAM
			signed := fsm.AlterScramCredentials{User: args[0]}
			for _, m := range mechanisms {
				mech, ok := sasl.ParseScramMechanism(m)
				if !ok {
					return usageErrorf("--mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", m)
				}
				ups = append(ups, kadm.UpsertSCRAM{User: args[0], Mechanism: kadm.ScramMechanism(mech), Iterations: iterations, Password: string(pw)})
				if sign.on() {
					c, err := sasl.NewCredential(mech, pw, iterations)
					if err != nil {
						return usageErrorf("%v", err)
					}
					signed.Upserts = append(signed.Upserts, c)
				}
			}
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			if sign.on() {
				if err := sign.submit(cmd.Context(), g, signed); err != nil {
					return fmt.Errorf("create user %q: %w", args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "User %q has credentials for %v.\n", args[0], mechanisms)
				if tenantAdmin {
					for _, b := range tenantAdminACLs(tenant, args[0]) {
						if err := sign.submit(cmd.Context(), g, fsm.CreateACL{ACL: b}); err != nil {
							return fmt.Errorf("make %q an administrator of tenant %s: %w", args[0], tenant, err)
						}
					}
					fmt.Fprintf(cmd.OutOrStdout(), "User %q administers tenant %s.\n", args[0], tenant)
				}
				return nil
			}
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			rs, err := adm.AlterUserSCRAMs(ctx, nil, ups)
			for _, r := range rs.Sorted() {
				if err == nil && r.Err != nil {
					err = brokerError("the broker refused", r.Err, r.ErrMessage)
				}
			}
			if err != nil {
				return fmt.Errorf("create user %q: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "User %q has credentials for %v.\n", args[0], mechanisms)
			if !tenantAdmin {
				return nil
			}
			req := kmsg.NewPtrCreateACLsRequest()
			for _, b := range tenantAdminACLs(tenant, args[0]) {
				c := kmsg.NewCreateACLsRequestCreation()
				c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceType(b.ResourceType), b.ResourceName, kmsg.ACLResourcePatternType(b.PatternType)
				c.Principal, c.Host, c.Operation, c.PermissionType = b.Principal, b.Host, kmsg.ACLOperation(b.Operation), kmsg.ACLPermissionType(b.Permission)
				req.Creations = append(req.Creations, c)
			}
			raw, err := g.roundTrip(cmd, req)
			if err == nil {
				for _, r := range raw.(*kmsg.CreateACLsResponse).Results {
					if e := kerr.ErrorForCode(r.ErrorCode); e != nil && err == nil {
						err = fmt.Errorf("%w%s", e, withMessage(r.ErrorMessage))
					}
				}
			}
			if err != nil {
				return fmt.Errorf("make %q an administrator of tenant %s: %w", args[0], tenant, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "User %q administers tenant %s.\n", args[0], tenant)
			return nil
		},
	}
	cmd.Flags().StringVar(&passwordFile, "password-file", "", "file holding the password")
	cmd.Flags().StringSliceVar(&mechanisms, "mechanism", []string{sasl.ScramSHA256, sasl.ScramSHA512}, "SCRAM mechanisms to make credentials for")
	cmd.Flags().Int32Var(&iterations, "iterations", sasl.MinIteration, "SCRAM iterations (4096 to 16384)")
	cmd.Flags().StringVar(&tenant, "tenant", "", "make NAME a user of this tenant: it logs in as NAME@TENANT and sees only the tenant's names (docs/tenants.md); the tenant must exist (asked over --http)")
	cmd.Flags().BoolVar(&tenantAdmin, "tenant-admin", false, "with --tenant: make NAME the tenant's administrator (ALL on the tenant's own cluster resource and on all its names: it manages the tenant's users, ACLs and topics with the Kafka admin APIs)")
	sign = addSignFlags(cmd)
	return cmd
}

func newUserListCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list [NAME...]",
		Short: "List users and their SCRAM mechanisms (kafka-configs.sh --describe --entity-type users)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, names []string) error {
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			rs, err := adm.DescribeUserSCRAMs(ctx, names...)
			if err == nil {
				err = rs.Error()
			}
			if err != nil {
				return fmt.Errorf("list users: %w", err)
			}
			out := []userCredential{}
			for _, r := range rs.Sorted() {
				for _, c := range r.CredInfos {
					out = append(out, userCredential{User: r.User, Mechanism: sasl.ScramMechanism(c.Mechanism).String(), Iterations: c.Iterations})
				}
			}
			sort.SliceStable(out, func(i, j int) bool { return out[i].User < out[j].User })
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "USER\tMECHANISM\tITERATIONS")
			for _, c := range out {
				fmt.Fprintf(w, "%s\t%s\t%d\n", c.User, c.Mechanism, c.Iterations)
			}
			return w.Flush()
		},
	}
}

func newUserDeleteCmd(g *globalOptions) *cobra.Command {
	var sign *adminSigning
	var tenant string
	cmd := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete users: every SCRAM credential each has (kafka-configs.sh --alter --delete-config)",
		Long: `Delete users: every SCRAM credential each has, after which they cannot
log in. Connections already authenticated stay open until they close or
re-authenticate (connections.max.reauth.ms).`,
		Args: minArgs("NAME"),
		RunE: func(cmd *cobra.Command, names []string) error {
			if tenant != "" {
				if err := fsm.ValidTenantName(tenant); err != nil {
					return usageErrorf("--tenant: %v", err)
				}
				for i, n := range names {
					names[i] = fsm.QualifyUser(tenant, n)
				}
			}
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			names = uniqueSorted(names)
			described, err := adm.DescribeUserSCRAMs(ctx, names...)
			if err != nil {
				return fmt.Errorf("delete users: %w", err)
			}
			var dels []kadm.DeleteSCRAM
			var errs []error
			for _, n := range names {
				r := described[n]
				if r.Err != nil {
					errs = append(errs, fmt.Errorf("delete user %q: %w", n, r.Err))
					continue
				}
				for _, c := range r.CredInfos {
					dels = append(dels, kadm.DeleteSCRAM{User: n, Mechanism: c.Mechanism})
				}
			}
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			if sign.on() {
				byUser := map[string][]sasl.ScramMechanism{}
				for _, d := range dels {
					byUser[d.User] = append(byUser[d.User], sasl.ScramMechanism(d.Mechanism))
				}
				for _, n := range names {
					if len(byUser[n]) == 0 {
						continue
					}
					if err := sign.submit(ctx, g, fsm.AlterScramCredentials{User: n, Deletions: byUser[n]}); err != nil {
						errs = append(errs, fmt.Errorf("delete user %q: %w", n, err))
					} else {
						fmt.Fprintf(cmd.OutOrStdout(), "Deleted user %q.\n", n)
					}
				}
				return errors.Join(errs...)
			}
			if len(dels) > 0 {
				rs, err := adm.AlterUserSCRAMs(ctx, dels, nil)
				if err != nil {
					return fmt.Errorf("delete users: %w", err)
				}
				for _, r := range rs.Sorted() {
					if r.Err != nil {
						errs = append(errs, brokerError(fmt.Sprintf("delete user %q", r.User), r.Err, r.ErrMessage))
					} else {
						fmt.Fprintf(cmd.OutOrStdout(), "Deleted user %q.\n", r.User)
					}
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the users are this tenant's (NAME@TENANT)")
	sign = addSignFlags(cmd)
	return cmd
}
