package chaos

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
	type key struct {
		addr string
		sign func(fsm.MembershipChange, string) fsm.CertSig
	}
	keys := map[string]key{}
	var targetAddr string
	for i, n := range c.Nodes {
		k, addr, err := cometbft.ValidatorKeyFile(filepath.Join(n.Dir, "cometbft", "config", "priv_validator_key.json"))
		if err != nil {
			c.T.Fatal(err)
		}
		a := strings.ToUpper(hex.EncodeToString(addr[:]))
		keys[a] = key{addr: a, sign: func(ch fsm.MembershipChange, chain string) fsm.CertSig { return fsm.SignMembership(chain, ch, addr, k) }}
		if i == target {
			targetAddr = a
		}
	}
	hc := &http.Client{Transport: c.HTTPC.Transport, Timeout: 30 * time.Second}
	base := c.Nodes[via].HTTPURL
	get := func(path string, out any) error {
		resp, err := hc.Get(base + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(out)
	}
	what := fmt.Sprintf("node%d's voting power set to %d", target, power)
	c.Eventually(2*time.Minute, what, func() error {
		var st httpapi.ClusterStatus
		if err := get("/v1/cluster", &st); err != nil {
			return err
		}
		var voters []string
		for _, v := range st.Validators {
			a := strings.ToUpper(v.Address)
			if a == targetAddr && v.Power == power {
				return nil // applied
			}
			if v.Power > 0 {
				voters = append(voters, a)
			}
		}
		var mv httpapi.MembershipView
		if err := get("/v1/cluster/membership", &mv); err != nil {
			return err
		}
		raw, _ := hex.DecodeString(targetAddr)
		ch := fsm.MembershipChange{Epoch: mv.Epoch, Validator: [20]byte(raw), Power: power}
		req := httpapi.MembershipRequest{ChainID: mv.ChainID, Epoch: mv.Epoch, Validator: targetAddr, Power: power}
		for _, a := range voters {
			s := keys[a].sign(ch, mv.ChainID)
			req.Signatures = append(req.Signatures, httpapi.UpgradeSignature{Validator: hex.EncodeToString(s.Validator[:]), Signature: s.Signature[:]})
		}
		body, _ := json.Marshal(req)
		resp, err := hc.Post(base+"/v1/cluster/membership", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return fmt.Errorf("POST /v1/cluster/membership: %s %s (checking that it applied)", resp.Status, bytes.TrimSpace(msg))
	})
	c.T.Logf("%s %s", harness.Clock(), what)
	if power == 0 {
		return
	}
	c.Eventually(time.Minute, fmt.Sprintf("node%d signing again", target), func() error {
		var st httpapi.ClusterStatus
		if err := get("/v1/cluster", &st); err != nil {
			return err
		}
		for _, v := range st.Validators {
			if strings.ToUpper(v.Address) == targetAddr && !v.Signing {
				return fmt.Errorf("node%d not signing yet (last signed height %d, the chain at %d)", target, v.LastSignedHeight, st.Height)
			}
		}
		return nil
	})
}
