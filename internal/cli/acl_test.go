package cli

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestACLBindings: stele acl add's flags make kafka-acls.sh's bindings:
// every resource × principal × host × operation, --producer and
// --consumer expanded as kafka-acls.sh expands them, and mistakes refused.
func TestACLBindings(t *testing.T) {
	a := aclFlags{allowPrincipals: []string{"User:alice", "User:bob"}, allowHosts: []string{"10.0.0.1", "10.0.0.2"},
		operations: []string{"read", "Describe"}, topics: []string{"orders"}, groups: []string{"billing"}, pattern: "prefixed"}
	bs, err := a.bindings()
	if err != nil || len(bs) != 2*2*2*2 {
		t.Fatalf("%d bindings, %v", len(bs), err)
	}
	if b := bs[0]; b.ResourcePatternType != kmsg.ACLResourcePatternTypePrefixed || b.PermissionType != kmsg.ACLPermissionTypeAllow || b.Host != "10.0.0.1" {
		t.Errorf("first binding %+v", b)
	}
	p := aclFlags{denyPrincipals: []string{"User:svc"}, producer: true, consumer: true, idempotent: true,
		topics: []string{"logs"}, groups: []string{"g"}, txnIDs: []string{"tx"}, pattern: "literal"}
	bs, err = p.bindings()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range bs {
		got = append(got, b.ResourceType.String()+":"+b.Operation.String()+":"+b.Host)
	}
	want := "TOPIC:WRITE:*,TOPIC:DESCRIBE:*,TOPIC:CREATE:*,TOPIC:READ:*,TOPIC:DESCRIBE:*,GROUP:READ:*,TRANSACTIONAL_ID:WRITE:*,TRANSACTIONAL_ID:DESCRIBE:*,CLUSTER:IDEMPOTENT_WRITE:*"
	if strings.Join(got, ",") != want || bs[0].PermissionType != kmsg.ACLPermissionTypeDeny {
		t.Errorf("--producer --consumer --idempotent: %s", strings.Join(got, ","))
	}
	for _, c := range []struct {
		f    aclFlags
		want string
	}{
		{aclFlags{operations: []string{"read"}, topics: []string{"t"}, pattern: "literal"}, "--allow-principal or --deny-principal"},
		{aclFlags{allowPrincipals: []string{"User:a"}, topics: []string{"t"}, pattern: "literal"}, "give --operation"},
		{aclFlags{allowPrincipals: []string{"User:a"}, operations: []string{"read"}, pattern: "literal"}, "name a resource"},
		{aclFlags{allowPrincipals: []string{"User:a"}, operations: []string{"fly"}, topics: []string{"t"}, pattern: "literal"}, `"fly"`},
		{aclFlags{allowPrincipals: []string{"User:a"}, operations: []string{"read"}, topics: []string{"t"}, pattern: "match"}, "literal or prefixed"},
		{aclFlags{allowPrincipals: []string{"User:a"}, consumer: true, topics: []string{"t"}, pattern: "literal"}, "--consumer needs --group"},
	} {
		if _, err := c.f.bindings(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.f, err, c.want)
		}
	}
}
