package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// What the chain itself says: the genesis validators and the committed
// block headers, read from CometBFT's RPC (the `rpc` listener of each
// node file, on base+300+i).

// ValidatorAddrs returns each node's validator address (upper-case hex, as
// CometBFT logs it) from the genesis `stele cluster init` wrote, whose
// validators are named "node0", "node1", ...
func (c *Cluster) ValidatorAddrs() map[int]string {
	c.T.Helper()
	data, err := os.ReadFile(filepath.Join(c.Nodes[0].Dir, "cometbft", "config", "genesis.json"))
	if err != nil {
		c.T.Fatal(err)
	}
	var g struct {
		Validators []struct {
			Address string `json:"address"`
			Name    string `json:"name"`
		} `json:"validators"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		c.T.Fatalf("genesis.json: %v", err)
	}
	out := map[int]string{}
	for _, v := range g.Validators {
		var i int
		if _, err := fmt.Sscanf(v.Name, "node%d", &i); err != nil || i < 0 || i >= len(c.Nodes) {
			c.T.Fatalf("genesis.json: validator %s is named %q, not nodeI", v.Address, v.Name)
		}
		out[i] = v.Address
	}
	if len(out) != len(c.Nodes) {
		c.T.Fatalf("genesis.json names %d validators for %d nodes", len(out), len(c.Nodes))
	}
	return out
}

// RPCAddr returns node i's CometBFT RPC address from its node file.
func (c *Cluster) RPCAddr(i int) string {
	c.T.Helper()
	data, err := os.ReadFile(filepath.Join(c.Nodes[i].Dir, "stele.json"))
	if err != nil {
		c.T.Fatal(err)
	}
	var nf struct {
		RPC string `json:"rpc"`
	}
	if err := json.Unmarshal(data, &nf); err != nil || nf.RPC == "" {
		c.T.Fatalf("node%d/stele.json has no rpc address (%v)", i, err)
	}
	return nf.RPC
}

// Header is what a test reads of a committed block header.
type Header struct {
	Proposer string    // validator address, upper-case hex
	Time     time.Time // block time: the median of the validators' vote timestamps
}

// BlockProposers asks node i's RPC (/blockchain) for the headers of heights
// 1..top and returns each height's proposer address.
func (c *Cluster) BlockProposers(i int, top int64) (map[int64]string, error) {
	hs, err := c.BlockHeaders(i, 1, top)
	if err != nil {
		return nil, err
	}
	out := map[int64]string{}
	for h, hd := range hs {
		out[h] = hd.Proposer
	}
	return out, nil
}

// BlockHeaders asks node i's RPC (/blockchain) for the headers of heights
// lo..hi.
func (c *Cluster) BlockHeaders(i int, lo, hi int64) (map[int64]Header, error) {
	out := map[int64]Header{}
	for from := lo; from <= hi; from += 20 {
		to := min(from+19, hi)
		var result struct {
			BlockMetas []struct {
				Header struct {
					Height   string    `json:"height"`
					Proposer string    `json:"proposer_address"`
					Time     time.Time `json:"time"`
				} `json:"header"`
			} `json:"block_metas"`
		}
		path := fmt.Sprintf("/blockchain?minHeight=%d&maxHeight=%d", from, to)
		if err := c.rpc(i, path, &result); err != nil {
			return nil, err
		}
		for _, m := range result.BlockMetas {
			h, err := strconv.ParseInt(m.Header.Height, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("node%d RPC %s: height %q", i, path, m.Header.Height)
			}
			out[h] = Header{Proposer: m.Header.Proposer, Time: m.Header.Time}
		}
	}
	if int64(len(out)) != hi-lo+1 {
		return nil, fmt.Errorf("node%d RPC: %d headers for heights %d-%d", i, len(out), lo, hi)
	}
	return out, nil
}

// ReadFileIfExists reads a file, returning no data for a missing one.
func ReadFileIfExists(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// CommitTimes asks node i's RPC (/commit) for the precommits that
// committed height h and returns each signer's vote timestamp, by
// validator address.
func (c *Cluster) CommitTimes(i int, h int64) (map[string]time.Time, error) {
	var result struct {
		SignedHeader struct {
			Commit struct {
				Signatures []struct {
					Flag      int       `json:"block_id_flag"`
					Validator string    `json:"validator_address"`
					Timestamp time.Time `json:"timestamp"`
				} `json:"signatures"`
			} `json:"commit"`
		} `json:"signed_header"`
	}
	if err := c.rpc(i, fmt.Sprintf("/commit?height=%d", h), &result); err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for _, s := range result.SignedHeader.Commit.Signatures {
		if s.Flag == 2 { // BlockIDFlagCommit: a precommit for the block
			out[s.Validator] = s.Timestamp
		}
	}
	return out, nil
}

// ChainID returns the chain id of the genesis `stele cluster init` wrote.
func (c *Cluster) ChainID() string {
	c.T.Helper()
	data, err := os.ReadFile(filepath.Join(c.Nodes[0].Dir, "cometbft", "config", "genesis.json"))
	if err != nil {
		c.T.Fatal(err)
	}
	var g struct {
		ChainID string `json:"chain_id"`
	}
	if err := json.Unmarshal(data, &g); err != nil || g.ChainID == "" {
		c.T.Fatalf("genesis.json: chain_id %q (%v)", g.ChainID, err)
	}
	return g.ChainID
}

// SetGenesisAppVersion rewrites every node's genesis, before the chain's
// first start, to start at app version v; 0 writes the genesis of a
// release that set no app version (CometBFT's default 0, which Stele runs
// as version 1).
func (c *Cluster) SetGenesisAppVersion(v uint32) {
	c.T.Helper()
	for _, n := range c.Nodes {
		path := filepath.Join(n.Dir, "cometbft", "config", "genesis.json")
		data, err := os.ReadFile(path)
		if err != nil {
			c.T.Fatal(err)
		}
		var g map[string]any
		if err := json.Unmarshal(data, &g); err != nil {
			c.T.Fatalf("%s: %v", path, err)
		}
		params, _ := g["consensus_params"].(map[string]any)
		if params == nil {
			c.T.Fatalf("%s has no consensus_params", path)
		}
		params["version"] = map[string]any{"app": strconv.FormatUint(uint64(v), 10)}
		if data, err = json.MarshalIndent(g, "", "  "); err != nil {
			c.T.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			c.T.Fatal(err)
		}
	}
}

// BlockTxs returns the transactions of node i's block at height h, from
// its CometBFT RPC (/block).
func (c *Cluster) BlockTxs(i int, h int64) ([][]byte, error) {
	var result struct {
		Block struct {
			Data struct {
				Txs [][]byte `json:"txs"` // base64, as encoding/json reads []byte
			} `json:"data"`
		} `json:"block"`
	}
	if err := c.rpc(i, fmt.Sprintf("/block?height=%d", h), &result); err != nil {
		return nil, err
	}
	return result.Block.Data.Txs, nil
}

// rpc GETs path from node i's CometBFT RPC and decodes its result into
// result.
func (c *Cluster) rpc(i int, path string, result any) error {
	url := "http://" + c.RPCAddr(i) + path
	resp, err := c.HTTPC.Get(url)
	if err != nil {
		return fmt.Errorf("node%d RPC: %w", i, err)
	}
	defer resp.Body.Close()
	var body struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("node%d RPC %s: %w", i, url, err)
	}
	if len(body.Error) > 0 {
		return fmt.Errorf("node%d RPC %s: %s", i, url, body.Error)
	}
	if err := json.Unmarshal(body.Result, result); err != nil {
		return fmt.Errorf("node%d RPC %s: %w", i, url, err)
	}
	return nil
}
