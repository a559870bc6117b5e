package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

var sample = Input{
	Config:    []Config{{"fields", "card,ssn"}, {"mask", "*"}},
	Topic:     "orders",
	Partition: 3,
	Records: []Record{
		{Timestamp: 1700000000000, Key: []byte("k1"), Value: []byte(`{"card":"4111"}`), Headers: []Header{{"h", []byte("v")}, {"null", nil}, {"empty", []byte{}}}},
		{Timestamp: -1, Key: nil, Value: nil},
		{Timestamp: 5, Key: []byte{}, Value: []byte{}},
	},
}

// TestRoundTrip: an input and an output decode to what was encoded, null
// and empty byte strings kept apart.
func TestRoundTrip(t *testing.T) {
	in, err := DecodeInput(AppendInput(nil, sample))
	if err != nil || !reflect.DeepEqual(in, sample) {
		t.Fatalf("input: %v\n%+v\n%+v", err, in, sample)
	}
	for _, out := range []Output{{Records: sample.Records}, {Reject: true, Message: "no card numbers"}, {Records: []Record{}}} {
		got, err := DecodeOutput(AppendOutput(nil, out))
		if err != nil || !reflect.DeepEqual(got, out) {
			t.Fatalf("output: %v\n%+v\n%+v", err, got, out)
		}
	}
}

// TestDecodeRefuses: truncated, trailing, oversized counts, an unknown
// version or verdict: ErrMalformed.
func TestDecodeRefuses(t *testing.T) {
	enc := AppendInput(nil, sample)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"truncated": enc[:len(enc)-1],
		"trailing":  append(append([]byte{}, enc...), 0),
		"version":   append([]byte{2, 0, 0, 0}, enc[4:]...),
		"huge":      {1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0x7F},
	} {
		if _, err := DecodeInput(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("input %s: %v", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":   nil,
		"verdict": {2},
		"huge":    {0, 0xFF, 0xFF, 0xFF, 0xFF},
		"message": {1, 9, 0, 0, 0, 'x'},
	} {
		if _, err := DecodeOutput(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("output %s: %v", name, err)
		}
	}
}

// FuzzDecodeOutput: what a plugin answers is outside input to the
// broker: decoding never panics, and what decodes encodes back to the
// same bytes.
func FuzzDecodeOutput(f *testing.F) {
	f.Add(AppendOutput(nil, Output{Records: sample.Records}))
	f.Add(AppendOutput(nil, Output{Reject: true, Message: "no"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := DecodeOutput(b)
		if err != nil {
			return
		}
		if again := AppendOutput(nil, out); !bytes.Equal(again, b) {
			t.Fatalf("%x decoded and encoded again is %x", b, again)
		}
	})
}

// FuzzDecodeInput: the same of an input, which the SDK decodes.
func FuzzDecodeInput(f *testing.F) {
	f.Add(AppendInput(nil, sample))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodeInput(b)
		if err != nil {
			return
		}
		if again := AppendInput(nil, in); !bytes.Equal(again, b) {
			t.Fatalf("%x decoded and encoded again is %x", b, again)
		}
	})
}
