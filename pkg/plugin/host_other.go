//go:build !wasip1

package plugin

// Outside WebAssembly (the SDK's own tests) there is no host: the block
// time is 0 and the state a map.

func hostBlockTime() int64 { return 0 }

type hostState struct{}

var nativeState = MapState{}

func (hostState) Get(key []byte) ([]byte, bool) { return nativeState.Get(key) }
func (hostState) Set(key, value []byte)         { nativeState.Set(key, value) }
func (hostState) Delete(key []byte)             { nativeState.Delete(key) }
