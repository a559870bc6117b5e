package chaos

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/test/harness"
)

// setPower sets node target's voting power (power -1: back to its genesis
// power, 10 for a cluster init made) with every validator's signed vote,
// asked of node via, as `stele cluster demote|promote` would: a
// FaultMembership. The change is retried until the chain applied it (the
// guard refuses a demotion while a broker that recovered from the fault
// before is not signing yet); after a promotion it waits until every
// broker but target shows target signing, so the next fault begins on
// four validators.
func setPower(c *harness.Cluster, via, target int, power int64) {
	c.T.Helper()
	if power < 0 {
		power = 10
	}
	m := newMembershipClient(c, via)
	addr := m.address(target)
	m.change(fmt.Sprintf("node%d's voting power set to %d", target, power), addr, power, false,
		func(v httpapi.ValidatorView) bool { return v.Power == power })
	if power == 0 {
		return
	}
	c.Eventually(time.Minute, fmt.Sprintf("node%d signing again", target), func() error {
		var st httpapi.ClusterStatus
		if err := m.get("/v1/cluster", &st); err != nil {
			return err
		}
		for _, v := range st.Validators {
			if strings.ToUpper(v.Address) == addr && !v.Signing {
				return fmt.Errorf("node%d not signing yet (last signed height %d, the chain at %d)", target, v.LastSignedHeight, st.Height)
			}
		}
		return nil
	})
}

// addReplica adds a broker to the cluster with `stele cluster add` (the
// administrator's key) through node via, starts it and waits until it has
// caught up with the others as a replica: a FaultMembership. It returns
// the new node's index.
func addReplica(c *harness.Cluster, via int) int {
	c.T.Helper()
	var args []string
	if *secure {
		// The CLI reaches the brokers' HTTPS APIs with the cluster's CA.
		props := filepath.Join(c.Dir, "command.properties")
		ca := filepath.Join(filepath.Dir(c.Nodes[0].Dir), "ca", "ca.crt")
		if err := os.WriteFile(props, []byte("security.protocol=SSL\nssl.ca.location="+ca+"\n"), 0o600); err != nil {
			c.T.Fatal(err)
		}
		args = append(args, "--command-config", props)
	}
	others := c.All()
	n, out := c.AddNode(via, args...)
	c.T.Logf("%s %s", harness.Clock(), strings.TrimSpace(out))
	c.Start(n.Idx)
	c.WaitCaughtUp(rejoinBound(c.MaxHeight(others...)), n.Idx, others...)
	c.T.Logf("%s node%d (broker %d) added and caught up as a replica", harness.Clock(), n.Idx, n.NodeID)
	return n.Idx
}

// removeReplica takes node i, which addReplica added, out of the cluster
// with every validator's signed vote asked of node via, as `stele cluster
// remove` would, waits for it to exit with status 11 and drops it from the
// cluster's nodes, so that the run ends on the four it began with.
func removeReplica(c *harness.Cluster, via, i int) {
	c.T.Helper()
	m := newMembershipClient(c, via)
	m.change(fmt.Sprintf("node%d removed from the cluster", i), m.address(i), 0, true,
		func(v httpapi.ValidatorView) bool { return v.Role == httpapi.RoleRemoved })
	err := c.WaitExit(i, time.Minute, "its removal")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 11 {
		c.T.Fatalf("node%d ended with %v after its removal, want exit status 11", i, err)
	}
	if i != len(c.Nodes)-1 {
		c.T.Fatalf("node%d is not the last node added", i)
	}
	c.Nodes = c.Nodes[:i]
}

// membershipClient signs membership changes with every node's validator
// key and submits them to one broker's HTTP API.
type membershipClient struct {
	c    *harness.Cluster
	hc   *http.Client
	base string
	keys map[string]func(fsm.MembershipChange, string) fsm.CertSig
	addr []string // by node index
}

func newMembershipClient(c *harness.Cluster, via int) *membershipClient {
	c.T.Helper()
	m := &membershipClient{c: c, hc: &http.Client{Transport: c.HTTPC.Transport, Timeout: 30 * time.Second}, base: c.Nodes[via].HTTPURL,
		keys: map[string]func(fsm.MembershipChange, string) fsm.CertSig{}}
	for _, n := range c.Nodes {
		k, addr, err := cometbft.ValidatorKeyFile(filepath.Join(n.Dir, "cometbft", "config", "priv_validator_key.json"))
		if err != nil {
			c.T.Fatal(err)
		}
		a := strings.ToUpper(hex.EncodeToString(addr[:]))
		m.keys[a] = func(ch fsm.MembershipChange, chain string) fsm.CertSig { return fsm.SignMembership(chain, ch, addr, k) }
		m.addr = append(m.addr, a)
	}
	return m
}

// address is node i's validator address.
func (m *membershipClient) address(i int) string { return m.addr[i] }

func (m *membershipClient) get(path string, out any) error {
	resp, err := m.hc.Get(m.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// change votes, with every validator's key, for validator target's power
// (or its removal) until the broker lists target as applied says.
func (m *membershipClient) change(what, target string, power int64, remove bool, applied func(httpapi.ValidatorView) bool) {
	c := m.c
	c.T.Helper()
	c.Eventually(2*time.Minute, what, func() error {
		var st httpapi.ClusterStatus
		if err := m.get("/v1/cluster", &st); err != nil {
			return err
		}
		var voters []string
		for _, v := range st.Validators {
			a := strings.ToUpper(v.Address)
			if a == target && applied(v) {
				return nil
			}
			if v.Power > 0 {
				voters = append(voters, a)
			}
		}
		var mv httpapi.MembershipView
		if err := m.get("/v1/cluster/membership", &mv); err != nil {
			return err
		}
		raw, _ := hex.DecodeString(target)
		ch := fsm.MembershipChange{Epoch: mv.Epoch, Validator: [20]byte(raw), Power: power, Remove: remove}
		req := httpapi.MembershipRequest{ChainID: mv.ChainID, Epoch: mv.Epoch, Validator: target, Power: power, Remove: remove}
		for _, a := range voters {
			sign, ok := m.keys[a]
			if !ok {
				continue
			}
			s := sign(ch, mv.ChainID)
			req.Signatures = append(req.Signatures, httpapi.UpgradeSignature{Validator: hex.EncodeToString(s.Validator[:]), Signature: s.Signature[:]})
		}
		body, _ := json.Marshal(req)
		resp, err := m.hc.Post(m.base+"/v1/cluster/membership", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return fmt.Errorf("POST /v1/cluster/membership: %s %s (checking that it applied)", resp.Status, bytes.TrimSpace(msg))
	})
	c.T.Logf("%s %s", harness.Clock(), what)
}
