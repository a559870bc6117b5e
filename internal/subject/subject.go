// Package subject is a record's subject (docs/subjects.md): a dotted
// string such as orders.eu.fr.created, the patterns that select subjects
// (`*` one token, `>` every token left, at the end only, as in NATS), the
// JSON Pointer that lifts a subject from a JSON value
// (stele.subject.from=json:/pointer), and the per-batch summary a
// partition keeps so that a read by pattern skips the batches that cannot
// match without reading them.
//
// Everything here is a pure function of its input: the state machine
// calls it in its deterministic apply, and the front-ends to check what
// clients send. Error messages are for people; nothing hashed depends on
// them.
package subject

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Header is the record header that carries a record's subject.
const Header = "stele-subject"

// MaxLen is the longest subject or pattern, in bytes, separators included.
const MaxLen = 255

// ErrInvalid is wrapped by every error about a subject or a pattern
// (errors.Is); their messages are for people and name neither.
var ErrInvalid = errors.New("stele/subject: invalid subject or pattern")

// invalid is an error about a subject or a pattern.
type invalid string

func (e invalid) Error() string { return string(e) }
func (e invalid) Unwrap() error { return ErrInvalid }

func invalidf(format string, args ...any) error { return invalid(fmt.Sprintf(format, args...)) }

// Check reports why s is not a valid subject, or nil: tokens separated by
// dots, each non-empty, at most MaxLen bytes in all, valid UTF-8, and no
// wildcard (`*`, `>`), whitespace or control character anywhere.
func Check(s []byte) error {
	if len(s) == 0 {
		return invalidf("the subject is empty")
	}
	if len(s) > MaxLen {
		return invalidf("the subject is %d bytes, more than %d", len(s), MaxLen)
	}
	if !utf8.Valid(s) {
		return invalidf("the subject is not valid UTF-8")
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if i == start {
				return invalidf("subject %q has an empty token at byte %d", s, i)
			}
			start = i + 1
			continue
		}
		if c := s[i]; c == '*' || c == '>' {
			return invalidf("subject %q has the wildcard %q at byte %d; wildcards are for patterns", s, c, i)
		} else if bad(c) {
			return invalidf("subject %q has whitespace or a control character at byte %d", s, i)
		}
	}
	return nil
}

// bad reports whether c may not appear in a subject: ASCII whitespace and
// control characters. (Other Unicode spaces are let through: a subject is
// compared as bytes.)
func bad(c byte) bool { return c <= ' ' || c == 0x7f }

// Pattern is a parsed subscription pattern.
type Pattern struct {
	text   string
	tokens [][]byte // `*` for one token; the last may be `>`
	rest   bool     // the last token is `>`
}

// ParsePattern parses a pattern: tokens as in a subject, where a token may
// also be `*` (any one token) and the last token may be `>` (one or more
// tokens). A wildcard must be a whole token: `ord*` is refused.
func ParsePattern(p string) (Pattern, error) {
	if len(p) == 0 {
		return Pattern{}, invalidf("the pattern is empty")
	}
	if len(p) > MaxLen {
		return Pattern{}, invalidf("the pattern is %d bytes, more than %d", len(p), MaxLen)
	}
	if !utf8.ValidString(p) {
		return Pattern{}, invalidf("the pattern is not valid UTF-8")
	}
	pat := Pattern{text: p}
	toks := bytes.Split([]byte(p), []byte{'.'})
	for i, t := range toks {
		switch {
		case len(t) == 0:
			return Pattern{}, invalidf("pattern %q has an empty token (token %d)", p, i+1)
		case string(t) == ">":
			if i != len(toks)-1 {
				return Pattern{}, invalidf("pattern %q has `>` before its last token; `>` matches the rest and may only end a pattern", p)
			}
			pat.rest = true
		case string(t) == "*":
		default:
			for j, c := range t {
				if c == '*' || c == '>' {
					return Pattern{}, invalidf("pattern %q: a wildcard must be a whole token, not part of %q", p, t)
				}
				if bad(c) {
					return Pattern{}, invalidf("pattern %q has whitespace or a control character in token %d at byte %d", p, i+1, j)
				}
			}
		}
		pat.tokens = append(pat.tokens, t)
	}
	return pat, nil
}

// MustPattern is ParsePattern for patterns known to be valid (tests).
func MustPattern(p string) Pattern {
	pat, err := ParsePattern(p)
	if err != nil {
		panic(err)
	}
	return pat
}

// String is the pattern as given.
func (p Pattern) String() string { return p.text }

// Literal reports whether the pattern has no wildcard: it matches one
// subject, itself.
func (p Pattern) Literal() bool {
	if p.rest {
		return false
	}
	for _, t := range p.tokens {
		if string(t) == "*" {
			return false
		}
	}
	return true
}

// Match reports whether subject s matches the pattern.
func (p Pattern) Match(s []byte) bool {
	return p.match(s, -1)
}

// MatchPrefix reports whether some subject whose first tokens are prefix
// (a whole number of tokens) may match the pattern: what a summary that
// kept only its subjects' first tokens can tell.
func (p Pattern) MatchPrefix(prefix []byte) bool {
	return p.match(prefix, 1)
}

// match walks s's tokens against the pattern's. With open >= 0, s is the
// start of a longer subject: reaching its end before the pattern's is a
// possible match, not a miss.
func (p Pattern) match(s []byte, open int) bool {
	if len(p.tokens) == 0 {
		return false
	}
	for i, t := range p.tokens {
		if len(s) == 0 {
			return open >= 0 // the rest of the subject is unknown
		}
		if p.rest && i == len(p.tokens)-1 {
			return true // `>`: one or more tokens, and there is one
		}
		tok := s
		if j := bytes.IndexByte(s, '.'); j >= 0 {
			tok, s = s[:j], s[j+1:]
			if len(s) == 0 {
				return false // a trailing dot: not a subject
			}
		} else {
			s = nil
		}
		if string(t) != "*" && !bytes.Equal(t, tok) {
			return false
		}
	}
	return len(s) == 0
}

// HasPrefix reports whether subject s is prefix or lies under it: prefix
// is a whole number of s's first tokens. An empty prefix holds every
// subject.
func HasPrefix(s, prefix []byte) bool {
	if len(prefix) == 0 {
		return true
	}
	return bytes.HasPrefix(s, prefix) && (len(s) == len(prefix) || s[len(prefix)] == '.')
}
