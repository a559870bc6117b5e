package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
)

// stele plugin deploy|list|describe|remove (issue 24, docs/plugins.md;
// new: plugin_new.go):
// WebAssembly plugins on a topic's hooks, over a broker's HTTP API
// (--http, /v1/plugins). deploy compiles and starts the module here first,
// so what cannot be a plugin is refused before anything is sent. With
// --sign each command of the deployment (the deployment, then the
// module's chunks) is signed administration (sign.go), as
// stele.admin.signed=true requires.

func newPluginCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("plugin", "Manage WebAssembly plugins: filters and transforms that run on every broker inside the deterministic apply",
		newPluginDeployCmd(g), newPluginListCmd(g), newPluginDescribeCmd(g), newPluginRemoveCmd(g), newPluginNewCmd(g))
}

func pluginsURL(addr string, rest ...string) string {
	u := httpBase(addr) + "/v1/plugins"
	for _, r := range rest {
		u += "/" + url.PathEscape(r)
	}
	return u
}

func newPluginDeployCmd(g *globalOptions) *cobra.Command {
	var wasmFile, topic, hook string
	var config []string
	var sign *adminSigning
	cmd := &cobra.Command{
		Use:   "deploy NAME --wasm FILE --topic T [--hook produce|fetch] [--config KEY=VALUE ...]",
		Short: "Deploy a plugin's module on a topic's hook; in effect on every broker at one height",
		Long: `Deploy a WebAssembly module built with the Go SDK (pkg/plugin) as plugin NAME on
the topic's hook. The module is replicated state: it is uploaded in chunks of
768 KiB, one block each, and takes effect in the block that applies its last
chunk, on every broker at that height, replacing the module NAME ran before.
Deploying the module NAME runs already, with another topic or config, takes
effect at once. A produce plugin runs on every batch produced to the topic,
inside the apply, on every broker; a fetch plugin (app version 18) on the
records a consumer is sent, on the broker it fetches from (outside what
proofs cover). The snapshot hook is not built yet. Needs ALTER_CONFIGS on the
topic; under stele.admin.signed=true, --sign.`,
		Example: `  stele plugin deploy redact --wasm redact.wasm --topic orders --config fields=card,customer.ssn
  stele plugin deploy decrypt --wasm encrypt.wasm --topic orders --hook fetch --config secret.key.k1=... --config readers=User:alice
  stele plugin deploy redact --wasm redact.wasm --topic orders --config fields=card --sign admin.key --principal admin`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := fsm.ValidPluginName(name); err != nil {
				return usageErrorf("%v", err)
			}
			if wasmFile == "" || topic == "" {
				return usageErrorf("deploy needs --wasm FILE and --topic T")
			}
			switch hook {
			case fsm.PluginHookProduce, fsm.PluginHookFetch:
			case fsm.PluginHookSnapshot:
				return usageErrorf("--hook %s: not built yet; plugins run on the produce and fetch hooks (docs/plugins.md)", hook)
			default:
				return usageErrorf("--hook %q: produce, fetch or snapshot", hook)
			}
			cfg, err := httpapi.ParsePluginConfig(config)
			if err != nil {
				return usageErrorf("--config: %v", err)
			}
			wasm, err := os.ReadFile(wasmFile)
			if err != nil {
				return err
			}
			if err := httpapi.CheckPluginModule(cmd.Context(), wasm, hook); err != nil {
				return fmt.Errorf("%s cannot be a plugin: %w", wasmFile, err)
			}
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			var height int64
			uploaded := false
			if sign.on() {
				for i, c := range fsm.DeployPluginCommands(name, topic, hook, cfg, wasm) {
					res, err := sign.submitResult(cmd.Context(), g, c)
					if err != nil {
						return fmt.Errorf("deploy plugin %s: %w", name, err)
					}
					height = res.Height
					if i == 0 && res.BytesNeeded != nil && *res.BytesNeeded == 0 {
						break
					}
					uploaded = true
				}
			} else {
				addr, err := httpAddress(cmd, sign.http)
				if err != nil {
					return err
				}
				q := url.Values{"topic": {topic}, "hook": {hook}, "config": config}
				var res httpapi.PluginResult
				if err := rawRequest(cmd.Context(), g, "PUT", pluginsURL(addr, name)+"?"+q.Encode(), "application/wasm", wasm, &res); err != nil {
					return fmt.Errorf("deploy plugin %s: %w", name, err)
				}
				height, uploaded = res.Height, res.Uploaded
			}
			how := "uploaded"
			if !uploaded {
				how = "the module ran already; its topic and config changed"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Deployed plugin %s on %s's %s hook (%d bytes, %s), in effect from height %d.\n", name, topic, hook, len(wasm), how, height)
			return nil
		},
	}
	cmd.Flags().StringVar(&wasmFile, "wasm", "", "the plugin's WebAssembly module (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared)")
	cmd.Flags().StringVar(&topic, "topic", "", "the topic whose hook runs it")
	cmd.Flags().StringVar(&hook, "hook", fsm.PluginHookProduce, "the hook: produce or fetch (snapshot is not built yet)")
	cmd.Flags().StringArrayVar(&config, "config", nil, "a config entry KEY=VALUE the plugin reads; repeat for several, in order")
	sign = addTenantSignFlags(cmd)
	return cmd
}

// rawRequest sends body (of contentType) and decodes the JSON answer into
// out, as jsonRequest does for a JSON body.
func rawRequest(ctx context.Context, g *globalOptions, method, u, contentType string, body []byte, out any) error {
	// Each chunk of a module is a block of its own.
	ctx, cancel := context.WithTimeout(ctx, g.timeout+time.Duration(len(body)/fsm.MaxPluginChunkBytes+1)*10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	return doJSON(g, req, out)
}

func newPluginListCmd(g *globalOptions) *cobra.Command {
	var httpAddr string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the plugins deployed, and uploads under way",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := httpAddress(cmd, httpAddr)
			if err != nil {
				return err
			}
			var all []httpapi.Plugin
			if err := jsonRequest(cmd.Context(), g, "GET", pluginsURL(addr), nil, &all); err != nil {
				return fmt.Errorf("list plugins: %w", err)
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), all)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "PLUGIN\tTOPIC\tHOOK\tSTATE\tSIZE\tSHA256\tHEIGHT")
			for _, p := range all {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.16s\t%d\n", p.Name, p.Topic, p.Hook, pluginState(p), sizeCell(p), p.Digest, p.Height)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}

func pluginState(p httpapi.Plugin) string {
	if p.State == fsm.PluginStateUploading {
		return fmt.Sprintf("uploading %d%%", p.Received*100/max(p.Size, 1))
	}
	return p.State
}

func sizeCell(p httpapi.Plugin) string { return fmt.Sprintf("%d", p.Size) }

func newPluginDescribeCmd(g *globalOptions) *cobra.Command {
	var httpAddr string
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Describe a plugin: its topic, hook, module digest, config, and an upload under way",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, err := httpAddress(cmd, httpAddr)
			if err != nil {
				return err
			}
			var ps []httpapi.Plugin
			if err := jsonRequest(cmd.Context(), g, "GET", pluginsURL(addr, args[0]), nil, &ps); err != nil {
				return fmt.Errorf("describe plugin %s: %w", args[0], err)
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), ps)
			}
			out := cmd.OutOrStdout()
			for _, p := range ps {
				fmt.Fprintf(out, "Plugin %s on %s's %s hook: %s since height %d\n", p.Name, p.Topic, p.Hook, pluginState(p), p.Height)
				fmt.Fprintf(out, "  module  %d bytes, sha256 %s\n", p.Size, p.Digest)
				var kv []string
				for _, c := range p.Config {
					kv = append(kv, c.Key+"="+c.Value)
				}
				fmt.Fprintf(out, "  config  %s\n", strings.Join(kv, " "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}

func newPluginRemoveCmd(g *globalOptions) *cobra.Command {
	var topic string
	var sign *adminSigning
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a plugin (and an upload of it under way); the topic's batches are stored as sent again",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			if sign.on() {
				if topic == "" {
					return usageErrorf("remove --sign needs --topic T: the signed command names the plugin's topic")
				}
				if _, err := sign.submitResult(cmd.Context(), g, fsm.RemovePlugin{Name: name, Topic: topic}); err != nil {
					return fmt.Errorf("remove plugin %s: %w", name, err)
				}
			} else {
				addr, err := httpAddress(cmd, sign.http)
				if err != nil {
					return err
				}
				var res httpapi.PluginResult
				if err := jsonRequest(cmd.Context(), g, "DELETE", pluginsURL(addr, name), nil, &res); err != nil {
					return fmt.Errorf("remove plugin %s: %w", name, err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Removed plugin %s.\n", name)
			return nil
		},
	}
	cmd.Flags().StringVar(&topic, "topic", "", "the plugin's topic (needed with --sign)")
	sign = addTenantSignFlags(cmd)
	return cmd
}
