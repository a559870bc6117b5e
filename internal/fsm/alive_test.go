package fsm

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
)

// TestReplicaAlive (issue 19: leaders among the replicas that are caught
// up): from app version 10 a replica's signed statement that it applied
// the chain up to a height records it as signing at the block's time, in
// the liveness every broker derives from the chain, across a restart; a
// statement by a validator with power, for another chain, with another
// key, for a height not committed, too far behind, replayed (before or
// after a restart: the last height is authenticated state), or by a
// broker taken out is refused; a demoted genesis validator's is accepted
// with its genesis key; under version 9 the transaction fails whole, as
// on the binaries before version 10.
func TestReplicaAlive(t *testing.T) {
	vs, keys := testValidators(t, 4)
	open := directoryOpener(t, vs, keys, mapBatches{})
	dir := t.TempDir()
	f := open(dir, cluster.MaxAppVersion)
	all := signersOf(keys...)
	h := int64(0)
	block := func(cmds ...core.Command) core.BlockOutcome {
		h++
		b := core.Block{Height: h, TimeMs: h * 1000, Signers: all}
		for i, c := range cmds {
			b.Txs = append(b.Txs, tx(int(h)*10+i, c))
		}
		return applyCommit(t, f, b)
	}
	code := func(what string, c core.Command, want int16) {
		t.Helper()
		if got := block(c).Txs[0].Results[0]; got.Code != want {
			t.Fatalf("%s: code %d (%s), want %d", what, got.Code, got.Message, want)
		}
	}
	seed := sha256.Sum256([]byte("broker 4"))
	k4 := ed25519.NewKeyFromSeed(seed[:])
	e := BrokerEntry{NodeID: 4, Kafka: "127.0.0.1:19096", HTTP: "127.0.0.1:19196"}
	copy(e.PubKey[:], k4.Public().(ed25519.PublicKey))
	add := ChangeMembership{ChainID: membershipChain, Change: MembershipChange{Validator: e.Address(), Broker: e}}
	for _, k := range keys[:3] {
		add.Sigs = append(add.Sigs, SignMembership(membershipChain, add.Change, [20]byte(addressOf(k)), k))
	}
	code("adding broker 4", add, 0)
	lastOf := func(k ed25519.PrivateKey) Signer {
		t.Helper()
		signers, _ := f.Liveness()
		for _, s := range signers {
			if bytes.Equal(s.Address, addressOf(k)) {
				return s
			}
		}
		return Signer{}
	}
	if s := lastOf(k4); s.LastHeight != 0 {
		t.Fatalf("a replica that said nothing is signing: %+v", s)
	}

	stmt := SignAlive(membershipChain, 4, h, k4)
	code("broker 4 caught up", stmt, 0)
	if s := lastOf(k4); s.LastHeight != h-1 || s.LastTimeMs != h*1000 {
		t.Fatalf("broker 4 after its statement at height %d: %+v", h, s)
	}
	code("the statement replayed", stmt, kerr.InvalidRequest.Code)
	code("a height below its last", SignAlive(membershipChain, 4, h-2, k4), kerr.InvalidRequest.Code)
	code("a height not committed", SignAlive(membershipChain, 4, h+1, k4), kerr.InvalidRequest.Code)
	code("another chain", SignAlive("another", 4, h, k4), kerr.InvalidRequest.Code)
	code("another key", SignAlive(membershipChain, 4, h, keys[1]), kerr.ClusterAuthorizationFailed.Code)
	code("no such broker", SignAlive(membershipChain, 9, h, k4), kerr.InvalidRequest.Code)
	code("a validator", SignAlive(membershipChain, 0, h, keys[0]), kerr.InvalidRequest.Code)
	for h < cluster.MaxAliveLag+10 {
		block(Tick{})
	}
	code("too far behind", SignAlive(membershipChain, 4, h-cluster.MaxAliveLag, k4), kerr.InvalidRequest.Code)
	code("just within the lag", SignAlive(membershipChain, 4, h+1-cluster.MaxAliveLag, k4), 0)

	// A genesis validator demoted to a replica says so with its genesis key.
	demote := memberChange(1, keys[3], 0, keys[0], keys[1], keys[2])
	code("demoting broker 3", demote, 0)
	all = signersOf(keys[:3]...) // it signs no commit from two heights on
	block(Tick{})
	block(Tick{})
	at := h
	code("broker 3 caught up", SignAlive(membershipChain, 3, at, keys[3]), 0)
	if s := lastOf(keys[3]); s.LastHeight != at || s.LastTimeMs != h*1000 {
		t.Fatalf("broker 3 after its statement for height %d: %+v", at, s)
	}

	// Restarted, the record is the same.
	want := lastOf(k4)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = open(dir, cluster.MaxAppVersion)
	if s := lastOf(k4); s.LastHeight != want.LastHeight || s.LastTimeMs != want.LastTimeMs || s.LastHeight == 0 {
		t.Fatalf("after a restart broker 4 is %+v, was %+v", s, want)
	}
	code("its last statement replayed after a restart", SignAlive(membershipChain, 4, want.LastHeight, k4), kerr.InvalidRequest.Code)
	// Taken out of the cluster, it says nothing more.
	remove := ChangeMembership{ChainID: membershipChain, Change: MembershipChange{Epoch: 2, Validator: [20]byte(addressOf(k4)), Remove: true}}
	for _, k := range keys[:3] {
		remove.Sigs = append(remove.Sigs, SignMembership(membershipChain, remove.Change, [20]byte(addressOf(k)), k))
	}
	code("removing broker 4", remove, 0)
	code("a removed broker", SignAlive(membershipChain, 4, h, k4), kerr.PolicyViolation.Code)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	old := open(t.TempDir(), cluster.RotationVersion)
	defer old.Close()
	o := applyCommit(t, old, core.Block{Height: 1, TimeMs: 1000, Signers: all, Txs: [][]byte{tx(1, SignAlive(membershipChain, 3, 0, keys[3]))}})
	if o.Txs[0].Code != 1 || len(o.Txs[0].Results) != 0 || o.Txs[0].Data != nil {
		t.Fatalf("a statement under version 9: code %d, %d results, data %x (%s); want the binaries before version 10's failure", o.Txs[0].Code, len(o.Txs[0].Results), o.Txs[0].Data, o.Txs[0].Log)
	}
}
