package record

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/klauspost/compress/s2"
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
		n, err := s2.DecodedLen(src)
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
		n, err := s2.DecodedLen(block)
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
		n, _ := s2.DecodedLen(block)
		if _, err := decodeSnappyBlock(out[at:at+n], block); err != nil {
			return nil, err
		}
		at += n
		rest = next
	}
	return out, nil
}

// decodeSnappyBlock decodes the Snappy block src into dst, which has
// exactly its decoded length. It checks src with checkSnappy, then decodes
// with S2's fast decoder: on input strict Snappy accepts, both decode alike.
func decodeSnappyBlock(dst, src []byte) ([]byte, error) {
	if err := checkSnappy(src, len(dst)); err != nil {
		return nil, err
	}
	out, err := s2.Decode(dst, src)
	if err != nil || len(out) != len(dst) {
		return nil, corruptf("snappy: %v", err)
	}
	return out, nil
}

// checkSnappy walks the elements of a Snappy block that decodes to n bytes
// and fails on anything a strict Snappy decoder refuses (the decodeStrict
// of github.com/klauspost/compress/snappy, which it follows step by step,
// without moving any data): notably S2's repeat copies, encoded with
// offset 0.
func checkSnappy(src []byte, n int) error {
	_, s := binary.Uvarint(src)
	if s <= 0 {
		return corruptf("snappy: malformed block length")
	}
	d := 0 // bytes the block has decoded to so far
	for s < len(src) {
		tag := src[s]
		var length, offset, size int
		switch tag & 0x03 {
		case 0x00:
			x, extra := int(tag>>2), 0
			if x >= 60 {
				extra = x - 59
				if s+1+extra > len(src) {
					return corruptf("snappy: literal length cut short")
				}
				x = 0
				for i := range extra {
					x |= int(src[s+1+i]) << (8 * i)
				}
			}
			s += 1 + extra
			length = x + 1
			if length > n-d || length > len(src)-s {
				return corruptf("snappy: literal of %d bytes overruns the block", length)
			}
			d += length
			s += length
			continue
		case 0x01:
			size = 2
		case 0x02:
			size = 3
		case 0x03:
			size = 5
		}
		if s+size > len(src) {
			return corruptf("snappy: copy cut short")
		}
		switch size {
		case 2:
			length = 4 + int(tag>>2&0x7)
			offset = int(tag&0xe0)<<3 | int(src[s+1])
		case 3:
			length = 1 + int(tag>>2)
			offset = int(binary.LittleEndian.Uint16(src[s+1:]))
		case 5:
			length = 1 + int(tag>>2)
			offset = int(binary.LittleEndian.Uint32(src[s+1:]))
		}
		s += size
		if offset <= 0 || d < offset || length > n-d {
			return corruptf("snappy: copy of %d bytes at offset %d invalid after %d bytes", length, offset, d)
		}
		d += length
	}
	if d != n {
		return corruptf("snappy: block decodes to %d bytes, its header says %d", d, n)
	}
	return nil
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
