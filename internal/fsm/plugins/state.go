package plugins

// A plugin's own state (app version 18, HostVersion): a key-value store per
// deployment name that its produce hook reads and writes through the host
// functions (internal/plugin/host.go), kept in the authenticated store
// under d/s/<name>\0<key>, so it is the same on every broker and under the
// app hash.
//
// What a hook writes while a produce runs goes to that produce's overlay,
// which the produce check "plugin state" commits once the produce's
// batches are written: a produce refused (by a plugin or by any check
// after the plugins) leaves the state as it was. The overlay is reset
// when a produce begins (the Transforms hook is asked for every produce,
// before its checks).
//
// The state belongs to the name: a new module deployed under it keeps it;
// removing the plugin (or its topic, or its tenant) drops it.

import (
	"fmt"

	"github.com/stele-io/stele/internal/fsm/core"
)

// HostVersion is the app version from which a plugin's produce hook gets
// the block time and its state (and a module may import the host
// functions; below it such a module is refused, as version 17's binaries
// refuse it).
const HostVersion = 18

// Bounds of a plugin's state.
const (
	MaxStateKey   = 256
	MaxStateValue = 64 << 10
	MaxStateBytes = 4 << 20 // keys and values, per plugin
)

const prefixState = "d/s/"

func stateKey(name string, key []byte) []byte {
	return append(piecePrefix(prefixState, name), key...)
}

// pluginState is one plugin's state, committed.
type pluginState struct {
	kv    map[string][]byte
	bytes int
}

// stateWrite is a write of the overlay: a value, or a deletion.
type stateWrite struct {
	value []byte
	del   bool
}

// overlayState is a plugin's state as a produce's hook sees it: the
// overlay of the produce over the committed state.
type overlayState struct {
	f    *Plugins
	name string
}

func (s overlayState) committed() *pluginState { return s.f.state[s.name] }

func (s overlayState) Get(key []byte) ([]byte, bool) {
	if w, ok := s.f.overlay[s.name][string(key)]; ok {
		return w.value, !w.del
	}
	if c := s.committed(); c != nil {
		v, ok := c.kv[string(key)]
		return v, ok
	}
	return nil, false
}

// size is the state's bytes with the overlay's writes.
func (s overlayState) size() int {
	n := 0
	c := s.committed()
	if c != nil {
		n = c.bytes
	}
	for k, w := range s.f.overlay[s.name] {
		if c != nil {
			if v, ok := c.kv[k]; ok {
				n -= len(k) + len(v)
			}
		}
		if !w.del {
			n += len(k) + len(w.value)
		}
	}
	return n
}

func (s overlayState) Set(key, value []byte) error {
	switch {
	case len(key) == 0 || len(key) > MaxStateKey:
		return fmt.Errorf("state: a key of %d bytes: 1 to %d", len(key), MaxStateKey)
	case len(value) > MaxStateValue:
		return fmt.Errorf("state: a value of %d bytes: at most %d", len(value), MaxStateValue)
	}
	old, had := s.Get(key)
	n := s.size() + len(key) + len(value)
	if had {
		n -= len(key) + len(old)
	}
	if n > MaxStateBytes {
		return fmt.Errorf("state: %d bytes with this one: at most %d", n, MaxStateBytes)
	}
	s.write(key, stateWrite{value: value})
	return nil
}

func (s overlayState) Delete(key []byte) {
	if _, ok := s.Get(key); ok {
		s.write(key, stateWrite{del: true})
	}
}

func (s overlayState) write(key []byte, w stateWrite) {
	if s.f.overlay == nil {
		s.f.overlay = map[string]map[string]stateWrite{}
	}
	if s.f.overlay[s.name] == nil {
		s.f.overlay[s.name] = map[string]stateWrite{}
	}
	s.f.overlay[s.name][string(key)] = w
}

// commitOverlay makes the produce's writes the plugins' state and stages
// them.
func (f *Plugins) commitOverlay() {
	for _, name := range core.SortedKeys(f.overlay) {
		st := f.state[name]
		if st == nil {
			st = &pluginState{kv: map[string][]byte{}}
			f.state[name] = st
		}
		writes := f.overlay[name]
		for _, k := range core.SortedKeys(writes) {
			w := writes[k]
			if v, ok := st.kv[k]; ok {
				st.bytes -= len(k) + len(v)
				delete(st.kv, k)
			}
			if w.del {
				f.ops = append(f.ops, op{kind: opStateDelete, name: name, data: []byte(k)})
				continue
			}
			st.kv[k] = w.value
			st.bytes += len(k) + len(w.value)
			f.ops = append(f.ops, op{kind: opStateSet, name: name, data: []byte(k), value: w.value})
		}
		if len(st.kv) == 0 {
			delete(f.state, name)
		}
	}
	f.overlay = nil
}

// dropState drops name's state.
func (f *Plugins) dropState(name string) {
	delete(f.state, name)
	f.ops = append(f.ops, op{kind: opStateDrop, name: name})
}

// loadState reads every plugin's state.
func (f *Plugins) loadState() error {
	f.state = map[string]*pluginState{}
	return f.Store.Scan([]byte(prefixState), func(k, v []byte) error {
		rest := k[len(prefixState):]
		i := 0
		for i < len(rest) && rest[i] != 0 {
			i++
		}
		if i == len(rest) || i == len(rest)-1 {
			return fmt.Errorf("stele/fsm: %w: plugin state key %q", core.ErrMalformed, k)
		}
		name, key := string(rest[:i]), string(rest[i+1:])
		st := f.state[name]
		if st == nil {
			st = &pluginState{kv: map[string][]byte{}}
			f.state[name] = st
		}
		st.kv[key] = append([]byte{}, v...)
		st.bytes += len(key) + len(v)
		return nil
	})
}
