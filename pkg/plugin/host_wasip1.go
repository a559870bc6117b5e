//go:build wasip1

package plugin

import "unsafe"

// The host functions (internal/plugin/host.go): a module built with the
// SDK imports them, so it needs app version 18.

//go:wasmimport stele block_time
func steleBlockTime() int64

//go:wasmimport stele state_get
func steleStateGet(kptr unsafe.Pointer, klen uint32, vptr unsafe.Pointer, vcap uint32) int64

//go:wasmimport stele state_set
func steleStateSet(kptr unsafe.Pointer, klen uint32, vptr unsafe.Pointer, vlen uint32)

//go:wasmimport stele state_delete
func steleStateDelete(kptr unsafe.Pointer, klen uint32)

func hostBlockTime() int64 { return steleBlockTime() }

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// hostState is the state the host keeps.
type hostState struct{}

func (hostState) Get(key []byte) ([]byte, bool) {
	buf := make([]byte, 256)
	for {
		n := steleStateGet(ptr(key), uint32(len(key)), ptr(buf), uint32(len(buf)))
		switch {
		case n < 0:
			return nil, false
		case int(n) <= len(buf):
			return buf[:n], true
		}
		buf = make([]byte, n)
	}
}

func (hostState) Set(key, value []byte) {
	steleStateSet(ptr(key), uint32(len(key)), ptr(value), uint32(len(value)))
}

func (hostState) Delete(key []byte) { steleStateDelete(ptr(key), uint32(len(key))) }
