package cometbft

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	cmtcfg "github.com/cometbft/cometbft/config"
	"github.com/cometbft/cometbft/crypto"
	"github.com/cometbft/cometbft/crypto/ed25519"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	"github.com/cometbft/cometbft/p2p"
	"github.com/cometbft/cometbft/privval"
	"github.com/cometbft/cometbft/types"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/sasl"
)

// ErrNotInitialised is returned by Start when the home directory lacks the
// files Init writes.
var ErrNotInitialised = errors.New("stele/consensus/cometbft: home not initialised (run Init first)")

// ErrAlreadyInitialised is returned by InitCluster when a home already has a
// genesis: a cluster's homes must all get the same new genesis.
var ErrAlreadyInitialised = errors.New("stele/consensus/cometbft: home already initialised")

// Defaults of InitOptions.
const (
	// DefaultMaxBlockBytes is the block size limit (consensus param
	// block.max_bytes): the smallest round size that holds one transaction of
	// DefaultMaxTxBytes plus CometBFT's share of a block (1 MiB of evidence,
	// header, last commit). Larger blocks add no throughput (a single
	// validator moves ~4 blocks/s of 8 MB here) but lengthen the worst-case
	// block time and propagation that every produce in the block waits for.
	DefaultMaxBlockBytes = 18 << 20
	// DefaultValidatorPower is the voting power of every genesis validator.
	DefaultValidatorPower = 10
)

// Layout of a home, as CometBFT's defaults have it.
const (
	configFile      = "config/config.toml"
	genesisFile     = "config/genesis.json"
	nodeKeyFile     = "config/node_key.json"
	privValKeyFile  = "config/priv_validator_key.json"
	privValStateDir = "data"
	privValState    = "data/priv_validator_state.json"
)

// InitOptions are the chain-wide settings a genesis fixes, plus the node
// configuration Init records in config.toml.
type InitOptions struct {
	// ChainID names the chain; empty means "stele-" and 8 random hex digits.
	ChainID string
	// MaxBlockBytes is the consensus parameter block.max_bytes (0 means
	// DefaultMaxBlockBytes). It must hold one transaction of MaxTxBytes.
	MaxBlockBytes int64
	// MaxTxBytes is the largest transaction the chain accepts (0 means
	// DefaultMaxTxBytes). It is recorded in the genesis app_state, so every
	// validator's ProcessProposal applies the same limit.
	MaxTxBytes int64
	// GenesisTime is the chain's start time (zero means now).
	GenesisTime time.Time
	// AppVersion is the app version the chain starts at, the consensus
	// parameter version.app (0 means fsm.MaxAppVersion, the newest this
	// binary runs).
	AppVersion uint64
	// Users are users the chain starts with (`stele cluster init
	// --admin-password-file`): recorded in the genesis app_state, created
	// by the state machine as it applies the first block.
	Users []GenesisUser
	// Config is written to config.toml by Init (which sets its Home); a
	// Config without P2PListen means DefaultConfig. InitCluster ignores it.
	Config Config
	// Brokers, for InitCluster: one entry per node, in the nodes' order,
	// with NodeID, Kafka and HTTP set; InitCluster fills in Validator and
	// records the list in the genesis. Empty means no directory.
	Brokers []GenesisBroker
	// AdminKey is the cluster administrator's ed25519 public key (`stele
	// cluster init` writes its private half to DIR/admin.key): recorded in
	// the genesis app_state, it may sign membership changes alone.
	AdminKey []byte
}

// GenesisAppState is the application part of the genesis (app_state).
type GenesisAppState struct {
	// MaxTxBytes is the largest transaction a valid proposal may hold.
	MaxTxBytes int64 `json:"max_tx_bytes"`
	// Brokers is the cluster's broker directory: which validator each Kafka
	// node id is and where clients reach it. Every broker reads the same
	// list, so Metadata answers agree. Empty for a single node started with
	// Init (it then describes only itself).
	Brokers []GenesisBroker `json:"brokers,omitempty"`
	// Users are the users the chain starts with: their SCRAM credentials
	// (never a password), created as the first block is applied.
	Users []GenesisUser `json:"users,omitempty"`
	// AdminKey is the cluster administrator's ed25519 public key, which may
	// sign membership changes alone (fsm/cluster's membership_change.go);
	// absent: only the validators may.
	AdminKey []byte `json:"admin_key,omitempty"`
}

// GenesisUser is a user of the genesis, with its SCRAM credentials.
type GenesisUser struct {
	Name        string              `json:"name"`
	Credentials []GenesisCredential `json:"credentials"`
}

// GenesisCredential is one SCRAM credential: RFC 5802's salt, iteration
// count, StoredKey and ServerKey, base64 in the JSON.
type GenesisCredential struct {
	Mechanism  string `json:"mechanism"`
	Iterations int32  `json:"iterations"`
	Salt       []byte `json:"salt"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
}

// ScramCredentials returns u's credentials, or what makes one unusable.
func (u GenesisUser) ScramCredentials() ([]sasl.Credential, error) {
	if u.Name == "" || len(u.Credentials) == 0 {
		return nil, fmt.Errorf("stele/consensus/cometbft: genesis user %q: a name and at least one credential", u.Name)
	}
	var out []sasl.Credential
	for _, c := range u.Credentials {
		m, ok := sasl.ParseScramMechanism(c.Mechanism)
		if !ok {
			return nil, fmt.Errorf("stele/consensus/cometbft: genesis user %q: mechanism %q is not SCRAM-SHA-256 or SCRAM-SHA-512", u.Name, c.Mechanism)
		}
		cr := sasl.Credential{Mechanism: m, Iterations: c.Iterations, Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey}
		if err := cr.Check(); err != nil {
			return nil, fmt.Errorf("stele/consensus/cometbft: genesis user %q: %w", u.Name, err)
		}
		out = append(out, cr)
	}
	return out, nil
}

// GenesisUserOf is the genesis form of a user's credentials.
func GenesisUserOf(name string, creds []sasl.Credential) GenesisUser {
	u := GenesisUser{Name: name}
	for _, c := range creds {
		u.Credentials = append(u.Credentials, GenesisCredential{Mechanism: c.Mechanism.String(), Iterations: c.Iterations,
			Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey})
	}
	return u
}

// GenesisBroker is one broker of the directory.
type GenesisBroker struct {
	NodeID int32 `json:"node_id"`
	// Kafka is the advertised Kafka address, host:port.
	Kafka string `json:"kafka"`
	// HTTP is the advertised HTTP address, host:port.
	HTTP string `json:"http,omitempty"`
	// Validator is the hex address of the broker's validator key.
	Validator string `json:"validator"`
}

// Identity is what a home's keys tell others about the node.
type Identity struct {
	// NodeID is the peer-to-peer ID (hex of the node key's address), the
	// "nodeid" of "nodeid@host:port".
	NodeID string
	// ValidatorPubKey is the consensus (validator) public key.
	ValidatorPubKey crypto.PubKey
}

func (o *InitOptions) setDefaults() error {
	if o.ChainID == "" {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("stele/consensus/cometbft: chain ID: %w", err)
		}
		o.ChainID = "stele-" + hex.EncodeToString(b[:])
	}
	if o.MaxBlockBytes == 0 {
		o.MaxBlockBytes = DefaultMaxBlockBytes
	}
	if o.AppVersion == 0 {
		o.AppVersion = uint64(fsm.MaxAppVersion)
	}
	if o.MaxTxBytes == 0 {
		o.MaxTxBytes = DefaultMaxTxBytes
	}
	if o.GenesisTime.IsZero() {
		o.GenesisTime = time.Now().UTC().Round(time.Millisecond)
	}
	return nil
}

// Init creates a single-validator CometBFT home under home: the node key,
// the validator key and its sign state, a genesis naming this node the only
// validator, and config.toml. Files already there are left as they are, so
// Init on an initialised home changes nothing.
func Init(home string, opts InitOptions) error {
	if err := opts.setDefaults(); err != nil {
		return err
	}
	id, err := InitKeys(home)
	if err != nil {
		return err
	}
	if !exists(filepath.Join(home, genesisFile)) {
		doc, err := NewGenesis(opts, []Identity{id})
		if err != nil {
			return err
		}
		if err := WriteGenesis(home, doc); err != nil {
			return err
		}
	}
	if !exists(filepath.Join(home, configFile)) {
		cfg := opts.Config
		if cfg.P2PListen == "" {
			cfg = DefaultConfig(home)
		}
		cfg.Home = home
		if err := WriteConfigFile(cfg); err != nil {
			return err
		}
	}
	return nil
}

// InitCluster initialises one home per node of a new cluster: keys in each,
// one genesis naming every node a validator of equal power, and each node's
// config.toml listing the others as persistent peers. It returns the
// configs with PersistentPeers filled in. A peer is dialled at its
// ExternalAddress, or else at its P2PListen address, which must then not be
// a wildcard.
func InitCluster(nodes []Config, opts InitOptions) ([]Config, error) {
	if len(nodes) == 0 {
		return nil, errors.New("stele/consensus/cometbft: InitCluster needs at least one node")
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	ids := make([]Identity, len(nodes))
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		if err := n.Validate(); err != nil {
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
		if exists(filepath.Join(n.Home, genesisFile)) {
			return nil, fmt.Errorf("%w: %s", ErrAlreadyInitialised, n.Home)
		}
		addr, err := dialAddress(n)
		if err != nil {
			return nil, fmt.Errorf("stele/consensus/cometbft: node %d: %w", i, err)
		}
		addrs[i] = addr
		if ids[i], err = InitKeys(n.Home); err != nil {
			return nil, err
		}
	}
	doc, err := NewGenesis(opts, ids)
	if err != nil {
		return nil, err
	}
	out := make([]Config, len(nodes))
	for i, n := range nodes {
		n.PersistentPeers = nil
		for j := range nodes {
			if j != i {
				n.PersistentPeers = append(n.PersistentPeers, ids[j].NodeID+"@"+addrs[j])
			}
		}
		if err := WriteGenesis(n.Home, doc); err != nil {
			return nil, err
		}
		if err := WriteConfigFile(n); err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// dialAddress is the host:port other nodes dial to reach n.
func dialAddress(n Config) (string, error) {
	if n.ExternalAddress != "" {
		return n.ExternalAddress, nil
	}
	hostport := strings.TrimPrefix(n.P2PListen, "tcp://")
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", fmt.Errorf("p2p_listen %s is a wildcard address: set ExternalAddress", n.P2PListen)
	}
	return hostport, nil
}

// InitKeys creates home's directories, node key and validator key (with an
// empty sign state) where they are missing, and returns the node's
// identity. A validator key without its sign state is an error: signing
// again from height 0 could equivocate, so the state must be restored, not
// recreated.
func InitKeys(home string) (Identity, error) {
	for _, dir := range []string{filepath.Join(home, "config"), filepath.Join(home, privValStateDir)} {
		if err := os.MkdirAll(dir, cmtcfg.DefaultDirPerm); err != nil {
			return Identity{}, fmt.Errorf("stele/consensus/cometbft: %w", err)
		}
	}
	nodeKey, err := p2p.LoadOrGenNodeKey(filepath.Join(home, nodeKeyFile))
	if err != nil {
		return Identity{}, fmt.Errorf("stele/consensus/cometbft: node key: %w", err)
	}
	keyPath, statePath := filepath.Join(home, privValKeyFile), filepath.Join(home, privValState)
	var pub crypto.PubKey
	switch {
	case exists(keyPath):
		key, err := readPrivValKey(keyPath)
		if err != nil {
			return Identity{}, err
		}
		if !exists(statePath) {
			return Identity{}, fmt.Errorf("stele/consensus/cometbft: %s exists but %s is missing: restore it from a backup (recreating it risks double signing)", keyPath, statePath)
		}
		pub = key.PubKey
	default:
		priv := ed25519.GenPrivKey()
		pub = priv.PubKey()
		key := privval.FilePVKey{Address: pub.Address(), PubKey: pub, PrivKey: priv}
		data, err := cmtjson.MarshalIndent(key, "", "  ")
		if err != nil {
			return Identity{}, fmt.Errorf("stele/consensus/cometbft: validator key: %w", err)
		}
		if !exists(statePath) {
			state, err := encodeSignState(privval.FilePVLastSignState{})
			if err != nil {
				return Identity{}, err
			}
			if err := writeFileAtomic(statePath, state, 0o600); err != nil {
				return Identity{}, err
			}
		}
		if err := writeFileAtomic(keyPath, data, 0o600); err != nil {
			return Identity{}, err
		}
	}
	return Identity{NodeID: string(nodeKey.ID()), ValidatorPubKey: pub}, nil
}

// NewGenesis returns the genesis of a new chain whose validators are the
// given nodes, each with DefaultValidatorPower.
func NewGenesis(opts InitOptions, validators []Identity) (*types.GenesisDoc, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if len(validators) == 0 {
		return nil, errors.New("stele/consensus/cometbft: a genesis needs at least one validator")
	}
	params := types.DefaultConsensusParams()
	params.Block.MaxBytes = opts.MaxBlockBytes
	params.Block.MaxGas = -1
	params.Version.App = opts.AppVersion
	if err := checkBlockFitsTx(params, len(validators), opts.MaxTxBytes); err != nil {
		return nil, err
	}
	var brokers []GenesisBroker
	if len(opts.Brokers) > 0 {
		if len(opts.Brokers) != len(validators) {
			return nil, fmt.Errorf("stele/consensus/cometbft: %d brokers for %d validators", len(opts.Brokers), len(validators))
		}
		for i, b := range opts.Brokers {
			b.Validator = validators[i].ValidatorPubKey.Address().String()
			brokers = append(brokers, b)
		}
	}
	appState, err := json.Marshal(GenesisAppState{MaxTxBytes: opts.MaxTxBytes, Brokers: brokers, Users: opts.Users, AdminKey: opts.AdminKey})
	if err != nil {
		return nil, fmt.Errorf("stele/consensus/cometbft: app state: %w", err)
	}
	doc := &types.GenesisDoc{
		GenesisTime:     opts.GenesisTime,
		ChainID:         opts.ChainID,
		InitialHeight:   1,
		ConsensusParams: params,
		AppState:        appState,
	}
	for i, v := range validators {
		doc.Validators = append(doc.Validators, types.GenesisValidator{
			Address: v.ValidatorPubKey.Address(),
			PubKey:  v.ValidatorPubKey,
			Power:   DefaultValidatorPower,
			Name:    fmt.Sprintf("node%d", i),
		})
	}
	if err := doc.ValidateAndComplete(); err != nil {
		return nil, fmt.Errorf("stele/consensus/cometbft: genesis: %w", err)
	}
	return doc, nil
}

// checkBlockFitsTx reports whether a block can hold one transaction of
// maxTx bytes next to a full evidence section and the last commit of
// nVals validators.
func checkBlockFitsTx(params *types.ConsensusParams, nVals int, maxTx int64) error {
	if maxTx <= 0 {
		return fmt.Errorf("stele/consensus/cometbft: max tx bytes %d must be positive", maxTx)
	}
	overhead := types.MaxOverheadForBlock + types.MaxHeaderBytes +
		types.MaxCommitBytes(nVals) + params.Evidence.MaxBytes
	need := types.ComputeProtoSizeForTxs([]types.Tx{make([]byte, maxTx)})
	if params.Block.MaxBytes < overhead+need {
		return fmt.Errorf("stele/consensus/cometbft: block max bytes %d cannot hold a %d-byte transaction (needs at least %d)",
			params.Block.MaxBytes, maxTx, overhead+need)
	}
	return nil
}

// WriteGenesis writes doc as home's config/genesis.json, replacing any.
func WriteGenesis(home string, doc *types.GenesisDoc) error {
	data, err := cmtjson.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("stele/consensus/cometbft: genesis: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(home, "config"), cmtcfg.DefaultDirPerm); err != nil {
		return fmt.Errorf("stele/consensus/cometbft: %w", err)
	}
	return writeFileAtomic(filepath.Join(home, genesisFile), data, 0o644)
}

// ReadGenesis reads home's genesis and its Stele app state.
func ReadGenesis(home string) (*types.GenesisDoc, GenesisAppState, error) {
	path := filepath.Join(home, genesisFile)
	if !exists(path) {
		return nil, GenesisAppState{}, fmt.Errorf("%w: no %s", ErrNotInitialised, path)
	}
	doc, err := types.GenesisDocFromFile(path)
	if err != nil {
		return nil, GenesisAppState{}, fmt.Errorf("stele/consensus/cometbft: %w", err)
	}
	var st GenesisAppState
	if len(doc.AppState) > 0 {
		if err := json.Unmarshal(doc.AppState, &st); err != nil {
			return nil, GenesisAppState{}, fmt.Errorf("stele/consensus/cometbft: genesis app_state: %w", err)
		}
	}
	if st.MaxTxBytes <= 0 {
		return nil, GenesisAppState{}, fmt.Errorf("stele/consensus/cometbft: genesis app_state has no positive max_tx_bytes")
	}
	for _, u := range st.Users {
		if _, err := u.ScramCredentials(); err != nil {
			return nil, GenesisAppState{}, err
		}
	}
	if st.AdminKey != nil && len(st.AdminKey) != 32 {
		return nil, GenesisAppState{}, fmt.Errorf("stele/consensus/cometbft: genesis app_state admin_key is %d bytes, want an ed25519 public key of 32", len(st.AdminKey))
	}
	return doc, st, nil
}

// WriteConfigFile writes cfg, as CometBFT would run it, to
// cfg.Home/config/config.toml, replacing any.
func WriteConfigFile(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	dir := filepath.Join(cfg.Home, "config")
	if err := os.MkdirAll(dir, cmtcfg.DefaultDirPerm); err != nil {
		return fmt.Errorf("stele/consensus/cometbft: %w", err)
	}
	// CometBFT's writer exits the process on a write error; render into a
	// temporary file we already know we can write, then rename it.
	f, err := os.CreateTemp(dir, ".config.toml.*")
	if err != nil {
		return fmt.Errorf("stele/consensus/cometbft: %w", err)
	}
	tmp := f.Name()
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("stele/consensus/cometbft: %w", err)
	}
	cmtcfg.WriteConfigFile(tmp, cfg.cometConfig(cfg.MaxTxBytes))
	if err := os.Rename(tmp, filepath.Join(cfg.Home, configFile)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("stele/consensus/cometbft: %w", err)
	}
	return nil
}

// readPrivValKey reads a validator key file without CometBFT's loader,
// which exits the process on a bad file.
func readPrivValKey(path string) (privval.FilePVKey, error) {
	var key privval.FilePVKey
	data, err := os.ReadFile(path)
	if err != nil {
		return key, fmt.Errorf("stele/consensus/cometbft: validator key: %w", err)
	}
	if err := cmtjson.Unmarshal(data, &key); err != nil {
		return key, fmt.Errorf("stele/consensus/cometbft: validator key %s: %w", path, err)
	}
	if key.PrivKey == nil {
		return key, fmt.Errorf("stele/consensus/cometbft: validator key %s has no private key", path)
	}
	key.PubKey = key.PrivKey.PubKey()
	return key, nil
}

// loadFilePV loads the broker's validator key and sign state (signer.go).
func loadFilePV(home string) (*filePV, error) {
	return loadPV(filepath.Join(home, privValKeyFile), filepath.Join(home, privValState))
}

// writeFileAtomic writes data to path through a synced temporary file and a
// rename, so a crash leaves the old file or the new one.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("stele/consensus/cometbft: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("stele/consensus/cometbft: writing %s: %w", path, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
