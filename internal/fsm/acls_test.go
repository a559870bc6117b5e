package fsm

import (
	"bytes"
	"testing"

	"github.com/stele-io/stele/internal/fsm/cluster"
)

func acl(rt int8, name string, pt int8, principal, host string, op, perm int8) ACLBinding {
	return ACLBinding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: principal, Host: host, Operation: op, Permission: perm}
}

// TestAuthorize: Kafka's authorizer semantics (Reference: Kafka's
// StandardAuthorizerData.authorize and AclAuthorizer): literal, wildcard
// and prefixed patterns; DENY over ALLOW; User:* and host *; DESCRIBE
// implied by READ, WRITE, DELETE, ALTER and DESCRIBE_CONFIGS by
// ALTER_CONFIGS; ALL; super users; no ACL for a resource decided by
// allow.everyone.if.no.acl.found. The ACLs survive a restart.
func TestAuthorize(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
	if err != nil {
		t.Fatal(err)
	}
	bindings := []ACLBinding{
		acl(ACLResourceTopic, "orders", ACLPatternLiteral, "User:alice", "*", ACLOpRead, ACLPermissionAllow),
		acl(ACLResourceTopic, "orders", ACLPatternLiteral, "User:bob", "*", ACLOpWrite, ACLPermissionAllow),
		acl(ACLResourceTopic, "orders", ACLPatternLiteral, "User:bob", "10.0.0.66", ACLOpAll, ACLPermissionDeny),
		acl(ACLResourceTopic, "logs-", ACLPatternPrefixed, "User:*", "*", ACLOpDescribe, ACLPermissionAllow),
		acl(ACLResourceTopic, "logs-secret", ACLPatternLiteral, "User:carol", "*", ACLOpDescribe, ACLPermissionDeny),
		acl(ACLResourceTopic, "*", ACLPatternLiteral, "User:auditor", "*", ACLOpDescribeConfigs, ACLPermissionAllow),
		acl(ACLResourceGroup, "billing", ACLPatternLiteral, "User:alice", "*", ACLOpAll, ACLPermissionAllow),
		acl(ACLResourceCluster, ClusterResourceName, ACLPatternLiteral, "User:ops", "*", ACLOpAlterConfigs, ACLPermissionAllow),
	}
	var blocks []block
	for i, b := range bindings {
		blocks = append(blocks, block{time: t0 + int64(i), txs: [][]byte{tx(i+1, CreateACL{ACL: b})}})
	}
	blocks = append(blocks,
		block{time: t0 + 100, txs: [][]byte{tx(100, DeleteACLs{ACLs: bindings[2:3]})}},
		block{time: t0 + 101, txs: [][]byte{tx(101, CreateACL{ACL: bindings[2]})}})
	n := len(bindings)
	applyRange(t, f, blocks, 1, n)
	check := func(a *ACLs) {
		t.Helper()
		for _, c := range []struct {
			principal, host string
			op, rt          int8
			name            string
			super, none     bool
			want            bool
		}{
			{"User:alice", "10.0.0.1", ACLOpRead, ACLResourceTopic, "orders", false, false, true},
			{"User:alice", "10.0.0.1", ACLOpDescribe, ACLResourceTopic, "orders", false, false, true}, // implied by READ
			{"User:alice", "10.0.0.1", ACLOpWrite, ACLResourceTopic, "orders", false, false, false},
			{"User:bob", "10.0.0.1", ACLOpWrite, ACLResourceTopic, "orders", false, false, true},
			{"User:bob", "10.0.0.66", ACLOpWrite, ACLResourceTopic, "orders", false, false, false},  // DENY ALL from that host
			{"User:mallory", "10.0.0.1", ACLOpRead, ACLResourceTopic, "orders", false, true, false}, // ACLs exist: allow-if-none does not apply
			{"User:mallory", "10.0.0.1", ACLOpDescribe, ACLResourceTopic, "logs-app", false, false, true},
			{"User:mallory", "10.0.0.1", ACLOpRead, ACLResourceTopic, "logs-app", false, false, false},
			{"User:carol", "10.0.0.1", ACLOpDescribe, ACLResourceTopic, "logs-secret", false, false, false}, // literal DENY over prefixed ALLOW
			{"User:auditor", "10.0.0.1", ACLOpDescribeConfigs, ACLResourceTopic, "anything", false, false, true},
			{"User:alice", "10.0.0.1", ACLOpDelete, ACLResourceGroup, "billing", false, false, true},
			{"User:ops", "10.0.0.1", ACLOpDescribeConfigs, ACLResourceCluster, ClusterResourceName, false, false, true}, // implied by ALTER_CONFIGS
			{"User:ops", "10.0.0.1", ACLOpAlter, ACLResourceCluster, ClusterResourceName, false, false, false},
			{"User:x", "10.0.0.1", ACLOpRead, ACLResourceTopic, "unlisted", false, true, false}, // the literal * applies to every topic
			{"User:x", "10.0.0.1", ACLOpRead, ACLResourceGroup, "unlisted", false, false, false},
			{"User:x", "10.0.0.1", ACLOpRead, ACLResourceGroup, "unlisted", false, true, true},
			{"User:x", "10.0.0.1", ACLOpDelete, ACLResourceTopic, "orders", true, false, true}, // super user
		} {
			got := a.Authorize(AuthorizeRequest{Principal: c.principal, Host: c.host, Operation: c.op, ResourceType: c.rt, ResourceName: c.name, SuperUser: c.super, AllowIfNoACL: c.none})
			if got != c.want {
				t.Errorf("%s from %s, op %d on %d %q (super %v, allow if none %v): %v, want %v", c.principal, c.host, c.op, c.rt, c.name, c.super, c.none, got, c.want)
			}
		}
		name := "logs-app"
		if m := a.Match(ACLFilter{ResourceType: ACLResourceTopic, ResourceName: &name, PatternType: ACLPatternMatch, Operation: ACLOpAny, Permission: ACLPermissionAny}); len(m) != 2 {
			t.Errorf("MATCH logs-app: %+v, want the prefixed pattern and the literal *", m)
		}
		if m := a.Match(ACLFilter{ResourceType: ACLResourceAny, PatternType: ACLPatternAny, Operation: ACLOpAny, Permission: ACLPermissionAny}); len(m) != len(bindings) {
			t.Errorf("match all: %d, want %d", len(m), len(bindings))
		}
	}
	check(f.ACLs())
	applyRange(t, f, blocks, n+1, n+1)
	if !f.ACLs().Authorize(AuthorizeRequest{Principal: "User:bob", Host: "10.0.0.66", Operation: ACLOpWrite, ResourceType: ACLResourceTopic, ResourceName: "orders"}) {
		t.Error("the deleted DENY still applies")
	}
	applyRange(t, f, blocks, n+2, n+2)
	_, hash := f.Info()
	f.Close()
	g, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	check(g.ACLs())
	if _, h := g.Info(); !bytes.Equal(h, hash) {
		t.Fatal("the app hash changed across a restart")
	}
}
