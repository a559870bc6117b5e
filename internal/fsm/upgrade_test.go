package fsm

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
	"github.com/stele-io/stele/internal/record"
)

// testChainID is the chain id the test state machines run as.
const testChainID = "stele-test"

// upgradeVote is a ScheduleUpgrade for testChainID signed by the given
// test validators (testValidators' keys).
func upgradeVote(p cluster.UpgradePlan, keys ...ed25519.PrivateKey) cluster.ScheduleUpgrade {
	return upgradeVoteFor(testChainID, p, keys...)
}

// upgradeVoteFor is a ScheduleUpgrade signed for chain chainID.
func upgradeVoteFor(chainID string, p cluster.UpgradePlan, keys ...ed25519.PrivateKey) cluster.ScheduleUpgrade {
	c := cluster.ScheduleUpgrade{ChainID: chainID, Plan: p}
	for _, k := range keys {
		var addr [20]byte
		h := sha256.Sum256(k.Public().(ed25519.PublicKey))
		copy(addr[:], h[:20])
		c.Sigs = append(c.Sigs, cluster.SignUpgrade(chainID, p, addr, k))
	}
	return c
}

// upgradeChain is a state machine of a 4-validator chain (power 10 each)
// and the helpers the upgrade tests drive it with.
type upgradeChain struct {
	t     *testing.T
	dir   string
	vs    *trust.ValidatorSet
	keys  []ed25519.PrivateKey
	f     *FSM
	max   uint32
	nonce int
	src   mapBatches // the certified batches' payloads
}

func newUpgradeChain(t *testing.T, max uint32) *upgradeChain {
	vs, keys := testValidators(t, 4)
	c := &upgradeChain{t: t, dir: t.TempDir(), vs: vs, keys: keys, max: max, src: mapBatches{}}
	c.open()
	t.Cleanup(func() { c.f.Close() })
	return c
}

func (c *upgradeChain) open() {
	c.t.Helper()
	f, err := Open(Options{Dir: c.dir, HousekeepingIntervalMs: 1000, Validators: c.vs, Batches: c.src, ChainID: testChainID, maxAppVersionForTest: c.max})
	if err != nil {
		c.t.Fatal(err)
	}
	c.f = f
}

// restart closes the state machine and opens it as a binary running app
// versions up to max.
func (c *upgradeChain) restart(max uint32) {
	c.t.Helper()
	c.f.Close()
	c.max = max
	c.open()
}

// block applies and commits the next block with the commands, one
// transaction each, and returns the results.
func (c *upgradeChain) block(cmds ...core.Command) []core.Result {
	c.t.Helper()
	var txs [][]byte
	for _, cmd := range cmds {
		c.nonce++
		txs = append(txs, tx(c.nonce, cmd))
	}
	h, _ := c.f.Info()
	out, err := c.f.ApplyBlock(core.Block{Height: h + 1, TimeMs: 1000 * (h + 1), Txs: txs})
	if err != nil {
		c.t.Fatalf("height %d: %v", h+1, err)
	}
	if _, err := c.f.Commit(); err != nil {
		c.t.Fatal(err)
	}
	var rs []core.Result
	for _, o := range out.Txs {
		rs = append(rs, o.Results...)
	}
	return rs
}

func (c *upgradeChain) height() int64 { h, _ := c.f.Info(); return h }

func (c *upgradeChain) to(height int64) {
	c.t.Helper()
	for c.height() < height {
		c.block()
	}
}

func wantUpgradeCode(t *testing.T, what string, r core.Result, code int16) {
	t.Helper()
	if r.Code != code {
		t.Fatalf("%s: code %d (%s), want %d", what, r.Code, r.Message, code)
	}
}

// TestUpgradeVotes: an upgrade is scheduled once validators holding more
// than two thirds of the power voted for the same height, version and
// name; a validator's later vote replaces its earlier one.
func TestUpgradeVotes(t *testing.T) {
	c := newUpgradeChain(t, 2)
	k := c.keys
	p := cluster.UpgradePlan{Height: 50, Version: 2, Name: "v2"}
	other := cluster.UpgradePlan{Height: 50, Version: 2, Name: "v2-other"}
	wantUpgradeCode(t, "vote 0", c.block(upgradeVote(p, k[0]))[0], 0)
	wantUpgradeCode(t, "vote 0 again", c.block(upgradeVote(p, k[0]))[0], 0)
	wantUpgradeCode(t, "vote 1 for another name", c.block(upgradeVote(other, k[1]))[0], 0)
	if st := c.f.Upgrade(); st.Plan != nil || len(st.Votes) != 2 {
		t.Fatalf("after 2 votes (one counted twice): %+v", st)
	}
	wantUpgradeCode(t, "vote 2", c.block(upgradeVote(p, k[2]))[0], 0)
	if st := c.f.Upgrade(); st.Plan != nil {
		t.Fatalf("scheduled with 20 of 40 power: %+v", st)
	}
	// Validator 1 changes its mind: 30 of 40 power now agree.
	wantUpgradeCode(t, "vote 1", c.block(upgradeVote(p, k[1]))[0], 0)
	st := c.f.Upgrade()
	if st.Plan == nil || *st.Plan != p || len(st.Votes) != 0 || st.Version != 1 {
		t.Fatalf("after 3 of 4 votes: %+v", st)
	}
	// Reopened, the state says the same.
	c.restart(2)
	if st2 := c.f.Upgrade(); st2.Plan == nil || *st2.Plan != p || len(st2.Votes) != 0 {
		t.Fatalf("after restart: %+v", st2)
	}
	// A later schedule replaces the earlier one (one command, 3 signatures).
	later := cluster.UpgradePlan{Height: 70, Version: 2, Name: "v2-later"}
	wantUpgradeCode(t, "reschedule", c.block(upgradeVote(later, k[0], k[1], k[3]))[0], 0)
	if st := c.f.Upgrade(); st.Plan == nil || *st.Plan != later {
		t.Fatalf("rescheduled: %+v", st)
	}
	c.to(60)
	if v := c.f.AppVersion(); v != 1 {
		t.Fatalf("version %d at 60: the replaced plan took effect", v)
	}
	c.to(70)
	if st := c.f.Upgrade(); st.Version != 2 || st.Plan != nil {
		t.Fatalf("after height 70: %+v", st)
	}
}

// TestUpgradeRefusals: results carry codes; nothing is recorded.
func TestUpgradeRefusals(t *testing.T) {
	c := newUpgradeChain(t, 2)
	k := c.keys
	p := cluster.UpgradePlan{Height: 50, Version: 2, Name: "v2"}
	stranger := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	forged := upgradeVote(p, k[0])
	forged.Sigs[0].Signature[0] ^= 1
	twice := upgradeVote(p, k[0])
	twice.Sigs = append(twice.Sigs, twice.Sigs[0])
	c.to(5)
	for _, tc := range []struct {
		name string
		cmd  cluster.ScheduleUpgrade
		code int16
	}{
		{"unknown signer", upgradeVote(p, k[0], stranger), kerr.ClusterAuthorizationFailed.Code},
		{"bad signature", forged, kerr.ClusterAuthorizationFailed.Code},
		{"signed for another plan", cluster.ScheduleUpgrade{ChainID: testChainID, Plan: cluster.UpgradePlan{Height: 51, Version: 2, Name: "v2"}, Sigs: upgradeVote(p, k[0]).Sigs}, kerr.ClusterAuthorizationFailed.Code},
		{"too soon", upgradeVote(cluster.UpgradePlan{Height: 6 + cluster.MinUpgradeDelay - 1, Version: 2}, k[0], k[1], k[2]), kerr.PolicyViolation.Code},
		{"in the past", upgradeVote(cluster.UpgradePlan{Height: 3, Version: 2}, k[0], k[1], k[2]), kerr.PolicyViolation.Code},
		{"version 0", upgradeVote(cluster.UpgradePlan{Height: 50}, k[0]), kerr.InvalidRequest.Code},
		{"no signatures", cluster.ScheduleUpgrade{ChainID: testChainID, Plan: p}, kerr.InvalidRequest.Code},
		{"no chain id", cluster.ScheduleUpgrade{Plan: p, Sigs: upgradeVote(p, k[0]).Sigs}, kerr.InvalidRequest.Code},
		{"signed twice", twice, kerr.InvalidRequest.Code},
		{"bad name", upgradeVote(cluster.UpgradePlan{Height: 50, Version: 2, Name: "a b"}, k[0]), kerr.InvalidRequest.Code},
	} {
		wantUpgradeCode(t, tc.name, c.block(tc.cmd)[0], tc.code)
	}
	if st := c.f.Upgrade(); st.Plan != nil || len(st.Votes) != 0 {
		t.Fatalf("refused votes were recorded: %+v", st)
	}
	// Just far enough ahead is accepted.
	wantUpgradeCode(t, "soonest", c.block(upgradeVote(cluster.UpgradePlan{Height: c.height() + 1 + cluster.MinUpgradeDelay, Version: 2}, k[0], k[1], k[2]))[0], 0)
	// Without a validator set nobody can vote.
	f, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := f.ApplyBlock(core.Block{Height: 1, Txs: [][]byte{tx(1, upgradeVote(p, k[0], k[1], k[2]))}})
	if err != nil {
		t.Fatal(err)
	}
	wantUpgradeCode(t, "no validator set", out.Txs[0].Results[0], kerr.ClusterAuthorizationFailed.Code)
}

// TestUpgradeVoteBoundToChain: a vote names the chain it was signed for
// (issue 16). Votes signed for another chain by the same validator keys, a
// staging cluster's say, are refused whether the command names that chain
// or claims this one; the same votes signed for this chain schedule the
// upgrade.
func TestUpgradeVoteBoundToChain(t *testing.T) {
	c := newUpgradeChain(t, 2)
	k := c.keys
	p := cluster.UpgradePlan{Height: 50, Version: 2, Name: "v2"}
	staging := upgradeVoteFor("stele-staging", p, k[0], k[1], k[2])
	r := c.block(staging)[0]
	wantUpgradeCode(t, "votes for another chain", r, kerr.InvalidRequest.Code)
	if !strings.Contains(r.Message, `"stele-staging"`) || !strings.Contains(r.Message, `"`+testChainID+`"`) {
		t.Errorf("the refusal does not name both chains: %q", r.Message)
	}
	replayed := staging
	replayed.ChainID = testChainID
	wantUpgradeCode(t, "votes for another chain claiming this one", c.block(replayed)[0], kerr.ClusterAuthorizationFailed.Code)
	if st := c.f.Upgrade(); st.Plan != nil || len(st.Votes) != 0 || st.ChainID != testChainID {
		t.Fatalf("votes for another chain were recorded: %+v", st)
	}
	wantUpgradeCode(t, "votes for this chain", c.block(upgradeVote(p, k[0], k[1], k[2]))[0], 0)
	if st := c.f.Upgrade(); st.Plan == nil || *st.Plan != p {
		t.Fatalf("votes for this chain did not schedule the upgrade: %+v", st)
	}
	// A broker that does not know its chain id checks no vote.
	f, err := Open(Options{Dir: t.TempDir(), Validators: c.vs})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := f.ApplyBlock(core.Block{Height: 1, Txs: [][]byte{tx(1, upgradeVote(p, k[0], k[1], k[2]))}})
	if err != nil {
		t.Fatal(err)
	}
	wantUpgradeCode(t, "no chain id", out.Txs[0].Results[0], kerr.ClusterAuthorizationFailed.Code)
}

// TestUpgradeBelowCurrentRefused: once at version 2, version 1 is refused;
// scheduling version 2 again cancels a pending plan (nothing changes at
// its height).
func TestUpgradeBelowCurrentRefused(t *testing.T) {
	c := newUpgradeChain(t, 2)
	k := c.keys
	c.block(upgradeVote(cluster.UpgradePlan{Height: 20, Version: 2}, k[0], k[1], k[2]))
	c.to(20)
	wantUpgradeCode(t, "back to 1", c.block(upgradeVote(cluster.UpgradePlan{Height: 60, Version: 1}, k[0], k[1], k[2]))[0], kerr.InvalidRequest.Code)
	c.block(upgradeVote(cluster.UpgradePlan{Height: 60, Version: 3}, k[0], k[1], k[2]))
	wantUpgradeCode(t, "cancel", c.block(upgradeVote(cluster.UpgradePlan{Height: 61, Version: 2, Name: "cancel"}, k[0], k[1], k[2]))[0], 0)
	c.to(61) // a binary running up to version 2 passes 60 and 61
	if st := c.f.Upgrade(); st.Version != 2 || st.Plan != nil {
		t.Fatalf("after the cancelled upgrade: %+v", st)
	}
}

// TestUpgradeStopsBeforeHeight: a binary that cannot run the scheduled
// version commits H-1, refuses block H (ErrUpgradeRequired, nothing
// applied), refuses it again after a restart, and a binary that runs the
// version continues at H from the same directory.
func TestUpgradeStopsBeforeHeight(t *testing.T) {
	c := newUpgradeChain(t, 1)
	k := c.keys
	p := cluster.UpgradePlan{Height: 30, Version: 2, Name: "v2"}
	c.block(upgradeVote(p, k[0], k[1], k[2], k[3]))
	c.to(28)
	if err := c.f.UpgradeRequired(); err != nil {
		t.Fatalf("at 28: %v", err)
	}
	c.to(29)
	var ue *cluster.UpgradeRequiredError
	if err := c.f.UpgradeRequired(); !errors.As(err, &ue) || ue.Plan != p || ue.MaxVersion != 1 {
		t.Fatalf("at 29, UpgradeRequired: %v", err)
	}
	h, hash := c.f.Info()
	for range 2 {
		_, err := c.f.ApplyBlock(core.Block{Height: 30, TimeMs: 30_000})
		if !errors.Is(err, cluster.ErrUpgradeRequired) || !errors.As(err, &ue) || ue.Plan != p {
			t.Fatalf("ApplyBlock(30) on a version-1 binary: %v", err)
		}
	}
	if h2, hash2 := c.f.Info(); h2 != h || !bytes.Equal(hash, hash2) {
		t.Fatalf("the refused block changed the state: %d %x, was %d %x", h2, hash2, h, hash)
	}
	c.restart(1)
	if err := c.f.UpgradeRequired(); !errors.Is(err, cluster.ErrUpgradeRequired) {
		t.Fatalf("reopened old binary: %v", err)
	}
	c.restart(2)
	if err := c.f.UpgradeRequired(); err != nil {
		t.Fatalf("new binary: %v", err)
	}
	c.block()
	if st := c.f.Upgrade(); st.Version != 2 || st.Plan != nil || c.height() != 30 {
		t.Fatalf("new binary after 30: %+v", st)
	}
	// The old binary cannot open what the new one wrote.
	c.f.Close()
	_, err := Open(Options{Dir: c.dir, Validators: c.vs, ChainID: testChainID, maxAppVersionForTest: 1})
	if !errors.Is(err, cluster.ErrUpgradeRequired) {
		t.Fatalf("old binary opening a version-2 state: %v", err)
	}
	c.open()
}

// TestOpenChecksVersionBeforeLogs: a binary that cannot run the state's
// app version refuses it at Open before it opens any partition log (the
// cluster's load step ranks below the topics', registry.go): a block
// applied but not committed under version 2 leaves its records past the
// log's committed end, and the old binary's refused Open leaves them
// there; the new binary's Open cuts them back.
func TestOpenChecksVersionBeforeLogs(t *testing.T) {
	c := newUpgradeChain(t, 2)
	k := c.keys
	p := cluster.UpgradePlan{Height: 1 + cluster.MinUpgradeDelay, Version: 2, Name: "v2"}
	c.block(topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1}, upgradeVote(p, k[0], k[1], k[2], k[3]))
	c.to(p.Height)
	if st := c.f.Upgrade(); st.Version != 2 {
		t.Fatalf("at %d: %+v", p.Height, st)
	}
	c.block(topics.Produce{Topic: "t", Records: batch(t, 1000*(p.Height+1), record.CodecNone, "k", 3)})
	h := c.height() + 1
	if _, err := c.f.ApplyBlock(core.Block{Height: h, TimeMs: 1000 * h, Txs: [][]byte{tx(1000, topics.Produce{Topic: "t", Records: batch(t, 1000*h, record.CodecNone, "k", 3)})}}); err != nil {
		t.Fatal(err)
	}
	c.f.Close() // no Commit: as if killed
	applied := logFiles(t, c.dir)
	old, err := Open(Options{Dir: c.dir, Validators: c.vs, ChainID: testChainID, maxAppVersionForTest: 1})
	if err == nil {
		old.Close()
	}
	refused := logFiles(t, c.dir)
	c.open() // before any Fatal: the cleanup closes c.f
	var ue *cluster.UpgradeRequiredError
	if !errors.As(err, &ue) || ue.Plan.Version != 2 || ue.MaxVersion != 1 {
		t.Fatalf("old binary opening a version-2 state: %v", err)
	}
	if !maps.EqualFunc(refused, applied, bytes.Equal) {
		t.Fatal("the refused Open changed the partition logs")
	}
	if maps.EqualFunc(logFiles(t, c.dir), applied, bytes.Equal) {
		t.Fatal("the new binary's Open did not cut the uncommitted block's records back")
	}
	if p := c.f.View().Partition("t", 0); p.HighWatermark() != 3 {
		t.Fatalf("high watermark %d after reopening, want 3", p.HighWatermark())
	}
}

// upgradeBlocks is a run of blocks that produces, schedules version 2 at
// height 20 and produces on past it.
func upgradeBlocks(t *testing.T, keys []ed25519.PrivateKey) []block {
	var blocks []block
	n := 0
	next := func(cmds ...core.Command) {
		b := block{time: int64(len(blocks)+1) * 1000}
		for _, c := range cmds {
			n++
			b.txs = append(b.txs, tx(n, c))
		}
		blocks = append(blocks, b)
	}
	next(topics.CreateTopic{Name: "u", Partitions: 2, ReplicationFactor: -1})
	next(upgradeVote(cluster.UpgradePlan{Height: 20, Version: 2, Name: "v2"}, keys[0], keys[1], keys[2]))
	for len(blocks) < 30 {
		h := len(blocks) + 1
		next(topics.Produce{Topic: "u", Partition: int32(h % 2), Records: batch(t, int64(h)*1000, 0, "k", 2)})
	}
	return blocks
}

// TestUpgradeDeterminism: two state machines fed the same blocks across an
// upgrade hold the same app hash at every height; so does one that runs
// the old binary up to the upgrade and the new one from there on the same
// directory, and a new binary replaying from genesis.
func TestUpgradeDeterminism(t *testing.T) {
	vs, keys := testValidators(t, 4)
	blocks := upgradeBlocks(t, keys)
	run := func(switchAt int64) ([][]byte, *FSM) {
		dir := t.TempDir()
		max := uint32(2)
		if switchAt > 0 {
			max = 1
		}
		f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, Validators: vs, ChainID: testChainID, maxAppVersionForTest: max})
		if err != nil {
			t.Fatal(err)
		}
		var hashes [][]byte
		for i, b := range blocks {
			out, err := f.ApplyBlock(core.Block{Height: int64(i + 1), TimeMs: b.time, Txs: b.txs})
			if errors.Is(err, cluster.ErrUpgradeRequired) && int64(i+1) == switchAt {
				f.Close()
				if f, err = Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, Validators: vs, ChainID: testChainID, maxAppVersionForTest: 2}); err != nil {
					t.Fatal(err)
				}
				out, err = f.ApplyBlock(core.Block{Height: int64(i + 1), TimeMs: b.time, Txs: b.txs})
			}
			if err != nil {
				t.Fatalf("height %d: %v", i+1, err)
			}
			if _, err := f.Commit(); err != nil {
				t.Fatal(err)
			}
			hashes = append(hashes, out.AppHash)
		}
		t.Cleanup(func() { f.Close() })
		return hashes, f
	}
	a, fa := run(0)
	b, _ := run(0)
	switched, fs := run(20)
	for i := range a {
		if !bytes.Equal(a[i], b[i]) || !bytes.Equal(a[i], switched[i]) {
			t.Fatalf("height %d: app hashes differ: %x %x %x", i+1, a[i], b[i], switched[i])
		}
	}
	if fa.AppVersion() != 2 || fs.AppVersion() != 2 {
		t.Fatalf("versions after the upgrade: %d, %d", fa.AppVersion(), fs.AppVersion())
	}
	// Version 1 throughout (no vote) gives other hashes from the vote on.
	var v1 [][]byte
	f := open(t, t.TempDir())
	defer f.Close()
	noVote := append([]block(nil), blocks...)
	noVote[1] = block{time: blocks[1].time}
	v1 = applyAll(t, f, noVote)
	if !bytes.Equal(v1[0], a[0]) || bytes.Equal(v1[1], a[1]) {
		t.Fatalf("the vote did not change the state it was applied to")
	}
}
