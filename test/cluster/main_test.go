// Package cluster holds Stele's fault tests: real `stele serve` processes on
// 127.0.0.1, formed into a 4-broker cluster by `stele cluster init`, driven by
// franz-go producers and consumers while the test crashes, freezes and cuts
// off brokers (issue 3, "Fault tests"; DESIGN.md §4).
//
// The package has test files only. The harness (test/harness) builds the
// stele binary once per `go test` run, starts and signals broker processes,
// splits the network and compares the brokers' state; cluster.go here adds
// the fault tests' own helpers to it. workload_test.go produces, consumes
// and checks. faults_test.go holds
// fault tests 1-3, byzantine_test.go and tamper_test.go fault test 4 (with
// a second binary built with `-tags stelebyzantine` when first needed),
// statesync_test.go fault test 5, upgrade_test.go an upgrade of the app
// version under load (with a second binary built with -tags
// steleupgradetest), restart_test.go a measurement run by hand (with
// -restart.fill) of where a power-cut broker's restart spends its time.
//
// Environment:
//
// those of test/harness (STELE_BIN, STELE_BYZANTINE_BIN, STELE_FAULT_SEED,
// STELE_FAULT_KEEP, STELE_LOG_LEVEL), and
//
//	STELE_STATESYNC_UNDER_LOAD  1: TestWipeRejoinsByStateSync keeps producing
//	                  while the wiped broker joins (it cannot, with 5 retained
//	                  blocks; see the test)
//
// `go test -short` skips every test that starts a cluster.
package cluster

import (
	"os"
	"testing"

	"github.com/stele-io/stele/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// cluster is the harness's cluster with the fault tests' own methods.
type cluster struct{ *harness.Cluster }

type clusterOptions = harness.Options

func newCluster(t *testing.T, opts clusterOptions) *cluster {
	return &cluster{harness.New(t, opts)}
}
