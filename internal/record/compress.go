package record

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Bounds on decompression. A compressed batch's records may inflate to
// DecompressLimit(n) bytes, n being their compressed size; past that,
// decoding fails with ErrTooLarge.
//
// The floor lets every batch a mainstream client writes with its default
// settings through, whatever its ratio: franz-go and librdkafka cap a batch
// at about 1 MB before compression, the Java producer at 16 KiB after it.
// Above the floor the ratio bounds what a small hostile batch can cost; 255
// is more than LZ4 or Snappy can reach at all and more than gzip or zstd
// reach on anything but near-constant data. The cap bounds everything.
const (
	// MaxDecompressedSize is the most any batch's records may inflate to.
	MaxDecompressedSize = 256 << 20
	// MaxCompressionRatio is the largest inflation factor allowed above
	// MinDecompressLimit.
	MaxCompressionRatio = 255
	// MinDecompressLimit is what any batch's records may inflate to,
	// whatever their compressed size.
	MinDecompressLimit = 4 << 20
)

// zstdMinWindow is the window size every zstd decoder should support.
const zstdMinWindow = 8 << 20

// DecompressLimit returns how many bytes the records of a batch may inflate
// to when they take n bytes compressed: MaxCompressionRatio times n, but at
// least MinDecompressLimit and at most MaxDecompressedSize.
func DecompressLimit(n int) int {
	if n >= MaxDecompressedSize/MaxCompressionRatio {
		return MaxDecompressedSize
	}
	return max(MinDecompressLimit, n*MaxCompressionRatio)
}

// decompress inflates src, the records of a batch compressed with c, to at
// most DecompressLimit(len(src)) bytes. The result never aliases src.
func decompress(c Codec, src []byte) ([]byte, error) {
	limit := DecompressLimit(len(src))
	switch c {
	case CodecGzip:
		d := gzipReaders.Get().(*gzipReader)
		defer func() { d.src.Reset(nil); gzipReaders.Put(d) }()
		d.src.Reset(src)
		if err := d.r.Reset(&d.src); err != nil {
			return nil, corruptf("gzip: %v", err)
		}
		return readBounded(c, &d.r, limit, len(src))
	case CodecSnappy:
		return decodeSnappy(src, limit)
	case CodecLZ4:
		d := lz4Readers.Get().(*lz4Reader)
		defer func() { d.src.Reset(nil); lz4Readers.Put(d) }()
		d.src.Reset(src)
		d.r.Reset(&d.src)
		return readBounded(c, d.r, limit, len(src))
	case CodecZstd:
		d := zstdDecoders.Get().(*zstdDecoder)
		defer func() { d.src.Reset(nil); zstdDecoders.Put(d) }()
		// A bytes.Reader, unlike a bytes.Buffer, makes the decoder stream,
		// so that readBounded's limit bounds its output as it goes. The
		// decoder allocates a frame's whole declared window up front, so
		// the window is bounded like the output, but never below the 8 MiB
		// zstd asks every decoder to support (which covers the Java
		// client's levels up to 19).
		d.src.Reset(src)
		window := uint64(min(MaxDecompressedSize, max(limit, zstdMinWindow)))
		if err := d.d.ResetWithOptions(&d.src, zstd.WithDecoderMaxWindow(window)); err != nil {
			return nil, corruptf("zstd: %v", err)
		}
		return readBounded(c, d.d, limit, len(src))
	}
	return nil, errUnsupportedCodec(c)
}

// readBounded reads r to its end, failing with ErrTooLarge past limit
// bytes. The buffer grows by doubling but never past limit+1 bytes, so a
// bomb costs at most about twice the limit.
func readBounded(c Codec, r io.Reader, limit, srcLen int) ([]byte, error) {
	buf := make([]byte, 0, min(limit+1, 4*srcLen+512))
	for empty := 0; ; {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(limit+1, 2*cap(buf))-len(buf))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, fmt.Errorf("%w: %v records of %d bytes inflate past %d bytes", ErrTooLarge, c, srcLen, limit)
		}
		if n > 0 {
			empty = 0
		} else if empty++; err == nil && empty > 100 {
			err = io.ErrNoProgress
		}
		switch {
		case err == io.EOF:
			return buf, nil
		case errors.Is(err, zstd.ErrDecoderSizeExceeded), errors.Is(err, zstd.ErrWindowSizeExceeded):
			return nil, fmt.Errorf("%w: %v records: %v", ErrTooLarge, c, err)
		case err != nil:
			return nil, corruptf("%v: %v", c, err)
		}
	}
}

// Pooled decoders: building one allocates far more than a small batch.
// The pools are caches only; no decoder state survives a Put that matters.
type gzipReader struct {
	r   gzip.Reader
	src bytes.Reader
}

type lz4Reader struct {
	r   *lz4.Reader
	src bytes.Reader
}

type zstdDecoder struct {
	d   *zstd.Decoder
	src bytes.Reader
}

var (
	gzipReaders = sync.Pool{New: func() any { return new(gzipReader) }}
	lz4Readers  = sync.Pool{New: func() any { return &lz4Reader{r: lz4.NewReader(nil)} }}
	// Concurrency 1 makes the decoder decode synchronously, with no
	// goroutines; the cleanup releases its buffers when the pool drops it.
	zstdDecoders = sync.Pool{New: func() any {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(MaxDecompressedSize),
			zstd.WithDecoderMaxWindow(MaxDecompressedSize),
		)
		if err != nil { // only on invalid options, which these are not
			panic("stele/record: zstd decoder options: " + err.Error())
		}
		z := &zstdDecoder{d: d}
		runtime.AddCleanup(z, func(d *zstd.Decoder) { d.Close() }, d)
		return z
	}}
)

// compress appends the compressed form of src to dst.
func compress(dst []byte, c Codec, src []byte) ([]byte, error) {
	switch c {
	case CodecNone:
		return append(dst, src...), nil
	case CodecGzip:
		w := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(w)
		return streamCompress(dst, w, src)
	case CodecSnappy:
		return appendXerial(dst, src), nil
	case CodecLZ4:
		w := lz4Writers.Get().(*lz4.Writer)
		defer lz4Writers.Put(w)
		return streamCompress(dst, w, src)
	case CodecZstd:
		return zstdEncoder().EncodeAll(src, dst), nil
	}
	return nil, errUnsupportedCodec(c)
}

// resetWriter is a compressing writer that can be reused.
type resetWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

// streamCompress appends src compressed by w to dst.
func streamCompress(dst []byte, w resetWriter, src []byte) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	w.Reset(buf)
	_, err := w.Write(src)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	w.Reset(nil)
	if err != nil {
		return nil, fmt.Errorf("stele/record: compressing: %w", err)
	}
	return buf.Bytes(), nil
}

var (
	gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}
	lz4Writers  = sync.Pool{New: func() any { return lz4.NewWriter(nil) }}
	// zstdEncoder is shared: EncodeAll is safe for concurrent use.
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
		if err != nil { // only on invalid options, which these are not
			panic("stele/record: zstd encoder options: " + err.Error())
		}
		return e
	})
)
