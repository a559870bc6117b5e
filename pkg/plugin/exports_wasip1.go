//go:build wasip1

package plugin

import "unsafe"

// The buffers the broker writes an input into and reads an output from;
// kept here so that the collector leaves them alone between the calls.
var (
	inBuf  []byte
	outBuf []byte
)

//go:wasmexport stele_alloc
func steleAlloc(n uint32) uint32 {
	inBuf = make([]byte, n)
	if n == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&inBuf[0])))
}

//go:wasmexport stele_produce
func steleProduce(ptr, n uint32) uint64 {
	outBuf = runProduce(inBuf[:n])
	if len(outBuf) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&outBuf[0])))<<32 | uint64(len(outBuf))
}

//go:wasmexport stele_fetch
func steleFetch(ptr, n uint32) uint64 {
	outBuf = runFetch(inBuf[:n])
	if len(outBuf) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&outBuf[0])))<<32 | uint64(len(outBuf))
}
