package meter

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
)

// BenchmarkFuel: the cost of metering, one call of count(10000) (a loop
// of ten thousand iterations) on wazero's compiler, plain and metered.
func BenchmarkFuel(b *testing.B) {
	ctx := context.Background()
	for _, metered := range []bool{false, true} {
		name := "plain"
		if metered {
			name = "metered"
		}
		b.Run(name, func(b *testing.B) {
			m := loops
			if metered {
				var err error
				if m, err = Instrument(loops); err != nil {
					b.Fatal(err)
				}
			}
			rt := wazero.NewRuntime(ctx)
			defer rt.Close(ctx)
			mod, err := rt.Instantiate(ctx, m)
			if err != nil {
				b.Fatal(err)
			}
			count := mod.ExportedFunction("count")
			var fuel interface{ Set(uint64) }
			if g := mod.ExportedGlobal(FuelExport); g != nil {
				fuel = g.(interface{ Set(uint64) })
			}
			b.ResetTimer()
			for range b.N {
				if fuel != nil {
					fuel.Set(1 << 40)
				}
				if _, err := count.Call(ctx, 10000); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInstrument: metering the test module.
func BenchmarkInstrument(b *testing.B) {
	b.SetBytes(int64(len(loops)))
	for range b.N {
		if _, err := Instrument(loops); err != nil {
			b.Fatal(err)
		}
	}
}
