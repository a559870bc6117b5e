package meter

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
)

// FuzzInstrument: Instrument never panics on any input, and a module it
// meters that wazero accepts stays one wazero accepts, exporting the fuel
// global.
func FuzzInstrument(f *testing.F) {
	f.Add(loops)
	f.Add(testModule([][]byte{{0x60, 0, 0}}, []fn{{typ: 0, code: []byte{0x02, 0x40, 0x03, 0x7F, 0x41, 1, 0x0B, 0x1A, 0x0B, 0x0B}, export: "f"}}))
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	f.Fuzz(func(t *testing.T, m []byte) {
		out, err := Instrument(m)
		if err != nil {
			return
		}
		cm, err := rt.CompileModule(ctx, m)
		if err != nil {
			return // not valid before: nothing to keep
		}
		cm.Close(ctx)
		metered, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("a valid module metered is not valid: %v", err)
		}
		defer metered.Close(ctx)
		if _, ok := metered.ExportedFunctions()[FuelExport]; ok {
			t.Fatal("the fuel export is a function")
		}
	})
}
