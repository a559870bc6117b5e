// Command ratelimit is an example plugin (issue 24, pkg/plugin): its
// produce hook limits each key to a number of records per second of block
// time, counting in the plugin's own state (app version 18), so that the
// limit holds across batches, producers and brokers alike.
//
// Config:
//
//	records=N      records a key may have in one second (required, >= 1)
//	over=reject    refuse the batch of a record past the limit (the
//	               default: its producer gets INVALID_RECORD and the
//	               message); over=drop stores the batch without the
//	               records past it
//	keyless=count  count the records without a key as one key; by
//	               default they are not limited
//
// A second is one of block time (plugin.Batch.Time): every batch ordered
// in blocks of the same second counts toward it, on every broker alike. A
// refused batch counts nothing (its state changes are dropped with it).
// Build:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o ratelimit.wasm ./examples/plugins/ratelimit
//
// and deploy (docs/plugins.md):
//
//	stele plugin deploy ratelimit --wasm ratelimit.wasm --topic clicks --config records=100
//
// State: "k"+key holds a key's count in the current second (a u32); "w"
// the current second (a u64) and how many index pieces list the keys
// counted in it; "i"+n (n a u32) those pieces, keys with a u16 length
// each, at most indexPiece bytes a piece. When the second changes, the
// keys listed and the pieces are deleted, so the state holds one second's
// keys only.
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/stele-io/stele/pkg/plugin"
)

func init() { plugin.HandleProduce(limitBatch) }

func main() {}

const indexPiece = 60 << 10

// window is the state's current second and its index.
type window struct {
	st     plugin.State
	second int64
	pieces uint32
	last   []byte // the last piece, to append to
}

func openWindow(st plugin.State, second int64) *window {
	w := &window{st: st}
	if v, ok := st.Get([]byte("w")); ok && len(v) == 12 {
		w.second, w.pieces = int64(binary.BigEndian.Uint64(v)), binary.BigEndian.Uint32(v[8:])
	}
	if w.second != second {
		// A new second: forget the last one's keys.
		for n := range w.pieces {
			piece, _ := st.Get(pieceKey(n))
			for len(piece) >= 2 {
				l := int(binary.BigEndian.Uint16(piece))
				st.Delete(append([]byte("k"), piece[2:2+l]...))
				piece = piece[2+l:]
			}
			st.Delete(pieceKey(n))
		}
		w.second, w.pieces = second, 0
		w.save()
	} else if w.pieces > 0 {
		w.last, _ = st.Get(pieceKey(w.pieces - 1))
	}
	return w
}

func pieceKey(n uint32) []byte { return binary.BigEndian.AppendUint32([]byte("i"), n) }

func (w *window) save() {
	v := binary.BigEndian.AppendUint64(nil, uint64(w.second))
	w.st.Set([]byte("w"), binary.BigEndian.AppendUint32(v, w.pieces))
}

// count adds one to key's count and answers it.
func (w *window) count(key []byte) uint32 {
	k := append([]byte("k"), key...)
	n := uint32(0)
	if v, ok := w.st.Get(k); ok && len(v) == 4 {
		n = binary.BigEndian.Uint32(v)
	} else {
		// First in this second: listed, so the next second deletes it.
		if w.pieces == 0 || len(w.last)+2+len(key) > indexPiece {
			w.pieces++
			w.last = nil
			w.save()
		}
		w.last = append(binary.BigEndian.AppendUint16(w.last, uint16(len(key))), key...)
		w.st.Set(pieceKey(w.pieces-1), w.last)
	}
	n++
	w.st.Set(k, binary.BigEndian.AppendUint32(nil, n))
	return n
}

func limitBatch(b *plugin.Batch) ([]plugin.Record, error) {
	limit, err := strconv.ParseUint(b.Config["records"], 10, 32)
	if err != nil || limit == 0 {
		return nil, errors.New("ratelimit: the config needs records=N, a number of records per key per second (N >= 1)")
	}
	drop := b.Config["over"] == "drop"
	if o := b.Config["over"]; o != "" && o != "drop" && o != "reject" {
		return nil, fmt.Errorf("ratelimit: over=%s: reject or drop", o)
	}
	countKeyless := b.Config["keyless"] == "count"
	if b.State == nil {
		return nil, errors.New("ratelimit: no state (the cluster's app version is below 18)")
	}
	second := b.Time.Unix()
	w := openWindow(b.State, second)
	out := b.Records[:0:0]
	for i, r := range b.Records {
		if r.Key == nil && !countKeyless {
			out = append(out, r)
			continue
		}
		if len(r.Key) > 250 {
			return nil, fmt.Errorf("ratelimit: record %d: a key of %d bytes; keys of at most 250 bytes are counted", i, len(r.Key))
		}
		if w.count(r.Key) > uint32(limit) {
			if drop {
				continue
			}
			return nil, fmt.Errorf("ratelimit: record %d: key %q has more than %d records in the second %d", i, r.Key, limit, second)
		}
		out = append(out, r)
	}
	return out, nil
}
