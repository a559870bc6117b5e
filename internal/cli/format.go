package cli

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// defaultFormat is consume's default --format: the value and a newline.
const defaultFormat = `%v\n`

// formatHelp documents the --format template.
const formatHelp = `output template: %k key, %v value, %o offset, %p partition, %t timestamp (ms), ` +
	`%T topic, %h headers (k=v,comma-joined), %K/%V key/value length (-1 for null), %% a %; ` +
	`escapes \n \t \r \\`

// errBadFormat is the cause of every --format parse error
// (errors.Is(err, errBadFormat)).
var errBadFormat = errors.New("stele/cli: invalid --format")

// formatError is a --format parse error as a person reads it.
type formatError struct{ msg string }

func (e formatError) Error() string { return "invalid --format " + e.msg }
func (e formatError) Unwrap() error { return errBadFormat }

func badFormat(format string, args ...any) error {
	return formatError{fmt.Sprintf(format, args...)}
}

// recordFormat is a parsed --format template: literal text and verbs, in
// order, as kcat's -f.
type recordFormat []formatPart

// formatPart is literal text (verb 0) or one verb such as 'k' or 'v'.
type formatPart struct {
	verb byte
	lit  []byte
}

// parseFormat parses a --format template. An unknown verb or escape, or a
// trailing lone % or \, is an error wrapping errBadFormat.
func parseFormat(s string) (recordFormat, error) {
	var (
		parts recordFormat
		lit   []byte
	)
	flush := func() {
		if len(lit) > 0 {
			parts = append(parts, formatPart{lit: lit})
			lit = nil
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '%':
			if i+1 == len(s) {
				return nil, badFormat("%q: it ends with a lone %%; write %%%% for a literal %%", s)
			}
			i++
			switch v := s[i]; v {
			case '%':
				lit = append(lit, '%')
			case 'k', 'v', 'o', 'p', 't', 'T', 'h', 'K', 'V':
				flush()
				parts = append(parts, formatPart{verb: v})
			default:
				return nil, badFormat("%q: unknown verb %%%c (known: %%k %%v %%o %%p %%t %%T %%h %%K %%V %%%%)",
					s, v)
			}
		case '\\':
			if i+1 == len(s) {
				return nil, badFormat(`%q: it ends with a lone \; write \\ for a literal \`, s)
			}
			i++
			switch e := s[i]; e {
			case 'n':
				lit = append(lit, '\n')
			case 't':
				lit = append(lit, '\t')
			case 'r':
				lit = append(lit, '\r')
			case '\\':
				lit = append(lit, '\\')
			default:
				return nil, badFormat(`%q: unknown escape \%c (known: \n \t \r \\)`, s, e)
			}
		default:
			lit = append(lit, c)
		}
	}
	flush()
	return parts, nil
}

// append appends r formatted by f to dst. A null key or value formats as
// nothing for %k/%v and -1 for %K/%V, as kcat does.
func (f recordFormat) append(dst []byte, r *kgo.Record) []byte {
	for _, p := range f {
		switch p.verb {
		case 0:
			dst = append(dst, p.lit...)
		case 'k':
			dst = append(dst, r.Key...)
		case 'v':
			dst = append(dst, r.Value...)
		case 'o':
			dst = strconv.AppendInt(dst, r.Offset, 10)
		case 'p':
			dst = strconv.AppendInt(dst, int64(r.Partition), 10)
		case 't':
			dst = strconv.AppendInt(dst, r.Timestamp.UnixMilli(), 10)
		case 'T':
			dst = append(dst, r.Topic...)
		case 'h':
			for i, h := range r.Headers {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, h.Key...)
				dst = append(dst, '=')
				dst = append(dst, h.Value...)
			}
		case 'K':
			dst = appendLen(dst, r.Key)
		case 'V':
			dst = appendLen(dst, r.Value)
		}
	}
	return dst
}

// appendLen appends len(b), or -1 when b is null.
func appendLen(dst, b []byte) []byte {
	if b == nil {
		return append(dst, "-1"...)
	}
	return strconv.AppendInt(dst, int64(len(b)), 10)
}
