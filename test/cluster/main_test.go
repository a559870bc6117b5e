// Package cluster holds Stele's fault tests: real `stele serve` processes on
// 127.0.0.1, formed into a 4-broker cluster by `stele cluster init`, driven by
// franz-go producers and consumers while the test crashes, freezes and cuts
// off brokers (issue 3, "Fault tests"; DESIGN.md §4).
//
// The package has test files only. The harness (harness_test.go) builds the
// stele binary once per `go test` run, starts and signals broker processes
// and compares their state; proxy_test.go is a fault-injecting TCP proxy put
// between CometBFT peers; workload_test.go produces, consumes and checks;
// chain_test.go reads the genesis and CometBFT's RPC. faults_test.go holds
// fault tests 1-3, byzantine_test.go and tamper_test.go fault test 4 (with
// a second binary built with `-tags stelebyzantine` when first needed),
// statesync_test.go fault test 5.
//
// Environment:
//
//	STELE_BIN         use this stele binary instead of building ./cmd/stele
//	STELE_BYZANTINE_BIN  use this binary, built with `-tags stelebyzantine`,
//	                  for the Byzantine tests instead of building one
//	STELE_FAULT_SEED  seed choosing which brokers fail (default: the time;
//	                  every test logs the seed it used)
//	STELE_FAULT_KEEP  1: keep the cluster directories of failed tests
//	STELE_STATESYNC_UNDER_LOAD  1: TestWipeRejoinsByStateSync keeps producing
//	                  while the wiped broker joins (it cannot, with 5 retained
//	                  blocks; see the test)
//	STELE_LOG_LEVEL   the brokers' log level (inherited by `stele serve`;
//	                  debug shows CometBFT's own logs)
//
// `go test -short` skips every test that starts a cluster.
package cluster

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// steleBin is the stele binary every test runs; TestMain sets it.
var steleBin string

// binDir is TestMain's temporary directory for the binaries it builds.
var binDir string

// byzantine is the test-only `stelebyzantine` build, made by the first
// test that asks for it (byzantineBin).
var byzantine struct {
	once sync.Once
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "stele-cluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster: ", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	binDir = tmp
	if bin := os.Getenv("STELE_BIN"); bin != "" {
		steleBin = bin
		return m.Run()
	}
	steleBin = filepath.Join(tmp, "stele")
	if err := goBuild(steleBin); err != nil {
		fmt.Fprintln(os.Stderr, "cluster: go build ./cmd/stele failed, no fault test can run:", err)
		return 1
	}
	return m.Run()
}

// goBuild builds ./cmd/stele into out with the build flags given.
func goBuild(out string, flags ...string) error {
	args := append(append([]string{"build", "-o", out}, flags...), "./cmd/stele")
	build := exec.Command("go", args...)
	// The module root is two directories up from this package.
	build.Dir = filepath.Join("..", "..")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

// byzantineBin returns the stele binary built with `-tags stelebyzantine`
// (STELE_BYZANTINE_BIN, or built once per run). Without the environment
// variable STELE_BYZANTINE it behaves as the ordinary build.
func byzantineBin(t *testing.T) string {
	t.Helper()
	byzantine.once.Do(func() {
		if bin := os.Getenv("STELE_BYZANTINE_BIN"); bin != "" {
			byzantine.bin = bin
			return
		}
		byzantine.bin = filepath.Join(binDir, "stele-byzantine")
		byzantine.err = goBuild(byzantine.bin, "-tags", "stelebyzantine")
	})
	if byzantine.err != nil {
		t.Fatalf("go build -tags stelebyzantine ./cmd/stele: %v", byzantine.err)
	}
	return byzantine.bin
}
