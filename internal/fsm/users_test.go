package fsm

import (
	"bytes"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/security"
	"github.com/stele-io/stele/internal/sasl"
)

// TestUsers: credentials set, replaced and deleted with Kafka's codes
// (Reference: Kafka's ScramControlManager and
// ControllerConfigurationValidator), all or nothing per user, read back
// after a restart, and the leaf gone with the user's last credential.
func TestUsers(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
	if err != nil {
		t.Fatal(err)
	}
	alice, alice2 := goldenCredentials("alice", "pw"), goldenCredentials("alice", "pw2")
	bad := alice[1]
	bad.StoredKey = bad.StoredKey[:10]
	steps := []struct {
		cmd  AlterScramCredentials
		code int16
	}{
		{AlterScramCredentials{User: "alice", Upserts: alice}, 0},
		{AlterScramCredentials{User: "", Upserts: alice}, kerr.UnacceptableCredential.Code},
		{AlterScramCredentials{User: "bob"}, kerr.InvalidRequest.Code},
		{AlterScramCredentials{User: "bob", Upserts: []sasl.Credential{{Mechanism: 7}}}, kerr.UnsupportedSaslMechanism.Code},
		{AlterScramCredentials{User: "bob", Upserts: alice[:1], Deletions: []sasl.ScramMechanism{sasl.SHA256}}, kerr.DuplicateResource.Code},
		{AlterScramCredentials{User: "bob", Upserts: []sasl.Credential{bad}}, kerr.UnacceptableCredential.Code},
		// A deletion that fails refuses the upsert beside it.
		{AlterScramCredentials{User: "alice", Upserts: alice2[1:], Deletions: []sasl.ScramMechanism{sasl.SHA256, 2}}, kerr.DuplicateResource.Code},
		{AlterScramCredentials{User: "carol", Upserts: alice2[1:], Deletions: []sasl.ScramMechanism{sasl.SHA256}}, kerr.ResourceNotFound.Code},
		{AlterScramCredentials{User: "alice", Upserts: alice2[1:]}, 0},
		{AlterScramCredentials{User: "alice", IfAbsent: true, Upserts: alice2[:1]}, kerr.DuplicateResource.Code},
		{AlterScramCredentials{User: "dave", Upserts: alice[:1]}, 0},
		{AlterScramCredentials{User: "dave", Deletions: []sasl.ScramMechanism{sasl.SHA256}}, 0},
	}
	var blocks []block
	for i, s := range steps {
		blocks = append(blocks, block{time: t0 + int64(i), txs: [][]byte{tx(i+1, s.cmd)}})
	}
	for i, out := range applyOutcomes(t, f, blocks) {
		if r := out.Txs[0].Results[0]; r.Code != steps[i].code {
			t.Errorf("step %d: code %d (%s), want %d", i, r.Code, r.Message, steps[i].code)
		}
	}
	check := func(f *FSM, when string) {
		t.Helper()
		u := f.Users()
		if !slices.Equal(u.Names(), []string{"alice"}) || !u.Exists("alice") || u.Exists("dave") {
			t.Fatalf("%s: users %v", when, u.Names())
		}
		c, ok := u.Credential("alice", sasl.SHA512)
		if !ok || !c.Verify([]byte("pw2")) {
			t.Fatalf("%s: alice's SCRAM-SHA-512 is not the replaced one", when)
		}
		if c, ok := u.Credential("alice", sasl.SHA256); !ok || !c.Verify([]byte("pw")) {
			t.Fatalf("%s: alice's SCRAM-SHA-256 changed", when)
		}
	}
	check(f, "applied")
	if _, ok, _ := f.Store.Get(security.UserKey("dave")); ok {
		t.Fatal("a user with no credential left is still stored")
	}
	_, hash := f.Info()
	f.Close()
	g, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	check(g, "reopened")
	if _, h := g.Info(); !bytes.Equal(h, hash) {
		t.Fatal("the app hash changed across a restart")
	}
}

// TestUsersNeedVersion3: a chain at version 2 refuses users, as a binary
// that predates them would.
func TestUsersNeedVersion3(t *testing.T) {
	f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := applyOutcomes(t, f, []block{{time: t0, txs: [][]byte{tx(1, AlterScramCredentials{User: "alice", Upserts: goldenCredentials("alice", "pw")})}}})
	if r := out[0].Txs[0].Results[0]; r.Code != kerr.UnsupportedVersion.Code || f.Users().Exists("alice") {
		t.Fatalf("code %d (%s); users %v", r.Code, r.Message, f.Users().Names())
	}
}

// TestUsersAfterUpgradeFromVersion1: a chain at app version 1 upgrades to
// 3 at once, and from the upgrade's height takes users.
func TestUsersAfterUpgradeFromVersion1(t *testing.T) {
	f, err := Open(goldenOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, vkeys := goldenValidators()
	user := AlterScramCredentials{User: "alice", Upserts: goldenCredentials("alice", "pw")}
	plan := cluster.UpgradePlan{Height: 2 + cluster.MinUpgradeDelay, Version: 3, Name: "users"}
	blocks := []block{{time: t0, txs: [][]byte{tx(1, upgradeVote(plan, vkeys[0], vkeys[1], vkeys[2])), tx(2, user)}}}
	for h := int64(2); h <= plan.Height; h++ {
		blocks = append(blocks, block{time: t0 + h, txs: [][]byte{tx(int(h)+10, Tick{})}})
	}
	blocks = append(blocks, block{time: t0 + 100, txs: [][]byte{tx(99, user)}})
	out := applyOutcomes(t, f, blocks)
	if r := out[0].Txs[1].Results[0]; r.Code != kerr.UnsupportedVersion.Code {
		t.Fatalf("a user under version 1: code %d (%s)", r.Code, r.Message)
	}
	if r := out[len(out)-1].Txs[0].Results[0]; r.Code != 0 || f.AppVersion() != 3 || !f.Users().Exists("alice") {
		t.Fatalf("after the upgrade to 3: code %d (%s), version %d", r.Code, r.Message, f.AppVersion())
	}
}

// TestGenesisUsers: the genesis users exist once the first block is
// applied, under the app hash (two state machines with them agree, one
// without differs), and not on a chain whose app version has no users.
func TestGenesisUsers(t *testing.T) {
	admin := []GenesisUser{{Name: "admin", Credentials: goldenCredentials("admin", "root")}}
	var hashes [][]byte
	for i, v := range []uint32{cluster.MaxAppVersion, cluster.MaxAppVersion, cluster.MaxAppVersion, 2} {
		users := admin
		if i == 2 {
			users = nil
		}
		f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: v, GenesisUsers: users})
		if err != nil {
			t.Fatal(err)
		}
		if f.Users().Exists("admin") {
			t.Fatal("a genesis user exists before the first block")
		}
		out := applyOutcomes(t, f, []block{{time: t0, txs: nil}})
		if got := f.Users().Exists("admin"); got != (v >= SecurityVersion && users != nil) {
			t.Fatalf("app version %d: admin exists %v after block 1", v, got)
		}
		hashes = append(hashes, out[0].AppHash)
		f.Close()
	}
	if !bytes.Equal(hashes[0], hashes[1]) || bytes.Equal(hashes[0], hashes[2]) {
		t.Fatalf("app hashes %x: two chains with the genesis user must agree, and differ from one without", hashes)
	}
}
