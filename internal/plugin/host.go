package plugin

// The host functions a plugin may import from module "stele" when its
// Limits allow them (HostImports): the block's time and the plugin's own
// key-value state, which the state machine keeps in the replicated state
// (internal/fsm/plugins). What they answer is the same on every broker:
// the block time is the block's, the state the same replicated state.
//
//	block_time() i64                              the block's time, ms
//	state_get(kptr, klen, vptr, vcap i32) i64     -1: no such key; else
//	        the value's length (copied to vptr when it fits in vcap)
//	state_set(kptr, klen, vptr, vlen i32)         set key to value
//	state_delete(kptr, klen i32)                  delete key
//
// Each call costs fuel: HostCallFuel, and HostByteFuel per byte of key
// and value. A call made where there is no state (the fetch hook), a key
// or value past the state's bounds, or memory out of range traps.

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/stele-io/stele/internal/plugin/meter"
)

// HostModule is the module name of the host functions.
const HostModule = "stele"

// The fuel a host call costs: per call, and per byte of key and value.
const (
	HostCallFuel = 1000
	HostByteFuel = 1
)

// State is a plugin's key-value state during one call. Set refuses (an
// error, which traps the call) what is past the state's bounds. The keys
// and values it is given are its own.
type State interface {
	Get(key []byte) ([]byte, bool)
	Set(key, value []byte) error
	Delete(key []byte)
}

// Env is what a call's host functions answer from.
type Env struct {
	BlockTime int64 // ms
	State     State
}

type envKey struct{}

var errNoEnv = errors.New("no state or block time in this call (the fetch hook has neither; a produce hook's state needs app version 18)")

// hostNames are the functions the host module exports.
var hostNames = map[string]bool{"block_time": true, "state_get": true, "state_set": true, "state_delete": true}

// instantiateHost adds the host module to rt.
func instantiateHost(ctx context.Context, rt wazero.Runtime) error {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	_, err := rt.NewHostModuleBuilder(HostModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostBlockTime), nil, []api.ValueType{i64}).Export("block_time").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostStateGet), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i64}).Export("state_get").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostStateSet), []api.ValueType{i32, i32, i32, i32}, nil).Export("state_set").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostStateDelete), []api.ValueType{i32, i32}, nil).Export("state_delete").
		Instantiate(ctx)
	return err
}

// charge takes fuel from the calling instance; it panics (which traps the
// call) when the fuel is gone.
func charge(m api.Module, fuel int64) {
	if g, ok := m.ExportedGlobal(meter.FuelExport).(api.MutableGlobal); ok {
		left := int64(g.Get()) - fuel
		g.Set(uint64(left))
		if left < 0 {
			panic(errors.New("out of fuel in a host call"))
		}
	}
}

// hostEnv is the call's Env, having charged a call of bytes bytes; it
// panics when there is none, or no state and state is wanted.
func hostEnv(ctx context.Context, m api.Module, bytes int, state bool) *Env {
	charge(m, HostCallFuel+HostByteFuel*int64(bytes))
	env, _ := ctx.Value(envKey{}).(*Env)
	if env == nil || (state && env.State == nil) {
		panic(errNoEnv)
	}
	return env
}

// read copies n bytes at ptr out of the module's memory.
func read(m api.Module, ptr, n uint64) []byte {
	b, ok := m.Memory().Read(uint32(ptr), uint32(n))
	if !ok {
		panic(fmt.Errorf("%d bytes at %d: outside the module's memory", uint32(n), uint32(ptr)))
	}
	return append([]byte{}, b...)
}

func hostBlockTime(ctx context.Context, m api.Module, stack []uint64) {
	stack[0] = uint64(hostEnv(ctx, m, 0, false).BlockTime)
}

func hostStateGet(ctx context.Context, m api.Module, stack []uint64) {
	env := hostEnv(ctx, m, int(uint32(stack[1])), true)
	v, ok := env.State.Get(read(m, stack[0], stack[1]))
	if !ok {
		stack[0] = api.EncodeI64(-1)
		return
	}
	if len(v) > 0 && uint32(len(v)) <= uint32(stack[3]) {
		charge(m, HostByteFuel*int64(len(v)))
		if !m.Memory().Write(uint32(stack[2]), v) {
			panic(fmt.Errorf("%d bytes at %d: outside the module's memory", len(v), uint32(stack[2])))
		}
	}
	stack[0] = uint64(len(v))
}

func hostStateSet(ctx context.Context, m api.Module, stack []uint64) {
	env := hostEnv(ctx, m, int(uint32(stack[1]))+int(uint32(stack[3])), true)
	if err := env.State.Set(read(m, stack[0], stack[1]), read(m, stack[2], stack[3])); err != nil {
		panic(err)
	}
}

func hostStateDelete(ctx context.Context, m api.Module, stack []uint64) {
	env := hostEnv(ctx, m, int(uint32(stack[1])), true)
	env.State.Delete(read(m, stack[0], stack[1]))
}
