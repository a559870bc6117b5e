package cometbft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/freeport"
)

// freeP2P returns a tcp:// address on a free 127.0.0.1 port.
func freeP2P(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr() // below the ephemeral range: see package freeport
	if err != nil {
		t.Fatal(err)
	}
	return "tcp://" + a
}

// testLogger logs CometBFT's warnings and errors to the test log (verbose
// with STELE_TEST_DEBUG=1). Lines logged after the test ends are dropped:
// CometBFT's peer dialling goroutines can outlive a stopped node.
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("STELE_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// testConfig is a single-validator config in home with a free port.
func testConfig(t testing.TB, home string) Config {
	cfg := DefaultConfig(home)
	cfg.P2PListen = freeP2P(t)
	cfg.CreateEmptyBlocksInterval = 0
	return cfg
}

// initHome initialises a single-validator home with a 4 KiB max tx.
func initHome(t testing.TB) string {
	t.Helper()
	home := filepath.Join(t.TempDir(), "cometbft")
	if err := Init(home, InitOptions{MaxTxBytes: 4096, MaxBlockBytes: 2 << 20}); err != nil {
		t.Fatalf("Init: %v", err)
	}
	return home
}

func startOrderer(t testing.TB, cfg Config, app consensus.Application) *Orderer {
	t.Helper()
	o, err := New(cfg, app, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := o.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = o.Stop() })
	return o
}

// eventually polls f until it returns nil or d passes.
func eventually(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not reached within %v: %v", d, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func committedTxs(a *diskApp) []string {
	var out []string
	for _, tx := range a.state().Txs {
		out = append(out, string(tx))
	}
	return out
}

func TestSubmittedTransactionsCommitInOrder(t *testing.T) {
	home := initHome(t)
	app, err := openDiskApp(filepath.Join(t.TempDir(), "app.json"), always)
	if err != nil {
		t.Fatal(err)
	}
	o := startOrderer(t, testConfig(t, home), app)
	ctx := context.Background()

	var want []string
	for i := range 30 {
		tx := fmt.Sprintf("tx-%03d", i)
		if err := o.Submit(ctx, []byte(tx)); err != nil {
			t.Fatalf("Submit(%s): %v", tx, err)
		}
		want = append(want, tx)
	}
	if err := o.Submit(ctx, []byte("invalid-but-admitted")); err != nil {
		t.Fatalf("Submit of a tx CheckTx accepts: %v", err)
	}
	if err := o.Submit(ctx, []byte("tx-000")); !errors.Is(err, ErrDuplicateTx) {
		t.Errorf("resubmitting the same bytes: got %v, want ErrDuplicateTx", err)
	}
	err = o.Submit(ctx, []byte("refuse this"))
	if !errors.Is(err, ErrRejected) || !errors.Is(err, errToyRefused) {
		t.Errorf("Submit of a tx CheckTx refuses: got %v, want ErrRejected wrapping the app's error", err)
	}
	if err := o.Submit(ctx, make([]byte, 4097)); !errors.Is(err, ErrTxTooLarge) {
		t.Errorf("Submit over the genesis max_tx_bytes: got %v, want ErrTxTooLarge", err)
	}

	eventually(t, time.Minute, func() error {
		if got := committedTxs(app); !reflect.DeepEqual(got, want) {
			return fmt.Errorf("committed %d txs, want %d", len(got), len(want))
		}
		return nil
	})
	st := app.state()
	for i := 1; i < len(st.Times); i++ {
		if !st.Times[i].After(st.Times[i-1]) {
			t.Errorf("block %d time %v not after block %d time %v", i+1, st.Times[i], i, st.Times[i-1])
		}
	}
	if h := o.Node().BlockStore().Height(); h < st.Height {
		t.Errorf("block store at %d behind the app at %d", h, st.Height)
	}
	// BlockTxs reads the blocks back: the committed transactions, in
	// order, and nothing for a height not reached.
	var stored []string
	for h := int64(1); h <= st.Height; h++ {
		txs, ok := o.BlockTxs(h)
		if !ok {
			t.Fatalf("BlockTxs(%d): not held, the app is at %d", h, st.Height)
		}
		for _, tx := range txs {
			if strings.HasPrefix(string(tx), "tx-") {
				stored = append(stored, string(tx))
			}
		}
	}
	if !reflect.DeepEqual(stored, want) {
		t.Errorf("BlockTxs found %d transactions %q, want the %d committed", len(stored), stored, len(want))
	}
	for _, h := range []int64{0, -1, o.Node().BlockStore().Height() + 1000} {
		if txs, ok := o.BlockTxs(h); ok {
			t.Errorf("BlockTxs(%d) = %q, true; want not held", h, txs)
		}
	}
	// The invalid transaction never reaches a block and leaves the mempool.
	eventually(t, 30*time.Second, func() error {
		if n := o.Node().Mempool().Size(); n != 0 {
			return fmt.Errorf("%d txs still in the mempool", n)
		}
		return nil
	})
	for _, tx := range committedTxs(app) {
		if strings.HasPrefix(tx, "invalid") {
			t.Errorf("invalid tx %q was committed", tx)
		}
	}
	if err := o.Err(); err != nil {
		t.Errorf("Err() = %v", err)
	}
}

// TestRestartHonoursInfo: a restarted node on the same home starts from
// the application's height; no block at or below it is applied again.
func TestRestartHonoursInfo(t *testing.T) {
	home := initHome(t)
	appFile := filepath.Join(t.TempDir(), "app.json")
	cfg := testConfig(t, home)
	app1, _ := openDiskApp(appFile, always)
	o1 := startOrderer(t, cfg, app1)
	submitAndWait(t, o1, app1, "a", "b", "c")
	if err := o1.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := o1.Submit(context.Background(), []byte("late")); !errors.Is(err, consensus.ErrStopped) {
		t.Errorf("Submit after Stop: got %v, want ErrStopped", err)
	}
	before := app1.state()

	app2, _ := openDiskApp(appFile, always)
	cfg.P2PListen = freeP2P(t)
	o2 := startOrderer(t, cfg, app2)
	for _, h := range app2.finalizedHeights() {
		if h <= before.Height {
			t.Errorf("block %d re-applied after restart at height %d", h, before.Height)
		}
	}
	submitAndWait(t, o2, app2, "d")
	if got, want := committedTxs(app2), []string{"a", "b", "c", "d"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after restart committed %q, want %q", got, want)
	}
}

// TestReplayOfBlocksTheAppLacks: an application that persisted only some
// commits gets the missing blocks replayed by the handshake at Start, and
// ends in the state it had before the restart.
func TestReplayOfBlocksTheAppLacks(t *testing.T) {
	home := initHome(t)
	appFile := filepath.Join(t.TempDir(), "app.json")
	cfg := testConfig(t, home)
	frozen := false
	app1, _ := openDiskApp(appFile, func(h int64) bool { return !frozen && h%2 == 0 })
	o1 := startOrderer(t, cfg, app1)
	submitAndWait(t, o1, app1, "a", "b")
	submitAndWait(t, o1, app1, "c")
	app1.mu.Lock()
	frozen = true // nothing from here on reaches the disk
	app1.mu.Unlock()
	submitAndWait(t, o1, app1, "d")
	submitAndWait(t, o1, app1, "e", "f")
	if err := o1.Stop(); err != nil {
		t.Fatal(err)
	}
	before := app1.state()

	app2, _ := openDiskApp(appFile, always)
	saved, _ := app2.Info()
	if saved >= before.Height {
		t.Fatalf("test setup: saved height %d not behind committed height %d", saved, before.Height)
	}
	cfg.P2PListen = freeP2P(t)
	o2 := startOrderer(t, cfg, app2)
	// Start returns after the handshake: the replay is done by now.
	replayed := app2.finalizedHeights()
	if len(replayed) < int(before.Height-saved) || replayed[0] != saved+1 {
		t.Fatalf("replayed heights %v, want %d..%d", replayed, saved+1, before.Height)
	}
	for i, h := range replayed[:before.Height-saved] {
		if h != saved+1+int64(i) {
			t.Fatalf("replayed heights %v, want %d..%d in order", replayed, saved+1, before.Height)
		}
	}
	after := app2.state()
	if after.Height < before.Height || !bytes.Equal(after.Hash, before.Hash) ||
		!reflect.DeepEqual(after.Txs, before.Txs) || !reflect.DeepEqual(after.Times[:len(before.Times)], before.Times) {
		t.Errorf("after replay: height %d hash %x txs %q; before restart: height %d hash %x txs %q",
			after.Height, after.Hash, after.Txs, before.Height, before.Hash, before.Txs)
	}
	submitAndWait(t, o2, app2, "g")
}

// submitAndWait submits txs and waits until all are committed.
func submitAndWait(t testing.TB, o *Orderer, app *diskApp, txs ...string) {
	t.Helper()
	var chans []<-chan int64
	for _, tx := range txs {
		chans = append(chans, app.waitFor([]byte(tx)))
		if err := o.Submit(context.Background(), []byte(tx)); err != nil {
			t.Fatalf("Submit(%s): %v", tx, err)
		}
	}
	for i, ch := range chans {
		select {
		case <-ch:
		case <-time.After(time.Minute):
			// Generous: CI's two cores also run the other packages' tests.
			t.Fatalf("tx %q not committed within a minute", txs[i])
		}
	}
}

func TestStartNeedsInitialisedHome(t *testing.T) {
	app, _ := openDiskApp(filepath.Join(t.TempDir(), "app.json"), always)
	o, err := New(testConfig(t, t.TempDir()), app, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(context.Background()); !errors.Is(err, ErrNotInitialised) {
		t.Errorf("Start on an empty home: got %v, want ErrNotInitialised", err)
	}
	if err := o.Submit(context.Background(), []byte("x")); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Submit before Start: got %v, want ErrNotStarted", err)
	}
	if err := o.Stop(); err != nil {
		t.Errorf("Stop before Start: %v", err)
	}
	if _, err := New(Config{}, app, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("New with an empty config: got %v, want ErrConfig", err)
	}
}

// TestFailedStartReleasesHome: a start that fails after opening the stores
// (here: the P2P port is taken) leaves the home usable by the next start.
func TestFailedStartReleasesHome(t *testing.T) {
	home := initHome(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := testConfig(t, home)
	cfg.P2PListen = "tcp://" + l.Addr().String()
	app, _ := openDiskApp(filepath.Join(t.TempDir(), "app.json"), always)
	o, _ := New(cfg, app, testLogger(t))
	if err := o.Start(context.Background()); err == nil {
		_ = o.Stop()
		t.Fatal("Start succeeded on a taken port")
	}
	cfg.P2PListen = freeP2P(t)
	o2 := startOrderer(t, cfg, app)
	submitAndWait(t, o2, app, "after-failed-start")
}
