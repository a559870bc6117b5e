// Command cometbft measures bare CometBFT v0.39.4 carrying records inline:
// the ordering engine alone, with the settings Stele runs it with and a
// trivial application (app.go), 1 or 4 validators in this process on
// 127.0.0.1.
//
//	go run ./bench/cometbft -validators 4 -record-size 1024 -duration 20s
//
// Each transaction is tx-size/record-size records of record-size bytes
// concatenated (its first 8 bytes are a unique id). Submitters (goroutines,
// -submitters per validator) submit to every validator, keeping at most
// -inflight-bytes submitted but not yet committed. After the first block
// with transactions and then -warmup, the bytes
// committed by validator 0 are counted for -duration, between its first and
// its last commit in that window, and one JSON object is printed:
//
//	{"peer":"cometbft","scenario":"order-4v","kind":"write","validators":4,
//	 "record_size":1024,"tx_size":65536,"mb_per_s":...,"records_per_s":...,
//	 "blocks":...,"p50_ms":...,"p99_ms":...,"settings":{...}}
//
// mb_per_s is 10^6 bytes of committed transactions per second;
// records_per_s is that divided by the record size. p50_ms and p99_ms are
// from Submit to validator 0's Commit of the block holding the transaction,
// under the in-flight bound (a saturated, closed loop).
//
// Settings, Stele's (internal/consensus/cometbft): DefaultConfig for every
// node (timeout_commit 0, an empty block every 2 s when idle, flood mempool
// without recheck of 10000 txs / 256 MiB, 64 MiB/s p2p send and receive
// rates, 64 KiB p2p packets, goleveldb, no tx indexer) but timeout_propose
// 3 s, Stele's for blocks that carry records (InlineTimeoutPropose), and
// the default genesis (block max_bytes 18 MiB, max tx 16 MiB).
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/freeport"
)

// errInterrupted is returned when SIGINT or SIGTERM ends the run before
// its measurement.
var errInterrupted = errors.New("interrupted before the measurement ended")

// firstBlockTimeout bounds the wait for the first block with transactions.
const firstBlockTimeout = 60 * time.Second

// options are the command's flags.
type options struct {
	validators     int
	txSize         int
	recordSize     int
	duration       time.Duration
	warmup         time.Duration
	submitters     int
	inflightBytes  int
	dir            string
	timeoutCommit  time.Duration
	timeoutPropose time.Duration
	logLevel       string
}

// result is the JSON line printed at the end.
type result struct {
	Peer           string   `json:"peer"`
	Scenario       string   `json:"scenario"`
	Kind           string   `json:"kind"`
	Validators     int      `json:"validators"`
	RecordSize     int      `json:"record_size"`
	TxSize         int      `json:"tx_size"`
	DurationS      float64  `json:"duration_s"`
	MBPerS         float64  `json:"mb_per_s"`
	RecordsPerS    float64  `json:"records_per_s"`
	MsgsPerS       float64  `json:"msgs_per_s"`
	TxsPerS        float64  `json:"txs_per_s"`
	Blocks         int64    `json:"blocks"`
	NonEmptyBlocks int64    `json:"non_empty_blocks"`
	BlocksPerS     float64  `json:"blocks_per_s"`
	AvgBlockMB     float64  `json:"avg_block_mb"`
	P50Ms          float64  `json:"p50_ms"`
	P99Ms          float64  `json:"p99_ms"`
	Submitters     int      `json:"submitters"`
	InflightTxs    int      `json:"inflight_txs"`
	MempoolFull    int64    `json:"mempool_full"`
	Settings       settings `json:"settings"`
	Command        string   `json:"command"`
}

type settings struct {
	TimeoutCommit             string `json:"timeout_commit"`
	TimeoutPropose            string `json:"timeout_propose"`
	CreateEmptyBlocksInterval string `json:"create_empty_blocks_interval"`
	P2PRate                   int64  `json:"p2p_rate"`
	MempoolSize               int    `json:"mempool_size"`
	MempoolMaxTxsBytes        int64  `json:"mempool_max_txs_bytes"`
	MaxBlockBytes             int64  `json:"max_block_bytes"`
	MaxTxBytes                int64  `json:"max_tx_bytes"`
}

func main() {
	var o options
	flag.IntVar(&o.validators, "validators", 1, "validators in this process: 1 or 4")
	flag.IntVar(&o.txSize, "tx-size", 65536, "transaction size: records are packed into transactions of up to this many bytes")
	flag.IntVar(&o.recordSize, "record-size", 1024, "record size in bytes")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long to measure, after the warm-up")
	flag.DurationVar(&o.warmup, "warmup", 3*time.Second, "how long to submit before measuring")
	flag.IntVar(&o.submitters, "submitters", 2, "submitting goroutines per validator")
	flag.IntVar(&o.inflightBytes, "inflight-bytes", 64<<20, "bound on bytes submitted but not yet committed")
	flag.StringVar(&o.dir, "dir", "", "new or empty directory for the validators' homes, left behind (default: a temporary directory, removed at exit)")
	flag.DurationVar(&o.timeoutCommit, "timeout-commit", cometbft.DefaultTimeoutCommit, "CometBFT timeout_commit (Stele's default)")
	flag.DurationVar(&o.timeoutPropose, "timeout-propose", cometbft.InlineTimeoutPropose, "CometBFT timeout_propose (Stele's for blocks that carry records, as these do)")
	flag.StringVar(&o.logLevel, "log-level", "", "CometBFT log level on stderr: debug, info, warn, error (default: none)")
	flag.Parse()
	// The nodes are never stopped: CometBFT v0.39.4's consensus reactor
	// (queryMaj23Routine) may read the block store up to a few seconds
	// after Stop has closed it, and panics the process with "leveldb:
	// closed"; its WAL's ticker panics if the home disappears under it. So
	// without -dir the program runs itself again on a temporary directory
	// and removes that once the child has exited, and the child exits
	// without stopping its nodes.
	if o.dir == "" {
		os.Exit(runChild())
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "cometbft bench:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runChild runs this program with the same arguments and -dir set to a new
// temporary directory, forwarding SIGINT and SIGTERM to it, removes the
// directory once it has exited and returns its exit code.
func runChild() int {
	d, err := os.MkdirTemp("", "cometbft-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cometbft bench:", err)
		return 1
	}
	defer os.RemoveAll(d)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cometbft bench:", err)
		return 1
	}
	cmd := exec.Command(self, append(os.Args[1:], "-dir", d)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "cometbft bench:", err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "cometbft bench:", err)
		return 1
	}
	return 0
}

func (o options) validate() error {
	switch {
	case o.validators != 1 && o.validators != 4:
		return fmt.Errorf("-validators %d: want 1 or 4", o.validators)
	case o.recordSize < 8:
		return fmt.Errorf("-record-size %d: want at least 8 (the id)", o.recordSize)
	case o.txSize < o.recordSize || int64(o.txSize) > cometbft.DefaultMaxTxBytes:
		return fmt.Errorf("-tx-size %d: want between the record size and %d", o.txSize, cometbft.DefaultMaxTxBytes)
	case o.duration <= 0 || o.warmup < 0:
		return errors.New("-duration must be positive and -warmup not negative")
	case o.submitters < 1 || o.inflightBytes < o.txSize:
		return errors.New("-submitters must be positive and -inflight-bytes at least -tx-size")
	}
	return nil
}

func run(o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	dir := o.dir
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	recordsPerTx := o.txSize / o.recordSize
	txLen := recordsPerTx * o.recordSize
	inflight := max(1, o.inflightBytes/txLen)
	rec := newRecorder(inflight)

	orderers, cfg, err := startValidators(ctx, o, dir, rec)
	if err != nil {
		return err
	}

	subCtx, cancelSubs := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var seq atomic.Uint64
	var full atomic.Int64
	errs := make(chan error, len(orderers)*o.submitters)
	for _, ord := range orderers {
		for range o.submitters {
			wg.Go(func() {
				if err := submit(subCtx, ord, rec, &seq, &full, txLen); err != nil {
					errs <- err
				}
			})
		}
	}
	defer func() { cancelSubs(); wg.Wait() }()

	wait := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return errInterrupted
		case err := <-errs:
			return err
		}
	}
	// The warm-up starts at the first block with transactions: with four
	// validators the first full block takes seconds to gossip.
	firstBlock := time.Now().Add(firstBlockTimeout)
	for rec.mark(false).nonEmpty == 0 {
		if time.Now().After(firstBlock) {
			return fmt.Errorf("no block with transactions within %v", firstBlockTimeout)
		}
		if err := wait(50 * time.Millisecond); err != nil {
			return err
		}
	}
	if err := wait(o.warmup); err != nil {
		return err
	}
	s0 := rec.mark(true)
	full0 := full.Load()
	if err := wait(o.duration); err != nil {
		return err
	}
	s1 := rec.mark(false)
	elapsed := s1.lastCommit.Sub(s0.lastCommit).Seconds()
	if s0.lastCommit.IsZero() || elapsed <= 0 || s1.bytes == s0.bytes {
		return fmt.Errorf("fewer than two commits while measuring (%d blocks before, %d after): try a longer -duration", s0.blocks, s1.blocks)
	}

	bytes := float64(s1.bytes - s0.bytes)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	res := result{
		Peer:           "cometbft",
		Scenario:       fmt.Sprintf("order-%dv", o.validators),
		Kind:           "write",
		Validators:     o.validators,
		RecordSize:     o.recordSize,
		TxSize:         txLen,
		DurationS:      round(elapsed, 3),
		MBPerS:         round(bytes/elapsed/1e6, 2),
		RecordsPerS:    round(bytes/elapsed/float64(o.recordSize), 0),
		TxsPerS:        round(float64(s1.txs-s0.txs)/elapsed, 1),
		Blocks:         s1.blocks - s0.blocks,
		NonEmptyBlocks: s1.nonEmpty - s0.nonEmpty,
		BlocksPerS:     round(float64(s1.blocks-s0.blocks)/elapsed, 2),
		P50Ms:          ms(rec.percentile(50)),
		P99Ms:          ms(rec.percentile(99)),
		Submitters:     o.submitters * len(orderers),
		InflightTxs:    inflight,
		MempoolFull:    full.Load() - full0,
		Settings: settings{
			TimeoutCommit:             cfg.TimeoutCommit.String(),
			TimeoutPropose:            cfg.TimeoutPropose.String(),
			CreateEmptyBlocksInterval: cfg.CreateEmptyBlocksInterval.String(),
			P2PRate:                   cfg.P2PRate,
			MempoolSize:               cfg.MempoolSize,
			MempoolMaxTxsBytes:        cfg.MempoolMaxTxsBytes,
			MaxBlockBytes:             cometbft.DefaultMaxBlockBytes,
			MaxTxBytes:                cometbft.DefaultMaxTxBytes,
		},
		Command: fmt.Sprintf("bench/cometbft -validators %d -record-size %d -tx-size %d -duration %v -warmup %v -submitters %d -inflight-bytes %d -timeout-commit %v -timeout-propose %v",
			o.validators, o.recordSize, o.txSize, o.duration, o.warmup, o.submitters, o.inflightBytes, o.timeoutCommit, o.timeoutPropose),
	}
	res.MsgsPerS = res.RecordsPerS
	if n := s1.nonEmpty - s0.nonEmpty; n > 0 {
		res.AvgBlockMB = round(bytes/float64(n)/1e6, 2)
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// startValidators initialises and starts o.validators nodes under dir,
// validator 0's application reporting to rec. It returns the orderers and
// the configuration of node 0.
func startValidators(ctx context.Context, o options, dir string, rec *recorder) ([]*cometbft.Orderer, cometbft.Config, error) {
	cfgs := make([]cometbft.Config, o.validators)
	for i := range cfgs {
		c := cometbft.DefaultConfig(filepath.Join(dir, fmt.Sprintf("node%d", i)))
		c.Moniker = fmt.Sprintf("node%d", i)
		addr, err := freeAddr()
		if err != nil {
			return nil, c, err
		}
		c.P2PListen = "tcp://" + addr
		c.TimeoutCommit = o.timeoutCommit
		c.TimeoutPropose = o.timeoutPropose
		cfgs[i] = c
	}
	if o.validators == 1 {
		if err := cometbft.Init(cfgs[0].Home, cometbft.InitOptions{Config: cfgs[0]}); err != nil {
			return nil, cfgs[0], err
		}
	} else {
		inited, err := cometbft.InitCluster(cfgs, cometbft.InitOptions{})
		if err != nil {
			return nil, cfgs[0], err
		}
		cfgs = inited
	}
	logger := newLogger(o.logLevel)
	var out []*cometbft.Orderer
	for i, c := range cfgs {
		a := &app{}
		if i == 0 {
			a.rec = rec
		}
		ord, err := cometbft.New(c, a, logger)
		if err != nil {
			return out, cfgs[0], err
		}
		startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = ord.Start(startCtx)
		cancel()
		if err != nil {
			return out, cfgs[0], fmt.Errorf("starting validator %d: %w", i, err)
		}
		out = append(out, ord)
	}
	return out, cfgs[0], nil
}

// submit submits transactions of txLen bytes to ord until ctx ends, each
// taking one of rec's in-flight slots. A full mempool is retried after a
// pause; any other refusal ends the benchmark.
func submit(ctx context.Context, ord consensus.Orderer, rec *recorder, seq *atomic.Uint64, full *atomic.Int64, txLen int) error {
	tx := make([]byte, txLen)
	if _, err := rand.Read(tx); err != nil {
		return err
	}
	for {
		select {
		case rec.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		id := seq.Add(1)
		binary.BigEndian.PutUint64(tx, id)
		rec.submitting(id, time.Now())
		err := ord.Submit(ctx, tx)
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil:
			rec.failed(id)
			return nil
		case errors.Is(err, consensus.ErrMempoolFull):
			rec.failed(id)
			full.Add(1)
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				return nil
			}
		default:
			rec.failed(id)
			return fmt.Errorf("submit: %w", err)
		}
	}
}

// freeAddr returns a free 127.0.0.1 host:port below the kernel's ephemeral
// range (see package freeport).
func freeAddr() (string, error) { return freeport.Addr() }

// newLogger logs CometBFT at level to stderr, or nowhere when level is "".
func newLogger(level string) *slog.Logger {
	if level == "" {
		return nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}
