// A plugin for the runtime's tests, built with the SDK: its config's
// "mode" says what its produce hook does. upper: upper-cases values,
// drops records keyed "drop", rejects a batch with a record keyed "bad",
// appends config "suffix" to each value and a header "seen" with the
// hook's reading of the clock and of chance; grow: the same after
// allocating 16 MiB (which grows the module's memory); spin: never
// returns; hog: allocates without end; panic: panics.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stele-io/stele/pkg/plugin"
)

var sink [][]byte

func init() {
	plugin.HandleProduce(func(b *plugin.Batch) ([]plugin.Record, error) {
		switch b.Config["mode"] {
		case "spin":
			for i := 0; ; i++ {
				sink = nil
			}
		case "hog":
			for {
				sink = append(sink, make([]byte, 1<<20))
			}
		case "panic":
			panic("the guest panics")
		case "grow":
			sink = append(sink, make([]byte, 16<<20))
		}
		var out []plugin.Record
		for _, r := range b.Records {
			switch string(r.Key) {
			case "bad":
				return nil, errors.New("a record keyed bad")
			case "drop":
				continue
			}
			r.Value = append(bytes.ToUpper(r.Value), b.Config["suffix"]...)
			r.Headers = append(r.Headers, plugin.Header{Key: "seen", Value: fmt.Appendf(nil, "%d/%d", time.Now().UnixNano(), rand.IntN(1000000))})
			out = append(out, r)
		}
		return out, nil
	})
}

func main() {}
