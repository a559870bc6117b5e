package cometbft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cometbft/cometbft/types"
)

func readAll(t *testing.T, home string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, f := range []string{configFile, genesisFile, nodeKeyFile, privValKeyFile, privValState} {
		data, err := os.ReadFile(filepath.Join(home, f))
		if err != nil {
			t.Fatalf("Init did not write %s: %v", f, err)
		}
		out[f] = data
	}
	return out
}

func TestInitWritesASingleValidatorHomeOnce(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if err := Init(home, InitOptions{}); err != nil {
		t.Fatal(err)
	}
	first := readAll(t, home)
	doc, st, err := ReadGenesis(home)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.ChainID, "stele-") || len(doc.ChainID) != len("stele-")+8 {
		t.Errorf("chain ID %q, want stele-<8 hex digits>", doc.ChainID)
	}
	if len(doc.Validators) != 1 || doc.ConsensusParams.Block.MaxBytes != DefaultMaxBlockBytes || st.MaxTxBytes != DefaultMaxTxBytes {
		t.Errorf("genesis: %d validators, max_bytes %d, app max_tx_bytes %d", len(doc.Validators),
			doc.ConsensusParams.Block.MaxBytes, st.MaxTxBytes)
	}
	pv, err := loadFilePV(home)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pv.key.Address, doc.Validators[0].Address) {
		t.Error("the genesis validator is not this home's validator key")
	}
	if info, _ := os.Stat(filepath.Join(home, privValKeyFile)); info.Mode().Perm() != 0o600 {
		t.Errorf("validator key mode %v, want 0600", info.Mode().Perm())
	}

	// Idempotent: a second Init, even with other options, changes nothing.
	if err := Init(home, InitOptions{ChainID: "other", MaxTxBytes: 10}); err != nil {
		t.Fatal(err)
	}
	for f, data := range readAll(t, home) {
		if !bytes.Equal(data, first[f]) {
			t.Errorf("second Init rewrote %s", f)
		}
	}
}

func TestInitOptionsChecked(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	err := Init(home, InitOptions{ChainID: "c", MaxBlockBytes: 1 << 20, MaxTxBytes: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "cannot hold") {
		t.Errorf("a block too small for the largest tx: got %v", err)
	}
	if err := Init(home, InitOptions{ChainID: strings.Repeat("x", 51)}); err == nil {
		t.Error("Init accepted a 51-character chain ID")
	}
}

func TestInitKeysRefusesAKeyWithoutItsSignState(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if err := Init(home, InitOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(home, privValState)); err != nil {
		t.Fatal(err)
	}
	if _, err := InitKeys(home); err == nil || !strings.Contains(err.Error(), "double signing") {
		t.Errorf("InitKeys with the sign state gone: got %v", err)
	}
	if err := os.WriteFile(filepath.Join(home, privValKeyFile), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadFilePV(home); err == nil {
		t.Error("loadFilePV accepted a corrupt key file")
	}
}

func clusterConfigs(t *testing.T, n int) []Config {
	dir := t.TempDir()
	var cfgs []Config
	for i := range n {
		c := DefaultConfig(filepath.Join(dir, fmt.Sprintf("node%d", i)))
		c.P2PListen = freeP2P(t)
		c.CreateEmptyBlocksInterval = 0
		c.Moniker = fmt.Sprintf("node%d", i)
		cfgs = append(cfgs, c)
	}
	return cfgs
}

func TestInitClusterSharesOneGenesis(t *testing.T) {
	cfgs, err := InitCluster(clusterConfigs(t, 4), InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var genesis []byte
	ids := map[string]bool{}
	for i, c := range cfgs {
		data, err := os.ReadFile(filepath.Join(c.Home, genesisFile))
		if err != nil {
			t.Fatal(err)
		}
		if genesis == nil {
			genesis = data
		} else if !bytes.Equal(data, genesis) {
			t.Errorf("node %d has a different genesis", i)
		}
		if len(c.PersistentPeers) != 3 {
			t.Errorf("node %d has %d peers, want 3", i, len(c.PersistentPeers))
		}
		id, err := InitKeys(c.Home)
		if err != nil {
			t.Fatal(err)
		}
		ids[id.NodeID] = true
		for _, p := range c.PersistentPeers {
			if strings.HasPrefix(p, id.NodeID+"@") {
				t.Errorf("node %d lists itself as a peer", i)
			}
		}
		if err := c.Validate(); err != nil {
			t.Errorf("node %d config: %v", i, err)
		}
	}
	doc, err := types.GenesisDocFromJSON(genesis)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Validators) != 4 || len(ids) != 4 {
		t.Errorf("%d validators, %d distinct node IDs; want 4 and 4", len(doc.Validators), len(ids))
	}
	if _, err := InitCluster(cfgs, InitOptions{}); !errors.Is(err, ErrAlreadyInitialised) {
		t.Errorf("InitCluster over existing homes: got %v, want ErrAlreadyInitialised", err)
	}
	wild := clusterConfigs(t, 2)
	wild[1].P2PListen = "tcp://0.0.0.0:26656"
	if _, err := InitCluster(wild, InitOptions{}); err == nil || !strings.Contains(err.Error(), "wildcard") {
		t.Errorf("InitCluster with a wildcard listen address and no external address: got %v", err)
	}
}

// TestClusterOfFourCommitsTheSameBlocks runs the homes InitCluster wrote:
// four validators in this process agree on every transaction, in the same
// order, with the same app hash.
func TestClusterOfFourCommitsTheSameBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four nodes")
	}
	cfgs, err := InitCluster(clusterConfigs(t, 4), InitOptions{MaxTxBytes: 4096, MaxBlockBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	apps := make([]*diskApp, len(cfgs))
	orderers := make([]*Orderer, len(cfgs))
	for i, c := range cfgs {
		apps[i], _ = openDiskApp(filepath.Join(t.TempDir(), fmt.Sprintf("app%d.json", i)), func(int64) bool { return false })
		o, err := New(c, apps[i], testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Start(context.Background()); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		t.Cleanup(func() { _ = o.Stop() })
		orderers[i] = o
	}
	var want []string
	for i := range 12 {
		tx := fmt.Sprintf("tx-%02d", i)
		want = append(want, tx)
		// Spread submissions over the nodes; gossip brings them to the
		// proposer.
		if err := orderers[i%4].Submit(context.Background(), []byte(tx)); err != nil {
			t.Fatalf("Submit to node %d: %v", i%4, err)
		}
	}
	eventually(t, 30*time.Second, func() error {
		for i, a := range apps {
			if n := len(a.state().Txs); n != len(want) {
				return fmt.Errorf("node %d committed %d of %d txs", i, n, len(want))
			}
		}
		return nil
	})
	ref := apps[0].state()
	for i, a := range apps[1:] {
		st := a.state()
		if !bytes.Equal(st.Hash, ref.Hash) || fmt.Sprint(st.Txs) != fmt.Sprint(ref.Txs) {
			t.Errorf("node %d disagrees with node 0: hash %x vs %x", i+1, st.Hash, ref.Hash)
		}
	}
}
