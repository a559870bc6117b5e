package subject

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Pointer is a parsed JSON Pointer (RFC 6901): the path to the member of a
// record's JSON value whose string is the record's subject.
type Pointer struct {
	text   string
	tokens []string
}

// ParsePointer parses an RFC 6901 JSON Pointer: "" (the whole value) or
// "/"-separated reference tokens with `~0` for `~` and `~1` for `/`.
func ParsePointer(p string) (Pointer, error) {
	if p == "" {
		return Pointer{text: p}, nil
	}
	if p[0] != '/' {
		return Pointer{}, fmt.Errorf("JSON Pointer %q must be empty or start with /", p)
	}
	ptr := Pointer{text: p}
	for _, t := range strings.Split(p[1:], "/") {
		var b strings.Builder
		for i := 0; i < len(t); i++ {
			if t[i] != '~' {
				b.WriteByte(t[i])
				continue
			}
			if i+1 >= len(t) || (t[i+1] != '0' && t[i+1] != '1') {
				return Pointer{}, fmt.Errorf("JSON Pointer %q: `~` must be followed by 0 or 1", p)
			}
			if t[i+1] == '0' {
				b.WriteByte('~')
			} else {
				b.WriteByte('/')
			}
			i++
		}
		ptr.tokens = append(ptr.tokens, b.String())
	}
	return ptr, nil
}

// String is the pointer as given.
func (p Pointer) String() string { return p.text }

// errNotJSON is the cause given for a value that does not parse: the JSON
// library's own message is left out (it is a library's text).
var errNotJSON = errors.New("the value is not valid JSON")

// FromJSON finds the pointer's member in the JSON value v and returns its
// string: the record's subject, not checked yet (Check). found is false
// when v is null (a tombstone) or has no such member. An object with two
// members of one name gives the first. A member that is not a string, and
// a value that is not JSON up to the member, are errors. The value is read
// as a stream, no further than the member.
func (p Pointer) FromJSON(v []byte) (subject []byte, found bool, err error) {
	if v == nil {
		return nil, false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	for _, ref := range p.tokens {
		tok, err := dec.Token()
		if err != nil {
			return nil, false, errNotJSON
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return nil, false, nil // the pointer goes on into a scalar
		}
		switch d {
		case '{':
			ok, err := seekMember(dec, ref)
			if err != nil || !ok {
				return nil, false, err
			}
		case '[':
			ok, err := seekElement(dec, ref)
			if err != nil || !ok {
				return nil, false, err
			}
		default:
			return nil, false, errNotJSON
		}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, false, errNotJSON
	}
	switch t := tok.(type) {
	case string:
		return []byte(t), true, nil
	case nil:
		return nil, false, nil // null: no subject
	case json.Delim:
		if t == '{' {
			return nil, false, fmt.Errorf("the value at %q is an object, not a string", p.text)
		}
		if t == '[' {
			return nil, false, fmt.Errorf("the value at %q is an array, not a string", p.text)
		}
		return nil, false, errNotJSON
	case bool:
		return nil, false, fmt.Errorf("the value at %q is a boolean, not a string", p.text)
	default:
		return nil, false, fmt.Errorf("the value at %q is a number, not a string", p.text)
	}
}

// seekMember reads an object's members up to the one named name, leaving
// dec before its value; false when the object has none.
func seekMember(dec *json.Decoder, name string) (bool, error) {
	for {
		tok, err := dec.Token()
		if err != nil {
			return false, errNotJSON
		}
		if d, ok := tok.(json.Delim); ok && d == '}' {
			return false, nil
		}
		key, ok := tok.(string)
		if !ok {
			return false, errNotJSON
		}
		if key == name {
			return true, nil
		}
		if err := skipValue(dec); err != nil {
			return false, err
		}
	}
}

// seekElement reads an array's elements up to index ref, leaving dec
// before it; false when ref is no index (RFC 6901: digits, no leading
// zero) or the array is shorter.
func seekElement(dec *json.Decoder, ref string) (bool, error) {
	n, err := strconv.ParseUint(ref, 10, 31)
	if err != nil || (len(ref) > 1 && ref[0] == '0') {
		return false, nil
	}
	for i := uint64(0); ; i++ {
		if !dec.More() {
			return false, nil
		}
		if i == n {
			return true, nil
		}
		if err := skipValue(dec); err != nil {
			return false, err
		}
	}
}

// skipValue reads one whole value from dec.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return errNotJSON
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
			default:
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
	}
}
