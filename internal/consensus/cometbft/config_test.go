package cometbft

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

const peerID = "0123456789abcdef0123456789abcdef01234567"

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig("/tmp/x")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cc := c.cometConfig(1 << 20)
	if err := cc.ValidateBasic(); err != nil {
		t.Fatalf("CometBFT rejects the config built from the defaults: %v", err)
	}
	if cc.Mempool.MaxTxBytes != 1<<20 {
		t.Errorf("mempool max_tx_bytes %d, want the chain's 1 MiB cap", cc.Mempool.MaxTxBytes)
	}
	if cc.Consensus.CreateEmptyBlocks || cc.Mempool.Recheck || cc.TxIndex.Indexer != "null" ||
		cc.Instrumentation.Prometheus || cc.RPC.ListenAddress != "" || cc.P2P.AddrBookStrict || !cc.P2P.AllowDuplicateIP {
		t.Errorf("CometBFT config does not carry Stele's settings: %+v %+v", cc.Consensus, cc.Mempool)
	}
}

func TestConfigValidateRejects(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"no home":            func(c *Config) { c.Home = "" },
		"bad p2p":            func(c *Config) { c.P2PListen = "127.0.0.1:26656" },
		"p2p without port":   func(c *Config) { c.P2PListen = "tcp://127.0.0.1" },
		"bad rpc":            func(c *Config) { c.RPCListen = "http://x" },
		"zero propose":       func(c *Config) { c.TimeoutPropose = 0 },
		"negative commit":    func(c *Config) { c.TimeoutCommit = -time.Millisecond },
		"negative empty":     func(c *Config) { c.CreateEmptyBlocksInterval = -time.Second },
		"zero max tx":        func(c *Config) { c.MaxTxBytes = 0 },
		"zero mempool":       func(c *Config) { c.MempoolSize = 0 },
		"mempool below tx":   func(c *Config) { c.MempoolMaxTxsBytes = c.MaxTxBytes - 1 },
		"zero rate":          func(c *Config) { c.P2PRate = 0 },
		"bad external":       func(c *Config) { c.ExternalAddress = "nohostport" },
		"peer without id":    func(c *Config) { c.PersistentPeers = []string{"127.0.0.1:1"} },
		"peer with short id": func(c *Config) { c.PersistentPeers = []string{"abcd@127.0.0.1:1"} },
		"peer without port":  func(c *Config) { c.PersistentPeers = []string{peerID + "@127.0.0.1"} },
		"moniker line break": func(c *Config) { c.Moniker = "a\nb" },
		"state sync mode":    func(c *Config) { c.StateSync.Mode = "maybe" },
		"state sync no rpc":  func(c *Config) { c.StateSync.Mode = StateSyncAuto },
		"state sync quick": func(c *Config) {
			c.StateSync = StateSyncConfig{Mode: StateSyncOn, RPCServers: []string{"a:1"}, DiscoveryTime: time.Second}
		},
	} {
		c := DefaultConfig("/tmp/x")
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate() = %v, want ErrConfig", name, err)
		}
	}
}

func TestConfigTextRoundTrip(t *testing.T) {
	c := DefaultConfig("/var/lib/stele/cometbft")
	c.Moniker = "node 2"
	c.PersistentPeers = []string{peerID + "@127.0.0.1:26656", peerID + "@10.0.0.2:26656"}
	c.RPCListen = "tcp://127.0.0.1:26657"
	c.TimeoutCommit = 1500 * time.Microsecond
	c.ExternalAddress = "node2.example:26656"
	c.StateSync = StateSyncConfig{Mode: StateSyncAuto, RPCServers: []string{"10.0.0.1:26657", "http://10.0.0.3:26657"},
		DiscoveryTime: 7 * time.Second, ChunkRequestTimeout: 20 * time.Second}
	got, err := ParseConfig(c.String())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip:\n%s\ngave\n%s", c, got)
	}
	if def, err := ParseConfig(""); err != nil || !reflect.DeepEqual(def, DefaultConfig("")) {
		t.Errorf("ParseConfig(\"\") = %v, %v; want the defaults", def, err)
	}
	partial, err := ParseConfig("# comment\n\ntimeout_commit = 0s\nhome=/h\n")
	if err != nil || partial.TimeoutCommit != 0 || partial.Home != "/h" || partial.MaxTxBytes != DefaultMaxTxBytes {
		t.Errorf("partial config: %+v, %v", partial, err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, text := range []string{
		"nonsense",
		"unknown_key = 1",
		"timeout_commit = soon",
		"max_tx_bytes = 1e6",
		"home = a\nhome = b",
	} {
		if _, err := ParseConfig(text); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseConfig(%q) = %v, want ErrConfig", text, err)
		}
	}
}

// FuzzParseConfig: ParseConfig never panics, and whatever it accepts
// survives a String/ParseConfig round trip unchanged.
func FuzzParseConfig(f *testing.F) {
	f.Add(DefaultConfig("/h").String())
	f.Add("persistent_peers = a@b:1, ,c@d:2\nmempool_size = -3\n")
	f.Add("timeout_commit = 1h2m3.5s\n# x\nmoniker = = =\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseConfig(text)
		if err != nil {
			return
		}
		_ = c.Validate()
		again, err := ParseConfig(c.String())
		if err != nil {
			t.Fatalf("re-parsing %q: %v", c.String(), err)
		}
		if !reflect.DeepEqual(again, c) && !(len(again.PersistentPeers) == 0 && len(c.PersistentPeers) == 0) {
			t.Fatalf("round trip changed the config:\n%q\n%q", c.String(), again.String())
		}
		if strings.Count(c.String(), "\n") != 17 {
			t.Fatalf("text form has a line break inside a value: %q", c.String())
		}
	})
}
