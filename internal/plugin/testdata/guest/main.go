// A plugin for the runtime's tests, built with the SDK: its config's
// "mode" says what its produce hook does. upper: upper-cases values,
// drops records keyed "drop", rejects a batch with a record keyed "bad",
// appends config "suffix" to each value and a header "seen" with the
// hook's reading of the clock and of chance; grow: the same after
// allocating 16 MiB (which grows the module's memory); spin: never
// returns; hog: allocates without end; panic: panics; state: counts its
// calls in its state (and, with config big=X, sets a value of len(X)
// KiB) and answers one record "count@blocktime".
//
// Its fetch hook, by the same config's "fetch": filter: leaves out the
// records keyed "drop", upper-cases the others' values and adds a header
// "principal" with the consumer's principal; bogus: answers a record at
// an offset it was not given; reject: fails with "no fetch for you";
// spin: never returns.
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
		case "state":
			// Counts its calls in its state and says the block time.
			n := 0
			if v, ok := b.State.Get([]byte("n")); ok {
				n = int(v[0])
			}
			b.State.Set([]byte("n"), []byte{byte(n + 1)})
			if big := b.Config["big"]; big != "" {
				b.State.Set([]byte("big"), make([]byte, len(big)*1024))
			}
			return []plugin.Record{{Value: fmt.Appendf(nil, "%d@%d", n+1, b.Time.UnixMilli())}}, nil
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

func init() {
	plugin.HandleFetch(func(b *plugin.FetchBatch) ([]plugin.FetchRecord, error) {
		switch b.Config["fetch"] {
		case "bogus":
			return []plugin.FetchRecord{{Offset: -1}}, nil
		case "reject":
			return nil, errors.New("no fetch for you")
		case "spin":
			for {
				sink = nil
			}
		}
		var out []plugin.FetchRecord
		for _, r := range b.Records {
			if string(r.Key) == "drop" {
				continue
			}
			r.Value = bytes.ToUpper(r.Value)
			r.Headers = append(r.Headers, plugin.Header{Key: "principal", Value: []byte(b.Principal)})
			out = append(out, r)
		}
		return out, nil
	})
}

func main() {}
