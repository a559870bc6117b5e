package merkle

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strconv"
)

// KV is one update of a block: key and new value.
type KV struct{ K, V []byte }

// The state's keys mimic Stele's metadata store (internal/fsm/core/persist.go),
// one key in ten a partition's offsets, four in ten a committed offset,
// five in ten an idempotent producer's state:
//
//	p/<topic id 16B><partition u32>                       → 24 bytes
//	o/<group>/<topic>/<partition u32>                     → 40 bytes
//	s/<topic>\x00<partition u32><producer id u64>         → 32 bytes
//
// Key i is a pure function of i, so every candidate sees the same keys.
func stateKey(i uint64) []byte {
	j := i / 10
	switch k := i % 10; {
	case k == 0:
		b := make([]byte, 0, 22)
		b = append(b, "p/"...)
		b = appendTopicID(b, j>>6)
		return binary.BigEndian.AppendUint32(b, uint32(j&63))
	case k <= 4:
		j = j*4 + (k - 1)
		b := make([]byte, 0, 40)
		b = append(b, "o/group-"...)
		b = strconv.AppendUint(b, j>>8, 10)
		b = append(b, "/topic-"...)
		b = strconv.AppendUint(b, (j>>4)&15, 10)
		b = append(b, '/')
		return binary.BigEndian.AppendUint32(b, uint32(j&15))
	default:
		j = j*5 + (k - 5)
		b := make([]byte, 0, 40)
		b = append(b, "s/topic-"...)
		b = strconv.AppendUint(b, j>>9, 10)
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32((j>>3)&63))
		return binary.BigEndian.AppendUint64(b, 1000+(j&7))
	}
}

// appendTopicID appends a 16-byte topic ID derived from t (splitmix64).
func appendTopicID(b []byte, t uint64) []byte {
	x := t*0x9e3779b97f4a7c15 + 1
	for range 2 {
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		b = binary.BigEndian.AppendUint64(b, x)
	}
	return b
}

// absentKey is a key of the state's shape that is never inserted: the
// workload's key indexes stay below 1<<40.
func absentKey(i uint64) []byte { return stateKey(1<<40 + i) }

// valueLen is the size of the value stored under stateKey(i).
func valueLen(i uint64) int {
	switch k := i % 10; {
	case k == 0:
		return 24
	case k <= 4:
		return 40
	default:
		return 32
	}
}

// Workload generates blocks of updates over a growing state, deterministically
// from its seed: mostly overwrites of existing keys, some inserts.
type Workload struct {
	rng  *rand.Rand
	n    uint64 // keys 0..n-1 exist
	gen  uint64 // bumped by every value written
	seen map[uint64]struct{}
}

// insertPercent of a block's updates insert a new key; the rest overwrite
// an existing one chosen uniformly (the worst case for every cache: Stele's
// hot keys, the partitions being produced to, are far fewer).
const insertPercent = 10

// NewWorkload starts a workload over an empty state.
func NewWorkload(seed uint64) *Workload {
	return &Workload{rng: rand.New(rand.NewPCG(seed, 0x57e1e)), seen: map[uint64]struct{}{}}
}

// Keys is the number of keys the state holds once every block generated so
// far is applied.
func (w *Workload) Keys() uint64 { return w.n }

// ExistingKey returns a key chosen uniformly among those inserted.
func (w *Workload) ExistingKey() (uint64, []byte) {
	i := w.rng.Uint64N(w.n)
	return i, stateKey(i)
}

// Preload returns the next n inserts, in key-index order, in blocks of at
// most per.
func (w *Workload) Preload(n, per int) [][]KV {
	var out [][]KV
	for n > 0 {
		m := min(n, per)
		blk := make([]KV, m)
		for j := range blk {
			blk[j] = KV{stateKey(w.n), w.value(w.n)}
			w.n++
		}
		slices.SortFunc(blk, func(a, b KV) int { return bytes.Compare(a.K, b.K) })
		out = append(out, blk)
		n -= m
	}
	return out
}

// HotKeys is the size of the hot set of HotBlock: the first key indexes,
// 64 partitions' offsets, 256 committed offsets and 320 producer states,
// like the partitions a produce load writes to, block after block.
const HotKeys = 640

// Block returns the next block of n distinct updates, sorted by key (Stele
// writes a block's changes in a deterministic order): insertPercent of
// them inserts, the others overwrites of keys chosen uniformly.
func (w *Workload) Block(n int) []KV { return w.block(n, false) }

// HotBlock returns a block of n distinct overwrites of keys of the hot set
// (n at most HotKeys).
func (w *Workload) HotBlock(n int) []KV { return w.block(n, true) }

func (w *Workload) block(n int, hot bool) []KV {
	clear(w.seen)
	blk := make([]KV, 0, n)
	for len(blk) < n {
		var i uint64
		if hot {
			i = w.rng.Uint64N(min(HotKeys, w.n))
			if _, dup := w.seen[i]; dup {
				continue
			}
		} else if w.rng.IntN(100) < insertPercent {
			i = w.n
			w.n++
		} else {
			i = w.rng.Uint64N(w.n)
			if _, dup := w.seen[i]; dup {
				continue
			}
		}
		w.seen[i] = struct{}{}
		blk = append(blk, KV{stateKey(i), w.value(i)})
	}
	slices.SortFunc(blk, func(a, b KV) int { return bytes.Compare(a.K, b.K) })
	return blk
}

// value is a fresh value for key i: counters and random bytes, as offsets
// and epochs are.
func (w *Workload) value(i uint64) []byte {
	w.gen++
	v := make([]byte, valueLen(i))
	binary.BigEndian.PutUint64(v, w.gen)
	for j := 8; j+8 <= len(v); j += 8 {
		binary.BigEndian.PutUint64(v[j:], w.rng.Uint64())
	}
	return v
}
