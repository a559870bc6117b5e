// Package cluster holds Stele's fault tests: real `stele serve` processes on
// 127.0.0.1, formed into a 4-broker cluster by `stele cluster init`, driven by
// franz-go producers and consumers while the test crashes, freezes and cuts
// off brokers (issue 3, "Fault tests"; DESIGN.md §4).
//
// The package has test files only. The harness (harness_test.go) builds the
// stele binary once per `go test` run, starts and signals broker processes
// and compares their state; proxy_test.go is a fault-injecting TCP proxy put
// between CometBFT peers; workload_test.go produces, consumes and checks.
//
// Environment:
//
//	STELE_BIN         use this stele binary instead of building ./cmd/stele
//	STELE_FAULT_SEED  seed choosing which brokers fail (default: the time;
//	                  every test logs the seed it used)
//	STELE_FAULT_KEEP  1: keep the cluster directories of failed tests
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
	"testing"
)

// steleBin is the stele binary every test runs; TestMain sets it.
var steleBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		return m.Run()
	}
	if bin := os.Getenv("STELE_BIN"); bin != "" {
		steleBin = bin
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "stele-cluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster: ", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	steleBin = filepath.Join(tmp, "stele")
	// The module root is two directories up from this package.
	build := exec.Command("go", "build", "-o", steleBin, "./cmd/stele")
	build.Dir = filepath.Join("..", "..")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster: go build ./cmd/stele failed, no fault test can run:", err)
		return 1
	}
	return m.Run()
}
