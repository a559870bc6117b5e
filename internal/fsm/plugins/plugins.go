// Package plugins is the state machine's plugins module (issue 24,
// docs/plugins.md): WebAssembly plugins deployed to topics, whose modules
// are replicated state, and their produce hooks, which run inside the
// deterministic apply (internal/plugin is the runtime: metered, bounded,
// with no clock, randomness, files or network of the broker's).
//
// A deployment is a name (tenant-qualified, as a topic's: acme~redact),
// a topic of the same tenant, a hook and a config, and a module given by
// its SHA-256 digest and size. Deploying takes three commands, each from
// app version 17 (Version) and gated by stele.admin.signed with ALTER_CONFIGS
// on the topic, as altering the topic's configs is:
//
//   - DeployPlugin starts an upload of the module (a transaction holds at
//     most a MiB, a Go plugin is a few); a module the name already runs
//     (the same digest) is not uploaded again: the new topic or config
//     takes effect at once;
//   - PluginChunk carries the module's next bytes, in order; the one that
//     completes it checks the digest, compiles the module and starts it
//     (its _initialize, on its budget of fuel): a module that is not
//     valid WebAssembly, imports what a plugin may not, lacks the SDK's
//     exports or fails its start is refused there, and the upload
//     dropped; one that starts takes effect at that height, on every
//     broker, replacing the name's earlier module;
//   - RemovePlugin removes a deployment, and its upload under way.
//
// Deleting a topic removes the deployments on it.
//
// From app version 18 (FetchVersion) a plugin may be deployed to the
// fetch hook (its module must export stele_fetch): the state machine
// keeps the deployment and its module and checks that the module starts,
// as for a produce plugin, but never runs it; the View hands the fetch
// plugins of each topic to the Kafka layer, which runs them on the records
// a consumer is sent (internal/kafka/fetch_plugins.go). The snapshot hook
// is refused. From the same version a produce hook gets the block's time
// and its plugin's own state (state.go).
//
// The produce hook (the topics module's Transforms, rank 10) rewrites
// each batch of a produce to the topic, but for an idempotent producer's
// retries and batches the topics module refuses as sent: its records go
// to the module, in the order the plugins' names sort when several are
// deployed on the topic (each given what the one before returned), and
// what the last returns is what is stored, proven and indexed, encoded
// afresh as an uncompressed batch (compression libraries differ between
// releases; stored bytes may not). The stored batch keeps the offsets of
// the batch as sent: records a plugin dropped leave gaps at its end, as
// compaction leaves them, so an idempotent producer's sequence numbers
// (which count the records it sent) and its retries work as without a
// plugin. A plugin may return more records than it was given only for a
// batch without a producer id (Kafka gives each of a producer's records
// its own sequence number). A rejection, a trap, running out of fuel or
// memory, or records that cannot be stored refuse the whole produce with
// INVALID_RECORD and the plugin's message; nothing is written.
//
// The module uses topics (the hook point, the topics deployments name)
// and cluster (the app version); tenants uses it (a tenant's deletion
// removes its plugins).
//
// State, in the metadata store (authenticated, so the modules' bytes are
// under the app hash):
//
//	d/a/<name>              a deployment in effect
//	d/m/<name>\0<u64 off>   its module's bytes from off, 512 KiB a key
//	d/p/<name>              a deployment whose module is uploading
//	d/u/<name>\0<u64 off>   the bytes of it received so far, a chunk a key
//	d/s/<name>\0<key>       a key of its state (state.go)
package plugins

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/plugin"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/plugin/wire"
)

// ModPlugins is the plugins module.
const ModPlugins core.Module = "plugins"

// The plugins module's commands.
const (
	KindDeployPlugin core.Kind = 49
	KindPluginChunk  core.Kind = 50
	KindRemovePlugin core.Kind = 51
)

// Version is the app version from which plugins exist.
const Version = 17

// FetchVersion is the app version from which a plugin may be deployed to
// the fetch hook (below it the deployment is refused, as version 17's
// binaries refuse it).
const FetchVersion = 18

// The hooks a plugin may be deployed to. Produce and fetch run; snapshot
// is refused at deploy (docs/plugins.md says what is left).
const (
	HookProduce  = "produce"
	HookFetch    = "fetch"
	HookSnapshot = "snapshot"
)

// Limits of deployments.
const (
	// MaxModuleBytes bounds a module.
	MaxModuleBytes = 16 << 20
	// MaxChunkBytes bounds the bytes of one PluginChunk: with its
	// envelope it fits a transaction of the default 1 MiB.
	MaxChunkBytes = 768 << 10
	// MaxPerTenant bounds a tenant's deployments, in effect or uploading.
	MaxPerTenant = 32
	// MaxConfigs bounds a deployment's config entries.
	MaxConfigs     = 64
	maxConfigKey   = 255
	maxConfigValue = 4096
	maxNameLen     = 63
	storedChunk    = 512 << 10
)

// What one call of a plugin may use, the same on every broker: 100
// million instructions of fuel and 5 million more for each record of the
// batch (the redact example uses some 2 million a record of 1 KiB of JSON,
// BenchmarkRedactRecords), and 64 MiB of memory. The start has a budget
// of its own, of a billion: it runs once, and a Go program's package
// initialisation can be long (the jsonschema-check example's compiles its
// library's metaschemas, some 230 million).
const (
	Fuel          = 100_000_000
	FuelPerRecord = 5_000_000
	StartFuel     = 1_000_000_000
	MemoryPages   = 1024
)

// PluginConfig is one key=value of a deployment's config, in the order
// given.
type PluginConfig struct{ Key, Value string }

// ConfigSecret reports whether a config key's value is a secret (the key
// begins with "secret."): the plugin gets it, listings never show it.
// It is replicated state like the rest of the config: every broker holds
// it.
func ConfigSecret(key string) bool { return strings.HasPrefix(key, "secret.") }

// DeployPlugin deploys the module of Digest (Size bytes) as Name on
// Topic's Hook with Config. Name and Topic are qualified with their
// tenant, which must be the same.
type DeployPlugin struct {
	Name   string
	Topic  string
	Hook   string
	Digest [32]byte
	Size   int64
	Config []PluginConfig
}

// PluginChunk carries the bytes from Offset of the module Name is
// uploading (Topic is the deployment's, for signed administration's
// check).
type PluginChunk struct {
	Name   string
	Topic  string
	Digest [32]byte
	Offset int64
	Data   []byte
}

// RemovePlugin removes the deployment Name of Topic.
type RemovePlugin struct {
	Name  string
	Topic string
}

func (DeployPlugin) Kind() core.Kind { return KindDeployPlugin }
func (PluginChunk) Kind() core.Kind  { return KindPluginChunk }
func (RemovePlugin) Kind() core.Kind { return KindRemovePlugin }

func (c DeployPlugin) Encode(w *core.Writer) {
	w.Str(c.Name)
	w.Str(c.Topic)
	w.Str(c.Hook)
	w.Raw(c.Digest[:])
	w.I64(c.Size)
	w.Count(len(c.Config))
	for _, kv := range c.Config {
		w.Str(kv.Key)
		w.Str(kv.Value)
	}
}

func decodeDeployPlugin(r *core.Reader) DeployPlugin {
	c := DeployPlugin{Name: r.Str(), Topic: r.Str(), Hook: r.Str()}
	copy(c.Digest[:], r.Take(32))
	c.Size = r.I64()
	for i, n := 0, r.Count(2); i < n && r.E == nil; i++ {
		c.Config = append(c.Config, PluginConfig{Key: r.Str(), Value: r.Str()})
	}
	return c
}

func (c PluginChunk) Encode(w *core.Writer) {
	w.Str(c.Name)
	w.Str(c.Topic)
	w.Raw(c.Digest[:])
	w.I64(c.Offset)
	w.Bytes(c.Data)
}

func decodePluginChunk(r *core.Reader) PluginChunk {
	c := PluginChunk{Name: r.Str(), Topic: r.Str()}
	copy(c.Digest[:], r.Take(32))
	c.Offset = r.I64()
	c.Data = r.Bytes()
	return c
}

func (c RemovePlugin) Encode(w *core.Writer) {
	w.Str(c.Name)
	w.Str(c.Topic)
}

func decodeRemovePlugin(r *core.Reader) RemovePlugin {
	return RemovePlugin{Name: r.Str(), Topic: r.Str()}
}

// DeployCommands are the commands that deploy wasm as name (qualified) on
// topic's hook with config: the DeployPlugin, then the chunks of the
// module, to submit one after another (DeployPlugin's answer says how
// many bytes are still needed: none when name runs that module already).
func DeployCommands(name, topic, hook string, config []PluginConfig, wasm []byte) (DeployPlugin, []PluginChunk) {
	d := DeployPlugin{Name: name, Topic: topic, Hook: hook, Digest: sha256.Sum256(wasm), Size: int64(len(wasm)), Config: config}
	var chunks []PluginChunk
	for off := 0; off < len(wasm); off += MaxChunkBytes {
		chunks = append(chunks, PluginChunk{Name: name, Topic: topic, Digest: d.Digest, Offset: int64(off), Data: wasm[off:min(off+MaxChunkBytes, len(wasm))]})
	}
	return d, chunks
}

// ValidName says why local cannot be a plugin's name: 1 to 63 lowercase
// letters, digits, '-', '_' and '.'.
func ValidName(local string) error {
	if local == "" || len(local) > maxNameLen {
		return fmt.Errorf("a plugin name is 1 to %d characters; %q is not", maxNameLen, local)
	}
	for _, c := range local {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("plugin name %q: only lowercase letters, digits, '-', '_' and '.'", local)
		}
	}
	return nil
}

// checkNames checks a command's qualified name and topic: a valid name,
// of the topic's tenant.
func checkNames(name, topic string) error {
	tn, local := core.SplitTenant(name)
	if err := ValidName(local); err != nil {
		return err
	}
	tt, lt := core.SplitTenant(topic)
	if lt == "" {
		return fmt.Errorf("no topic")
	}
	if tn != tt {
		return fmt.Errorf("plugin %s and topic %s are of different tenants", name, topic)
	}
	return nil
}

// CheckConfig says why config cannot be a deployment's.
func CheckConfig(config []PluginConfig) error {
	if len(config) > MaxConfigs {
		return fmt.Errorf("%d config entries: at most %d", len(config), MaxConfigs)
	}
	seen := map[string]bool{}
	for _, kv := range config {
		switch {
		case kv.Key == "" || len(kv.Key) > maxConfigKey:
			return fmt.Errorf("a config key is 1 to %d bytes", maxConfigKey)
		case len(kv.Value) > maxConfigValue:
			return fmt.Errorf("config %s: a value is at most %d bytes", kv.Key, maxConfigValue)
		case seen[kv.Key]:
			return fmt.Errorf("config %s given twice", kv.Key)
		}
		seen[kv.Key] = true
	}
	return nil
}

func checkCommand(c core.Command) core.Result {
	var err error
	switch c := c.(type) {
	case DeployPlugin:
		err = checkNames(c.Name, c.Topic)
		switch {
		case err != nil:
		case c.Hook != HookProduce && c.Hook != HookFetch && c.Hook != HookSnapshot:
			err = fmt.Errorf("unknown hook %q: produce, fetch or snapshot", c.Hook)
		case c.Size <= 0 || c.Size > MaxModuleBytes:
			err = fmt.Errorf("a module of %d bytes: a module is 1 to %d bytes", c.Size, MaxModuleBytes)
		default:
			err = CheckConfig(c.Config)
		}
	case PluginChunk:
		err = checkNames(c.Name, c.Topic)
		switch {
		case err != nil:
		case len(c.Data) == 0 || len(c.Data) > MaxChunkBytes:
			err = fmt.Errorf("a chunk of %d bytes: a chunk is 1 to %d bytes", len(c.Data), MaxChunkBytes)
		case c.Offset < 0 || c.Offset > MaxModuleBytes-int64(len(c.Data)):
			err = fmt.Errorf("a chunk at %d: outside a module of at most %d bytes", c.Offset, MaxModuleBytes)
		}
	case RemovePlugin:
		err = checkNames(c.Name, c.Topic)
	}
	if err != nil {
		return core.Fail(kerr.InvalidRequest.Code, err.Error())
	}
	return core.Result{}
}

// Deployment is a plugin deployed, or uploading.
type Deployment struct {
	Name   string // qualified
	Topic  string // qualified
	Hook   string
	Digest [32]byte
	Size   int64
	Config []PluginConfig
	// Height: the block that put it in effect, or that began its upload.
	Height int64
	// wasm is the module, or what has come of it while it uploads.
	wasm []byte
}

// op is one change of the store, staged in the order the block made it.
type op struct {
	kind   opKind
	name   string
	offset int64
	data   []byte // a chunk's bytes; a state key
	value  []byte // a state value
	d      *Deployment
}

type opKind uint8

const (
	opSetPending opKind = iota + 1
	opChunk
	opDropPending
	opSetActive
	opDropActive
	opStateSet
	opStateDelete
	opStateDrop
)

// Plugins is the plugins module, its part of a state machine.
type Plugins struct {
	*core.Machine
	topics  *topics.Topics
	cluster *cluster.Cluster

	active  map[string]*Deployment // by name
	pending map[string]*Deployment // by name
	byTopic map[string][]*Deployment
	ops     []op
	fresh   bool
	// modules are the compiled modules, by digest: the same bytes compile
	// to the same module, so it outlives what a failed block changed.
	modules map[[32]byte]*plugin.Module
	view    atomic.Pointer[View]
	// state is each plugin's own state, by name (state.go); overlay the
	// writes of the produce under way, by name and key.
	state   map[string]*pluginState
	overlay map[string]map[string]stateWrite
}

// NewPlugins is the plugins module of the machine m.
func NewPlugins(m *core.Machine, t *topics.Topics, c *cluster.Cluster) *Plugins {
	return &Plugins{Machine: m, topics: t, cluster: c, modules: map[[32]byte]*plugin.Module{}}
}

func pluginsOf(m *core.Machine) *Plugins {
	return m.App.(interface{ PluginsModule() *Plugins }).PluginsModule()
}

// RegisterPlugins registers the plugins module: its commands, its state's
// step, its produce hook and what it does when a topic is deleted. gate
// registers a kind with signed administration, given the command's topic.
func RegisterPlugins(r *core.Registry, h *topics.TopicHooks, gate func(k core.Kind, topic func(core.Command) string)) {
	core.RegisterModuleCommand(r, pluginsOf, KindDeployPlugin, "DeployPlugin", ModPlugins, decodeDeployPlugin, checkCommand,
		func(f *Plugins, c DeployPlugin, _ core.CmdAt) core.Result {
			return f.gated(func() core.Result { return f.deploy(c) })
		}).Since = Version
	core.RegisterModuleCommand(r, pluginsOf, KindPluginChunk, "PluginChunk", ModPlugins, decodePluginChunk, checkCommand,
		func(f *Plugins, c PluginChunk, _ core.CmdAt) core.Result {
			return f.gated(func() core.Result { return f.chunk(c) })
		}).Since = Version
	core.RegisterModuleCommand(r, pluginsOf, KindRemovePlugin, "RemovePlugin", ModPlugins, decodeRemovePlugin, checkCommand,
		func(f *Plugins, c RemovePlugin, _ core.CmdAt) core.Result {
			return f.gated(func() core.Result { return f.remove(c) })
		}).Since = Version
	core.RegisterModuleStep(r, pluginsOf, core.ModuleStep[*Plugins]{Rank: 137, Name: "plugins", Module: ModPlugins,
		Empty: emptyPlugins, Load: loadPlugins, Stage: stagePlugins, Publish: publishPlugins, Close: closePlugins})
	gate(KindDeployPlugin, func(c core.Command) string { return c.(DeployPlugin).Topic })
	gate(KindPluginChunk, func(c core.Command) string { return c.(PluginChunk).Topic })
	gate(KindRemovePlugin, func(c core.Command) string { return c.(RemovePlugin).Topic })
	h.Transforms.Register(10, "produce plugins", ModPlugins, func(tm *topics.Topics, t *topics.Topic) func(*topics.Partition, record.Header, []byte) ([]byte, core.Result) {
		f := pluginsOf(tm.Machine)
		f.overlay = nil // a produce begins: nothing of one refused before it is kept
		if f.cluster.Version < Version {
			return nil
		}
		var ds []*Deployment
		for _, d := range f.byTopic[t.Name] {
			if d.Hook == HookProduce {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			return nil
		}
		return func(p *topics.Partition, h record.Header, b []byte) ([]byte, core.Result) {
			var out []byte
			for _, d := range ds {
				nb, r := f.transform(d, t, p, h, b)
				if r.Code != 0 {
					return nil, r
				}
				if h, r = reparse(nb); r.Code != 0 {
					return nil, r
				}
				b, out = nb, nb
			}
			return out, core.Result{}
		}
	})
	h.ProduceChecks.Register(50, "plugin state", ModPlugins, func(tm *topics.Topics, _ *topics.Producing) (core.Result, func()) {
		f := pluginsOf(tm.Machine)
		if len(f.overlay) == 0 {
			return core.Result{}, nil
		}
		return core.Result{}, f.commitOverlay // once the batches are written
	})
	h.TopicDeleted.Register(20, "plugins on the topic", ModPlugins, func(tm *topics.Topics, t *topics.Topic) { pluginsOf(tm.Machine).dropTopic(t.Name) })
}

func reparse(b []byte) (record.Header, core.Result) {
	h, err := record.ParseHeader(b)
	if err != nil {
		return h, core.Fail(kerr.InvalidRecord.Code, err.Error())
	}
	return h, core.Result{}
}

func (f *Plugins) gated(do func() core.Result) core.Result {
	if v := f.cluster.Version; v < Version {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("plugins need app version %d; this chain runs %d (stele cluster upgrade)", Version, v))
	}
	return do()
}

// BytesNeeded is the Result.Counts entry of a deploy or chunk: how many
// bytes of the module are still to come (0: the deployment is in effect).
const BytesNeeded = "bytes_needed"

func needed(n int64) core.Result {
	return core.Result{Counts: []core.Count{{What: BytesNeeded, N: int(n)}}}
}

func local(name string) string { _, l := core.SplitTenant(name); return l }

func (f *Plugins) deploy(c DeployPlugin) core.Result {
	t := f.topics.ByName[c.Topic]
	if t == nil || t.Deleted {
		return core.Fail(kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("topic '%s' does not exist", local(c.Topic)))
	}
	if topics.IsView(t) {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("topic '%s' is a view: its records are copied from its sources, where a plugin may run", local(c.Topic)))
	}
	if c.Hook == HookSnapshot || (c.Hook == HookFetch && f.cluster.Version < FetchVersion) {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the %s hook is not built yet: only produce plugins run (docs/plugins.md)", c.Hook))
	}
	if f.active[c.Name] == nil && f.pending[c.Name] == nil {
		tenant, _ := core.SplitTenant(c.Name)
		names := map[string]bool{}
		for _, m := range []map[string]*Deployment{f.active, f.pending} {
			for name := range m {
				if tn, _ := core.SplitTenant(name); tn == tenant {
					names[name] = true
				}
			}
		}
		n := len(names)
		if n >= MaxPerTenant {
			return core.Fail(kerr.PolicyViolation.Code, fmt.Sprintf("%d plugins deployed or uploading: at most %d", n, MaxPerTenant))
		}
	}
	d := &Deployment{Name: c.Name, Topic: c.Topic, Hook: c.Hook, Digest: c.Digest, Size: c.Size,
		Config: slices.Clone(c.Config), Height: f.Height}
	if f.pending[c.Name] != nil {
		f.dropPending(c.Name)
	}
	if old := f.active[c.Name]; old != nil && old.Digest == c.Digest && old.Size == c.Size {
		d.wasm = old.wasm // the same module: in effect at once
		if r := f.checkHook(d); r.Code != 0 {
			return r
		}
		f.setActive(d)
		return needed(0)
	}
	f.pending[c.Name] = d
	f.ops = append(f.ops, op{kind: opSetPending, name: c.Name, d: d})
	f.fresh = true
	return needed(c.Size)
}

func (f *Plugins) chunk(c PluginChunk) core.Result {
	d := f.pending[c.Name]
	if d == nil || d.Topic != c.Topic {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("no module of plugin %s on topic '%s' is uploading (deploy it first)", local(c.Name), local(c.Topic)))
	}
	if d.Digest != c.Digest {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("plugin %s is uploading module %x, not %x", local(c.Name), d.Digest[:8], c.Digest[:8]))
	}
	have := int64(len(d.wasm))
	end := c.Offset + int64(len(c.Data))
	switch {
	case end <= have && bytes.Equal(d.wasm[c.Offset:end], c.Data):
		return needed(d.Size - have) // a retry of a chunk applied
	case c.Offset != have:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("plugin %s: a chunk at %d; the upload has %d bytes, the next chunk starts there", local(c.Name), c.Offset, have))
	case end > d.Size:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("plugin %s: a chunk ending at %d, past the module's %d bytes", local(c.Name), end, d.Size))
	}
	data := slices.Clone(c.Data)
	d.wasm = append(d.wasm, data...)
	f.ops = append(f.ops, op{kind: opChunk, name: c.Name, offset: c.Offset, data: data})
	f.fresh = true
	if end < d.Size {
		return needed(d.Size - end)
	}
	// The module is whole: check it, compile it, start it.
	if sha256.Sum256(d.wasm) != d.Digest {
		f.dropPending(c.Name)
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("plugin %s: the module's bytes do not hash to the digest deployed; the upload is dropped", local(c.Name)))
	}
	if r := f.checkHook(d); r.Code != 0 {
		f.dropPending(c.Name)
		return r
	}
	f.dropPending(c.Name)
	d.Height = f.Height
	f.setActive(d)
	return needed(0)
}

// Limits is what one call of a plugin may use (the constants above), with
// the host functions allowed or not: the state machine allows them from
// HostVersion; a broker's fetch hooks and the checks before a deployment
// always (a deployment the version refuses is refused in the apply).
func Limits(hostImports bool) plugin.Limits {
	return plugin.Limits{Fuel: Fuel, FuelPerRecord: FuelPerRecord, StartFuel: StartFuel, MemoryPages: MemoryPages, HostImports: hostImports}
}

// CheckHook says why the compiled module m cannot run on hook, or nil.
func CheckHook(m *plugin.Module, hook string) error {
	switch {
	case hook == HookProduce && !m.HasProduce():
		return errors.New("the module has no produce hook (it does not export stele_produce)")
	case hook == HookFetch && !m.HasFetch():
		return errors.New("the module has no fetch hook (it does not export stele_fetch; build it with this release's SDK)")
	}
	return nil
}

// checkHook compiles and starts d's module (or finds it compiled) and
// checks that it has d's hook.
func (f *Plugins) checkHook(d *Deployment) core.Result {
	m, err := f.module(d)
	if err == nil {
		err = CheckHook(m, d.Hook)
	}
	if err != nil {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("plugin %s refused: %v", local(d.Name), err))
	}
	return core.Result{}
}

func (f *Plugins) remove(c RemovePlugin) core.Result {
	a, p := f.active[c.Name], f.pending[c.Name]
	if (a == nil || a.Topic != c.Topic) && (p == nil || p.Topic != c.Topic) {
		return core.Fail(kerr.ResourceNotFound.Code, fmt.Sprintf("plugin %s is not deployed on topic '%s'", local(c.Name), local(c.Topic)))
	}
	if p != nil {
		f.dropPending(c.Name)
	}
	if a != nil {
		f.dropActive(c.Name)
	}
	return core.Result{}
}

// RemoveTenant removes every deployment of tenant and answers how many.
func (f *Plugins) RemoveTenant(tenant string) int {
	n := 0
	for _, name := range core.SortedKeys(f.active) {
		if t, _ := core.SplitTenant(name); t == tenant {
			f.dropActive(name)
			n++
		}
	}
	for _, name := range core.SortedKeys(f.pending) {
		if t, _ := core.SplitTenant(name); t == tenant {
			f.dropPending(name)
			if f.active[name] == nil {
				n++
			}
		}
	}
	return n
}

func (f *Plugins) dropTopic(topic string) {
	for _, name := range core.SortedKeys(f.pending) {
		if f.pending[name].Topic == topic {
			f.dropPending(name)
		}
	}
	for _, name := range core.SortedKeys(f.active) {
		if f.active[name].Topic == topic {
			f.dropActive(name)
		}
	}
}

func (f *Plugins) dropPending(name string) {
	delete(f.pending, name)
	f.ops = append(f.ops, op{kind: opDropPending, name: name})
	f.fresh = true
}

func (f *Plugins) setActive(d *Deployment) {
	f.active[d.Name] = d
	f.ops = append(f.ops, op{kind: opSetActive, name: d.Name, d: d})
	f.index()
}

func (f *Plugins) dropActive(name string) {
	delete(f.active, name)
	f.ops = append(f.ops, op{kind: opDropActive, name: name})
	if f.state[name] != nil {
		f.dropState(name)
	}
	f.index()
}

// index rebuilds byTopic: each topic's deployments in effect, by name.
func (f *Plugins) index() {
	f.byTopic = map[string][]*Deployment{}
	for _, name := range core.SortedKeys(f.active) {
		d := f.active[name]
		f.byTopic[d.Topic] = append(f.byTopic[d.Topic], d)
	}
	f.fresh = true
}

// module is d's module compiled and started (from the cache when its
// digest was).
func (f *Plugins) module(d *Deployment) (*plugin.Module, error) {
	if m := f.modules[d.Digest]; m != nil {
		return m, nil
	}
	ctx := context.Background()
	m, err := plugin.Compile(ctx, d.wasm, Limits(f.cluster.Version >= HostVersion))
	if err != nil {
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		m.Close(ctx)
		return nil, err
	}
	f.modules[d.Digest] = m
	return m, nil
}

// transform runs d's produce hook on the batch b (of header h) of t's
// partition p and answers the batch to store.
func (f *Plugins) transform(d *Deployment, t *topics.Topic, p *topics.Partition, h record.Header, b []byte) ([]byte, core.Result) {
	_, recs, err := record.Records(b)
	if err != nil {
		return nil, core.Fail(record.ErrorCode(err), err.Error())
	}
	in := wire.Input{Topic: local(t.Name), Partition: p.Index, Records: make([]wire.Record, len(recs))}
	for _, kv := range d.Config {
		in.Config = append(in.Config, wire.Config{Key: kv.Key, Value: kv.Value})
	}
	for i, r := range recs {
		wr := wire.Record{Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
		for _, rh := range r.Headers {
			wr.Headers = append(wr.Headers, wire.Header{Key: rh.Key, Value: rh.Value})
		}
		in.Records[i] = wr
	}
	name := local(d.Name)
	m, err := f.module(d)
	if err != nil {
		return nil, core.Fail(kerr.InvalidRecord.Code, fmt.Sprintf("plugin %s cannot run: %v", name, err))
	}
	var env *plugin.Env
	if f.cluster.Version >= HostVersion {
		env = &plugin.Env{BlockTime: f.BlockTime, State: overlayState{f: f, name: d.Name}}
	}
	out, _, err := m.ProduceWith(context.Background(), in, env)
	switch {
	case err != nil:
		return nil, core.Fail(kerr.InvalidRecord.Code, fmt.Sprintf("plugin %s failed on the batch: %v", name, err))
	case out.Reject:
		return nil, core.Fail(kerr.InvalidRecord.Code, fmt.Sprintf("plugin %s rejected the batch: %s", name, out.Message))
	case h.ProducerID >= 0 && len(out.Records) > int(h.LastOffsetDelta)+1:
		return nil, core.Fail(kerr.InvalidRecord.Code, fmt.Sprintf("plugin %s returned %d records for a batch of %d from an idempotent producer, whose sequence numbers count the records it sent: a plugin may return more records only for a batch without a producer id",
			name, len(out.Records), h.LastOffsetDelta+1))
	}
	nh := h.WithoutCompression()
	nh.BaseOffset = 0
	if len(out.Records) > 0 {
		nh.FirstTimestamp = out.Records[0].Timestamp
	}
	rs := make([]record.Record, len(out.Records))
	for i, r := range out.Records {
		rs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: r.Timestamp - nh.FirstTimestamp, Key: r.Key, Value: r.Value}
		for _, wh := range r.Headers {
			rs[i].Headers = append(rs[i].Headers, record.RecordHeader{Key: wh.Key, Value: wh.Value})
		}
	}
	nb, err := record.Build(nh, rs)
	if err != nil {
		return nil, core.Fail(kerr.InvalidRecord.Code, fmt.Sprintf("plugin %s returned records that cannot be stored: %v", name, err))
	}
	return nb, core.Result{}
}

const (
	prefixActive  = "d/a/"
	prefixModule  = "d/m/"
	prefixPending = "d/p/"
	prefixUpload  = "d/u/"
)

func key(prefix, name string) []byte { return append([]byte(prefix), name...) }

// piecePrefix is the prefix of name's module or upload pieces.
func piecePrefix(prefix, name string) []byte { return append(key(prefix, name), 0) }

func pieceKey(prefix, name string, off int64) []byte {
	return binary.BigEndian.AppendUint64(piecePrefix(prefix, name), uint64(off))
}

// EncodeDeployment is a deployment's d/a/ or d/p/ value:
//
//	u8 version | str topic | str hook | 32 digest | i64 size | i64 height |
//	count | (str key | str value)*
func EncodeDeployment(d *Deployment) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.Str(d.Topic)
	w.Str(d.Hook)
	w.Raw(d.Digest[:])
	w.I64(d.Size)
	w.I64(d.Height)
	w.Count(len(d.Config))
	for _, kv := range d.Config {
		w.Str(kv.Key)
		w.Str(kv.Value)
	}
	return w.B
}

// DecodeDeployment reads EncodeDeployment's bytes.
func DecodeDeployment(name string, v []byte) (*Deployment, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: plugin %s: state format %d not supported", name, ver)
	}
	d := &Deployment{Name: name, Topic: r.Str(), Hook: r.Str()}
	copy(d.Digest[:], r.Take(32))
	d.Size, d.Height = r.I64(), r.I64()
	for i, n := 0, r.Count(2); i < n && r.E == nil; i++ {
		d.Config = append(d.Config, PluginConfig{Key: r.Str(), Value: r.Str()})
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("stele/fsm: reading plugin %s: %w", name, err)
	}
	if err := checkNames(name, d.Topic); err != nil {
		return nil, fmt.Errorf("stele/fsm: %w: plugin %s: %v", core.ErrMalformed, name, err)
	}
	if d.Size <= 0 || d.Size > MaxModuleBytes || CheckConfig(d.Config) != nil {
		return nil, fmt.Errorf("stele/fsm: %w: plugin %s", core.ErrMalformed, name)
	}
	return d, nil
}

func emptyPlugins(f *Plugins) {
	f.active, f.pending = map[string]*Deployment{}, map[string]*Deployment{}
	f.state, f.overlay = map[string]*pluginState{}, nil
	f.ops = nil
	f.index()
}

func loadPlugins(f *Plugins) error {
	emptyPlugins(f)
	for _, s := range []struct {
		prefix, pieces string
		into           map[string]*Deployment
		whole          bool
	}{{prefixActive, prefixModule, f.active, true}, {prefixPending, prefixUpload, f.pending, false}} {
		err := f.Store.Scan([]byte(s.prefix), func(k, v []byte) error {
			name := string(k[len(s.prefix):])
			d, err := DecodeDeployment(name, v)
			if err != nil {
				return err
			}
			s.into[name] = d
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range core.SortedKeys(s.into) {
			d := s.into[name]
			err := f.Store.Scan(piecePrefix(s.pieces, name), func(k, v []byte) error {
				off := binary.BigEndian.Uint64(k[len(k)-8:])
				if len(k) != len(piecePrefix(s.pieces, name))+8 || off != uint64(len(d.wasm)) || int64(len(d.wasm)+len(v)) > d.Size {
					return fmt.Errorf("stele/fsm: %w: plugin %s: a piece of its module at %d", core.ErrMalformed, name, off)
				}
				d.wasm = append(d.wasm, v...)
				return nil
			})
			if err != nil {
				return err
			}
			if s.whole && (int64(len(d.wasm)) != d.Size || sha256.Sum256(d.wasm) != d.Digest) {
				return fmt.Errorf("stele/fsm: %w: plugin %s: its module does not hash to its digest", core.ErrMalformed, name)
			}
		}
	}
	f.index()
	return f.loadState()
}

func stagePlugins(f *Plugins, b *core.StateBatch) error {
	for _, o := range f.ops {
		switch o.kind {
		case opSetPending:
			b.DeletePrefix(piecePrefix(prefixUpload, o.name))
			b.Set(key(prefixPending, o.name), EncodeDeployment(o.d))
		case opChunk:
			b.Set(pieceKey(prefixUpload, o.name, o.offset), o.data)
		case opDropPending:
			b.DeletePrefix(piecePrefix(prefixUpload, o.name))
			b.Delete(key(prefixPending, o.name))
		case opSetActive:
			b.DeletePrefix(piecePrefix(prefixModule, o.name))
			for off := 0; off < len(o.d.wasm); off += storedChunk {
				b.Set(pieceKey(prefixModule, o.name, int64(off)), o.d.wasm[off:min(off+storedChunk, len(o.d.wasm))])
			}
			b.Set(key(prefixActive, o.name), EncodeDeployment(o.d))
		case opDropActive:
			b.DeletePrefix(piecePrefix(prefixModule, o.name))
			b.Delete(key(prefixActive, o.name))
		case opStateSet:
			b.Set(stateKey(o.name, o.data), o.value)
		case opStateDelete:
			b.Delete(stateKey(o.name, o.data))
		case opStateDrop:
			b.DeletePrefix(piecePrefix(prefixState, o.name))
		}
	}
	f.ops = nil
	// Modules no deployment runs any more are let go.
	used := map[[32]byte]bool{}
	for _, d := range f.active {
		used[d.Digest] = true
	}
	for dg, m := range f.modules { // closing in any order changes nothing of the state
		if !used[dg] {
			m.Close(context.Background())
			delete(f.modules, dg)
		}
	}
	return nil
}

func closePlugins(f *Plugins) {
	for dg, m := range f.modules {
		m.Close(context.Background())
		delete(f.modules, dg)
	}
}

func publishPlugins(f *Plugins, _ bool) {
	if !f.fresh && f.view.Load() != nil {
		return
	}
	f.fresh = false
	v := &View{}
	for _, name := range core.SortedKeys(f.active) {
		v.all = append(v.all, info(f.active[name], StateActive))
	}
	for _, name := range core.SortedKeys(f.pending) {
		v.all = append(v.all, info(f.pending[name], StateUploading))
	}
	slices.SortStableFunc(v.all, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	for _, topic := range core.SortedKeys(f.byTopic) {
		for _, d := range f.byTopic[topic] {
			if d.Hook == HookFetch {
				if v.fetch == nil {
					v.fetch = map[string][]FetchDeployment{}
				}
				v.fetch[topic] = append(v.fetch[topic], FetchDeployment{Name: d.Name, Digest: d.Digest, Config: slices.Clone(d.Config), Wasm: d.wasm})
			}
		}
	}
	f.view.Store(v)
}

// The states of a deployment, as its Info says.
const (
	StateActive    = "active"
	StateUploading = "uploading"
)

func info(d *Deployment, state string) Info {
	return Info{Name: d.Name, Topic: d.Topic, Hook: d.Hook, Digest: hex.EncodeToString(d.Digest[:]), Size: d.Size,
		Received: int64(len(d.wasm)), Config: slices.Clone(d.Config), Height: d.Height, State: state}
}

// PluginsView returns the committed deployments.
func (f *Plugins) PluginsView() *View { return f.view.Load() }

// View is the committed deployments, as readers see them.
type View struct {
	all []Info
	// fetch: each topic's fetch deployments in effect, by name.
	fetch map[string][]FetchDeployment
}

// FetchDeployment is a fetch plugin in effect, with its module for the
// broker to run (Wasm is shared: read it, never change it).
type FetchDeployment struct {
	Name   string // qualified
	Digest [32]byte
	Config []PluginConfig
	Wasm   []byte
}

// Fetch returns the fetch plugins in effect on topic (qualified), in the
// order they run: by name.
func (v *View) Fetch(topic string) []FetchDeployment {
	if v == nil {
		return nil
	}
	return v.fetch[topic]
}

// Info is one deployment as readers see it: in effect (StateActive) or
// uploading its module (StateUploading; Received bytes of Size so far).
// A name may have both: the one in effect runs while a new module
// uploads.
type Info struct {
	Name, Topic, Hook string
	Digest            string // hex
	Size, Received    int64
	Config            []PluginConfig
	Height            int64
	State             string
}

// All returns every deployment, by name (one in effect before its upload).
func (v *View) All() []Info {
	if v == nil {
		return nil
	}
	return v.all
}
