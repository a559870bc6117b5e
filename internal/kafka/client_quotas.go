package kafka

// DescribeClientQuotas: v0-1
// AlterClientQuotas: v0-1
// Behavior:
//  * Quotas per user and client id, named or default (Kafka's entity
//    types user and client-id), are replicated state (fsm/security's quotas.go):
//    an alteration is ordered like any command and answered once
//    committed, so every broker enforces the same limits from then on.
//  * Keys: producer_byte_rate, consumer_byte_rate, request_percentage and
//    controller_mutation_rate, with Kafka's checks (INVALID_REQUEST: an
//    unknown key or entity type, a value not above 0, a byte rate not a
//    whole number, a type named twice). The ip entity type, alone
//    (KIP-612), takes connection_creation_rate, a whole number of
//    connections a second per address or for the default, enforced by
//    the acceptor (accept.go).
//  * DescribeClientQuotas takes Kafka's filters: EXACT, DEFAULT and ANY per
//    entity type, strict or not.
//  * Authorization (acls.go): DESCRIBE_CONFIGS on the cluster to describe,
//    ALTER_CONFIGS to alter (CLUSTER_AUTHORIZATION_FAILED). A tenant's
//    administrator (those operations on its tenant's own cluster resource,
//    acls.go's adminAllowed) describes and alters the quotas of its
//    tenant's users only, by their short names (tenant_lens.go): an entity
//    with a user of the tenant, alone or with a client id; the default
//    user, client ids alone and addresses are the cluster's
//    (docs/tenants.md).
//  * Enforcement, on each broker for its own connections (throttle.go):
//    producer_byte_rate and consumer_byte_rate, measured over Kafka's 11
//    windows of 1 s per (user, client id) the quota applies to, answered
//    with throttle_time_ms and the connection muted that long (KIP-219),
//    as Kafka. controller_mutation_rate counts the partitions CreateTopics,
//    CreatePartitions and DeleteTopics create or delete (KIP-599): from
//    CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 a topic is
//    refused with THROTTLING_QUOTA_EXCEEDED while the rate is over the
//    quota (the answer carries the throttle; the connection is not
//    muted), before them it is taken and the answer throttled.
//    request_percentage counts each request's handling time, less its
//    waits, as a percentage of one thread (throttle.go), throttled and
//    muted as the byte rates are.

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func quotaRoutes() []route {
	return []route{
		{key: 48, min: 0, max: 1, handle: handleDescribeClientQuotas},
		{key: 49, min: 0, max: 1, handle: handleAlterClientQuotas},
	}
}

// Kafka's quota entity types.
const (
	quotaEntityUser     = "user"
	quotaEntityClientID = "client-id"
	quotaEntityIP       = "ip"
)

// ipQuotaOf turns a request's ip entity into the state machine's command
// (ok false: the entity names no ip).
func ipQuotaOf(types []string, names []*string) (fsm.AlterIPQuotas, bool, problem) {
	if !slices.Contains(types, quotaEntityIP) {
		return fsm.AlterIPQuotas{}, false, problem{}
	}
	if len(types) != 1 {
		return fsm.AlterIPQuotas{}, true, newProblem(kerr.InvalidRequest, "Invalid quota entity combination, IP entity should not be used with user/client ID entity.")
	}
	if names[0] == nil {
		return fsm.AlterIPQuotas{Default: true}, true, problem{}
	}
	ip, err := fsm.CanonicalQuotaIP(*names[0])
	if err != nil {
		return fsm.AlterIPQuotas{}, true, newProblem(kerr.InvalidRequest, err.Error())
	}
	return fsm.AlterIPQuotas{IP: ip}, true, problem{}
}

// quotaEntityOf turns a request's entity into the state machine's.
func quotaEntityOf(types []string, names []*string) (fsm.QuotaEntity, problem) {
	var e fsm.QuotaEntity
	for i, typ := range types {
		side := fsm.QuotaName{Set: true, Default: names[i] == nil}
		if names[i] != nil {
			side.Name = *names[i]
		}
		var dst *fsm.QuotaName
		switch typ {
		case quotaEntityUser:
			dst = &e.User
		case quotaEntityClientID:
			dst = &e.ClientID
		default:
			return e, newProblem(kerr.InvalidRequest, fmt.Sprintf("Unknown entity type %s", typ))
		}
		if dst.Set {
			return e, newProblem(kerr.InvalidRequest, fmt.Sprintf("Duplicate entity type %s", typ))
		}
		*dst = side
	}
	if err := fsm.CheckQuotaEntity(e); err != nil {
		return e, newProblem(kerr.InvalidRequest, err.Error())
	}
	return e, problem{}
}

func handleAlterClientQuotas(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.AlterClientQuotasRequest)
	resp := r.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	allowed := c.clusterAllowed(kmsg.ACLOperationAlterConfigs)
	tenantAdmin := !allowed && c.tenantNow() != "" && c.adminAllowed(kmsg.ACLOperationAlterConfigs)
	var cmds []fsm.Command
	var slots []int
	for _, entry := range r.Entries {
		res := kmsg.NewAlterClientQuotasResponseEntry()
		types, names := make([]string, len(entry.Entity)), make([]*string, len(entry.Entity))
		for i, en := range entry.Entity {
			types[i], names[i] = en.Type, en.Name
			re := kmsg.NewAlterClientQuotasResponseEntryEntity()
			re.Type, re.Name = en.Type, en.Name
			res.Entity = append(res.Entity, re)
		}
		var ops []fsm.QuotaOp
		for _, op := range entry.Ops {
			ops = append(ops, fsm.QuotaOp{Key: op.Key, Value: op.Value, Remove: op.Remove})
		}
		var cmd fsm.Command
		ipCmd, isIP, p := ipQuotaOf(types, names)
		if isIP {
			ipCmd.Ops = ops
			cmd = ipCmd
		} else {
			var e fsm.QuotaEntity
			e, p = quotaEntityOf(types, names)
			cmd = fsm.AlterClientQuotas{Entity: e, Ops: ops}
		}
		switch {
		case !allowed && !(tenantAdmin && !isIP && c.ownUserEntity(types, names)):
			p = newProblem(kerr.ClusterAuthorizationFailed, "")
		case p.failed():
		case c.s.b.Upgrade().Version < fsm.SecurityVersion:
			p = newProblem(kerr.UnsupportedVersion, "quotas need app version 3 (stele cluster upgrade)")
		default:
			p = checked(cmd)
		}
		res.ErrorCode, res.ErrorMessage = p.code, p.message()
		resp.Entries = append(resp.Entries, res)
		if !p.failed() && !r.ValidateOnly {
			cmds = append(cmds, cmd)
			slots = append(slots, len(resp.Entries)-1)
		}
	}
	if len(cmds) == 0 {
		return done(resp), nil
	}
	return func() kmsg.Response {
		for i, o := range c.submit(0, cmds...) {
			p := fromOutcome(o)
			resp.Entries[slots[i]].ErrorCode, resp.Entries[slots[i]].ErrorMessage = p.code, p.message()
		}
		return resp
	}, nil
}

func handleDescribeClientQuotas(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DescribeClientQuotasRequest)
	resp := r.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	// A tenant's administrator sees its tenant's users' quotas only.
	ownOnly := false
	if !c.clusterAllowed(kmsg.ACLOperationDescribeConfigs) {
		if c.tenantNow() == "" || !c.adminAllowed(kmsg.ACLOperationDescribeConfigs) {
			resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
			return done(resp), nil
		}
		ownOnly = true
	}
	seen := map[string]bool{}
	for _, comp := range r.Components {
		switch {
		case comp.EntityType != quotaEntityUser && comp.EntityType != quotaEntityClientID && comp.EntityType != quotaEntityIP:
			resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, kmsg.StringPtr("Unknown or unserved entity type "+comp.EntityType)
		case seen[comp.EntityType]:
			resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, kmsg.StringPtr("Duplicate entity type "+comp.EntityType)
		case comp.MatchType < 0 || comp.MatchType > 2 || comp.MatchType == 0 && comp.Match == nil:
			resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, kmsg.StringPtr("Invalid match for entity type "+comp.EntityType)
		}
		if resp.ErrorCode != 0 {
			return done(resp), nil
		}
		seen[comp.EntityType] = true
	}
	quotas := c.s.b.Quotas()
	hide := c.hidesTenants()
	for _, e := range quotas.Entities() {
		if hide && e.User.Set && !e.User.Default && c.foreignUser(e.User.Name) {
			continue // a tenant's user's (tenants.go)
		}
		if ownOnly && (!e.User.Set || e.User.Default) {
			continue // the cluster's
		}
		if !quotaEntityMatches(map[string]fsm.QuotaName{quotaEntityUser: e.User, quotaEntityClientID: e.ClientID}, r.Components, r.Strict) {
			continue
		}
		entry := kmsg.NewDescribeClientQuotasResponseEntry()
		for _, side := range []struct {
			typ string
			n   fsm.QuotaName
		}{{quotaEntityUser, e.User}, {quotaEntityClientID, e.ClientID}} {
			if !side.n.Set {
				continue
			}
			en := kmsg.NewDescribeClientQuotasResponseEntryEntity()
			en.Type = side.typ
			if !side.n.Default {
				en.Name = kmsg.StringPtr(side.n.Name)
			}
			entry.Entity = append(entry.Entity, en)
		}
		values := quotas.Of(e)
		for _, k := range fsm.QuotaKeys() {
			if v, ok := values[k]; ok {
				ev := kmsg.NewDescribeClientQuotasResponseEntryValue()
				ev.Key, ev.Value = k, v
				entry.Values = append(entry.Values, ev)
			}
		}
		resp.Entries = append(resp.Entries, entry)
	}
	for _, q := range c.s.b.IPQuotas().All() {
		if ownOnly {
			break
		}
		side := fsm.QuotaName{Set: true, Default: q.Default, Name: q.IP}
		if !quotaEntityMatches(map[string]fsm.QuotaName{quotaEntityIP: side}, r.Components, r.Strict) {
			continue
		}
		entry := kmsg.NewDescribeClientQuotasResponseEntry()
		en := kmsg.NewDescribeClientQuotasResponseEntryEntity()
		en.Type = quotaEntityIP
		if !q.Default {
			en.Name = kmsg.StringPtr(q.IP)
		}
		entry.Entity = append(entry.Entity, en)
		ev := kmsg.NewDescribeClientQuotasResponseEntryValue()
		ev.Key, ev.Value = fsm.QuotaConnectionCreationRate, q.Rate
		entry.Values = append(entry.Values, ev)
		resp.Entries = append(resp.Entries, entry)
	}
	return done(resp), nil
}

// ownUserEntity reports whether an entity names a user of c's tenant (as
// the state names it), alone or with a client id.
func (c *conn) ownUserEntity(types []string, names []*string) bool {
	own := false
	for i, typ := range types {
		if typ == quotaEntityUser {
			if names[i] == nil {
				return false // the default user is every tenant's
			}
			t, _ := fsm.SplitUser(*names[i])
			own = t != "" && t == c.tenantNow()
		}
	}
	return own
}

// quotaEntityMatches is Kafka's ClientQuotaFilter: every component must
// match its side (EXACT a name, DEFAULT the default, ANY any set side),
// and a strict filter admits no side it does not name.
func quotaEntityMatches(sides map[string]fsm.QuotaName, comps []kmsg.DescribeClientQuotasRequestComponent, strict bool) bool {
	named := map[string]bool{}
	for _, comp := range comps {
		side := sides[comp.EntityType]
		named[comp.EntityType] = true
		switch comp.MatchType {
		case 0: // EXACT
			match := *comp.Match
			if comp.EntityType == quotaEntityIP {
				if ip, err := fsm.CanonicalQuotaIP(match); err == nil {
					match = ip
				}
			}
			if !side.Set || side.Default || side.Name != match {
				return false
			}
		case 1: // DEFAULT
			if !side.Set || !side.Default {
				return false
			}
		default: // ANY
			if !side.Set {
				return false
			}
		}
	}
	if strict {
		for typ, side := range sides {
			if side.Set && !named[typ] {
				return false
			}
		}
	}
	return true
}
