package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
)

// `stele cluster upgrade` (docs/cluster.md, "Upgrades"): validators vote
// for an app version upgrade at a height through a broker's HTTP API
// (POST /v1/cluster/upgrade); without --height it shows the upgrade state.
// The votes are signed for the chain id the broker reports
// (GET /v1/cluster/upgrade), and no other chain counts them.

type clusterUpgradeOptions struct {
	http    string
	height  string
	version uint32
	name    string
	dir     string
	keys    []string
}

func newClusterUpgradeCmd(g *globalOptions) *cobra.Command {
	var o clusterUpgradeOptions
	cmd := &cobra.Command{
		Use:   "upgrade [--height H|+N --version V --name NAME (--dir CLUSTERDIR | --key FILE...)]",
		Short: "Schedule an app version upgrade at a height, or show the upgrade state",
		Long: `Vote, with validator keys, for the chain to run app version --version from
height --height on (+N: N heights after the broker's committed height). The
upgrade is scheduled once validators holding more than 2/3 of the voting
power voted for the same height, version and name; brokers whose binary
cannot run the version stop after committing the height before it (exit
status 10), and the new binary, started on the same data directory, goes on
from there. A later schedule replaces one that has not happened yet;
scheduling the running version cancels.

--dir signs with every node's key under a directory 'stele cluster init'
wrote; --key signs with one validator key file (CometBFT's
priv_validator_key.json), and may be repeated, so that validators run apart
each add their vote. Without --height: show the app version, the scheduled
upgrade and the votes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := httpAddress(cmd, o.http)
			if err != nil {
				return err
			}
			var st httpapi.UpgradeView
			if err := upgradeRequest(cmd.Context(), g, http.MethodGet, addr, nil, &st); err != nil {
				return err
			}
			if o.height == "" {
				return printUpgrade(cmd.OutOrStdout(), g, st)
			}
			req, err := o.request(st)
			if err != nil {
				return err
			}
			if err := upgradeRequest(cmd.Context(), g, http.MethodPost, addr, req, &st); err != nil {
				return err
			}
			return printUpgrade(cmd.OutOrStdout(), g, st)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.http, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	f.StringVar(&o.height, "height", "", "the first height applied under the new version, or +N from the committed height")
	f.Uint32Var(&o.version, "version", 0, "the app version to run (default: the running one + 1)")
	f.StringVar(&o.name, "name", "", "a name for the upgrade (letters, digits, . _ - +), e.g. the release")
	f.StringVar(&o.dir, "dir", "", "sign with every node's validator key under this cluster directory")
	f.StringArrayVar(&o.keys, "key", nil, "sign with this validator key file (repeatable)")
	return cmd
}

// request builds the signed vote.
func (o clusterUpgradeOptions) request(st httpapi.UpgradeView) (httpapi.UpgradeRequest, error) {
	var p fsm.UpgradePlan
	if rel, ok := strings.CutPrefix(o.height, "+"); ok {
		n, err := strconv.ParseInt(rel, 10, 64)
		if err != nil || n <= 0 {
			return httpapi.UpgradeRequest{}, usageErrorf("--height %q: want a height or +N", o.height)
		}
		p.Height = st.Height + n
	} else {
		h, err := strconv.ParseInt(o.height, 10, 64)
		if err != nil || h <= 0 {
			return httpapi.UpgradeRequest{}, usageErrorf("--height %q: want a height or +N", o.height)
		}
		p.Height = h
	}
	p.Version, p.Name = o.version, o.name
	if p.Version == 0 {
		p.Version = st.AppVersion + 1
	}
	keys, err := o.signers()
	if err != nil {
		return httpapi.UpgradeRequest{}, err
	}
	if st.ChainID == "" {
		return httpapi.UpgradeRequest{}, fmt.Errorf("the broker did not say which chain it runs: it is older than this command; upgrade votes are signed for a chain id")
	}
	req := httpapi.UpgradeRequest{ChainID: st.ChainID, Height: p.Height, Version: p.Version, Name: p.Name}
	for _, k := range keys {
		s := fsm.SignUpgrade(st.ChainID, p, k.addr, k.key)
		req.Signatures = append(req.Signatures, httpapi.UpgradeSignature{Validator: hex.EncodeToString(s.Validator[:]), Signature: s.Signature[:]})
	}
	return req, nil
}

type validatorKey struct {
	key  ed25519.PrivateKey
	addr [20]byte
}

// signers reads the keys --dir and --key name, each validator once.
func (o clusterUpgradeOptions) signers() ([]validatorKey, error) {
	return validatorKeys(o.dir, o.keys, "an upgrade")
}

// validatorKeys reads every node's validator key under dir (a directory
// 'stele cluster init' wrote) and the key files files, each validator
// once; what names what they sign, for the error when there are none.
func validatorKeys(dir string, files []string, what string) ([]validatorKey, error) {
	var paths []string
	if dir != "" {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("--dir: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() && nodeDirPattern.MatchString(e.Name()) {
				paths = append(paths, filepath.Join(dir, e.Name(), "cometbft", "config", "priv_validator_key.json"))
			}
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("--dir %s holds no node directories (node0, node1, ...): give the directory 'stele cluster init' wrote", dir)
		}
	}
	paths = append(paths, files...)
	if len(paths) == 0 {
		return nil, usageErrorf("give --dir CLUSTERDIR or --key FILE: %s is signed by validators", what)
	}
	sort.Strings(paths)
	var keys []validatorKey
	seen := map[[20]byte]bool{}
	for _, p := range paths {
		k, addr, err := cometbft.ValidatorKeyFile(p)
		if err != nil {
			return nil, err
		}
		if !seen[addr] {
			seen[addr] = true
			keys = append(keys, validatorKey{key: k, addr: addr})
		}
	}
	return keys, nil
}

func upgradeRequest(ctx context.Context, g *globalOptions, method, addr string, body, out any) error {
	if err := jsonRequest(ctx, g, method, httpBase(addr)+"/v1/cluster/upgrade", body, out); err != nil {
		return fmt.Errorf("%s %s/v1/cluster/upgrade: %w", method, addr, err)
	}
	return nil
}

func printUpgrade(w io.Writer, g *globalOptions, st httpapi.UpgradeView) error {
	if g.jsonOutput() {
		return writeJSON(w, st)
	}
	fmt.Fprintf(w, "height %d: app version %d (this broker's binary runs up to %d)\n", st.Height, st.AppVersion, st.MaxAppVersion)
	if p := st.Scheduled; p != nil {
		fmt.Fprintf(w, "scheduled: app version %d from height %d (%q)\n", p.Version, p.Height, p.Name)
	} else {
		fmt.Fprintln(w, "scheduled: none")
	}
	for _, v := range st.Votes {
		fmt.Fprintf(w, "vote by %s: app version %d from height %d (%q)\n", v.Validator, v.Upgrade.Version, v.Upgrade.Height, v.Upgrade.Name)
	}
	return nil
}
