package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/freeport"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/internal/server"
)

// runOK runs the CLI in-process and fails the test unless it exits 0.
func runOK(t *testing.T, args ...string) result {
	t.Helper()
	r := runCLI(context.Background(), "", args...)
	if r.code != ExitOK {
		t.Fatalf("stele %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// TestClusterInitLayout checks what `cluster init` writes for four brokers
// on one host: a data directory per broker with its node file, one genesis
// shared by all naming four validators and the broker directory, peers
// pointing at each other, and brokers.txt.
func TestClusterInitLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	r := runOK(t, "cluster", "init", "--nodes", "4", "--dir", dir, "--base-port", "30000", "--chain-id", "test-chain", "--output", "json")
	var out clusterInitOutput
	decodeJSON(t, r.stdout, &out)
	if r.stderr != "" {
		t.Errorf("4 brokers are 3f+1, yet stderr says: %s", r.stderr)
	}

	var genesis []byte
	p2pByNode := map[int]string{}
	for i := range 4 {
		nd := filepath.Join(dir, fmt.Sprintf("node%d", i))
		nf, ok, err := server.ReadNodeFile(nd)
		if err != nil || !ok {
			t.Fatalf("node%d: node file: %v %v", i, ok, err)
		}
		want := server.NodeFile{
			NodeID: int32(i),
			Kafka:  fmt.Sprintf("127.0.0.1:%d", 30000+i),
			HTTP:   fmt.Sprintf("127.0.0.1:%d", 30100+i),
			P2P:    fmt.Sprintf("127.0.0.1:%d", 30200+i),
			Peers:  nf.Peers,
		}
		if !slices.Equal([]string{nf.Kafka, nf.HTTP, nf.P2P}, []string{want.Kafka, want.HTTP, want.P2P}) || nf.NodeID != want.NodeID ||
			nf.AdvertiseKafka != "" || nf.P2PExternal != "" {
			t.Errorf("node%d: node file %+v, want %+v", i, nf, want)
		}
		if len(nf.Peers) != 3 {
			t.Errorf("node%d has %d peers, want 3: %v", i, len(nf.Peers), nf.Peers)
		}
		if nf.RPC != fmt.Sprintf("127.0.0.1:%d", 30300+i) || len(nf.StateSyncRPC) != 3 {
			t.Errorf("node%d: rpc %s, state sync from %v", i, nf.RPC, nf.StateSyncRPC)
		}
		for _, p := range nf.Peers {
			if strings.HasSuffix(p, "@"+nf.P2P) {
				t.Errorf("node%d lists itself as a peer: %s", i, p)
			}
		}
		p2pByNode[i] = out.Nodes[i].P2PNodeID + "@" + nf.P2P
		data, err := os.ReadFile(filepath.Join(nd, "cometbft", "config", "genesis.json"))
		if err != nil {
			t.Fatal(err)
		}
		if genesis == nil {
			genesis = data
		} else if !bytes.Equal(genesis, data) {
			t.Errorf("node%d has a different genesis", i)
		}
		for _, key := range []string{"node_key.json", "priv_validator_key.json"} {
			if _, err := os.Stat(filepath.Join(nd, "cometbft", "config", key)); err != nil {
				t.Errorf("node%d: %v", i, err)
			}
		}
	}
	// Every node's peers are exactly the other nodes' P2P IDs and addresses.
	for i := range 4 {
		nf, _, _ := server.ReadNodeFile(filepath.Join(dir, fmt.Sprintf("node%d", i)))
		var want []string
		for j := range 4 {
			if j != i {
				want = append(want, p2pByNode[j])
			}
		}
		if got := slices.Sorted(slices.Values(nf.Peers)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Errorf("node%d peers %v, want %v", i, got, want)
		}
	}

	doc, appState, err := cometbft.ReadGenesis(filepath.Join(dir, "node0", "cometbft"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.ChainID != "test-chain" || out.ChainID != "test-chain" {
		t.Errorf("chain ID %q (reported %q), want test-chain", doc.ChainID, out.ChainID)
	}
	if len(doc.Validators) != 4 || len(appState.Brokers) != 4 {
		t.Fatalf("%d validators and %d brokers in the genesis, want 4 and 4", len(doc.Validators), len(appState.Brokers))
	}
	for i, b := range appState.Brokers {
		want := cometbft.GenesisBroker{
			NodeID:    int32(i),
			Kafka:     fmt.Sprintf("127.0.0.1:%d", 30000+i),
			HTTP:      fmt.Sprintf("127.0.0.1:%d", 30100+i),
			Validator: doc.Validators[i].Address.String(),
		}
		if b != want {
			t.Errorf("genesis broker %d = %+v, want %+v", i, b, want)
		}
		if out.Nodes[i].Validator != want.Validator {
			t.Errorf("reported validator of node%d %s, want %s", i, out.Nodes[i].Validator, want.Validator)
		}
	}

	brokers, err := os.ReadFile(filepath.Join(dir, brokersFileName))
	if err != nil {
		t.Fatal(err)
	}
	const wantBrokers = "127.0.0.1:30000,127.0.0.1:30001,127.0.0.1:30002,127.0.0.1:30003\n"
	if string(brokers) != wantBrokers || out.Brokers+"\n" != wantBrokers || out.FaultsTolerated != 1 {
		t.Errorf("brokers.txt %q, reported %q, f=%d; want %q and f=1", brokers, out.Brokers, out.FaultsTolerated, wantBrokers)
	}

	// A second init into the same directory is refused and changes nothing.
	r = runCLI(context.Background(), "", "cluster", "init", "--nodes", "4", "--dir", dir)
	wantFailure(t, r, ExitFailure, filepath.Join(dir, "node0")+" already exists and is not empty")
	again, _ := os.ReadFile(filepath.Join(dir, "node3", "cometbft", "config", "genesis.json"))
	if !bytes.Equal(again, genesis) {
		t.Error("a refused init changed node3's genesis")
	}
}

// TestClusterInitTable checks the report for people: the node table with
// validator addresses and the commands that start the brokers.
func TestClusterInitTable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	r := runOK(t, "cluster", "init", "--nodes", "4", "--dir", dir)
	_, appState, err := cometbft.ReadGenesis(filepath.Join(dir, "node2", "cometbft"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"NODE", "VALIDATOR", "127.0.0.1:19092", "127.0.0.1:19195", "127.0.0.1:19294",
		appState.Brokers[3].Validator,
		"stele cluster up --dir " + dir,
		"stele serve --data " + filepath.Join(dir, "node3"),
		"$(cat " + filepath.Join(dir, "brokers.txt") + ")",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("init output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestClusterInitHosts checks the layout for brokers on several machines:
// each listens on every interface and advertises its host.
func TestClusterInitHosts(t *testing.T) {
	dir := t.TempDir()
	hosts := []string{"10.0.0.1", "10.0.0.2", "broker3.example", "fd00::4"}
	r := runOK(t, "cluster", "init", "--nodes", "4", "--dir", dir, "--hosts", strings.Join(hosts, ","), "--base-port", "9092")
	for _, want := range []string{"10.0.0.1: copy", "Kafka 9092-9095, HTTP 9192-9195, P2P 9292-9295, RPC 9392-9395"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("init output lacks %q:\n%s", want, r.stdout)
		}
	}
	for i, h := range hosts {
		nf, _, err := server.ReadNodeFile(filepath.Join(dir, fmt.Sprintf("node%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		wild := "0.0.0.0"
		if h == "fd00::4" {
			wild = "::"
		}
		want := server.NodeFile{
			NodeID:         int32(i),
			Kafka:          net.JoinHostPort(wild, strconv.Itoa(9092+i)),
			HTTP:           net.JoinHostPort(wild, strconv.Itoa(9192+i)),
			P2P:            net.JoinHostPort(wild, strconv.Itoa(9292+i)),
			AdvertiseKafka: net.JoinHostPort(h, strconv.Itoa(9092+i)),
			P2PExternal:    net.JoinHostPort(h, strconv.Itoa(9292+i)),
			Peers:          nf.Peers,
			RPC:            net.JoinHostPort(wild, strconv.Itoa(9392+i)),
		}
		for j, other := range hosts {
			if j != i {
				want.StateSyncRPC = append(want.StateSyncRPC, net.JoinHostPort(other, strconv.Itoa(9392+j)))
			}
		}
		if fmt.Sprint(nf) != fmt.Sprint(want) {
			t.Errorf("node%d: node file\n%+v, want\n%+v", i, nf, want)
		}
		for _, p := range nf.Peers {
			if strings.Contains(p, "0.0.0.0") || strings.Contains(p, "[::]") {
				t.Errorf("node%d dials a wildcard address: %s", i, p)
			}
		}
	}
	brokers, _ := os.ReadFile(filepath.Join(dir, brokersFileName))
	if want := "10.0.0.1:9092,10.0.0.2:9093,broker3.example:9094,[fd00::4]:9095\n"; string(brokers) != want {
		t.Errorf("brokers.txt %q, want %q", brokers, want)
	}
	_, appState, err := cometbft.ReadGenesis(filepath.Join(dir, "node0", "cometbft"))
	if err != nil {
		t.Fatal(err)
	}
	if b := appState.Brokers[2]; b.Kafka != "broker3.example:9094" || b.HTTP != "broker3.example:9194" {
		t.Errorf("genesis broker 2 = %+v: want the advertised addresses", b)
	}
}

// TestClusterInitTLS: --tls makes every broker's listener SSL with mutual
// TLS required, from a CA it writes; each broker's certificate is for the
// host clients reach it at; client.properties, as --command-config reads
// it, names the CA and a client certificate.
func TestClusterInitTLS(t *testing.T) {
	dir := t.TempDir()
	hosts := []string{"10.0.0.1", "10.0.0.2", "broker3.example", "fd00::4"}
	r := runOK(t, "cluster", "init", "--nodes", "4", "--dir", dir, "--hosts", strings.Join(hosts, ","), "--base-port", "9092", "--tls", "--output", "json")
	var out clusterInitOutput
	decodeJSON(t, r.stdout, &out)
	if out.ClientProperties != filepath.Join(dir, clientPropertiesFile) {
		t.Errorf("client_properties %q", out.ClientProperties)
	}
	roots := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca", "ca.crt"))
	if err != nil || !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("the CA: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca", "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key: %v %v", fi, err)
	}
	for i, h := range hosts {
		node := filepath.Join(dir, fmt.Sprintf("node%d", i))
		nf, _, err := server.ReadNodeFile(node)
		if err != nil {
			t.Fatal(err)
		}
		if want := "SSL://" + nf.Kafka; nf.Listeners != want || nf.SSLClientAuth != "required" || nf.SSLCert != "tls/broker.crt" || nf.SSLKey != "tls/broker.key" || nf.SSLCA != "tls/ca.crt" {
			t.Errorf("node%d: %+v", i, nf)
		}
		pair, err := tls.LoadX509KeyPair(filepath.Join(node, nf.SSLCert), filepath.Join(node, nf.SSLKey))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: h}); err != nil {
			t.Errorf("node%d's certificate for %s: %v", i, h, err)
		}
	}
	props, err := readProperties(out.ClientProperties)
	if err != nil {
		t.Fatal(err)
	}
	if opts, err := clientTLSOpts(props); err != nil || len(opts) == 0 || props["security.protocol"] != "SSL" {
		t.Errorf("client.properties %v: %v", props, err)
	}
}

// TestClusterInitSASL: --admin-password-file makes every listener
// SASL_PLAINTEXT (SASL_SSL with --tls, without client certificates), puts
// the admin user's SCRAM credentials, made from the file's password, in
// the genesis and no password in any broker's files, and writes
// client.properties (mode 0600) that logs in as admin; a password file
// that cannot be read is a usage error.
func TestClusterInitSASL(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "admin.password")
	if err := os.WriteFile(pw, []byte(`s3cr\et`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tlsOn := range []bool{false, true} {
		dir := t.TempDir()
		args := []string{"cluster", "init", "--nodes", "4", "--dir", dir, "--admin-password-file", pw, "--output", "json"}
		want := "SASL_PLAINTEXT"
		if tlsOn {
			args, want = append(args, "--tls"), "SASL_SSL"
		}
		var out clusterInitOutput
		decodeJSON(t, runOK(t, args...).stdout, &out)
		if out.Listener != want || out.ClientProperties != filepath.Join(dir, clientPropertiesFile) {
			t.Errorf("--tls %v: %+v", tlsOn, out)
		}
		for i := range 4 {
			node := filepath.Join(dir, fmt.Sprintf("node%d", i))
			nf, _, err := server.ReadNodeFile(node)
			if err != nil {
				t.Fatal(err)
			}
			if nf.Listeners != want+"://"+nf.Kafka || tlsOn && nf.SSLClientAuth != "none" {
				t.Errorf("node%d: %+v", i, nf)
			}
			err = filepath.WalkDir(node, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, err := os.ReadFile(path)
				if err == nil && bytes.Contains(b, []byte("s3cr")) {
					t.Errorf("%s holds the admin's password", path)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		_, appState, err := cometbft.ReadGenesis(filepath.Join(dir, "node0", "cometbft"))
		if err != nil {
			t.Fatal(err)
		}
		if len(appState.Users) != 1 || appState.Users[0].Name != "admin" {
			t.Fatalf("genesis users %+v", appState.Users)
		}
		creds, err := appState.Users[0].ScramCredentials()
		if err != nil || len(creds) != 2 || !creds[0].Verify([]byte(`s3cr\et`)) || !creds[1].Verify([]byte(`s3cr\et`)) {
			t.Fatalf("the genesis admin's credentials: %v", err)
		}
		if st, err := os.Stat(out.ClientProperties); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("client.properties: %v %v", st, err)
		}
		props, err := readProperties(out.ClientProperties)
		if err != nil {
			t.Fatal(err)
		}
		if props["security.protocol"] != want || props["sasl.username"] != "admin" || props["sasl.password"] != `s3cr\et` || props["ssl.certificate.location"] != "" {
			t.Errorf("--tls %v: client.properties %v", tlsOn, props)
		}
		if _, err := clientTLSOpts(props); err != nil {
			t.Errorf("client.properties: %v", err)
		}
	}
	wantFailure(t, runCLI(context.Background(), "", "cluster", "init", "--dir", t.TempDir(), "--admin-password-file", "/nonexistent"),
		ExitUsage, "--admin-password-file")
}

// TestClusterInitRejects checks the command-line mistakes init refuses
// with exit code 2, and the 3f+1 warning.
func TestClusterInitRejects(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "4", "--hosts", "a,b,c"}, "--hosts lists 3 hosts for --nodes 4"},
		{[]string{"--nodes", "0"}, "at least 1 broker"},
		{[]string{"--nodes", "101"}, "at most 100 brokers"},
		{[]string{"--nodes", "4", "--base-port", "65400"}, "must lie in 1-65535"},
		{[]string{"--nodes", "4", "--base-port", "0"}, "invalid --base-port"},
		{[]string{"--nodes", "2", "--hosts", "a,b:9092"}, `invalid host "b:9092"`},
		{[]string{"--nodes", "2", "--hosts", "a,"}, "empty entry"},
		{[]string{"--chain-id", strings.Repeat("x", 51)}, "at most 50 characters"},
	} {
		r := runCLI(context.Background(), "", append([]string{"cluster", "init", "--dir", dir}, tc.args...)...)
		wantFailure(t, r, ExitUsage, tc.want)
	}
	wantFailure(t, runCLI(context.Background(), "", "cluster", "init"), ExitUsage, "--dir is required")
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("rejected inits wrote %v", ents)
	}

	r := runOK(t, "cluster", "init", "--nodes", "5", "--dir", filepath.Join(dir, "five"))
	if !strings.Contains(r.stderr, "warning: 5 brokers tolerate 1 faulty broker (a block needs 4 of 5 votes); 4 brokers would tolerate as many") {
		t.Errorf("no 3f+1 warning for 5 brokers: %q", r.stderr)
	}
	r = runOK(t, "cluster", "init", "--nodes", "1", "--dir", filepath.Join(dir, "one"))
	if r.stderr != "" || !strings.Contains(r.stdout, "tolerates no faulty broker") {
		t.Errorf("one broker: stderr %q, stdout %s", r.stderr, r.stdout)
	}
}

// TestFindClusterNodes checks `cluster up`'s discovery: numeric order,
// empty directories skipped, wildcard listeners dialled on loopback.
func TestFindClusterNodes(t *testing.T) {
	dir := t.TempDir()
	for _, i := range []int{10, 2, 0} {
		nf := server.NodeFile{NodeID: int32(i), Kafka: fmt.Sprintf("0.0.0.0:%d", 9000+i), HTTP: fmt.Sprintf("[::]:%d", 8000+i), AdvertiseKafka: ""}
		if err := server.WriteNodeFile(filepath.Join(dir, fmt.Sprintf("node%d", i)), nf); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"node5", "other"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	nodes, err := findClusterNodes(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range nodes {
		got = append(got, n.name+" "+n.kafka+" "+n.health)
	}
	want := []string{
		"node0 127.0.0.1:9000 http://[::1]:8000/healthz",
		"node2 127.0.0.1:9002 http://[::1]:8002/healthz",
		"node10 127.0.0.1:9010 http://[::1]:8010/healthz",
	}
	if !slices.Equal(got, want) {
		t.Errorf("found %q, want %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "node5", "junk"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := findClusterNodes(dir); err == nil || !strings.Contains(err.Error(), "has no stele.json") {
		t.Errorf("a node directory without a node file: %v", err)
	}
	r := runCLI(context.Background(), "", "cluster", "up", "--dir", t.TempDir())
	wantFailure(t, r, ExitFailure, "no node directories")
	wantFailure(t, runCLI(context.Background(), "", "cluster", "up", "--dir", dir, "extra"), ExitUsage, "go after --")
}

func TestLinePrefixer(t *testing.T) {
	var buf bytes.Buffer
	l := &linePrefixer{w: &syncWriter{mu: new(sync.Mutex), w: &buf}, prefix: "[node1] "}
	for _, s := range []string{"a", "bc\nd", "\n\nlast"} {
		if n, err := l.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	l.flush()
	if want := "[node1] abc\n[node1] d\n[node1] \n[node1] last\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
	buf.Reset()
	l.Write(bytes.Repeat([]byte("x"), maxLogLine+10))
	l.flush()
	if got := strings.Count(buf.String(), "[node1] "); got != 2 {
		t.Errorf("an over-long line was written as %d lines, want 2", got)
	}
}

// TestServeWithNodeFile runs serve on a data directory holding a node file:
// the broker takes its node id and ports from the file, except the HTTP
// listener, given on the command line, which wins.
func TestServeWithNodeFile(t *testing.T) {
	dir := t.TempDir()
	nf := server.NodeFile{NodeID: 7, Kafka: freeAddr(t), HTTP: freeAddr(t), P2P: freeAddr(t)}
	if err := server.WriteNodeFile(dir, nf); err != nil {
		t.Fatal(err)
	}
	httpFlag := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- runCLI(ctx, "", "serve", "--data", dir, "--http", httpFlag, "--log-level", "warn") }()

	var health struct {
		NodeID int32 `json:"node_id"`
	}
	eventually(t, 30*time.Second, func() error {
		select {
		case r := <-done:
			t.Fatalf("serve exited early: %d\n%s", r.code, r.stderr)
		default:
		}
		resp, err := http.Get("http://" + httpFlag + "/healthz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&health)
	})
	if health.NodeID != 7 {
		t.Errorf("/healthz says node %d, want 7 from the node file", health.NodeID)
	}
	if c, err := net.Dial("tcp", nf.Kafka); err != nil {
		t.Errorf("no Kafka listener on the node file's %s: %v", nf.Kafka, err)
	} else {
		c.Close()
	}
	if c, err := net.Dial("tcp", nf.HTTP); err == nil {
		c.Close()
		t.Errorf("something listens on the node file's HTTP address %s, which --http overrode", nf.HTTP)
	}
	cancel()
	if r := <-done; r.code != ExitOK {
		t.Fatalf("serve: exit %d\n%s", r.code, r.stderr)
	}
}

func TestWithNodeFileFlagsWin(t *testing.T) {
	dir := t.TempDir()
	base := server.DefaultConfig()
	base.DataDir = dir
	if cfg, used, err := withNodeFile(func(string) bool { return false }, base); err != nil || used || fmt.Sprint(cfg) != fmt.Sprint(base) {
		t.Fatalf("without a node file: %+v %v %v", cfg, used, err)
	}
	nf := server.NodeFile{NodeID: 2, Kafka: "127.0.0.1:1", HTTP: "127.0.0.1:2", P2P: "127.0.0.1:3", Peers: []string{"ab@127.0.0.1:4"}}
	if err := server.WriteNodeFile(dir, nf); err != nil {
		t.Fatal(err)
	}
	flags := base
	flags.KafkaAddr, flags.NodeID = "127.0.0.1:9", 5 // as if given
	cfg, used, err := withNodeFile(func(f string) bool { return f == "kafka" || f == "node-id" }, flags)
	if err != nil || !used {
		t.Fatal(used, err)
	}
	if cfg.KafkaAddr != "127.0.0.1:9" || cfg.NodeID != 5 || cfg.HTTPAddr != "127.0.0.1:2" || cfg.P2PAddr != "127.0.0.1:3" || len(cfg.Peers) != 1 {
		t.Errorf("merged config %+v", cfg)
	}
	if err := os.WriteFile(filepath.Join(dir, server.NodeFileName), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantFailure(t, runCLI(context.Background(), "", "serve", "--data", dir), ExitFailure, "stele.json", "invalid node file")
}

// TestClusterUp is the local trial of the README: build the binary, `cluster
// init --nodes 4` on free ports, `cluster up`, wait for every broker, create
// a topic and produce and consume through franz-go with the addresses in
// brokers.txt, read the records back from every broker alone, then SIGTERM
// `cluster up` and check that it exits 0 and no broker is left running.
func TestClusterUp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs four brokers")
	}
	if runtime.GOOS != "linux" {
		t.Skip("cluster up's process groups and parent-death signal are Linux's")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "stele")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/stele-io/stele/cmd/stele")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	base := freeBasePort(t, 4)
	runOK(t, "cluster", "init", "--nodes", "4", "--dir", dir, "--base-port", strconv.Itoa(base))

	var stdout, stderr lockedBuffer
	up := exec.Command(bin, "cluster", "up", "--dir", dir, "--stop-timeout", "20s", "--", "--log-level", "warn")
	up.Stdout, up.Stderr = &stdout, &stderr
	up.SysProcAttr = childProcAttr() // gone with the test binary if it dies
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	upDone := make(chan error, 1)
	go func() { upDone <- up.Wait() }()
	defer func() {
		if up.ProcessState == nil {
			_ = up.Process.Signal(syscall.SIGTERM)
			select {
			case <-upDone:
			case <-time.After(30 * time.Second):
				_ = up.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("cluster up stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	}()
	eventually(t, 45*time.Second, func() error {
		select {
		case err := <-upDone:
			t.Fatalf("cluster up exited early: %v", err)
		default:
		}
		if !strings.Contains(stdout.String(), "[cluster] all 4 brokers are up") {
			return errors.New("not all brokers are up yet")
		}
		return nil
	})
	pids := childPIDs(t, stdout.String())
	if len(pids) != 4 {
		t.Fatalf("found %d broker pids in the output, want 4", len(pids))
	}

	raw, err := os.ReadFile(filepath.Join(dir, brokersFileName))
	if err != nil {
		t.Fatal(err)
	}
	seeds := strings.Split(strings.TrimSpace(string(raw)), ",")
	if !strings.Contains(stdout.String(), "[cluster] bootstrap brokers: "+strings.Join(seeds, ",")) {
		t.Errorf("cluster up did not print the bootstrap brokers of brokers.txt (%v)", seeds)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("trial"), kgo.RecordRetries(20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, -1, nil, "trial"); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	var want []string
	for i := range 10 {
		v := fmt.Sprintf("record-%d", i)
		want = append(want, v)
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte{byte(i % 2)}, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
	}
	// Every broker holds every partition: read everything back through
	// each broker alone.
	for i, seed := range seeds {
		got := consumeAll(t, ctx, seed, "trial", len(want))
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
			t.Errorf("through node%d (%s) read %v, want %v", i, seed, got, want)
		}
	}

	if err := up.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-upDone:
		if err != nil {
			t.Fatalf("cluster up after SIGTERM: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("cluster up did not exit within 40s of SIGTERM")
	}
	if !strings.Contains(stdout.String(), "[cluster] every broker stopped cleanly") {
		t.Error("cluster up did not report a clean stop")
	}
	for name, pid := range pids {
		// cluster up reaped its children, so a pid still there is a
		// broker left running (pid reuse within seconds is not a worry).
		p, err := os.FindProcess(pid)
		if err == nil {
			err = p.Signal(syscall.Signal(0))
		}
		if !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) is still there after cluster up exited: %v", name, pid, err)
		}
	}
}

// consumeAll reads n records of topic from the beginning through the
// broker at seed alone.
func consumeAll(t *testing.T, ctx context.Context, seed, topic string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Errorf("through %s: read %d of %d records before the deadline", seed, len(got), n)
			return got
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d via %s: %v", topic, p, seed, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}

// freeBasePort picks a base port P such that the ports `cluster init`
// gives n brokers (P+i, P+100+i, P+200+i, P+300+i) are free on 127.0.0.1
// now, below the kernel's ephemeral range (package freeport).
func freeBasePort(t *testing.T, n int) int {
	t.Helper()
	var offsets []int
	for _, off := range []int{0, httpPortOffset, p2pPortOffset, rpcPortOffset} {
		for i := range n {
			offsets = append(offsets, off+i)
		}
	}
	base, err := freeport.Base(nil, offsets...)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

var startedRE = regexp.MustCompile(`\[cluster\] started (node\d+) \(pid (\d+)\)`)

// childPIDs reads the brokers' pids from `cluster up`'s output.
func childPIDs(t *testing.T, out string) map[string]int {
	t.Helper()
	pids := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := startedRE.FindStringSubmatch(sc.Text()); m != nil {
			pid, _ := strconv.Atoi(m[2])
			pids[m[1]] = pid
		}
	}
	return pids
}

// lockedBuffer is a bytes.Buffer safe for a process's output copier and
// the test reading it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*lockedBuffer)(nil)

// TestSystemdUnitFlags keeps deploy/stele@.service in step with serve: its
// ExecStart runs stele serve with flags serve accepts, on the instance's
// directory under /var/lib/stele, which is also the one path it may write.
func TestSystemdUnitFlags(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "stele@.service"))
	if err != nil {
		t.Fatal(err)
	}
	var execStart, rw string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			execStart = v
		}
		if v, ok := strings.CutPrefix(line, "ReadWritePaths="); ok {
			rw = v
		}
	}
	args := strings.Fields(strings.ReplaceAll(execStart, "%i", "node0"))
	if len(args) < 2 || filepath.Base(args[0]) != "stele" || args[1] != "serve" {
		t.Fatalf("ExecStart=%s: want stele serve ...", execStart)
	}
	serve, _, err := New().Find(args[1:])
	if err != nil || serve.Name() != "serve" {
		t.Fatalf("ExecStart=%s: %v", execStart, err)
	}
	if err := serve.ParseFlags(args[2:]); err != nil {
		t.Fatalf("ExecStart=%s: serve rejects its flags: %v", execStart, err)
	}
	if d := serve.Flags().Lookup("data").Value.String(); d != "/var/lib/stele/node0" || strings.ReplaceAll(rw, "%i", "node0") != d {
		t.Errorf("stele@node0 serves --data %s and may write %s; want both /var/lib/stele/node0", d, rw)
	}
}

// TestClusterStatus: stele cluster status lists a single node as its one
// validator, signing, in a table and as JSON.
func TestClusterStatus(t *testing.T) {
	cfg, _ := startStele(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var r result
	eventually(t, time.Minute, func() error {
		if r = runCLI(ctx, "", "cluster", "status", "--http", cfg.HTTPAddr); r.code != ExitOK || !strings.Contains(r.stdout, "1 of 1 validators signing") {
			return fmt.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		return nil
	})
	if !strings.Contains(r.stdout, "BROKER") || !strings.Contains(r.stdout, "validator") || !strings.Contains(r.stdout, cfg.KafkaAddr) {
		t.Fatalf("stele cluster status:\n%s", r.stdout)
	}
	r = runCLI(ctx, "", "cluster", "status", "--http", cfg.HTTPAddr, "--output", "json")
	var st httpapi.ClusterStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Validators) != 1 || !st.Validators[0].Signing || st.Validators[0].Role != httpapi.RoleValidator ||
		st.Validators[0].Height == nil || *st.Validators[0].Height <= 0 {
		t.Fatalf("stele cluster status --output json: %v\n%s", err, r.stdout)
	}
	if r := runCLI(ctx, "", "cluster", "status", "--http", freeAddr(t)); r.code == ExitOK {
		t.Fatalf("stele cluster status against nothing: exit 0\n%s", r.stdout)
	}
}

// TestClusterAddPlans checks what `cluster add` writes for the fifth
// broker of a --tls cluster: the next node id on init's port layout, every
// broker a peer and a state-sync server, its own advertised address, an
// SSL listener with a certificate from the cluster's CA, and the cluster's
// genesis; and that a change no broker takes leaves no directory behind.
func TestClusterAddPlans(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	base := freeBasePort(t, 5)
	runOK(t, "cluster", "init", "--nodes", "4", "--dir", dir, "--tls", "--base-port", strconv.Itoa(base))
	nodes, err := readClusterNodes(dir)
	if err != nil || len(nodes) != 4 {
		t.Fatalf("%d nodes, %v", len(nodes), err)
	}
	n, err := planAddedNode(clusterAddOptions{dir: dir}, nodes)
	if err != nil {
		t.Fatal(err)
	}
	f := n.file
	if n.NodeID != 4 || f.Kafka != hostPort("127.0.0.1", base+4) || f.HTTP != hostPort("127.0.0.1", base+104) ||
		f.P2P != hostPort("127.0.0.1", base+204) || f.RPC != hostPort("127.0.0.1", base+304) || f.AdvertiseKafka != f.Kafka {
		t.Fatalf("planned node %d: %+v", n.NodeID, f)
	}
	if len(f.Peers) != 4 || len(f.StateSyncRPC) != 4 || f.Listeners != "SSL://"+f.Kafka || f.SSLCert == "" || !f.HTTPTLS {
		t.Fatalf("peers %v, state sync %v, listeners %q, cert %q, http tls %v", f.Peers, f.StateSyncRPC, f.Listeners, f.SSLCert, f.HTTPTLS)
	}
	if err := writeAddedNode(dir, nodes[0], &n); err != nil {
		t.Fatal(err)
	}
	g0, _ := os.ReadFile(filepath.Join(dir, "node0", "cometbft", "config", "genesis.json"))
	g4, _ := os.ReadFile(filepath.Join(dir, "node4", "cometbft", "config", "genesis.json"))
	if len(g0) == 0 || !bytes.Equal(g0, g4) {
		t.Fatal("node4's genesis is not the cluster's")
	}
	if _, err := os.Stat(filepath.Join(dir, "node4", "tls", "broker.crt")); err != nil {
		t.Fatalf("no certificate for node4: %v", err)
	}
	if err := writeAddedNode(dir, nodes[0], &n); err == nil {
		t.Fatal("node4 written twice")
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		t.Fatal(err)
	}
	// No broker answers: nothing is left behind.
	r := runCLI(context.Background(), "", "cluster", "add", "--dir", dir, "--http", hostPort("127.0.0.1", base+100), "--timeout", "2s")
	if r.code == ExitOK {
		t.Fatalf("cluster add without a running broker: %s", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "node4")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed add left node4 behind: %v", err)
	}
	wantFailure(t, runCLI(context.Background(), "", "cluster", "add"), ExitUsage, "--dir is required")

	// A change as approve takes it, and what is refused.
	newKey := fsm.ValidatorAddress(bytes.Repeat([]byte{1}, 32))
	req := httpapi.MembershipRequest{ChainID: "c", Epoch: 3, Validator: hex.EncodeToString(newKey[:]), Broker: &httpapi.BrokerView{NodeID: 4, PubKey: strings.Repeat("01", 32), Kafka: "h:1", HTTP: "h:2"}}
	back, err := decodeChange(encodeChange(req))
	if err != nil || back.Epoch != 3 || back.Broker == nil || *back.Broker != *req.Broker {
		t.Fatalf("a change round trip: %+v, %v", back, err)
	}
	if !strings.Contains(describeChange(back), "add broker 4") {
		t.Fatalf("describe: %s", describeChange(back))
	}
	wantFailure(t, runCLI(context.Background(), "", "cluster", "approve", "not a change", "--key", "k"), ExitUsage, "CHANGE is not what")
	wantFailure(t, runCLI(context.Background(), "", "cluster", "approve", encodeChange(req)), ExitUsage, "give --key FILE")
}

// TestClusterRotateKeyUsage: rotate-key needs a node id, signatures and
// the broker's data directory (given, or found under --dir); a change
// carrying a key that is not its validator's is described as a rotation.
func TestClusterRotateKeyUsage(t *testing.T) {
	ctx := context.Background()
	wantFailure(t, runCLI(ctx, "", "cluster", "rotate-key", "x", "--admin-key", "k"), ExitUsage, "node id")
	wantFailure(t, runCLI(ctx, "", "cluster", "rotate-key", "2"), ExitUsage, "--dir CLUSTERDIR or --key FILE")
	wantFailure(t, runCLI(ctx, "", "cluster", "rotate-key", "2", "--admin-key", "k"), ExitUsage, "--data DATADIR")
	dir := t.TempDir()
	if r := runCLI(ctx, "", "cluster", "init", "--nodes", "4", "--dir", dir); r.code != ExitOK {
		t.Fatalf("cluster init: %d %s", r.code, r.stderr)
	}
	wantFailure(t, runCLI(ctx, "", "cluster", "rotate-key", "9", "--dir", dir), ExitFailure, "holds no node directory of broker 9")

	seed := make([]byte, ed25519.SeedSize)
	pub := hex.EncodeToString(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
	self := fsm.ValidatorAddress(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
	add := httpapi.MembershipRequest{Validator: hex.EncodeToString(self[:]), Broker: &httpapi.BrokerView{NodeID: 4, PubKey: pub}}
	rot := httpapi.MembershipRequest{Validator: strings.Repeat("ab", 20), Broker: &httpapi.BrokerView{NodeID: 2, PubKey: pub}}
	if isRotation(add) || !strings.HasPrefix(describeChange(add), "add broker 4") {
		t.Errorf("an added broker described as %q", describeChange(add))
	}
	if !isRotation(rot) || !strings.HasPrefix(describeChange(rot), "replace broker 2's key") {
		t.Errorf("a rotation described as %q", describeChange(rot))
	}
}
