package tenants

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/security"
	"github.com/stele-io/stele/internal/fsm/shares"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// The tenants module's command gates.
//
// Before the check ("names before tenants"): under app versions below 4
// a topic name with a tenant (acme~orders) is as invalid as before tenants
// existed. The topics and groups modules' checks take such names now; a
// binary that predates tenants refused them in the check, first of all
// else that check refuses, with INVALID_TOPIC_EXCEPTION (or
// UNKNOWN_TOPIC_OR_PARTITION for an offset's topic). So under those
// versions this gate runs the checks as they were (CheckTopicCommandStrict,
// CheckGroupCommandStrict, and SignedAdmin's with them:
// security.CheckSignedAdminStrict) and answers what they answer: brokers
// of the two releases give every command the same result while a cluster
// upgrades, even one a Byzantine broker made up. A produce is checked by
// its apply, which finds no such topic under those versions, as before.
// Under app version 4 the gate does the same for what version 5 adds: a
// tenant command naming the quota keys it adds (Version5), an ACL on a
// tenant's own CLUSTER resource (acme~kafka-cluster: Version5), signed
// or not, is refused as version 4's binaries refuse it in its check.
//
// Its produce check (rank 30 of the topics' produce checks): a produce that
// would take a tenant past its stored_bytes is refused whole, with
// POLICY_VIOLATION, nothing written (storedBytesQuota).
//
// After the check ("tenants' names and quotas"), from app version 4: a
// topic is created only in a tenant that exists, and nothing takes a
// tenant past its quota of topics, partitions or groups (POLICY_VIOLATION,
// whose message names the quota). A group is counted when a command would
// create it: JoinGroup, a consumer group's first heartbeat (KIP-848), an
// offset commit from outside a generation, and from app version 6 a
// transaction's offset for a group that does not exist (which its commit
// would create; such pending groups count as the tenant's). Under version
// 5 and below a transaction's commit that adds offsets of a group that
// does not exist creates it past the quota, as those binaries do. From app version 5 an OffsetDelete of a
// tenant's group is refused (GROUP_SUBSCRIBED_TO_TOPIC) when its classic
// consumers subscribe to the topic by its short name.

func registerGates(r *core.Registry, admin *security.AdminGates, h *topics.TopicHooks) {
	// Once a produce's retries are known (topics' produce checks), before
	// anything is written: its new batches must fit the tenant's stored
	// bytes.
	h.ProduceChecks.Register(30, "tenant's stored bytes", ModTenants, func(tm *topics.Topics, pr *topics.Producing) (core.Result, func()) {
		return tenantsOf(tm.Machine).storedBytesQuota(pr), nil
	})
	r.RegisterCommandGate(core.CommandGate{Rank: 5, Name: "names before tenants", Module: ModTenants, BeforeCheck: true,
		Run: func(m *core.Machine, c core.Command) (core.Result, bool) {
			v := tenantsOf(m).cluster.Version
			if v >= Version5 {
				return core.Result{}, true
			}
			if v >= TenantsVersion {
				var res core.Result
				if s, ok := c.(security.SignedAdmin); ok {
					res = security.CheckSignedAdminWith(r, admin, s, func(inner core.Command) core.Result {
						if res := checkV4(inner); res.Code != 0 {
							return res
						}
						return r.CheckCommand(inner)
					})
				} else {
					res = checkV4(c)
				}
				return res, res.Code == 0
			}
			var res core.Result
			if s, ok := c.(security.SignedAdmin); ok {
				res = security.CheckSignedAdminStrict(r, admin, s)
			} else if res = topics.CheckTopicCommandStrict(c); res.Code == 0 {
				res = groups.CheckGroupCommandStrict(c)
			}
			return res, res.Code == 0
		}})
	r.RegisterCommandGate(core.CommandGate{Rank: 20, Name: "tenants' names and quotas", Module: ModTenants,
		Run: func(m *core.Machine, c core.Command) (core.Result, bool) { return tenantsOf(m).gate(c) }})
}

// checkV4 is the part of c's check app version 4's binaries did more
// strictly: a tenant command's quota keys, an ACL's CLUSTER resource name
// (a tenant's own cluster resource is version 5's).
func checkV4(c core.Command) core.Result {
	var acls []security.ACLBinding
	switch c := c.(type) {
	case CreateTenant, DeleteTenant, AlterTenantQuotas:
		return checkTenantCommandKeys(c, quotaKeysV4)
	case security.CreateACL:
		acls = []security.ACLBinding{c.ACL}
	case security.DeleteACLs:
		acls = c.ACLs
	}
	for _, b := range acls {
		if err := security.CheckACLV4(b); err != nil {
			return core.Fail(kerr.InvalidRequest.Code, err.Error())
		}
	}
	return core.Result{}
}

// gate is the gate after the check.
func (f *Tenants) gate(c core.Command) (core.Result, bool) {
	switch c := c.(type) {
	case topics.CreateTopic:
		tenant, _ := core.SplitTenant(c.Name)
		if tenant == "" {
			return core.Result{}, true
		}
		t := f.byName[tenant]
		if t == nil || f.cluster.Version < TenantsVersion {
			return core.Fail(kerr.InvalidTopicException.Code, fmt.Sprintf("topic %s names tenant %s, which does not exist", c.Name, tenant)), false
		}
		return f.topicQuotas(t, 1, int64(c.Partitions))
	case topics.CreatePartitions:
		tenant, _ := core.SplitTenant(c.Name)
		t := f.byName[tenant]
		top := f.topics.ByName[c.Name]
		if t == nil || top == nil || int(c.Count) <= len(top.Partitions) {
			return core.Result{}, true // the apply answers
		}
		return f.topicQuotas(t, 0, int64(int(c.Count)-len(top.Partitions)))
	case groups.JoinGroup:
		return f.groupQuota(c.Group)
	case groups.ConsumerGroupHeartbeat:
		return f.groupQuota(c.Group)
	case groups.OffsetCommit:
		return f.groupQuota(c.Group)
	case shares.ShareGroupHeartbeat, shares.SetShareGroupConfigs, shares.AlterShareOffsets:
		// Each may create a share group.
		if f.cluster.Version >= ShareGroupsQuotaVersion {
			return f.groupQuota(shares.GroupOf(c))
		}
	case producers.TxnOffsetCommit:
		if f.cluster.Version >= Version6 {
			return f.groupQuota(c.Group)
		}
	case groups.OffsetDelete:
		// A tenant's classic consumers subscribe to its topics by their
		// short names: OffsetDelete's check that the group does not
		// subscribe to the topic compares those (app version 5).
		tenant, local := core.SplitTenant(c.Topic)
		if gt, _ := core.SplitTenant(c.Group); tenant != "" && gt == tenant && f.cluster.Version >= Version5 && f.groups.ClassicSubscribed(c.Group, local) {
			return core.Fail(kerr.GroupSubscribedToTopic.Code, fmt.Sprintf("group %q is subscribed to %s", c.Group, c.Topic)), false
		}
	}
	return core.Result{}, true
}

// topicQuotas refuses topics more topics and partitions more partitions in
// tenant t when they would take it past a quota.
func (f *Tenants) topicQuotas(t *Tenant, topicsAdded, partitionsAdded int64) (core.Result, bool) {
	qt, hasT := t.Quotas[QuotaTopics]
	qp, hasP := t.Quotas[QuotaPartitions]
	if !hasT && !hasP {
		return core.Result{}, true
	}
	ntopics, nparts := f.topics.TenantUsage(t.Name)
	if hasT && topicsAdded > 0 && ntopics+topicsAdded > qt {
		return overQuota(t.Name, QuotaTopics, qt, ntopics), false
	}
	if hasP && nparts+partitionsAdded > qp {
		return overQuota(t.Name, QuotaPartitions, qp, nparts), false
	}
	return core.Result{}, true
}

// groupQuota refuses a command that would create group in a tenant at its
// quota of groups. From app version 6 a group that a transaction's offsets
// will create when it commits (TxnOffsetCommit of a group that does not
// exist) counts as the tenant's already, and such an offset is refused
// like any command that would create a group past the quota, so a
// transaction's commit never takes a tenant past it. From app version 16
// (ShareGroupsQuotaVersion) the tenant's share groups count too, and a
// command that would create a share group is refused the same way.
func (f *Tenants) groupQuota(group string) (core.Result, bool) {
	tenant, _ := core.SplitTenant(group)
	t := f.byName[tenant]
	shareQuota := f.cluster.Version >= ShareGroupsQuotaVersion
	if t == nil || f.groups.GroupsByName[group] != nil || (shareQuota && f.shares.IsShareGroup(group)) {
		return core.Result{}, true
	}
	q, ok := t.Quotas[QuotaGroups]
	if !ok {
		return core.Result{}, true
	}
	pre := tenant + string(core.TenantSep)
	var n int64
	for name := range f.groups.GroupsByName {
		if strings.HasPrefix(name, pre) {
			n++
		}
	}
	if f.cluster.Version >= Version6 {
		pending := f.pendingGroups(pre)
		if pending[group] {
			return core.Result{}, true // counted already
		}
		n += int64(len(pending))
	}
	if shareQuota {
		n += f.shares.TenantGroups(tenant)
	}
	if n+1 > q {
		return overQuota(tenant, QuotaGroups, q, n), false
	}
	return core.Result{}, true
}

// pendingGroups are the groups whose names start with pre that do not
// exist and that an open transaction's offsets will create when it
// commits.
func (f *Tenants) pendingGroups(pre string) map[string]bool {
	out := map[string]bool{}
	for _, t := range f.txns.Txns { // a set: the order does not matter
		for g := range t.Offsets {
			if strings.HasPrefix(g, pre) && f.groups.GroupsByName[g] == nil {
				out[g] = true
			}
		}
	}
	return out
}

// storedBytesQuota refuses a produce whose new batches would take its
// topic's tenant past its quota of stored bytes: the bytes of all the
// tenant's partition logs, the same on every broker (topics.
// TenantStoredBytes). A retry of a batch written before adds nothing.
func (f *Tenants) storedBytesQuota(pr *topics.Producing) core.Result {
	tenant, _ := core.SplitTenant(pr.T.Name)
	t := f.byName[tenant]
	if t == nil {
		return core.Result{}
	}
	q, ok := t.Quotas[QuotaStoredBytes]
	if !ok {
		return core.Result{}
	}
	var adding int64
	for i, b := range pr.Batches {
		if !pr.Dup[i] {
			adding += int64(len(b))
		}
	}
	if adding == 0 {
		return core.Result{}
	}
	used, err := f.topics.TenantStoredBytes(tenant)
	if err != nil {
		return f.LocalFault("counting the stored bytes of tenant %s: %w", tenant, err)
	}
	if used+adding > q {
		return overQuota(tenant, QuotaStoredBytes, q, used)
	}
	return core.Result{}
}

func overQuota(tenant, key string, quota, used int64) core.Result {
	return core.Fail(kerr.PolicyViolation.Code, fmt.Sprintf("tenant %s's quota of %s (%d) would be exceeded: %d in use (docs/tenants.md#quotas)", tenant, key, quota, used))
}
