package cli

import (
	"crypto/ed25519"
	"encoding/hex"
	"path/filepath"
	"testing"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
)

// TestClusterUpgradeSigns: --dir signs with every node's key, --key with
// the files given (each validator once), and every signature verifies
// against the genesis validators for the plan asked for.
func TestClusterUpgradeSigns(t *testing.T) {
	dir := t.TempDir()
	runOK(t, "cluster", "init", "--nodes", "4", "--dir", dir, "--base-port", "31000")
	genesis, _, err := cometbft.ReadGenesis(filepath.Join(dir, "node0", "cometbft"))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := cometbft.Validators(genesis)
	if err != nil {
		t.Fatal(err)
	}
	st := httpapi.UpgradeView{Height: 40, ChainID: genesis.ChainID, AppVersion: 1}
	key1 := filepath.Join(dir, "node1", "cometbft", "config", "priv_validator_key.json")
	for _, tc := range []struct {
		o    clusterUpgradeOptions
		want fsm.UpgradePlan
		sigs int
	}{
		{clusterUpgradeOptions{height: "+30", dir: dir, name: "r2"}, fsm.UpgradePlan{Height: 70, Version: 2, Name: "r2"}, 4},
		{clusterUpgradeOptions{height: "100", version: 3, keys: []string{key1, key1}}, fsm.UpgradePlan{Height: 100, Version: 3}, 1},
	} {
		req, err := tc.o.request(st)
		if err != nil {
			t.Fatal(err)
		}
		p := fsm.UpgradePlan{Height: req.Height, Version: req.Version, Name: req.Name}
		if req.ChainID != genesis.ChainID {
			t.Fatalf("%+v: votes for chain %q, want the broker's %q", tc.o, req.ChainID, genesis.ChainID)
		}
		if p != tc.want || len(req.Signatures) != tc.sigs {
			t.Fatalf("%+v: plan %+v with %d signatures, want %+v with %d", tc.o, p, len(req.Signatures), tc.want, tc.sigs)
		}
		for _, s := range req.Signatures {
			var addr [20]byte
			b, _ := hex.DecodeString(s.Validator)
			copy(addr[:], b)
			v, ok := vs.Lookup(addr)
			if !ok || !ed25519.Verify(v.PubKey, fsm.UpgradeStatement(genesis.ChainID, p), s.Signature) {
				t.Fatalf("signature by %s does not verify against the genesis validators", s.Validator)
			}
		}
	}
	for _, bad := range []clusterUpgradeOptions{{height: "soon", dir: dir}, {height: "+0", dir: dir}, {height: "50"}} {
		if _, err := bad.request(st); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}
