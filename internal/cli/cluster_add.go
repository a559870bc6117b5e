package cli

// stele cluster add (docs/cluster.md, "Adding a broker"): write the next
// broker's data directory beside the ones `stele cluster init` wrote, and
// submit the membership change that adds it to the chain's broker
// directory as a replica, signed by the cluster administrator (DIR/admin.key)
// or by validators. stele cluster approve CHANGE signs a change printed by
// add (or by demote, promote and remove) with other keys, on their hosts.

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/internal/listener"
	"github.com/stele-io/stele/internal/server"
)

type clusterAddOptions struct {
	dir      string
	host     string
	rack     string
	http     string
	keys     []string
	adminKey string
}

// clusterAddOutput is the JSON form of `stele cluster add`'s report.
type clusterAddOutput struct {
	Node clusterNode `json:"node"`
	// Change is the membership change that adds it, for stele cluster
	// approve on validators' hosts when the signatures given were not
	// enough.
	Change string                 `json:"change"`
	Result httpapi.MembershipView `json:"result"`
	// Applied: the broker is in the chain's directory now.
	Applied bool `json:"applied"`
}

func newClusterAddCmd(g *globalOptions) *cobra.Command {
	var o clusterAddOptions
	cmd := &cobra.Command{
		Use:   "add --dir DIR [--host H] [--rack R] [--http BROKER] [--admin-key FILE | --key FILE...]",
		Short: "Write a new broker's data directory and add it to the running cluster as a replica",
		Long: `Write the next broker's data directory, DIR/nodeN (N one more than the
highest node id under DIR): its CometBFT keys, the cluster's genesis, and a
node file naming the cluster's brokers as its peers and as the servers it
state-syncs from, with the port layout of 'stele cluster init' (Kafka on
P+N, HTTP on P+100+N, P2P on P+200+N, RPC on P+300+N). In a cluster made
with --tls it gets a certificate from DIR/ca.

Then submit the membership change that adds it to the chain's broker
directory as a replica (app version 8), to a running broker (--http,
default the first broker's HTTP address): signed with the cluster
administrator's key (DIR/admin.key, or --admin-key), which applies it
alone; without one, with every validator key under DIR; with --key FILE,
with those validator keys only. When the signatures given hold 2/3 of the
voting power or less, the change waits for more: run the printed
'stele cluster approve CHANGE' on other validators' hosts with their keys.
If the change cannot be submitted, the directory is removed again.

Start the broker with 'stele serve --data DIR/nodeN': it joins by state
sync when the other brokers have pruned old blocks (by replaying them
otherwise), follows the chain, serves reads and is listed in Metadata, and
votes on nothing; once it has caught up it says so every 2 s and leads
partitions (from app version 10). With --rack R, consumers that
set client.rack=R (franz-go's Rack, librdkafka's client.rack) are sent to
read from it (KIP-392's preferred read replica): a read replica. Once it
has caught up, 'stele cluster promote N --power P' makes it a validator.`,
		Example: `  stele cluster add --dir ./cluster
  stele serve --data ./cluster/node4
  stele cluster promote 4 --power 10 --dir ./cluster

  stele cluster add --dir ./prod --host 10.0.0.5 --rack eu-west-1b --http 10.0.0.1:9192 --admin-key ./prod/admin.key`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runClusterAdd(cmd, g, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "the cluster directory stele cluster init wrote (required)")
	f.StringVar(&o.host, "host", "", "host name or IP address the new broker runs on, as others reach it (default: the first broker's host)")
	f.StringVar(&o.http, "http", "", "a running broker's HTTP API host:port (default: the first broker's under --dir)")
	f.StringVar(&o.rack, "rack", "", "the new broker's rack (Kafka's broker.rack): consumers that set client.rack to it read from this broker (KIP-392)")
	f.StringArrayVar(&o.keys, "key", nil, "sign with this validator key file (repeatable) instead of DIR/admin.key or DIR's validator keys")
	f.StringVar(&o.adminKey, "admin-key", "", "sign with this cluster administrator's key (default DIR/admin.key when it exists)")
	return cmd
}

// existingNode is a node directory under the cluster directory.
type existingNode struct {
	dir  string
	file server.NodeFile
}

func runClusterAdd(cmd *cobra.Command, g *globalOptions, o clusterAddOptions) error {
	if o.dir == "" {
		return usageErrorf("--dir is required: the cluster directory 'stele cluster init' wrote")
	}
	nodes, err := readClusterNodes(o.dir)
	if err != nil {
		return err
	}
	first := nodes[0]
	n, err := planAddedNode(o, nodes)
	if err != nil {
		return err
	}
	httpAddr := o.http
	if httpAddr == "" {
		httpAddr = advertisedHTTP(first.file)
	} else if httpAddr, err = httpAddress(cmd, httpAddr); err != nil {
		return err
	}
	ctx := cmd.Context()
	var mv httpapi.MembershipView
	if err := membershipRequest(ctx, g, http.MethodGet, httpAddr, nil, &mv); err != nil {
		return err
	}
	if err := writeAddedNode(o.dir, first, &n); err != nil {
		_ = os.RemoveAll(n.Dir)
		return err
	}
	key, addr, err := cometbft.ValidatorKey(filepath.Join(n.Dir, "cometbft"))
	if err != nil {
		_ = os.RemoveAll(n.Dir)
		return err
	}
	n.Validator = strings.ToUpper(hex.EncodeToString(addr[:]))
	entry := fsm.BrokerEntry{NodeID: n.NodeID, Kafka: n.Kafka, HTTP: n.HTTP, Rack: o.rack}
	copy(entry.PubKey[:], key.Public().(ed25519.PublicKey))
	req := httpapi.MembershipRequest{ChainID: mv.ChainID, Epoch: mv.Epoch, Validator: hex.EncodeToString(addr[:]), Broker: httpapi.BrokerViewOf(entry)}

	signer := membershipSigner{keys: o.keys, adminKey: o.adminKey}
	if len(o.keys) == 0 && o.adminKey == "" {
		if _, err := os.Stat(filepath.Join(o.dir, adminKeyFileName)); err == nil {
			signer.adminKey = filepath.Join(o.dir, adminKeyFileName)
		} else {
			signer.dir = o.dir
		}
	}
	before := mv.Epoch
	if err := signer.submit(ctx, g, httpAddr, &req, &mv); err != nil {
		_ = os.RemoveAll(n.Dir)
		return fmt.Errorf("%w (the directory %s was removed again)", err, n.Dir)
	}
	out := clusterAddOutput{Node: n, Change: encodeChange(req), Result: mv, Applied: mv.Epoch > before}
	if g.jsonOutput() {
		return writeJSON(cmd.OutOrStdout(), out)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "Wrote broker %d to %s (validator %s): Kafka %s, HTTP %s, P2P %s.\n", n.NodeID, n.Dir, n.Validator, n.Kafka, n.HTTP, n.P2P)
	if out.Applied {
		fmt.Fprintf(w, "Added to the cluster as a replica at height %d (membership epoch %d).\n", mv.Height, mv.Epoch)
	} else {
		fmt.Fprintf(w, "Vote recorded at height %d; the change is applied once validators holding more than 2/3 of the power approve it: on their hosts run\n  stele cluster approve %s --key <its priv_validator_key.json>\n", mv.Height, out.Change)
	}
	fmt.Fprintf(w, "Start it (on %s):\n  stele serve --data %s\nand once it has caught up (stele cluster status), make it a validator:\n  stele cluster promote %d --power 10 --dir %s\n", n.Host, n.Dir, n.NodeID, o.dir)
	return nil
}

// readClusterNodes reads the node files under a cluster directory, by
// node id.
func readClusterNodes(dir string) ([]existingNode, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--dir: %w", err)
	}
	var nodes []existingNode
	for _, e := range ents {
		if !e.IsDir() || !nodeDirPattern.MatchString(e.Name()) {
			continue
		}
		d := filepath.Join(dir, e.Name())
		f, ok, err := server.ReadNodeFile(d)
		if err != nil {
			return nil, err
		}
		if ok {
			nodes = append(nodes, existingNode{dir: d, file: f})
		}
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("--dir %s holds no node directories with a node file (node0, node1, ...): give the directory 'stele cluster init' wrote", dir)
	}
	slices.SortFunc(nodes, func(a, b existingNode) int { return int(a.file.NodeID) - int(b.file.NodeID) })
	return nodes, nil
}

// advertisedHTTP is the address a node's HTTP API is reached at, with the
// scheme it serves.
func advertisedHTTP(f server.NodeFile) string {
	host, port, _ := net.SplitHostPort(f.HTTP)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if a, _, err := net.SplitHostPort(f.AdvertiseKafka); err == nil {
			host = a
		}
	}
	scheme := "http://"
	if f.HTTPTLS {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port)
}

// planAddedNode lays the new broker out after the existing ones: the next
// node id, the same port layout and listeners, every existing broker as a
// peer and state-sync server.
func planAddedNode(o clusterAddOptions, nodes []existingNode) (clusterNode, error) {
	first, last := nodes[0].file, nodes[len(nodes)-1].file
	id := last.NodeID + 1
	if id >= maxClusterNodes {
		return clusterNode{}, fmt.Errorf("node id %d: the port layout of stele cluster init holds at most %d brokers", id, maxClusterNodes)
	}
	_, p, err := net.SplitHostPort(first.Kafka)
	kp, perr := strconv.Atoi(p)
	if err != nil || perr != nil {
		return clusterNode{}, fmt.Errorf("%s: kafka %q is not host:port", nodes[0].dir, first.Kafka)
	}
	base := kp - int(first.NodeID)
	if base+rpcPortOffset+int(id) > 65535 {
		return clusterNode{}, fmt.Errorf("node id %d: port %d is out of range", id, base+rpcPortOffset+int(id))
	}
	host := o.host
	if host == "" {
		adv := first.AdvertiseKafka
		if adv == "" {
			adv = first.Kafka
		}
		host, _, _ = net.SplitHostPort(adv)
	} else if host, err = checkHost(host); err != nil {
		return clusterNode{}, err
	}
	listen := listenHost(host)
	kport, hport, pport, rport := base+int(id), base+httpPortOffset+int(id), base+p2pPortOffset+int(id), base+rpcPortOffset+int(id)
	n := clusterNode{NodeID: id, Dir: filepath.Join(o.dir, fmt.Sprintf("node%d", id)), Host: host,
		Kafka: hostPort(host, kport), HTTP: hostPort(host, hport), P2P: hostPort(host, pport), RPC: hostPort(host, rport)}
	f := first // TLS, SASL and super users as the cluster's brokers have them
	f.NodeID = id
	f.Kafka, f.HTTP, f.P2P, f.RPC = hostPort(listen, kport), hostPort(listen, hport), hostPort(listen, pport), hostPort(listen, rport)
	f.AdvertiseKafka = n.Kafka // not in the genesis directory: the node file says where clients reach it
	f.P2PExternal = ""
	if first.P2PExternal != "" || listen != host {
		f.P2PExternal = n.P2P
	}
	if proto, _, ok := strings.Cut(first.Listeners, "://"); ok {
		f.Listeners = proto + "://" + f.Kafka
	}
	// Every existing broker is a peer and a state-sync server: each node
	// file names the others, so together they name all.
	f.Peers, f.StateSyncRPC = nil, nil
	for _, e := range nodes {
		for _, p := range e.file.Peers {
			if !slices.Contains(f.Peers, p) {
				f.Peers = append(f.Peers, p)
			}
		}
		for _, r := range e.file.StateSyncRPC {
			if !slices.Contains(f.StateSyncRPC, r) {
				f.StateSyncRPC = append(f.StateSyncRPC, r)
			}
		}
	}
	slices.Sort(f.Peers)
	slices.Sort(f.StateSyncRPC)
	n.file = f
	return n, nil
}

// writeAddedNode writes the new node's directory: keys, the genesis of
// the first node, a certificate from DIR/ca when the brokers serve TLS,
// and the node file. It fills in the P2P node id.
func writeAddedNode(dir string, first existingNode, n *clusterNode) error {
	if _, err := os.Stat(n.Dir); err == nil {
		return fmt.Errorf("%s already exists: it holds a broker's keys and data", n.Dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(n.Dir, 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %w", n.Dir, err)
	}
	home := filepath.Join(n.Dir, "cometbft")
	id, err := cometbft.InitKeys(home)
	if err != nil {
		return err
	}
	n.P2PNodeID = id.NodeID
	genesis, err := os.ReadFile(filepath.Join(first.dir, "cometbft", "config", "genesis.json"))
	if err != nil {
		return fmt.Errorf("the cluster's genesis: %w", err)
	}
	if err := os.WriteFile(filepath.Join(home, "config", "genesis.json"), genesis, 0o644); err != nil {
		return err
	}
	if n.file.SSLCert != "" {
		if err := issueAddedNodeCert(dir, n); err != nil {
			return err
		}
	}
	return server.WriteNodeFile(n.Dir, n.file)
}

// issueAddedNodeCert issues the new broker's certificate from the
// cluster's CA (DIR/ca, stele cluster init --tls).
func issueAddedNodeCert(dir string, n *clusterNode) error {
	caDir := filepath.Join(dir, clusterCADir)
	ca, err := listener.ReadPair(filepath.Join(caDir, listener.CACertFile), filepath.Join(caDir, listener.CAKeyFile))
	if err != nil {
		return fmt.Errorf("the cluster's brokers serve TLS and the new one needs a certificate from the cluster's CA: %w", err)
	}
	dns, ips := []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if ip := net.ParseIP(n.Host); ip != nil {
		ips = append(ips, ip)
	} else if n.Host != "localhost" {
		dns = append(dns, n.Host)
	}
	p, err := listener.Issue(ca, fmt.Sprintf("node%d", n.NodeID), dns, ips, time.Now())
	if err != nil {
		return err
	}
	tlsDir := filepath.Join(n.Dir, nodeTLSDir)
	if err := listener.WritePair(p, filepath.Join(tlsDir, "broker.crt"), filepath.Join(tlsDir, "broker.key")); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(tlsDir, listener.CACertFile), ca.Cert, 0o644)
}

// encodeChange is a change as `stele cluster approve` takes it: its JSON
// without signatures, base64url.
func encodeChange(req httpapi.MembershipRequest) string {
	req.Signatures, req.AdminSignature = nil, nil
	b, _ := json.Marshal(req)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeChange reads what encodeChange wrote.
func decodeChange(s string) (httpapi.MembershipRequest, error) {
	var req httpapi.MembershipRequest
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return req, usageErrorf("CHANGE is not what stele cluster add, demote, promote or remove printed (base64url): %v", err)
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return req, usageErrorf("CHANGE is not what stele cluster add, demote, promote or remove printed: %v", err)
	}
	if len(req.Signatures) > 0 || len(req.AdminSignature) > 0 {
		return req, usageErrorf("CHANGE carries signatures: give the change as printed")
	}
	return req, nil
}

// describeChange says what a change does, for a person about to sign it.
func describeChange(req httpapi.MembershipRequest) string {
	switch {
	case isRotation(req):
		return fmt.Sprintf("replace broker %d's key (validator %s) by key %s (Kafka %s, HTTP %s, rack %q)", req.Broker.NodeID, strings.ToUpper(req.Validator), req.Broker.PubKey, req.Broker.Kafka, req.Broker.HTTP, req.Broker.Rack)
	case req.Broker != nil:
		return fmt.Sprintf("add broker %d (validator %s, key %s, Kafka %s, HTTP %s, rack %q) as a replica", req.Broker.NodeID, strings.ToUpper(req.Validator), req.Broker.PubKey, req.Broker.Kafka, req.Broker.HTTP, req.Broker.Rack)
	case req.Remove:
		return fmt.Sprintf("remove validator %s from the cluster for good", strings.ToUpper(req.Validator))
	case req.Power == 0:
		return fmt.Sprintf("demote validator %s to a replica", strings.ToUpper(req.Validator))
	}
	return fmt.Sprintf("give validator %s voting power %d", strings.ToUpper(req.Validator), req.Power)
}

// membershipSigner signs a change with validator keys (every one under
// dir, and files in keys) and the administrator's key, and submits it.
type membershipSigner struct {
	dir      string
	keys     []string
	adminKey string
}

// submit signs req with the signer's keys that are validators' now (and
// the administrator's key) and POSTs it; mv is the answer.
func (s membershipSigner) submit(ctx context.Context, g *globalOptions, addr string, req *httpapi.MembershipRequest, mv *httpapi.MembershipView) error {
	ch, err := changeOf(*req)
	if err != nil {
		return err
	}
	if s.dir != "" || len(s.keys) > 0 {
		var st httpapi.ClusterStatus
		if err := jsonRequest(ctx, g, http.MethodGet, httpBase(addr)+"/v1/cluster", nil, &st); err != nil {
			return fmt.Errorf("GET %s/v1/cluster: %w", addr, err)
		}
		voters := map[string]bool{}
		for _, v := range st.Validators {
			if v.Power > 0 {
				voters[strings.ToUpper(v.Address)] = true
			}
		}
		keys, err := validatorKeys(s.dir, s.keys, "a membership change")
		if err != nil {
			return err
		}
		for _, k := range keys {
			// Only validators vote: under --dir the replicas' keys (the
			// target's own, when it is promoted or added) are left out.
			if !voters[strings.ToUpper(hex.EncodeToString(k.addr[:]))] {
				continue
			}
			sig := fsm.SignMembership(req.ChainID, ch, k.addr, k.key)
			req.Signatures = append(req.Signatures, httpapi.UpgradeSignature{Validator: hex.EncodeToString(sig.Validator[:]), Signature: sig.Signature[:]})
		}
	}
	if s.adminKey != "" {
		k, err := readProducerKey(s.adminKey)
		if err != nil {
			return fmt.Errorf("--admin-key: %w", err)
		}
		req.AdminSignature = ed25519.Sign(k, fsm.MembershipStatement(req.ChainID, ch))
	}
	if len(req.Signatures) == 0 && req.AdminSignature == nil {
		return fmt.Errorf("none of the keys given is a validator's now: only validators, or the cluster administrator's key, vote for membership changes")
	}
	return membershipRequest(ctx, g, http.MethodPost, addr, req, mv)
}

// changeOf is the change a request describes, as validators sign it.
func changeOf(req httpapi.MembershipRequest) (fsm.MembershipChange, error) {
	ch := fsm.MembershipChange{Epoch: req.Epoch, Power: req.Power, Remove: req.Remove}
	raw, err := hex.DecodeString(req.Validator)
	if err != nil || len(raw) != 20 {
		return ch, fmt.Errorf("validator %q: not a 20-byte address", req.Validator)
	}
	ch.Validator = [20]byte(raw)
	if ch.Broker, err = req.Broker.Entry(); err != nil {
		return ch, err
	}
	return ch, nil
}

func newClusterApproveCmd(g *globalOptions) *cobra.Command {
	var o clusterMembershipOptions
	cmd := &cobra.Command{
		Use:   "approve CHANGE (--key FILE... | --dir CLUSTERDIR | --admin-key FILE)",
		Short: "Sign a membership change printed by add, demote, promote or remove with more keys",
		Long: `Sign the membership change CHANGE, as 'stele cluster add', 'demote',
'promote' and 'remove' print it when their signatures were not enough,
with this host's validator key (--key), and submit the vote to a broker
(--http). The change is printed before it is signed. Votes add up until
validators holding more than 2/3 of the voting power approved; a change
signed for an earlier membership epoch is refused as stale (the membership
moved on: run the command that made it again).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := decodeChange(args[0])
			if err != nil {
				return err
			}
			addr, err := httpAddress(cmd, o.http)
			if err != nil {
				return err
			}
			if o.dir == "" && len(o.keys) == 0 && o.adminKey == "" {
				return usageErrorf("give --key FILE (this host's validator key), --dir CLUSTERDIR or --admin-key FILE")
			}
			ctx := cmd.Context()
			var mv httpapi.MembershipView
			if err := membershipRequest(ctx, g, http.MethodGet, addr, nil, &mv); err != nil {
				return err
			}
			if mv.ChainID != req.ChainID {
				return fmt.Errorf("the change is for chain %q and the broker at %s is of chain %q", req.ChainID, addr, mv.ChainID)
			}
			if mv.Epoch != req.Epoch {
				return fmt.Errorf("the change was made for membership epoch %d and the membership is at epoch %d: it was applied, or another change was; make it again", req.Epoch, mv.Epoch)
			}
			if !g.jsonOutput() {
				fmt.Fprintf(cmd.ErrOrStderr(), "approving on chain %s at membership epoch %d: %s\n", req.ChainID, req.Epoch, describeChange(req))
			}
			before := mv.Epoch
			if err := (membershipSigner{dir: o.dir, keys: o.keys, adminKey: o.adminKey}).submit(ctx, g, addr, &req, &mv); err != nil {
				return err
			}
			return printChangeResult(cmd.OutOrStdout(), g, mv, before, describeChange(req), req)
		},
	}
	o.flags(cmd)
	return cmd
}

// printChangeResult writes the answer to a vote: applied, or recorded
// with the votes so far and how to add more.
func printChangeResult(w io.Writer, g *globalOptions, mv httpapi.MembershipView, before uint64, what string, req httpapi.MembershipRequest) error {
	if g.jsonOutput() {
		return writeJSON(w, mv)
	}
	if mv.Epoch > before {
		fmt.Fprintf(w, "applied at height %d: %s; CometBFT counts a change of power from two heights later (membership epoch %d)\n", mv.Height, what, mv.Epoch)
		return nil
	}
	fmt.Fprintf(w, "vote recorded at height %d: %s, once validators holding more than 2/3 of the power approve; votes so far:\n", mv.Height, what)
	for _, v := range mv.Votes {
		fmt.Fprintf(w, "  %s: validator %s to power %d (epoch %d)\n", v.Voter, v.Validator, v.Power, v.Epoch)
	}
	fmt.Fprintf(w, "more validators approve it on their hosts with:\n  stele cluster approve %s --key <its priv_validator_key.json>\n", encodeChange(req))
	return nil
}
