package record

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
)

// Snappy as Kafka clients write it: either a raw Snappy block, or the xerial
// framing of the Java client's snappy-java SnappyOutputStream: an 8-byte
// magic, two 4-byte versions, then blocks each behind a 4-byte big-endian
// length. snappy-java falls back to a raw block when the magic is absent; so
// do we.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const (
	xerialHeaderSize = 16
	xerialBlockSize  = 32 << 10 // what SnappyOutputStream writes
)

// decodeSnappy decodes raw or xerial-framed Snappy, refusing S2's
// extensions to Snappy, which no Snappy consumer could read.
func decodeSnappy(src []byte, limit int) ([]byte, error) {
	if len(src) < xerialHeaderSize || !bytes.HasPrefix(src, xerialMagic) {
		n, err := snappy.DecodedLen(src)
		if err != nil {
			return nil, corruptf("snappy: %v", err)
		}
		if n > limit {
			return nil, fmt.Errorf("%w: snappy block claims %d bytes, the limit is %d", ErrTooLarge, n, limit)
		}
		return decodeSnappyBlock(make([]byte, n), src)
	}
	// Sum the blocks' decoded sizes first so that the output is allocated
	// once and only once it is known to be within the limit.
	var total int
	for rest := src[xerialHeaderSize:]; len(rest) > 0; {
		block, next, err := xerialBlock(rest)
		if err != nil {
			return nil, err
		}
		n, err := snappy.DecodedLen(block)
		if err != nil {
			return nil, corruptf("snappy: %v", err)
		}
		if total += n; total > limit {
			return nil, fmt.Errorf("%w: snappy blocks inflate past %d bytes", ErrTooLarge, limit)
		}
		rest = next
	}
	out := make([]byte, total)
	at := 0
	for rest := src[xerialHeaderSize:]; len(rest) > 0; {
		block, next, _ := xerialBlock(rest) // checked above
		n, _ := snappy.DecodedLen(block)
		if _, err := decodeSnappyBlock(out[at:at+n], block); err != nil {
			return nil, err
		}
		at += n
		rest = next
	}
	return out, nil
}

// decodeSnappyBlock decodes the Snappy block src into dst, which has
// exactly its decoded length, with the strict Snappy decoder of
// github.com/klauspost/compress/snappy: it refuses S2's extensions (repeat
// copies, encoded with offset 0), which s2.Decode and snappy.Decode accept.
// BenchmarkSnappyBlock measured a hand-written strictness check in front of
// s2.Decode no faster than it (docs/benchmarks.md, "Snappy decoding").
func decodeSnappyBlock(dst, src []byte) ([]byte, error) {
	out, err := snappy.DecodeStrict(dst, src)
	if err != nil || len(out) != len(dst) {
		return nil, corruptf("snappy: %v", err)
	}
	return out, nil
}

// xerialBlock splits the first length-prefixed block off b.
func xerialBlock(b []byte) (block, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, corruptf("snappy: xerial block length cut short")
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, corruptf("snappy: xerial block of %d bytes, %d remain", n, len(b)-4)
	}
	return b[4 : 4+n], b[4+n:], nil
}

// appendXerial appends src compressed in the xerial framing, in blocks
// of 32 KiB as SnappyOutputStream writes them.
func appendXerial(dst, src []byte) []byte {
	dst = append(dst, xerialMagic...)
	dst = binary.BigEndian.AppendUint32(dst, 1) // version
	dst = binary.BigEndian.AppendUint32(dst, 1) // minimum compatible version
	for len(src) > 0 {
		n := min(len(src), xerialBlockSize)
		dst = slices.Grow(dst, 4+s2.MaxEncodedLen(n))
		at := len(dst)
		block := s2.EncodeSnappy(dst[at+4:cap(dst)], src[:n])
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(block)))
		dst = dst[:at+4+len(block)]
		src = src[n:]
	}
	return dst
}
