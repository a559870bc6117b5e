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

var fetchSample = FetchInput{
	Config:    []Config{{"readers", "User:alice"}},
	Topic:     "payments",
	Partition: 1,
	Principal: "User:alice",
	Records: []FetchRecord{
		{Offset: 40, Record: sample.Records[0]},
		{Offset: 42, Record: sample.Records[1]},
		{Offset: 43, Record: sample.Records[2]},
	},
}

// TestFetchRoundTrip: a fetch hook's input and output decode to what was
// encoded, offsets and principal included; what is malformed is refused.
func TestFetchRoundTrip(t *testing.T) {
	in, err := DecodeFetchInput(AppendFetchInput(nil, fetchSample))
	if err != nil || !reflect.DeepEqual(in, fetchSample) {
		t.Fatalf("input: %v\n%+v\n%+v", err, in, fetchSample)
	}
	for _, out := range []FetchOutput{{Records: fetchSample.Records}, {Reject: true, Message: "not yours"}, {Records: []FetchRecord{}}} {
		got, err := DecodeFetchOutput(AppendFetchOutput(nil, out))
		if err != nil || !reflect.DeepEqual(got, out) {
			t.Fatalf("output: %v\n%+v\n%+v", err, got, out)
		}
	}
	enc := AppendFetchInput(nil, fetchSample)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"truncated": enc[:len(enc)-1],
		"trailing":  append(append([]byte{}, enc...), 0),
		"version":   append([]byte{2, 0, 0, 0}, enc[4:]...),
		"produce":   AppendInput(nil, sample), // no principal, no offsets
	} {
		if _, err := DecodeFetchInput(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("fetch input %s: %v", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":   nil,
		"verdict": {2},
		"huge":    {0, 0xFF, 0xFF, 0xFF, 0xFF},
		"short":   {0, 1, 0, 0, 0, 1, 2, 3},
	} {
		if _, err := DecodeFetchOutput(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("fetch output %s: %v", name, err)
		}
	}
}

// FuzzDecodeFetchOutput: a fetch hook's answer, as FuzzDecodeOutput.
func FuzzDecodeFetchOutput(f *testing.F) {
	f.Add(AppendFetchOutput(nil, FetchOutput{Records: fetchSample.Records}))
	f.Add(AppendFetchOutput(nil, FetchOutput{Reject: true, Message: "no"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := DecodeFetchOutput(b)
		if err != nil {
			return
		}
		if again := AppendFetchOutput(nil, out); !bytes.Equal(again, b) {
			t.Fatalf("%x decoded and encoded again is %x", b, again)
		}
	})
}

// FuzzDecodeFetchInput: a fetch hook's input, which the SDK decodes.
func FuzzDecodeFetchInput(f *testing.F) {
	f.Add(AppendFetchInput(nil, fetchSample))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodeFetchInput(b)
		if err != nil {
			return
		}
		if again := AppendFetchInput(nil, in); !bytes.Equal(again, b) {
			t.Fatalf("%x decoded and encoded again is %x", b, again)
		}
	})
}
