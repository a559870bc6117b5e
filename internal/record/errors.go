package record

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Sentinel errors. Every error this package returns wraps one of them; test
// with errors.Is. ErrorCode maps them to the code a Kafka broker answers.
var (
	// ErrTruncated means the input ends before the batch (or header) it
	// starts does: a torn write, or a partial batch in a request.
	ErrTruncated = errors.New("stele/record: truncated batch")

	// ErrCorrupt means a CRC mismatch or a malformed batch: an impossible
	// length, trailing bytes, compressed data that does not decompress, or
	// records that do not decode. Errors wrapping ErrInvalidRecord wrap
	// ErrCorrupt too.
	ErrCorrupt = errors.New("stele/record: corrupt batch")

	// ErrInvalidRecord means the batch breaks a rule Kafka's broker answers
	// with INVALID_RECORD: records that do not decode or do not match the
	// header, or a produced batch breaking a rule on client batches (see
	// Validate). errors.Is(err, ErrCorrupt) is true for these errors too.
	ErrInvalidRecord = errors.New("stele/record: invalid record")

	// ErrUnsupportedMagic means the magic byte is not 2: magic 0 and 1
	// message sets (Kafka before 0.11) are not supported.
	ErrUnsupportedMagic = errors.New("stele/record: unsupported batch format (only magic 2, Kafka 0.11+ RecordBatch, is supported)")

	// ErrUnsupportedCodec means the compression bits name no codec (5-7).
	ErrUnsupportedCodec = errors.New("stele/record: unsupported compression codec")

	// ErrTooLarge means a batch's records would decompress past
	// DecompressLimit.
	ErrTooLarge = errors.New("stele/record: batch too large")
)

// ErrorCode returns the Kafka error code a Kafka broker answers a Produce
// with for err: 0 for nil, CORRUPT_MESSAGE for a CRC mismatch or a malformed
// batch, INVALID_RECORD for broken record or client rules (and for v0/v1
// batches and partial batches, which a Produce v3+ may not carry),
// UNSUPPORTED_COMPRESSION_TYPE, MESSAGE_TOO_LARGE, and
// UNKNOWN_SERVER_ERROR for errors not from this package.
//
// A zstd batch in a Produce below v7 must be answered with
// UNSUPPORTED_COMPRESSION_TYPE too; this package does not know the request
// version, so the caller checks that.
func ErrorCode(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, ErrUnsupportedCodec):
		return kerr.UnsupportedCompressionType.Code
	case errors.Is(err, ErrInvalidRecord), errors.Is(err, ErrUnsupportedMagic), errors.Is(err, ErrTruncated):
		return kerr.InvalidRecord.Code
	case errors.Is(err, ErrCorrupt):
		return kerr.CorruptMessage.Code
	}
	return kerr.UnknownServerError.Code
}

// invalidRecordError is an ErrInvalidRecord that is also an ErrCorrupt.
type invalidRecordError struct{ msg string }

func (e *invalidRecordError) Error() string   { return ErrInvalidRecord.Error() + ": " + e.msg }
func (e *invalidRecordError) Unwrap() []error { return []error{ErrInvalidRecord, ErrCorrupt} }

// invalidf returns an error wrapping ErrInvalidRecord and ErrCorrupt.
func invalidf(format string, args ...any) error {
	return &invalidRecordError{msg: fmt.Sprintf(format, args...)}
}

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

func errUnsupportedCodec(c Codec) error {
	return fmt.Errorf("%w: compression bits %d", ErrUnsupportedCodec, int8(c))
}
