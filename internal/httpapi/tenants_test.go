package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/fsm"
)

// TestTenantsAPI (issue 18): a tenant created with quotas, refused when it
// exists, with a bad name or quota, or a body with fields it does not know;
// listed and described with its usage against its quotas (its share
// groups among its groups); its quotas
// changed; deleted with what it owned counted; then gone (404).
func TestTenantsAPI(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	do := func(method, path, body string, want int, out any) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, resp.StatusCode, data, want)
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, data)
			}
		}
	}
	var res TenantResult
	do("POST", "/v1/tenants", `{"name":"acme","quotas":{"topics":2,"partitions":4}}`, http.StatusCreated, &res)
	if res.Tenant != "acme" || res.Height <= 0 {
		t.Fatalf("created: %+v", res)
	}
	do("POST", "/v1/tenants", `{"name":"acme"}`, http.StatusConflict, nil)
	do("POST", "/v1/tenants", `{"name":"Acme"}`, http.StatusBadRequest, nil)
	do("POST", "/v1/tenants", `{"name":"globex","quotas":{"storage":1}}`, http.StatusBadRequest, nil)
	do("POST", "/v1/tenants", `{"name":"globex","quotas":{"topics":-1}}`, http.StatusBadRequest, nil)
	do("POST", "/v1/tenants", `{"name":"globex","owner":"x"}`, http.StatusBadRequest, nil)
	do("POST", "/v1/tenants", `{"name":"globex"}`, http.StatusCreated, nil)

	// acme uses a topic of 3 partitions; a second of 2 would pass its
	// partitions quota.
	if r, err := b.SubmitOne(context.Background(), fsm.CreateTopic{Name: "acme~orders", Partitions: 3, ReplicationFactor: -1}); err != nil || r.Code != 0 {
		t.Fatalf("tenant topic: %v %+v", err, r)
	}
	if r, _ := b.SubmitOne(context.Background(), fsm.CreateTopic{Name: "acme~more", Partitions: 2, ReplicationFactor: -1}); r.Code == 0 || !strings.Contains(r.Message, "partitions") {
		t.Fatalf("over the partitions quota: %+v", r)
	}
	var all []Tenant
	do("GET", "/v1/tenants", "", http.StatusOK, &all)
	if len(all) != 2 || all[0].Name != "acme" || all[1].Name != "globex" {
		t.Fatalf("tenants %+v", all)
	}
	var acme Tenant
	do("GET", "/v1/tenants/acme", "", http.StatusOK, &acme)
	if q := acme.Quotas["partitions"]; q.Limit == nil || *q.Limit != 4 || q.Used != 3 {
		t.Errorf("acme's partitions %+v", q)
	}
	if q := acme.Quotas["groups"]; q.Limit != nil || q.Used != 0 {
		t.Errorf("acme's groups %+v", q)
	}
	// A share group counts as a group (app version 16).
	if r, err := b.SubmitOne(context.Background(), fsm.SetShareGroupConfigs{Group: "acme~queue", Configs: []fsm.ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}); err != nil || r.Code != 0 {
		t.Fatalf("a share group: %v %+v", err, r)
	}
	do("GET", "/v1/tenants/acme", "", http.StatusOK, &acme)
	if q := acme.Quotas["groups"]; q.Used != 1 {
		t.Errorf("acme's groups with a share group %+v", q)
	}
	do("PUT", "/v1/tenants/acme/quotas", `{"set":{"groups":5},"remove":["partitions"]}`, http.StatusOK, nil)
	do("GET", "/v1/tenants/acme", "", http.StatusOK, &acme)
	if q := acme.Quotas["partitions"]; q.Limit != nil || q.Used != 3 {
		t.Errorf("acme's partitions after the change %+v", q)
	}
	if q := acme.Quotas["groups"]; q.Limit == nil || *q.Limit != 5 {
		t.Errorf("acme's groups after the change %+v", q)
	}
	do("PUT", "/v1/tenants/initech/quotas", `{"set":{"groups":5}}`, http.StatusNotFound, nil)
	do("PUT", "/v1/tenants/acme/quotas", `{}`, http.StatusBadRequest, nil)

	do("DELETE", "/v1/tenants/acme", "", http.StatusOK, &res)
	if res.Removed["topics"] != 1 || res.Removed["partitions"] != 3 || res.Removed["groups"] != 0 || res.Removed["share_groups"] != 1 {
		t.Errorf("deleted: %+v", res)
	}
	do("GET", "/v1/tenants/acme", "", http.StatusNotFound, nil)
	do("DELETE", "/v1/tenants/acme", "", http.StatusNotFound, nil)
	if b.View().Topic("acme~orders") != nil {
		t.Error("acme~orders outlived its tenant")
	}
}

// TestHTTPTenantUsers (docs/tenants.md): a tenant's user names its
// tenant's topics by their short names on the HTTP API, as its Kafka
// clients do, and reads them back so (an error message included); it
// reaches no other tenant's topic, no default tenant's, and none of the
// cluster's routes.
func TestHTTPTenantUsers(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	for _, c := range []fsm.Command{fsm.CreateTenant{Name: "acme"}, fsm.CreateTenant{Name: "globex"},
		fsm.CreateTopic{Name: "acme~t", Partitions: 1, ReplicationFactor: -1}, fsm.CreateTopic{Name: "globex~t", Partitions: 1, ReplicationFactor: -1}} { // t, the default tenant's, startBrokerAt made
		if r, err := b.SubmitOne(context.Background(), c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	addUser(t, b, "alice@acme", "alice-pw")
	addUser(t, b, "admin", "admin-pw")
	for _, c := range []fsm.Command{
		fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: fsm.ACLResourceTopic, ResourceName: "acme~", PatternType: fsm.ACLPatternPrefixed,
			Principal: "User:alice@acme", Host: "*", Operation: fsm.ACLOpAll, Permission: fsm.ACLPermissionAllow}},
		allow("User:alice@acme", fsm.ACLResourceTopic, "*", fsm.ACLOpAll), // the default tenant's * is never acme's way out
		allow("User:alice@acme", fsm.ACLResourceCluster, fsm.ClusterResourceName, fsm.ACLOpAll),
	} {
		if r, err := b.SubmitOne(context.Background(), c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg, Security: &Security{BasicOverPlaintext: true}}))
	defer srv.Close()
	do := func(method, path, user, pass, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	if code, body := do("POST", "/v1/topics/t/keys/k/events", "alice@acme", "alice-pw", `{"value":{"utf8":"acme~v"}}`); code != http.StatusCreated || strings.Contains(body, "acme~t") {
		t.Fatalf("alice appends to her t: %d %s", code, body)
	}
	code, body := do("GET", "/v1/topics/t/keys/k/events", "alice@acme", "alice-pw", "")
	if code != http.StatusOK || !strings.Contains(body, "acme~v") || !strings.Contains(body, `"topic":"t"`) {
		t.Fatalf("alice reads k of her t: %d %s (want her value as written)", code, body)
	}
	if code, body := do("GET", "/v1/topics/t/keys", "alice@acme", "alice-pw", ""); code != http.StatusOK || strings.Contains(body, "acme~") {
		t.Fatalf("alice lists her t's keys: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/topics/acme~t/keys", "admin", "admin-pw", ""); code != http.StatusOK || !strings.Contains(body, `"k"`) {
		t.Fatalf("the admin reads acme~t: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/topics/missing/keys/k/events", "alice@acme", "alice-pw", ""); code < 400 || strings.Contains(body, "acme~") {
		t.Errorf("alice reads a topic she has not: %d %s", code, body)
	}
	// globex~t, to alice, is a name in acme: no such topic.
	if code, body := do("GET", "/v1/topics/globex~t/keys/k/events", "alice@acme", "alice-pw", ""); code != http.StatusNotFound || strings.Contains(body, "acme~") {
		t.Errorf("alice GET globex~t: %d %s, want 404 for a topic of acme's that does not exist", code, body)
	}
	// POST /v1/wait names her tenant's topic and group by their short
	// names, in the body and in the answer.
	for _, c := range []fsm.Command{
		fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: fsm.ACLResourceGroup, ResourceName: "acme~", PatternType: fsm.ACLPatternPrefixed,
			Principal: "User:alice@acme", Host: "*", Operation: fsm.ACLOpAll, Permission: fsm.ACLPermissionAllow}},
		fsm.OffsetCommit{Group: "acme~billing", Generation: -1, Topic: "acme~t", Partition: 0, Offset: 1, LeaderEpoch: -1},
	} {
		if r, err := b.SubmitOne(context.Background(), c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	code, body = do("POST", "/v1/wait", "alice@acme", "alice-pw", `{"topic":"t","partition":0,"offset":0,"group":"billing","timeout_ms":5000}`)
	if code != http.StatusOK || strings.Contains(body, "acme~") || !strings.Contains(body, `"group":"billing"`) || !strings.Contains(body, `"topic":"t"`) {
		t.Errorf("alice waits for her group billing: %d %s", code, body)
	}
	code, body = do("POST", "/v1/wait", "alice@acme", "alice-pw", `{"topic":"t","partition":0,"offset":1,"group":"billing","timeout_ms":1}`)
	if code != http.StatusGatewayTimeout || strings.Contains(body, "acme~") || !strings.Contains(body, `group \"billing\"`) {
		t.Errorf("alice's wait past the commit: %d %s, want 504 naming her group by its short name", code, body)
	}
	// The default tenant's group of that name is not hers.
	if code, body := do("POST", "/v1/wait", "admin", "admin-pw", `{"topic":"t","partition":0,"offset":0,"group":"billing","timeout_ms":1}`); code != http.StatusGatewayTimeout {
		t.Errorf("the default tenant's billing: %d %s, want 504 (it committed nothing)", code, body)
	}
	for _, path := range []string{"/v1/state/proof?key=m%2Ftopics%2Ft", "/v1/tenants"} {
		if code, _ := do("GET", path, "alice@acme", "alice-pw", ""); code != http.StatusForbidden {
			t.Errorf("alice GET %s: %d, want 403", path, code)
		}
	}
	if code, body := do("GET", "/v1/topics/t/keys", "admin", "admin-pw", ""); code != http.StatusOK || strings.Contains(body, `"k"`) {
		t.Errorf("the default tenant's t: %d %s, want none of alice's keys", code, body)
	}
}
