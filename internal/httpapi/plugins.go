package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/plugin"
)

// Plugins (issue 24, docs/plugins.md): GET /v1/plugins lists the
// deployments, GET /v1/plugins/{name} describes one, PUT
// /v1/plugins/{name}?topic=T&hook=produce&config=k=v... deploys the
// module in the body (application/wasm) and answers once it is in
// effect, DELETE /v1/plugins/{name} removes one. A deployment is read
// with DESCRIBE_CONFIGS on its topic and changed with ALTER_CONFIGS, as
// the topic's configs are; a tenant's user sees and names its tenant's
// only, by their short names. The module is compiled and started here
// before anything is submitted, so what cannot be a plugin is refused
// with 400 at once; then the deployment and the module's chunks are
// submitted one after another, each in its block, and the module takes
// effect in the block that applies its last chunk (on every broker at
// that height). Under stele.admin.signed=true the changes are refused
// unless signed (`stele plugin deploy --sign`, which signs each command
// and posts it to /v1/admin/signed).

// Plugin is a deployment as the HTTP API shows it.
type Plugin struct {
	Name   string `json:"name"`
	Topic  string `json:"topic"`
	Hook   string `json:"hook"`
	Digest string `json:"sha256"`
	Size   int64  `json:"size"`
	// State is active (in effect) or uploading (Received of Size bytes
	// so far); a name may have both while a new module uploads.
	State    string        `json:"state"`
	Received int64         `json:"received"`
	Config   []PluginEntry `json:"config"`
	// Height is the block that put it in effect (or began its upload).
	Height int64 `json:"height"`
}

// PluginEntry is one key=value of a plugin's config, in its order.
type PluginEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// PluginResult is the answer of a deployment or removal.
type PluginResult struct {
	Name   string `json:"name"`
	Topic  string `json:"topic"`
	Digest string `json:"sha256,omitempty"`
	Height int64  `json:"height"`
	// Uploaded is false when the name ran the module already (only the
	// topic or config changed).
	Uploaded bool `json:"uploaded"`
}

// PluginSecretShown is what a listing shows of a secret config value
// (a key that begins with "secret.").
const PluginSecretShown = "[hidden]"

// pluginsVisible are the deployments r's principal may see: of its
// tenant, on topics it may DESCRIBE_CONFIGS; secret config values hidden.
func pluginsVisible(opts Options, r *http.Request) []Plugin {
	tenant := registryTenant(r)
	out := []Plugin{}
	for _, in := range opts.Broker.Plugins().All() {
		if t, _ := fsm.SplitTenant(in.Name); t != tenant || !allowed(r, fsm.ACLResourceTopic, fsm.ACLOpDescribeConfigs, in.Topic) {
			continue
		}
		_, name := fsm.SplitTenant(in.Name)
		_, topic := fsm.SplitTenant(in.Topic)
		p := Plugin{Name: name, Topic: topic, Hook: in.Hook, Digest: in.Digest, Size: in.Size, State: in.State,
			Received: in.Received, Config: []PluginEntry{}, Height: in.Height}
		for _, kv := range in.Config {
			v := kv.Value
			if fsm.PluginConfigSecret(kv.Key) {
				v = PluginSecretShown
			}
			p.Config = append(p.Config, PluginEntry{Key: kv.Key, Value: v})
		}
		out = append(out, p)
	}
	return out
}

func servePlugins(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, pluginsVisible(opts, r))
	}
}

func servePlugin(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		var out []Plugin
		for _, p := range pluginsVisible(opts, r) {
			if p.Name == name {
				out = append(out, p)
			}
		}
		if len(out) == 0 {
			httpError(w, http.StatusNotFound, "plugin %q is not deployed", name)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// ParsePluginConfig parses key=value entries, in their order.
func ParsePluginConfig(entries []string) ([]fsm.PluginConfig, error) {
	var out []fsm.PluginConfig
	for _, e := range entries {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("config %q: want KEY=VALUE", e)
		}
		out = append(out, fsm.PluginConfig{Key: k, Value: v})
	}
	if err := fsm.CheckPluginConfig(out); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckPluginModule compiles wasm and starts it, as the brokers will when
// it is deployed to hook: an error says why it cannot be a plugin there.
func CheckPluginModule(ctx context.Context, wasm []byte, hook string) error {
	switch hook {
	case fsm.PluginHookProduce, fsm.PluginHookFetch:
	case fsm.PluginHookSnapshot:
		return fmt.Errorf("the snapshot hook is not built yet: plugins run on the produce and fetch hooks (docs/plugins.md)")
	default:
		return fmt.Errorf("unknown hook %q: produce, fetch or snapshot", hook)
	}
	if len(wasm) == 0 || len(wasm) > fsm.MaxPluginModuleBytes {
		return fmt.Errorf("a module of %d bytes: a module is 1 to %d bytes", len(wasm), fsm.MaxPluginModuleBytes)
	}
	m, err := plugin.Compile(ctx, wasm, fsm.PluginLimits(true))
	if err != nil {
		return err
	}
	defer m.Close(ctx)
	if err := fsm.CheckPluginHook(m, hook); err != nil {
		return err
	}
	return m.Start(ctx)
}

func servePluginDeploy(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, q := r.PathValue("name"), r.URL.Query()
		if pluginsUnsupported(w, opts) {
			return
		}
		if err := fsm.ValidPluginName(name); err != nil {
			httpError(w, http.StatusBadRequest, "%v", err)
			return
		}
		topic, hook := q.Get("topic"), q.Get("hook")
		if hook == "" {
			hook = fsm.PluginHookProduce
		}
		if topic == "" {
			httpError(w, http.StatusBadRequest, "no topic: PUT /v1/plugins/%s?topic=T&hook=produce with the module as the body", name)
			return
		}
		config, err := ParsePluginConfig(q["config"])
		if err != nil {
			httpError(w, http.StatusBadRequest, "%v", err)
			return
		}
		qt := qualified(r, topic)
		if !allowed(r, fsm.ACLResourceTopic, fsm.ACLOpAlterConfigs, qt) {
			httpError(w, http.StatusForbidden, "not authorized to ALTER_CONFIGS topic %q", topic)
			return
		}
		wasm, err := io.ReadAll(http.MaxBytesReader(w, r.Body, fsm.MaxPluginModuleBytes))
		if err != nil {
			httpError(w, http.StatusRequestEntityTooLarge, "the module: %v (at most %d bytes)", err, fsm.MaxPluginModuleBytes)
			return
		}
		if err := CheckPluginModule(r.Context(), wasm, hook); err != nil {
			httpError(w, http.StatusBadRequest, "%v", err)
			return
		}
		cmds := fsm.DeployPluginCommands(qualified(r, name), qt, hook, config, wasm)
		out := PluginResult{Name: name, Topic: topic, Digest: fmt.Sprintf("%x", cmds[0].(fsm.DeployPlugin).Digest)}
		for i, c := range cmds {
			res, ok := submitPlugin(w, r, opts, c)
			if !ok {
				return
			}
			out.Height = res.Height
			if i == 0 && pluginBytesNeeded(res) == 0 {
				break // the name runs this module already
			}
			out.Uploaded = true
		}
		w.Header().Set(HeightHeader, strconv.FormatInt(out.Height, 10))
		writeJSON(w, http.StatusOK, out)
	}
}

// pluginBytesNeeded is what a deploy or chunk's result says is still to
// come of the module.
func pluginBytesNeeded(res fsm.Result) int {
	for _, c := range res.Counts {
		if c.What == fsm.PluginBytesNeeded {
			return c.N
		}
	}
	return -1
}

func servePluginRemove(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		var topic string
		for _, p := range pluginsVisible(opts, r) {
			if p.Name == name {
				topic = p.Topic
			}
		}
		if topic == "" {
			httpError(w, http.StatusNotFound, "plugin %q is not deployed", name)
			return
		}
		qt := qualified(r, topic)
		if !allowed(r, fsm.ACLResourceTopic, fsm.ACLOpAlterConfigs, qt) {
			httpError(w, http.StatusForbidden, "not authorized to ALTER_CONFIGS topic %q", topic)
			return
		}
		res, ok := submitPlugin(w, r, opts, fsm.RemovePlugin{Name: qualified(r, name), Topic: qt})
		if !ok {
			return
		}
		w.Header().Set(HeightHeader, strconv.FormatInt(res.Height, 10))
		writeJSON(w, http.StatusOK, PluginResult{Name: name, Topic: topic, Height: res.Height})
	}
}

// pluginsUnsupported answers 501 when the chain runs an app version
// without plugins (a transaction holding a plugin command would fail
// whole).
func pluginsUnsupported(w http.ResponseWriter, opts Options) bool {
	if v := opts.Broker.Upgrade().Version; v < fsm.PluginsVersion {
		httpError(w, http.StatusNotImplemented, "plugins need app version %d; this chain runs %d (stele cluster upgrade)", fsm.PluginsVersion, v)
		return true
	}
	return false
}

// submitPlugin submits one of the plugins' commands; false when it
// answered a refusal or failure.
func submitPlugin(w http.ResponseWriter, r *http.Request, opts Options, c fsm.Command) (fsm.Result, bool) {
	if res := fsm.CheckCommand(c); res.Code != 0 {
		httpError(w, http.StatusBadRequest, "%s", res.Message)
		return res, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	res, err := opts.Broker.SubmitOne(ctx, c)
	switch {
	case err != nil:
		httpError(w, http.StatusServiceUnavailable, "the change was not confirmed (it may still be applied): %v", err)
		return res, false
	case res.Code != 0:
		httpError(w, tenantStatus(res.Code), "%s", res.Message)
		return res, false
	}
	return res, true
}
