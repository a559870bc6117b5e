// Package harness runs Stele clusters of real processes for the fault
// tests (test/cluster) and the chaos suite (test/chaos): `stele cluster
// init` on free 127.0.0.1 ports, `stele serve` processes started, crashed
// (SIGKILL), frozen (SIGSTOP) and restarted, a fault-injecting TCP proxy on
// every CometBFT peer link (proxy.go) to split the network, and readers of
// what each broker reports and stores (state.go, direct.go, chain.go,
// committed.go) to compare brokers byte for byte, and the lines a broker
// logged while opening its state at its latest start (StartLines in
// files.go), to say where a slow restart spent its time.
//
// Main builds the stele binary once per `go test` run; a test package using
// the harness calls it from its TestMain.
//
// Environment:
//
//	STELE_BIN         use this stele binary instead of building ./cmd/stele
//	STELE_BYZANTINE_BIN  use this binary, built with `-tags stelebyzantine`,
//	                  for the Byzantine tests instead of building one
//	STELE_FAULT_SEED  seed choosing which brokers fail (default: the time;
//	                  every test logs the seed it used)
//	STELE_FAULT_KEEP  1: keep the cluster directories of failed tests
//	STELE_LOG_LEVEL   the brokers' log level (inherited by `stele serve`;
//	                  debug shows CometBFT's own logs)
//
// `go test -short` skips every test that starts a cluster.
package harness

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// SteleBin is the stele binary every test runs; Main sets it.
var SteleBin string

// BinDir is Main's temporary directory for the binaries it builds.
var BinDir string

// byzantine is the test-only `stelebyzantine` build, made by the first
// test that asks for it (ByzantineBin).
var byzantine struct {
	once sync.Once
	bin  string
	err  error
}

// Main builds the stele binary (or takes STELE_BIN) and runs the tests of
// m: a TestMain of a package that uses the harness calls
// os.Exit(harness.Main(m)).
func Main(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "stele-cluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness: ", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	BinDir = tmp
	if bin := os.Getenv("STELE_BIN"); bin != "" {
		SteleBin = bin
		return m.Run()
	}
	SteleBin = filepath.Join(tmp, "stele")
	if err := GoBuild(SteleBin); err != nil {
		fmt.Fprintln(os.Stderr, "harness: go build ./cmd/stele failed, no fault test can run:", err)
		return 1
	}
	return m.Run()
}

// GoBuild builds ./cmd/stele into out with the build flags given.
func GoBuild(out string, flags ...string) error {
	args := append(append([]string{"build", "-o", out}, flags...), "./cmd/stele")
	build := exec.Command("go", args...)
	// The module root is two directories up from this package.
	build.Dir = filepath.Join("..", "..")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

// ByzantineBin returns the stele binary built with `-tags stelebyzantine`
// (STELE_BYZANTINE_BIN, or built once per run). Without the environment
// variable STELE_BYZANTINE it behaves as the ordinary build.
func ByzantineBin(t *testing.T) string {
	t.Helper()
	byzantine.once.Do(func() {
		if bin := os.Getenv("STELE_BYZANTINE_BIN"); bin != "" {
			byzantine.bin = bin
			return
		}
		byzantine.bin = filepath.Join(BinDir, "stele-byzantine")
		byzantine.err = GoBuild(byzantine.bin, "-tags", "stelebyzantine")
	})
	if byzantine.err != nil {
		t.Fatalf("go build -tags stelebyzantine ./cmd/stele: %v", byzantine.err)
	}
	return byzantine.bin
}
