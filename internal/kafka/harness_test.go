package kafka

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/broker"
	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
)

// testBroker is an in-process Stele broker: fsm, broker and this front-end
// over the in-memory orderer, listening on a free 127.0.0.1 port.
type testBroker struct {
	addr string
	fsm  *fsm.FSM
	b    *broker.Broker
	srv  *Server
}

// newTestBroker starts a broker for t and stops it when t ends.
func newTestBroker(t testing.TB) string { return startTestBroker(t, nil).addr }

func startTestBroker(t testing.TB, tweak func(*Options)) *testBroker {
	return startTestBrokerSigned(t, nil, tweak)
}

// startTestBrokerSigned is startTestBroker with these validators signing
// every block.
func startTestBrokerSigned(t testing.TB, signers [][]byte, tweak func(*Options)) *testBroker {
	t.Helper()
	return startTestBrokerOrdered(t, local.Options{StartTime: time.Unix(1_700_000_000, 0), Step: 10 * time.Millisecond, Signers: signers}, tweak)
}

// startTestBrokerClocked is startTestBroker with a block every interval
// whose block time advances by interval, so that block time keeps pace with
// the wall clock (group session and rebalance timeouts run on it).
func startTestBrokerClocked(t testing.TB, interval time.Duration) *testBroker {
	t.Helper()
	return startTestBrokerOrdered(t, local.Options{StartTime: time.Now(), Step: interval, Interval: interval}, nil)
}

func startTestBrokerOrdered(t testing.TB, lo local.Options, tweak func(*Options)) *testBroker {
	t.Helper()
	// A chain as `stele serve` starts one: at the newest app version, its
	// chain id the cluster id clients see.
	return startTestBrokerVersion(t, fsm.MaxAppVersion, lo, tweak)
}

// startTestBrokerVersion is startTestBrokerOrdered on a chain at app
// version v.
func startTestBrokerVersion(t testing.TB, v uint32, lo local.Options, tweak func(*Options)) *testBroker {
	t.Helper()
	f, err := fsm.Open(fsm.Options{Dir: t.TempDir(), ChainID: "stele-test", GenesisAppVersion: v})
	if err != nil {
		t.Fatal(err)
	}
	b := broker.New(f, broker.Options{})
	o := local.New(b.App(), lo)
	if err := o.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.Start(o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	// The advertised address is filled in up front so tweak can use it.
	opts := Options{NodeID: 0, ClusterID: "stele-test", AutoCreateTopics: true, DefaultPartitions: 1, DataDir: "/tmp",
		AdvertisedHost: "127.0.0.1", AdvertisedPort: int32(port)}
	if tweak != nil {
		tweak(&opts)
	}
	srv := New(b, opts)
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		b.Close()
		o.Stop()
		f.Close()
	})
	return &testBroker{addr: ln.Addr().String(), fsm: f, b: b, srv: srv}
}

// submitter returns a function that submits a command to tb's broker and
// fails t unless it is applied without error (what names it in the
// failure).
func (tb *testBroker) submitter(t testing.TB) func(what string, c fsm.Command) {
	return func(what string, c fsm.Command) {
		t.Helper()
		r, err := tb.b.SubmitOne(context.Background(), c)
		if err != nil || r.Code != 0 {
			t.Fatalf("%s: %v %+v", what, err, r)
		}
	}
}
