package fsm

import (
	"crypto/ed25519"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/pkg/proof"
)

// signAdmin wraps c, signed by s for chain with seq.
func (s signer) signAdmin(chain string, seq uint64, c core.Command) SignedAdmin {
	b := EncodeCommand(c)
	return SignedAdmin{Principal: s.name, Seq: seq, Command: b,
		Signature: ed25519.Sign(s.priv, proof.AdminMessage(chain, s.name, seq, b))}
}

// TestSignedAdmin: under stele.admin.signed=true a gated command applies
// only signed by a registered principal the ACLs in the state allow, once
// per sequence and for this chain; the setting changes only by a signed
// command (on and off), and an unsigned change of it is refused even when
// it is off; a member's commit is not gated, a commit from outside the
// group's generation is; a command that is not administration is never
// signed. Restarted, the state machine keeps the setting and the spent
// sequences.
func TestSignedAdmin(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion, ChainID: testChainID}
	f, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	admin, alice := newSigner("admin", 1), newSigner("alice", 2)
	on := cluster.AlterBrokerConfigs{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.AdminSignedConfig, Value: "true"}}}
	off := cluster.AlterBrokerConfigs{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpDelete, Name: cluster.AdminSignedConfig}}}
	wipe := cluster.AlterBrokerConfigs{Incremental: false}
	delOrders := topics.DeleteTopic{Name: "orders"}
	adminACL := func(rt int8, name string) CreateACL {
		return CreateACL{ACL: acl(rt, name, ACLPatternLiteral, "User:admin", "*", ACLOpAll, ACLPermissionAllow)}
	}
	forged := admin.signAdmin(testChainID, 9, topics.DeleteTopic{Name: "keep"})
	forged.Command = EncodeCommand(delOrders) // the signature is of another command
	commit := groups.OffsetCommit{Group: "g", Generation: -1, Topic: "keep", Partition: 0, Offset: 1, LeaderEpoch: -1}
	steps := []struct {
		name string
		cmd  core.Command
		code int16
	}{
		{"create orders", topics.CreateTopic{Name: "orders", Partitions: 1, ReplicationFactor: 1}, 0},
		{"create keep", topics.CreateTopic{Name: "keep", Partitions: 1, ReplicationFactor: 1}, 0},
		{"register admin", admin.register(nil), 0},
		{"register alice", alice.register(nil), 0},
		{"enable unsigned", on, kerr.PolicyViolation.Code},
		{"enable signed, no ACL", admin.signAdmin(testChainID, 1, on), kerr.ClusterAuthorizationFailed.Code},
		{"admin's cluster ACL", adminACL(ACLResourceCluster, ClusterResourceName), 0},
		{"admin's topic ACL", adminACL(ACLResourceTopic, ACLWildcard), 0},
		{"enable signed", admin.signAdmin(testChainID, 2, on), 0},
		{"delete unsigned", delOrders, kerr.PolicyViolation.Code},
		{"delete signed by alice, no ACL", alice.signAdmin(testChainID, 1, delOrders), kerr.TopicAuthorizationFailed.Code},
		{"delete, signature of another command", forged, kerr.SaslAuthenticationFailed.Code},
		{"delete signed for another chain", admin.signAdmin("other-chain", 3, delOrders), kerr.SaslAuthenticationFailed.Code},
		{"delete signed by an unknown principal", newSigner("mallory", 3).signAdmin(testChainID, 1, delOrders), kerr.SaslAuthenticationFailed.Code},
		{"delete signed", admin.signAdmin(testChainID, 4, delOrders), 0},
		{"create orders again", topics.CreateTopic{Name: "orders", Partitions: 1, ReplicationFactor: 1}, 0},
		{"delete replayed", admin.signAdmin(testChainID, 4, delOrders), kerr.SaslAuthenticationFailed.Code},
		{"ACL unsigned", adminACL(ACLResourceGroup, "g"), kerr.PolicyViolation.Code},
		{"commit from outside the group unsigned", commit, kerr.PolicyViolation.Code},
		{"records deleted unsigned", topics.DeleteRecords{Topic: "keep", Partition: 0, Offset: -1}, kerr.PolicyViolation.Code},
		{"a produce signed", admin.signAdmin(testChainID, 5, topics.Produce{Topic: "keep"}), kerr.InvalidRequest.Code},
		{"a member's commit signed", admin.signAdmin(testChainID, 6, groups.OffsetCommit{Group: "g", Generation: 3, Topic: "keep"}), kerr.InvalidRequest.Code},
		{"disable unsigned", off, kerr.PolicyViolation.Code},
		{"wipe the default unsigned", wipe, kerr.PolicyViolation.Code},
		{"disable signed", admin.signAdmin(testChainID, 7, off), 0},
		{"enable unsigned again", on, kerr.PolicyViolation.Code},
		{"delete keep unsigned, off", topics.DeleteTopic{Name: "keep"}, 0},
	}
	var blocks []block
	for i, s := range steps {
		blocks = append(blocks, block{time: t0 + int64(i), txs: [][]byte{tx(i+1, s.cmd)}})
	}
	for i, out := range applyOutcomes(t, f, blocks) {
		if r := out.Txs[0].Results[0]; r.Code != steps[i].code {
			t.Errorf("%s: code %d (%s), want %d", steps[i].name, r.Code, r.Message, steps[i].code)
		}
	}
	if f.View().Topic("orders") == nil || f.View().Topic("keep") != nil {
		t.Fatal("orders must exist again and keep be deleted")
	}
	if f.BrokerConfigs().AdminSigned() {
		t.Fatal("the setting is still on")
	}
	_, hash := f.Info()
	f.Close()

	// Restarted: the spent sequence stays spent; the setting turned on
	// again holds.
	g, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, h := g.Info(); string(h) != string(hash) {
		t.Fatal("the app hash changed across a restart")
	}
	n := int64(len(steps))
	apply := func(c core.Command) core.Result {
		t.Helper()
		n++
		out, err := g.ApplyBlock(core.Block{Height: n, TimeMs: t0 + n, Txs: [][]byte{tx(int(n), c)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Commit(); err != nil {
			t.Fatal(err)
		}
		return out.Txs[0].Results[0]
	}
	if r := apply(admin.signAdmin(testChainID, 4, topics.DeleteTopic{Name: "orders"})); r.Code != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("a sequence spent before the restart: code %d (%s)", r.Code, r.Message)
	}
	if r := apply(admin.signAdmin(testChainID, 8, on)); r.Code != 0 {
		t.Fatalf("enable: %d (%s)", r.Code, r.Message)
	}
	if !g.BrokerConfigs().AdminSigned() {
		t.Fatal("the setting is not on")
	}
	if r := apply(topics.DeleteTopic{Name: "orders"}); r.Code != kerr.PolicyViolation.Code {
		t.Fatalf("unsigned delete after the restart: %d (%s)", r.Code, r.Message)
	}
	// The ACLs decide: a DENY for admin on orders beats its ALLOW on *.
	deny := CreateACL{ACL: acl(ACLResourceTopic, "orders", ACLPatternLiteral, "User:admin", "*", ACLOpDelete, ACLPermissionDeny)}
	if r := apply(admin.signAdmin(testChainID, 10, deny)); r.Code != 0 {
		t.Fatalf("deny: %d (%s)", r.Code, r.Message)
	}
	if r := apply(admin.signAdmin(testChainID, 11, topics.DeleteTopic{Name: "orders"})); r.Code != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("delete denied by an ACL: %d (%s)", r.Code, r.Message)
	}
	// An ACL for one host does not count: the apply knows no host.
	hostOnly := CreateACL{ACL: acl(ACLResourceGroup, "g", ACLPatternLiteral, "User:alice", "127.0.0.1", ACLOpAll, ACLPermissionAllow)}
	if r := apply(admin.signAdmin(testChainID, 12, hostOnly)); r.Code != 0 {
		t.Fatalf("host ACL: %d (%s)", r.Code, r.Message)
	}
	if r := apply(alice.signAdmin(testChainID, 2, groups.DeleteGroup{Group: "g"})); r.Code != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("an ACL for one host counted: %d (%s)", r.Code, r.Message)
	}
}

// TestSignedAdminCodec: a SignedAdmin round-trips, and its command decodes
// back; trailing bytes or an unknown kind do not.
func TestSignedAdminCodec(t *testing.T) {
	c := newSigner("admin", 1).signAdmin(testChainID, 42, topics.DeleteTopic{Name: "orders"})
	tx, err := DecodeTx(EncodeTx(core.Tx{Commands: []core.Command{c}}))
	if err != nil {
		t.Fatal(err)
	}
	got := tx.Commands[0].(SignedAdmin)
	inner, err := DecodeCommand(got.Command)
	if err != nil || inner.(topics.DeleteTopic).Name != "orders" || got.Seq != 42 || got.Principal != "admin" {
		t.Fatalf("%+v %+v %v", got, inner, err)
	}
	if _, err := DecodeCommand(append(got.Command, 0)); err == nil {
		t.Fatal("trailing bytes decoded")
	}
	if _, err := DecodeCommand([]byte{250}); err == nil {
		t.Fatal("an unknown kind decoded")
	}
	if _, err := DecodeCommand(nil); err == nil {
		t.Fatal("nothing decoded")
	}
}

// FuzzSignedAdmin: whatever a client posts to /v1/admin/signed, decoding
// its command and checking it never panics, and a command that decodes
// encodes to bytes that decode to the same command.
func FuzzSignedAdmin(f *testing.F) {
	s := newSigner("admin", 1)
	for _, c := range []core.Command{topics.DeleteTopic{Name: "orders"}, groups.OffsetCommit{Group: "g", Generation: -1, Topic: "t"},
		cluster.AlterBrokerConfigs{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.AdminSignedConfig, Value: "true"}}}} {
		f.Add(s.signAdmin(testChainID, 1, c).Command, s.signAdmin(testChainID, 1, c).Signature)
	}
	f.Add([]byte{30, 0}, []byte{})
	f.Fuzz(func(t *testing.T, cmd, sig []byte) {
		c := SignedAdmin{Principal: "admin", Seq: 1, Signature: sig, Command: cmd}
		CheckCommand(c)
		if d, err := DecodeCommand(cmd); err == nil {
			// Not always cmd itself (a uvarint may be written longer
			// than it needs), but stable from there on.
			b := EncodeCommand(d)
			d2, err := DecodeCommand(b)
			if err != nil {
				t.Fatalf("%x decodes to %+v, whose encoding %x does not decode: %v", cmd, d, b, err)
			}
			if got := EncodeCommand(d2); string(got) != string(b) {
				t.Fatalf("%x encodes as %x, then as %x", cmd, b, got)
			}
		}
	})
}
