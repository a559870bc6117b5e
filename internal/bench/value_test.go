package bench

import (
	"encoding/json"
	"testing"
	"time"
)

// A value written by the producers decodes back to its intended send
// time; values of the wrong size are errors.
func TestValueRoundTrip(t *testing.T) {
	pl := newPayload(64)
	at := time.Unix(1_700_000_000, 123_456_789)
	for seq := range 3 {
		v := pl.value(seq, at, true)
		sent, err := decodeValue(v, 64, true)
		if err != nil || sent != at.UnixNano() {
			t.Fatalf("seq %d: decoded %d, %v; want %d", seq, sent, err, at.UnixNano())
		}
	}
	// Consecutive produce values are distinct slices of the pool.
	if a, b := pl.value(0, at, false), pl.value(1, at, false); string(a) == string(b) || len(a) != 64 {
		t.Fatal("consecutive values repeat")
	}
	if _, err := decodeValue(make([]byte, 10), 64, false); err == nil {
		t.Fatal("a 10-byte value passed a 64-byte check")
	}
	if _, err := decodeValue(make([]byte, 7), 0, true); err == nil {
		t.Fatal("a 7-byte e2e value decoded")
	}
}

// Keys are distinct, of the asked size, and wrap to keys' count.
func TestMakeKeys(t *testing.T) {
	keys := makeKeys(1000, 3)
	seen := map[string]bool{}
	for _, k := range keys {
		if len(k) != 3 || seen[string(k)] {
			t.Fatalf("key %q: wrong size or repeated", k)
		}
		seen[string(k)] = true
	}
	if string(makeKeys(12, 6)[11]) != "000012" || makeKeys(5, 0) != nil {
		t.Fatal("key format")
	}
}

// FuzzDecodeValue: any bytes from a broker decode without a panic, and a
// value that passes the e2e check is as long as asked and holds a time.
func FuzzDecodeValue(f *testing.F) {
	f.Add([]byte{}, 0, true)
	f.Add(make([]byte, 8), 8, true)
	f.Add(newPayload(16).value(1, time.Unix(1, 2), true), 16, true)
	f.Add([]byte("short"), 1024, false)
	f.Fuzz(func(t *testing.T, v []byte, size int, e2e bool) {
		_, err := decodeValue(v, size, e2e)
		if err != nil {
			return
		}
		if size > 0 && len(v) != size {
			t.Fatalf("%d-byte value accepted for size %d", len(v), size)
		}
		if e2e && len(v) < 8 {
			t.Fatalf("%d-byte value decoded a send time", len(v))
		}
	})
}

// TestJSONPayload: --json values are JSON objects of exactly the record
// size, with the card field a plugin like redact removes.
func TestJSONPayload(t *testing.T) {
	for _, size := range []int{minJSONValue, 100, 1024, 16384} {
		pl := newJSONPayload(size)
		for seq := range 3 {
			v := pl.value(seq, time.Time{}, false)
			var obj map[string]any
			if err := json.Unmarshal(v, &obj); err != nil || len(v) != size || obj["card"] == nil || obj["pad"] == nil {
				t.Fatalf("size %d: value %q (%d bytes): %v", size, v, len(v), err)
			}
		}
	}
}
