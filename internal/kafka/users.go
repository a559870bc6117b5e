package kafka

// DescribeUserScramCredentials: v0
// AlterUserScramCredentials: v0
// Behavior:
//  * Users and their SCRAM credentials are replicated state (fsm/security's
//    users.go): an alteration is ordered like any command and answered
//    once committed, so every broker authenticates the user alike from
//    then on.
//  * AlterUserScramCredentials takes Kafka's salted passwords and turns
//    each into the credential RFC 5802 has a server keep (StoredKey,
//    ServerKey) before submitting: the salted password, with which a
//    client could log in, never reaches a block. A user's deletions and
//    upsertions are one command, applied all or nothing. Kafka's codes: an
//    unknown mechanism UNSUPPORTED_SASL_MECHANISM, an empty name, an
//    empty salt or salted password, or iterations outside 4096-16384
//    UNACCEPTABLE_CREDENTIAL, a user and mechanism named twice
//    DUPLICATE_RESOURCE (for every alteration of that user), a deletion
//    of a credential that does not exist RESOURCE_NOT_FOUND.
//  * DescribeUserScramCredentials lists every user when none is named;
//    a named user without credentials gets RESOURCE_NOT_FOUND, a name
//    given twice DUPLICATE_RESOURCE. Salts and keys are never answered.
//  * Authorization, as Kafka: DESCRIBE on the cluster to describe, ALTER
//    on the cluster to alter; CLUSTER_AUTHORIZATION_FAILED otherwise.
//  * A chain below app version 3 has no users: UNSUPPORTED_VERSION.

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/sasl"
)

func userRoutes() []route {
	return []route{
		{key: 50, min: 0, max: 0, handle: handleDescribeUserScramCredentials},
		{key: 51, min: 0, max: 0, handle: handleAlterUserScramCredentials},
	}
}

func handleDescribeUserScramCredentials(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if !c.adminAllowed(kmsg.ACLOperationDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return done(resp), nil
	}
	users := c.s.b.Users()
	names := make([]string, 0, len(r.Users))
	for _, u := range r.Users {
		names = append(names, u.Name)
	}
	all := len(names) == 0
	hide := c.hidesTenants()
	if all {
		for _, n := range users.Names() {
			if !hide || !c.foreignUser(n) {
				names = append(names, n)
			}
		}
	}
	count := map[string]int{}
	for _, n := range names {
		count[n]++
	}
	answered := map[string]bool{}
	for _, n := range names {
		if answered[n] {
			continue
		}
		answered[n] = true
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User = n
		switch {
		case count[n] > 1:
			res.ErrorCode = kerr.DuplicateResource.Code
			res.ErrorMessage = kmsg.StringPtr("Cannot describe SCRAM credentials for the same user twice in a single request")
		case !users.Exists(n) || hide && c.foreignUser(n): // a tenant's user is not the default tenant's (tenants.go)
			res.ErrorCode = kerr.ResourceNotFound.Code
			res.ErrorMessage = kmsg.StringPtr("Attempt to describe a user credential that does not exist")
		default:
			for _, cr := range users.Mechanisms(n) {
				info := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
				info.Mechanism, info.Iterations = int8(cr.Mechanism), cr.Iterations
				res.CredentialInfos = append(res.CredentialInfos, info)
			}
		}
		resp.Results = append(resp.Results, res)
	}
	return done(resp), nil
}

func handleAlterUserScramCredentials(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	type alteration struct {
		cmd fsm.AlterScramCredentials
		p   problem
	}
	var order []string
	byUser := map[string]*alteration{}
	get := func(name string) *alteration {
		a := byUser[name]
		if a == nil {
			a = &alteration{cmd: fsm.AlterScramCredentials{User: name}}
			byUser[name] = a
			order = append(order, name)
		}
		return a
	}
	seen := map[string]map[int8]bool{}
	named := func(a *alteration, name string, m int8) {
		if seen[name] == nil {
			seen[name] = map[int8]bool{}
		}
		if seen[name][m] && !a.p.failed() {
			a.p = newProblem(kerr.DuplicateResource, "A user credential cannot be altered twice in the same request")
		}
		seen[name][m] = true
	}
	for _, d := range r.Deletions {
		a := get(d.Name)
		named(a, d.Name, d.Mechanism)
		if a.p.failed() {
			continue
		}
		m := sasl.ScramMechanism(d.Mechanism)
		if !m.Valid() {
			a.p = newProblem(kerr.UnsupportedSaslMechanism, "Unknown SCRAM mechanism")
			continue
		}
		a.cmd.Deletions = append(a.cmd.Deletions, m)
	}
	for _, u := range r.Upsertions {
		a := get(u.Name)
		named(a, u.Name, u.Mechanism)
		if a.p.failed() {
			continue
		}
		m := sasl.ScramMechanism(u.Mechanism)
		switch {
		case !m.Valid():
			a.p = newProblem(kerr.UnsupportedSaslMechanism, "Unknown SCRAM mechanism")
		case len(u.Salt) == 0:
			a.p = newProblem(kerr.UnacceptableCredential, "Salt must not be empty")
		case len(u.SaltedPassword) == 0:
			a.p = newProblem(kerr.UnacceptableCredential, "Salted password must not be empty")
		case u.Iterations < sasl.MinIteration:
			a.p = newProblem(kerr.UnacceptableCredential, fmt.Sprintf("Too few iterations: %d (at least %d)", u.Iterations, sasl.MinIteration))
		case u.Iterations > sasl.MaxIteration:
			a.p = newProblem(kerr.UnacceptableCredential, fmt.Sprintf("Too many iterations: %d (at most %d)", u.Iterations, sasl.MaxIteration))
		default:
			a.cmd.Upserts = append(a.cmd.Upserts, sasl.CredentialFromSalted(m, slices.Clone(u.Salt), u.SaltedPassword, u.Iterations))
		}
	}
	var cmds []fsm.Command
	var slots []int
	mayManage := c.adminAllowed(kmsg.ACLOperationAlter)
	version := c.s.b.Upgrade().Version
	for _, name := range order {
		a := byUser[name]
		switch {
		case a.p.failed():
		case !mayManage:
			a.p = newProblem(kerr.ClusterAuthorizationFailed, "")
		case version < fsm.SecurityVersion:
			a.p = newProblem(kerr.UnsupportedVersion, fmt.Sprintf("users need app version %d; this chain runs %d (stele cluster upgrade)", fsm.SecurityVersion, version))
		default:
			a.p = checked(a.cmd)
		}
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User = name
		res.ErrorCode, res.ErrorMessage = a.p.code, a.p.message()
		resp.Results = append(resp.Results, res)
		if !a.p.failed() {
			cmds = append(cmds, a.cmd)
			slots = append(slots, len(resp.Results)-1)
		}
	}
	if len(cmds) == 0 {
		return done(resp), nil
	}
	return func() kmsg.Response {
		for i, o := range c.submit(0, cmds...) {
			res := &resp.Results[slots[i]]
			p := fromOutcome(o)
			res.ErrorCode, res.ErrorMessage = p.code, p.message()
		}
		return resp
	}, nil
}
