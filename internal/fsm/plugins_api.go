package fsm

import (
	"github.com/stele-io/stele/internal/fsm/plugins"
	"github.com/stele-io/stele/internal/plugin"
)

// The plugins module's names the broker and the CLI use, under the package
// they import (core_api.go says why).

type (
	DeployPlugin = plugins.DeployPlugin
	PluginChunk  = plugins.PluginChunk
	RemovePlugin = plugins.RemovePlugin
	PluginConfig = plugins.PluginConfig
	PluginInfo   = plugins.Info
	PluginsView  = plugins.View
	// PluginFetch is a fetch plugin in effect (PluginsView.Fetch).
	PluginFetch = plugins.FetchDeployment
)

const (
	PluginsVersion       = plugins.Version
	PluginsFetchVersion  = plugins.FetchVersion
	PluginHookProduce    = plugins.HookProduce
	PluginHookFetch      = plugins.HookFetch
	PluginHookSnapshot   = plugins.HookSnapshot
	PluginStateActive    = plugins.StateActive
	PluginStateUploading = plugins.StateUploading
	PluginBytesNeeded    = plugins.BytesNeeded
	MaxPluginChunkBytes  = plugins.MaxChunkBytes
	MaxPluginModuleBytes = plugins.MaxModuleBytes
)

// ValidPluginName is plugins.ValidName.
func ValidPluginName(local string) error { return plugins.ValidName(local) }

// PluginLimits is plugins.Limits.
func PluginLimits(hostImports bool) plugin.Limits { return plugins.Limits(hostImports) }

// CheckPluginHook is plugins.CheckHook.
func CheckPluginHook(m *plugin.Module, hook string) error { return plugins.CheckHook(m, hook) }

// PluginConfigSecret is plugins.ConfigSecret.
func PluginConfigSecret(key string) bool { return plugins.ConfigSecret(key) }

// CheckPluginConfig is plugins.CheckConfig.
func CheckPluginConfig(c []PluginConfig) error { return plugins.CheckConfig(c) }

// The budget and memory of one call of a plugin, on every broker.
const (
	PluginFuel          = plugins.Fuel
	PluginFuelPerRecord = plugins.FuelPerRecord
	PluginStartFuel     = plugins.StartFuel
	PluginMemoryPages   = plugins.MemoryPages
)

// DeployPluginCommands are plugins.DeployCommands' commands in the order
// to submit them: the DeployPlugin (whose answer's PluginBytesNeeded is 0
// when name runs the module already), then the module's chunks.
func DeployPluginCommands(name, topic, hook string, config []PluginConfig, wasm []byte) []Command {
	d, chunks := plugins.DeployCommands(name, topic, hook, config, wasm)
	cmds := []Command{d}
	for _, c := range chunks {
		cmds = append(cmds, c)
	}
	return cmds
}
