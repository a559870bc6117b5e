package cometbft

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cometbft/cometbft/p2p"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	rpctypes "github.com/cometbft/cometbft/rpc/jsonrpc/types"

	"github.com/stele-io/stele/internal/consensus"
)

// snapApp is the toy diskApp with state sync: after every height that is a
// multiple of every it keeps its state (JSON) as a snapshot in chunks of
// chunkBytes, whose metadata is the chunks' SHA-256 hashes and whose hash
// is the hash of the metadata; its retain height is min(height -
// retainBlocks, latest snapshot). An evil snapApp serves every chunk with
// a byte flipped; a silent one advertises no snapshot.
type snapApp struct {
	*diskApp
	every, retainBlocks int64
	evil, silent        bool

	smu      sync.Mutex
	snaps    map[int64][][]byte // height -> chunks
	latest   int64
	served   int // chunks served
	restore  *toyRestore
	restored int64 // height restored from, 0 if none
	rejected []string
}

type toyRestore struct {
	snap   consensus.Snapshot
	chunks [][]byte
}

const chunkBytes = 32

func newSnapApp(t testing.TB, every, retainBlocks int64, evil bool) *snapApp {
	d, err := openDiskApp(filepath.Join(t.TempDir(), "app.json"), func(int64) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	return &snapApp{diskApp: d, every: every, retainBlocks: retainBlocks, evil: evil, snaps: map[int64][][]byte{}}
}

func (a *snapApp) Commit() (int64, error) {
	if _, err := a.diskApp.Commit(); err != nil {
		return 0, err
	}
	st := a.state()
	a.smu.Lock()
	defer a.smu.Unlock()
	if st.Height%a.every == 0 {
		data, err := json.Marshal(st)
		if err != nil {
			return 0, err
		}
		var chunks [][]byte
		for len(data) > 0 {
			n := min(chunkBytes, len(data))
			chunks, data = append(chunks, data[:n]), data[n:]
		}
		a.snaps[st.Height], a.latest = chunks, st.Height
	}
	if a.latest == 0 {
		return 0, nil
	}
	return max(min(st.Height-a.retainBlocks, a.latest), 0), nil
}

func toyMeta(chunks [][]byte) (meta, hash []byte) {
	for _, c := range chunks {
		h := sha256.Sum256(c)
		meta = append(meta, h[:]...)
	}
	h := sha256.Sum256(meta)
	return meta, h[:]
}

func (a *snapApp) ListSnapshots() ([]consensus.Snapshot, error) {
	a.smu.Lock()
	defer a.smu.Unlock()
	if a.silent {
		return nil, nil
	}
	var out []consensus.Snapshot
	for h, chunks := range a.snaps {
		meta, hash := toyMeta(chunks)
		out = append(out, consensus.Snapshot{Height: h, Format: 1, Chunks: uint32(len(chunks)), Hash: hash, Metadata: meta})
	}
	return out, nil
}

func (a *snapApp) LoadSnapshotChunk(height int64, format, index uint32) ([]byte, error) {
	a.smu.Lock()
	defer a.smu.Unlock()
	chunks := a.snaps[height]
	if format != 1 || int(index) >= len(chunks) {
		return nil, nil
	}
	a.served++
	c := append([]byte(nil), chunks[index]...)
	if a.evil {
		c[0] ^= 1
	}
	return c, nil
}

func (a *snapApp) OfferSnapshot(s consensus.Snapshot, appHash []byte) consensus.OfferResult {
	if h, _ := a.Info(); h != 0 {
		return consensus.OfferAbort
	}
	if s.Format != 1 {
		return consensus.OfferRejectFormat
	}
	if sum := sha256.Sum256(s.Metadata); !bytes.Equal(sum[:], s.Hash) || len(s.Metadata) != 32*int(s.Chunks) {
		return consensus.OfferRejectSender
	}
	a.smu.Lock()
	a.restore = &toyRestore{snap: s}
	a.smu.Unlock()
	return consensus.OfferAccept
}

func (a *snapApp) ApplySnapshotChunk(index uint32, chunk []byte, sender string) consensus.ChunkOutcome {
	a.smu.Lock()
	defer a.smu.Unlock()
	r := a.restore
	if r == nil || int(index) != len(r.chunks) {
		return consensus.ChunkOutcome{Result: consensus.ApplyAbort}
	}
	if sum := sha256.Sum256(chunk); !bytes.Equal(sum[:], r.snap.Metadata[32*index:32*index+32]) {
		a.rejected = append(a.rejected, sender)
		return consensus.ChunkOutcome{Result: consensus.ApplyRetry, Refetch: []uint32{index}, RejectSenders: []string{sender}}
	}
	r.chunks = append(r.chunks, chunk)
	if len(r.chunks) < int(r.snap.Chunks) {
		return consensus.ChunkOutcome{Result: consensus.ApplyAccept}
	}
	var st diskState
	if err := json.Unmarshal(bytes.Join(r.chunks, nil), &st); err != nil || st.Height != r.snap.Height {
		return consensus.ChunkOutcome{Result: consensus.ApplyRejectSnapshot}
	}
	a.diskApp.mu.Lock()
	a.diskApp.st = st
	a.diskApp.mu.Unlock()
	a.restored, a.restore = st.Height, nil
	return consensus.ChunkOutcome{Result: consensus.ApplyAccept}
}

// TestStateSyncJoinsAfterPruning: three of four validators run and prune
// their blocks below their latest snapshot; the fourth starts with an
// empty home, finds (state_sync = auto) that its peers pruned, restores a
// snapshot whose app hash it verified against the genesis validators'
// signatures, ignores the chunks of a peer that serves corrupted ones, and
// then follows the chain by block sync and consensus: DESIGN.md §4, issue 3
// ("a new or wiped broker joins through state sync").
func TestStateSyncJoinsAfterPruning(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four nodes")
	}
	cfgs := clusterConfigs(t, 4)
	for i := range cfgs {
		cfgs[i].RPCListen = freeP2P(t)
		cfgs[i].CreateEmptyBlocksInterval = time.Second
		cfgs[i].TimeoutPropose = time.Second // rounds of the absent proposer pass quickly
	}
	cfgs, err := InitCluster(cfgs, InitOptions{MaxTxBytes: 4096, MaxBlockBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// Blocks are kept 12 heights back: the joiner, restored at a snapshot
	// height, fetches the blocks after it while the others move on.
	// Node 0 serves no snapshot, so the joiner fetches chunks from node 1
	// and from node 2, which corrupts them.
	apps := []*snapApp{newSnapApp(t, 5, 12, false), newSnapApp(t, 5, 12, false), newSnapApp(t, 5, 12, true), newSnapApp(t, 5, 12, false)}
	apps[0].silent = true
	start := time.Now()
	var orderers []*Orderer
	for i := range 3 {
		orderers = append(orderers, startOrderer(t, cfgs[i], apps[i]))
	}
	for i := range 12 {
		submitAndWait(t, orderers[i%3], apps[i%3].diskApp, fmt.Sprintf("tx-%02d", i))
	}
	eventually(t, time.Minute, func() error {
		if base := orderers[0].Node().BlockStore().Base(); base <= 1 {
			return fmt.Errorf("node 0 has pruned nothing (base %d)", base)
		}
		return nil
	})

	t.Logf("%v: node 0 pruned below %d", time.Since(start).Round(time.Millisecond), orderers[0].Node().BlockStore().Base())
	joiner := cfgs[3]
	for _, c := range cfgs[:3] {
		joiner.StateSync.RPCServers = append(joiner.StateSync.RPCServers, strings.TrimPrefix(c.RPCListen, "tcp://"))
	}
	joiner.StateSync.Mode = StateSyncAuto
	joiner.StateSync.DiscoveryTime = 5 * time.Second
	// Peers offer their snapshots when the joiner connects, and the
	// running nodes make a block a second and a snapshot every 5. Were
	// node 2, the corrupting one, alone in holding the newest snapshot
	// then, it alone would offer the best one; once it is rejected for a
	// bad chunk that snapshot has no peer left, and CometBFT waits for its
	// next chunk for two minutes (chunkTimeout, statesync/syncer.go) before
	// it takes another, older than the blocks the others still keep (seen
	// once in CI). So the joiner starts just after a snapshot
	// height, when the three hold the same latest one and the next is four
	// blocks away: the offers it is sent are of the same snapshots.
	eventually(t, time.Minute, func() error {
		var at []string
		for i, a := range apps[:3] {
			h, _ := a.Info()
			a.smu.Lock()
			latest := a.latest
			a.smu.Unlock()
			if h%a.every != 1 || latest != h-1 {
				at = append(at, fmt.Sprintf("node %d at height %d, latest snapshot %d", i, h, latest))
			}
		}
		if len(at) > 0 {
			return errors.New(strings.Join(at, "; "))
		}
		return nil
	})
	o3 := startOrderer(t, joiner, apps[3])
	eventually(t, 60*time.Second, func() error {
		if h, _ := apps[3].Info(); h == 0 {
			return errors.New("node 3 has not restored a snapshot yet")
		}
		return nil
	})
	t.Logf("%v: node 3 restored", time.Since(start).Round(time.Millisecond))
	submitAndWait(t, orderers[0], apps[0].diskApp, "after-sync")
	eventually(t, 30*time.Second, func() error {
		if got, want := committedTxs(apps[3].diskApp), committedTxs(apps[0].diskApp); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("node 3 has %d txs, node 0 %d", len(got), len(want))
		}
		return nil
	})
	apps[3].smu.Lock()
	restored, rejected := apps[3].restored, append([]string(nil), apps[3].rejected...)
	apps[3].smu.Unlock()
	apps[2].smu.Lock()
	evilServed := apps[2].served
	apps[2].smu.Unlock()
	if restored == 0 {
		t.Fatalf("node 3 caught up without restoring a snapshot")
	}
	if hs := apps[3].finalizedHeights(); len(hs) == 0 || hs[0] != restored+1 {
		t.Errorf("node 3 applied heights %v after restoring height %d, want %d onwards", hs, restored, restored+1)
	}
	if evilServed > 0 && len(rejected) == 0 {
		t.Errorf("the corrupting peer served %d chunks and none was rejected", evilServed)
	}
	evil, err := InitKeys(cfgs[2].Home)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rejected {
		if r != evil.NodeID {
			t.Errorf("sender %s rejected; only node 2 (%s) corrupts chunks", r, evil.NodeID)
		}
	}
	if h0, h3 := apps[0].state(), apps[3].state(); !bytes.Equal(h0.Hash, h3.Hash) {
		t.Errorf("node 3 hash %x, node 0 %x", h3.Hash, h0.Hash)
	}
	if err := o3.Err(); err != nil {
		t.Errorf("node 3: %v", err)
	}
	t.Logf("%v: restored height %d; the corrupting peer served %d chunks, %d rejected", time.Since(start).Round(time.Millisecond), restored, evilServed, len(rejected))
}

// TestStateSyncAutoStaysOffOnAFreshChain: with state_sync = auto, nodes
// whose peers still hold every block replay instead, so a new cluster can
// start with auto set everywhere.
func TestStateSyncAutoStaysOffOnAFreshChain(t *testing.T) {
	c := StateSyncConfig{Mode: StateSyncAuto, RPCServers: []string{strings.TrimPrefix(freeP2P(t), "tcp://")}}
	if c.wantStateSync(context.Background(), "chain", 1, 0, testLogger(t)) {
		t.Errorf("auto state sync with no peer reachable")
	}
	if (StateSyncConfig{Mode: StateSyncOn, RPCServers: c.RPCServers}).wantStateSync(context.Background(), "chain", 1, 5, testLogger(t)) {
		t.Errorf("state sync with an application that has state")
	}
}

// statusServer answers CometBFT's RPC status method as a peer keeping
// blocks from earliest on, of chain chainID.
func statusServer(t *testing.T, chainID string, earliest int64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req rpctypes.RPCRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Method != "status" {
			http.Error(w, "status only", http.StatusBadRequest)
			return
		}
		res := ctypes.ResultStatus{NodeInfo: p2p.DefaultNodeInfo{Network: chainID},
			SyncInfo: ctypes.SyncInfo{EarliestBlockHeight: earliest, LatestBlockHeight: earliest + 100}}
		json.NewEncoder(w).Encode(rpctypes.NewRPCSuccessResponse(req.ID, res))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestStrandedBrokerIsFound: a broker whose state is below every block its
// peers keep cannot catch up by block sync (CometBFT state-syncs only an
// empty node); it is found at start, only when every peer says so.
func TestStrandedBrokerIsFound(t *testing.T) {
	ctx := context.Background()
	pruned := []string{statusServer(t, "chain", 500), statusServer(t, "chain", 800)}
	c := StateSyncConfig{Mode: StateSyncAuto, RPCServers: pruned}
	if lowest, ok := c.stranded(ctx, "chain", 100, testLogger(t)); !ok || lowest != 500 {
		t.Fatalf("at height 100 with peers keeping blocks from 500 and 800: stranded %v, lowest %d", ok, lowest)
	}
	for _, tc := range []struct {
		what string
		c    StateSyncConfig
		app  int64
	}{
		{"the next block is kept", c, 499},
		{"an empty broker (state sync's case)", c, 0},
		{"one peer keeps the next block", StateSyncConfig{Mode: StateSyncAuto, RPCServers: append(pruned, statusServer(t, "chain", 1))}, 100},
		{"one peer does not answer", StateSyncConfig{Mode: StateSyncAuto, RPCServers: append(pruned, strings.TrimPrefix(freeP2P(t), "tcp://"))}, 100},
		{"peers of another chain", StateSyncConfig{Mode: StateSyncAuto, RPCServers: []string{statusServer(t, "other", 500)}}, 100},
		{"state sync off", StateSyncConfig{Mode: StateSyncOff, RPCServers: pruned}, 100},
	} {
		if _, ok := tc.c.stranded(ctx, "chain", tc.app, testLogger(t)); ok {
			t.Errorf("%s: reported stranded", tc.what)
		}
	}
}
