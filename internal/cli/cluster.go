package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/kafka"
	"github.com/stele-io/stele/internal/server"
)

// The port layout of `stele cluster init`: node i listens for Kafka on
// base+i, for HTTP on base+httpPortOffset+i, for CometBFT's P2P on
// base+p2pPortOffset+i and for CometBFT's RPC on base+rpcPortOffset+i. maxClusterNodes keeps the three ranges apart.
const (
	defaultBasePort = 19092
	httpPortOffset  = 100
	p2pPortOffset   = 200
	rpcPortOffset   = 300
	maxClusterNodes = httpPortOffset
	// maxChainIDLen is CometBFT's limit on a chain ID.
	maxChainIDLen = 50
	// brokersFileName is the file in the cluster directory listing the
	// Kafka addresses, comma-separated on one line.
	brokersFileName = "brokers.txt"
	// adminKeyFileName is the cluster administrator's ed25519 key (base64
	// seed, as producer keys), which may sign membership changes alone.
	adminKeyFileName = "admin.key"
)

// nodeDirPattern matches the node directories `cluster init` writes.
var nodeDirPattern = regexp.MustCompile(`^node([0-9]+)$`)

// newClusterCmd is `stele cluster`: create (init), run (up), upgrade, show
// (status), grow (add) and change the validators of (demote, promote,
// remove, approve) a cluster.
func newClusterCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("cluster", "Create, run, upgrade and change the validators of a cluster of Stele brokers",
		newClusterInitCmd(g), newClusterUpCmd(), newClusterUpgradeCmd(g), newClusterStatusCmd(g), newClusterAddCmd(g), newClusterDemoteCmd(g), newClusterPromoteCmd(g), newClusterRemoveCmd(g), newClusterRotateKeyCmd(g), newClusterApproveCmd(g))
}

// clusterInitOptions are the flags of `stele cluster init`.
type clusterInitOptions struct {
	nodes    int
	dir      string
	hosts    []string
	basePort int
	chainID  string
	tls      bool // --tls: a CA, certificates, SSL listeners (clustertls.go)
	httpTLS  bool // --http-tls: the HTTP APIs over TLS too (with --tls)
	// adminPasswordFile (--admin-password-file): SASL listeners and the
	// admin user in the genesis (clustertls.go).
	adminPasswordFile string
}

// clusterNode is one broker of a planned cluster: where its data directory
// is, what it listens on (its node file) and where others reach it.
type clusterNode struct {
	NodeID int32  `json:"node_id"`
	Dir    string `json:"dir"`
	// Host is the machine the broker runs on, as others reach it.
	Host string `json:"host"`
	// Kafka, HTTP and P2P are the addresses clients and peers use.
	Kafka string `json:"kafka"`
	HTTP  string `json:"http"`
	P2P   string `json:"p2p"`
	// RPC is CometBFT's RPC address, read by brokers joining by state sync.
	RPC string `json:"rpc"`
	// Validator is the address of the broker's validator key, P2PNodeID
	// its CometBFT node ID (the "nodeid" of "nodeid@host:port").
	Validator string `json:"validator"`
	P2PNodeID string `json:"p2p_node_id"`
	// file is what goes into DIR/nodeI/stele.json.
	file server.NodeFile
}

// clusterInitOutput is the JSON form of `stele cluster init`'s report.
type clusterInitOutput struct {
	Dir     string `json:"dir"`
	ChainID string `json:"chain_id"`
	// FaultsTolerated is f: the cluster keeps its guarantees with up to f
	// brokers crashed or malicious.
	FaultsTolerated int           `json:"faults_tolerated"`
	Nodes           []clusterNode `json:"nodes"`
	// Brokers is the content of BrokersFile: the Kafka addresses,
	// comma-separated.
	Brokers     string `json:"brokers"`
	BrokersFile string `json:"brokers_file"`
	// AdminKey is DIR/admin.key, the cluster administrator's key, which
	// may sign membership changes alone: keep it off the brokers.
	AdminKey string `json:"admin_key"`
	// ClientProperties is DIR/client.properties with --tls or
	// --admin-password-file, for --command-config.
	ClientProperties string `json:"client_properties,omitempty"`
	// Listener is the brokers' Kafka security protocol (PLAINTEXT, SSL,
	// SASL_PLAINTEXT or SASL_SSL).
	Listener string `json:"listener"`
}

func newClusterInitCmd(g *globalOptions) *cobra.Command {
	o := clusterInitOptions{nodes: 4, basePort: defaultBasePort}
	cmd := &cobra.Command{
		Use:   "init --dir DIR [--nodes N] [--hosts h1,h2,...] [--base-port P] [--tls] [--admin-password-file FILE]",
		Short: "Write the data directories of a new cluster",
		Long: `Write one data directory per broker of a new cluster: DIR/node0,
DIR/node1, ... each with its CometBFT keys, the cluster's one shared genesis
(naming every broker a validator and recording the broker directory) and a
node file, stele.json, holding its node id, listeners and peers. DIR/brokers.txt
lists the brokers' Kafka addresses, comma-separated on one line, and
DIR/admin.key is the cluster administrator's key, which the genesis names
and which may change the validators alone (stele cluster demote|promote
--admin-key): keep it off the brokers.

Node i listens for Kafka on port P+i, for HTTP on P+100+i and for CometBFT's
peer-to-peer traffic on P+200+i (P is --base-port, 19092 by default).
Without --hosts every broker runs on this machine and listens on 127.0.0.1.
With --hosts (one host name or IP address per broker, in node order) broker i
runs on host i: it listens on every interface (0.0.0.0, or [::] for an IPv6
address; a loopback address is listened on as it is) and tells clients and
peers to reach it at host i.

A cluster of 3f+1 brokers keeps its guarantees with up to f of them crashed
or malicious: 4 brokers tolerate 1, 7 tolerate 2.

With --tls each broker's Kafka listener is SSL with mutual TLS required
(docs/security.md): DIR/ca holds the cluster's certificate authority (keep
ca.key private: it issues certificates clients are trusted with), each node
directory its certificate under tls/, DIR/client a client certificate, and
DIR/client.properties the client properties Kafka's tools and stele take
(--command-config). The HTTP listeners serve TLS too, with the brokers'
certificates (brokers push batches to each other over https; clients use
--http https://HOST:PORT); --http-tls=false keeps them plaintext.

With --admin-password-file FILE each broker's Kafka listener is
SASL_PLAINTEXT, or SASL_SSL with --tls (TLS without client certificates:
the password authenticates), and the genesis holds the super user admin
with SCRAM credentials made from the password in FILE (salted and hashed
here; the password itself is in no broker's files). DIR/client.properties
then logs in as admin with SCRAM-SHA-512: it holds the password, so it is
written readable by its owner only.

Start the brokers with 'stele cluster up --dir DIR' (all of them, on this
machine) or 'stele serve --data DIR/nodeI' (one, wherever its directory is).`,
		Example: `  stele cluster init --nodes 4 --dir ./cluster
  stele cluster up --dir ./cluster
  stele topic create orders --brokers $(cat ./cluster/brokers.txt)

  stele cluster init --nodes 4 --dir ./prod --hosts 10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4 --base-port 9092
  stele cluster init --nodes 4 --dir ./secure --tls
  stele --brokers $(cat ./secure/brokers.txt) --command-config ./secure/client.properties topic list
  stele cluster init --nodes 4 --dir ./sasl --tls --admin-password-file admin.password`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runClusterInit(cmd, g, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.nodes, "nodes", o.nodes, "number of brokers (3f+1 of them tolerate f faulty ones)")
	f.StringVar(&o.dir, "dir", "", "directory to write the node directories into (required)")
	f.StringSliceVar(&o.hosts, "hosts", nil, "host name or IP address of each broker, comma-separated in node order (default: all on 127.0.0.1)")
	f.IntVar(&o.basePort, "base-port", o.basePort, "node i listens on P+i (Kafka), P+100+i (HTTP), P+200+i (P2P)")
	f.StringVar(&o.chainID, "chain-id", "", "chain ID, reported to clients as the cluster ID (default: stele- and 8 random hex digits)")
	f.StringVar(&o.adminPasswordFile, "admin-password-file", "", "SASL listeners (SASL_SSL with --tls), and the super user admin with this file's password in the genesis; DIR/client.properties logs in as admin")
	f.BoolVar(&o.httpTLS, "http-tls", false, "with --tls (on by default there; --http-tls=false turns it off): serve every broker's HTTP API over TLS with its certificate too (stele serve --http-tls); brokers reach each other's data plane over https, and clients use --http https://HOST:PORT")
	f.BoolVar(&o.tls, "tls", false, "serve Kafka over TLS with mutual TLS: write a CA (DIR/ca), a certificate per broker, a client certificate (DIR/client) and DIR/client.properties for --command-config")
	return cmd
}

func runClusterInit(cmd *cobra.Command, g *globalOptions, o clusterInitOptions) error {
	nodes, err := planCluster(o)
	if err != nil {
		return err
	}
	if f, quorum, ok := faultTolerance(o.nodes); !ok {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d brokers tolerate %s (a block needs %d of %d votes); %s would tolerate as many (clusters of 3f+1 brokers: 1, 4, 7, 10, ...)\n",
			o.nodes, plural(int64(f), "faulty broker"), quorum, o.nodes, plural(int64(3*f+1), "broker"))
	}
	var password []byte
	if o.adminPasswordFile != "" {
		if password, err = server.ReadPasswordFile(o.adminPasswordFile); err != nil {
			return usageErrorf("--admin-password-file: %v", err)
		}
	}
	if o.httpTLS && !o.tls {
		return usageErrorf("--http-tls needs --tls (the certificates it serves with)")
	}
	if o.tls && !cmd.Flags().Changed("http-tls") {
		o.httpTLS = true // every listener over TLS; --http-tls=false keeps HTTP plain
	}
	if o.tls {
		planClusterTLS(nodes)
		for i := range nodes {
			nodes[i].file.HTTPTLS = o.httpTLS
		}
	}
	if password != nil {
		planClusterSASL(nodes, o.tls)
	}
	chainID, err := writeCluster(o, nodes, password)
	if err != nil {
		return err
	}
	if o.tls || password != nil {
		if err := writeClusterSecurity(o.dir, nodes, o.tls, password); err != nil {
			return err
		}
	}
	kafka := make([]string, len(nodes))
	for i, n := range nodes {
		kafka[i] = n.Kafka
	}
	out := clusterInitOutput{
		Dir:             o.dir,
		ChainID:         chainID,
		FaultsTolerated: (o.nodes - 1) / 3,
		Nodes:           nodes,
		Brokers:         strings.Join(kafka, ","),
		BrokersFile:     filepath.Join(o.dir, brokersFileName),
		AdminKey:        filepath.Join(o.dir, adminKeyFileName),
	}
	out.Listener = listenerProtocol(o.tls, password != nil)
	if o.tls || password != nil {
		out.ClientProperties = filepath.Join(o.dir, clientPropertiesFile)
	}
	if g.jsonOutput() {
		return writeJSON(cmd.OutOrStdout(), out)
	}
	printClusterInit(cmd.OutOrStdout(), out, len(o.hosts) > 0)
	return nil
}

// planCluster validates the flags and lays the brokers out: addresses,
// ports and node files (without peers, which InitCluster works out).
func planCluster(o clusterInitOptions) ([]clusterNode, error) {
	switch {
	case o.dir == "":
		return nil, usageErrorf("--dir is required: the directory to write the node directories into")
	case o.nodes < 1:
		return nil, usageErrorf("invalid --nodes %d: a cluster needs at least 1 broker (4 tolerate one faulty broker)", o.nodes)
	case o.nodes > maxClusterNodes:
		return nil, usageErrorf("invalid --nodes %d: at most %d brokers (the Kafka, HTTP and P2P port ranges are %d apart)", o.nodes, maxClusterNodes, httpPortOffset)
	case len(o.hosts) > 0 && len(o.hosts) != o.nodes:
		return nil, usageErrorf("--hosts lists %d hosts for --nodes %d: give one host per broker, in node order", len(o.hosts), o.nodes)
	case o.basePort < 1 || o.basePort+rpcPortOffset+o.nodes-1 > 65535:
		return nil, usageErrorf("invalid --base-port %d: the ports %d to %d must lie in 1-65535", o.basePort, o.basePort, o.basePort+rpcPortOffset+o.nodes-1)
	case len(o.chainID) > maxChainIDLen:
		return nil, usageErrorf("invalid --chain-id %q: at most %d characters", o.chainID, maxChainIDLen)
	}
	nodes := make([]clusterNode, o.nodes)
	for i := range nodes {
		host, listen := "127.0.0.1", "127.0.0.1"
		if len(o.hosts) > 0 {
			h, err := checkHost(o.hosts[i])
			if err != nil {
				return nil, err
			}
			host, listen = h, listenHost(h)
		}
		kp, hp, pp := o.basePort+i, o.basePort+httpPortOffset+i, o.basePort+p2pPortOffset+i
		n := clusterNode{
			NodeID: int32(i),
			Dir:    filepath.Join(o.dir, fmt.Sprintf("node%d", i)),
			Host:   host,
			Kafka:  hostPort(host, kp),
			HTTP:   hostPort(host, hp),
			P2P:    hostPort(host, pp),
		}
		n.RPC = hostPort(host, o.basePort+rpcPortOffset+i)
		n.file = server.NodeFile{
			NodeID: n.NodeID,
			Kafka:  hostPort(listen, kp),
			HTTP:   hostPort(listen, hp),
			P2P:    hostPort(listen, pp),
			RPC:    hostPort(listen, o.basePort+rpcPortOffset+i),
		}
		if len(o.hosts) > 0 {
			n.file.AdvertiseKafka, n.file.P2PExternal = n.Kafka, n.P2P
		}
		nodes[i] = n
	}
	return nodes, nil
}

// checkHost validates one --hosts entry: a host name or an IP address,
// without a port (brackets around an IPv6 address are dropped).
func checkHost(h string) (string, error) {
	h = strings.TrimSpace(h)
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	switch {
	case h == "":
		return "", usageErrorf("--hosts has an empty entry: give one host per broker")
	case net.ParseIP(h) != nil:
		return h, nil
	case strings.ContainsAny(h, ":/@ \t[]"):
		return "", usageErrorf("invalid host %q in --hosts: give a host name or IP address without a port (the ports come from --base-port)", h)
	}
	return h, nil
}

// listenHost is the address a broker reached at host binds its listeners
// to: a loopback address as it is, otherwise every interface.
func listenHost(host string) string {
	ip := net.ParseIP(host)
	switch {
	case host == "localhost":
		return "127.0.0.1"
	case ip != nil && ip.IsLoopback():
		return host
	case ip != nil && ip.To4() == nil:
		return "::"
	}
	return "0.0.0.0"
}

// hostPort joins a host and a port (bracketing an IPv6 address).
func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// faultTolerance returns how many faulty brokers n brokers tolerate (f),
// how many votes a block needs (more than two thirds of n), and whether n
// is of the form 3f+1 (no broker is spent without raising f).
func faultTolerance(n int) (f, quorum int, ok bool) {
	f = (n - 1) / 3
	return f, 2*n/3 + 1, n == 3*f+1
}

// writeCluster creates the node directories, their CometBFT homes (one
// shared genesis with the broker directory) and node files, and
// brokers.txt; it fills in each node's validator and P2P node ID and
// returns the chain ID. It refuses node directories that are not empty; on
// failure it removes what it wrote.
func writeCluster(o clusterInitOptions, nodes []clusterNode, adminPassword []byte) (_ string, err error) {
	if err := checkClusterDir(o.dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return "", fmt.Errorf("cannot create the cluster directory: %w", err)
	}
	defer func() {
		if err != nil {
			for _, n := range nodes {
				_ = emptyDir(n.Dir)
			}
		}
	}()
	cfgs := make([]cometbft.Config, len(nodes))
	brokers := make([]cometbft.GenesisBroker, len(nodes))
	for i, n := range nodes {
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			return "", fmt.Errorf("cannot create %s: %w", n.Dir, err)
		}
		c := cometbft.DefaultConfig(filepath.Join(n.Dir, "cometbft"))
		c.Moniker = fmt.Sprintf("node%d", i)
		c.P2PListen = "tcp://" + n.file.P2P
		c.ExternalAddress = n.file.P2PExternal
		cfgs[i] = c
		brokers[i] = cometbft.GenesisBroker{NodeID: n.NodeID, Kafka: n.Kafka, HTTP: n.HTTP}
	}
	// The cluster administrator's key: it may sign membership changes
	// alone (docs/cluster.md, "Membership"), as the genesis records.
	adminPub, adminKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(o.dir, adminKeyFileName), []byte(base64.StdEncoding.EncodeToString(adminKey.Seed())+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("the cluster administrator's key: %w", err)
	}
	iopts := cometbft.InitOptions{ChainID: o.chainID, Brokers: brokers, AdminKey: adminPub}
	if adminPassword != nil {
		creds, err := server.ScramCredentials(adminPassword)
		if err != nil {
			return "", err
		}
		iopts.Users = []cometbft.GenesisUser{cometbft.GenesisUserOf(kafka.AdminUser, creds)}
	}
	out, err := cometbft.InitCluster(cfgs, iopts)
	if err != nil {
		return "", err
	}
	genesis, appState, err := cometbft.ReadGenesis(out[0].Home)
	if err != nil {
		return "", err
	}
	if len(appState.Brokers) != len(nodes) {
		return "", fmt.Errorf("the genesis lists %d brokers, want %d", len(appState.Brokers), len(nodes))
	}
	kafka := make([]string, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		id, err := cometbft.InitKeys(out[i].Home) // loads the keys InitCluster wrote
		if err != nil {
			return "", err
		}
		n.Validator, n.P2PNodeID = appState.Brokers[i].Validator, id.NodeID
		n.file.Peers = out[i].PersistentPeers
		for j := range nodes {
			if j != i {
				n.file.StateSyncRPC = append(n.file.StateSyncRPC, nodes[j].RPC)
			}
		}
		if err := server.WriteNodeFile(n.Dir, n.file); err != nil {
			return "", err
		}
		kafka[i] = n.Kafka
	}
	path := filepath.Join(o.dir, brokersFileName)
	if err := os.WriteFile(path, []byte(strings.Join(kafka, ",")+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("cannot write %s: %w", path, err)
	}
	return genesis.ChainID, nil
}

// checkClusterDir refuses a cluster directory holding a node directory
// that is not empty: its keys and data belong to another cluster, and
// 'cluster up' would start it along with the new brokers.
func checkClusterDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot read the cluster directory: %w", err)
	}
	for _, e := range ents {
		if !nodeDirPattern.MatchString(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if !e.IsDir() {
			return fmt.Errorf("%s exists and is not a directory: choose another --dir or remove it", path)
		}
		sub, err := os.ReadDir(path)
		if err != nil {
			return fmt.Errorf("cannot read %s: %w", path, err)
		}
		if len(sub) > 0 {
			return fmt.Errorf("%s already exists and is not empty (it holds a broker's keys and data): choose another --dir, or remove it if that cluster is no longer wanted", path)
		}
	}
	return nil
}

// emptyDir removes everything inside dir, leaving dir itself.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// printClusterInit writes init's report for a person: the nodes and the
// commands that start them.
func printClusterInit(w io.Writer, out clusterInitOutput, multiHost bool) {
	n := len(out.Nodes)
	fmt.Fprintf(w, "Wrote %s to %s (chain %s); %s.\n\n", plural(int64(n), "broker"), out.Dir, out.ChainID,
		toleranceText(n, out.FaultsTolerated))
	tw := newTable(w)
	fmt.Fprintln(tw, "NODE\tDIR\tKAFKA\tHTTP\tP2P\tVALIDATOR")
	for _, nd := range out.Nodes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", nd.NodeID, nd.Dir, nd.Kafka, nd.HTTP, nd.P2P, nd.Validator)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nKafka bootstrap brokers (in %s): %s\n", out.BrokersFile, out.Brokers)
	fmt.Fprintf(w, "The cluster administrator's key, which may change the validators alone (stele cluster demote|promote --admin-key): %s; keep it off the brokers.\n\n", out.AdminKey)
	if !multiHost {
		fmt.Fprintf(w, "Start them all on this machine, logs prefixed with [nodeI], until Ctrl-C:\n  stele cluster up --dir %s\n", out.Dir)
		fmt.Fprintln(w, "or each in its own terminal:")
		for _, nd := range out.Nodes {
			fmt.Fprintf(w, "  stele serve --data %s\n", nd.Dir)
		}
	} else {
		fmt.Fprintln(w, "Copy each node directory to its host (it holds that broker's private keys: copy it")
		fmt.Fprintln(w, "only there, keep it private) and start the broker there:")
		for _, nd := range out.Nodes {
			fmt.Fprintf(w, "  %s: copy %s, then run: stele serve --data <where you copied it>\n", nd.Host, nd.Dir)
		}
		first, last := out.Nodes[0], out.Nodes[n-1]
		fmt.Fprintf(w, "Each host must accept TCP on its broker's ports: Kafka %s-%s, HTTP %s-%s, P2P %s-%s, RPC %s-%s (see docs/cluster.md).\n",
			portOf(first.Kafka), portOf(last.Kafka), portOf(first.HTTP), portOf(last.HTTP), portOf(first.P2P), portOf(last.P2P), portOf(first.RPC), portOf(last.RPC))
	}
	if out.ClientProperties != "" {
		how := map[string]string{
			"SSL":            "SSL with mutual TLS; clients take %s (CA and a client certificate)",
			"SASL_PLAINTEXT": "SASL_PLAINTEXT; %s logs in as admin (SCRAM-SHA-512, the password given)",
			"SASL_SSL":       "SASL_SSL; %s logs in as admin (SCRAM-SHA-512 over TLS, the password given)",
		}[out.Listener]
		fmt.Fprintf(w, "\nKafka listeners are "+how+":\n  stele topic create orders --brokers $(cat %s) --command-config %s\n",
			out.ClientProperties, out.BrokersFile, out.ClientProperties)
		return
	}
	fmt.Fprintf(w, "\nThen use it like Kafka:\n  stele topic create orders --brokers $(cat %s)\n", out.BrokersFile)
}

// toleranceText says how many faulty brokers a cluster of n tolerates.
func toleranceText(n, f int) string {
	if f == 0 {
		return "it tolerates no faulty broker (4 brokers tolerate one)"
	}
	return fmt.Sprintf("it keeps its guarantees with up to %d of them crashed or malicious", f)
}

// portOf returns the port of a host:port.
func portOf(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}
