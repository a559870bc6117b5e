package proof

import (
	"crypto/ed25519"
	"errors"
	"testing"
)

// TestSignRecord: a signature verifies for its record and for nothing
// else: another topic, principal, sequence, key, value, header, header
// order, or a null made empty.
func TestSignRecord(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(make([]byte, 32))
	pub := priv.Public().(ed25519.PublicKey)
	hs := []RecordHeader{{"a", []byte("1")}, {"b", nil}}
	v := SignRecord(priv, "alice", 7, "t", []byte("k"), []byte("v"), hs)
	s, err := ParseSignature([]byte(v))
	if err != nil || s.Principal != "alice" || s.Seq != 7 {
		t.Fatalf("ParseSignature(%q): %+v %v", v, s, err)
	}
	// The signature header itself is not signed: it may sit among them.
	withSig := append([]RecordHeader{{SignatureHeader, []byte(v)}}, hs...)
	if err := VerifyRecord(pub, s, "t", []byte("k"), []byte("v"), withSig); err != nil {
		t.Fatalf("the record as written: %v", err)
	}
	other := s
	other.Seq = 8
	for name, check := range map[string]error{
		"topic":        VerifyRecord(pub, s, "u", []byte("k"), []byte("v"), hs),
		"sequence":     VerifyRecord(pub, other, "t", []byte("k"), []byte("v"), hs),
		"key":          VerifyRecord(pub, s, "t", []byte("K"), []byte("v"), hs),
		"null key":     VerifyRecord(pub, s, "t", nil, []byte("v"), hs),
		"value":        VerifyRecord(pub, s, "t", []byte("k"), []byte("w"), hs),
		"header value": VerifyRecord(pub, s, "t", []byte("k"), []byte("v"), []RecordHeader{{"a", []byte("2")}, {"b", nil}}),
		"null header":  VerifyRecord(pub, s, "t", []byte("k"), []byte("v"), []RecordHeader{{"a", []byte("1")}, {"b", []byte{}}}),
		"order":        VerifyRecord(pub, s, "t", []byte("k"), []byte("v"), []RecordHeader{{"b", nil}, {"a", []byte("1")}}),
		"extra header": VerifyRecord(pub, s, "t", []byte("k"), []byte("v"), append(hs, RecordHeader{"c", nil})),
	} {
		if !errors.Is(check, ErrBadSignature) {
			t.Errorf("%s changed: %v, want ErrBadSignature", name, check)
		}
	}
	seed := make([]byte, 32)
	seed[0] = 1
	if err := VerifyRecord(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey), s, "t", []byte("k"), []byte("v"), hs); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another key: %v", err)
	}
	for _, bad := range []string{"", "v1:alice:7", "v3:alice:7:" + v[len(v)-86:], "v1:al:ice:7:x", "v1::7:x", "v1:alice:-1:x", "v1:alice:7:!!"} {
		if _, err := ParseSignature([]byte(bad)); !errors.Is(err, ErrBadSignature) {
			t.Errorf("ParseSignature(%q): %v", bad, err)
		}
	}
}

// TestSignRecordFor: a v2 signature verifies on the chain it was made
// for and on no other, nor as a v1 signature; a v1 one does not verify as
// a v2 one on any chain.
func TestSignRecordFor(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(make([]byte, 32))
	pub := priv.Public().(ed25519.PublicKey)
	v := SignRecordFor(priv, "stele-a", "alice", 7, "t", []byte("k"), []byte("v"), nil)
	s, err := ParseSignature([]byte(v))
	if err != nil || s.Version != 2 || s.Principal != "alice" || s.Seq != 7 || v[:3] != "v2:" {
		t.Fatalf("ParseSignature(%q): %+v %v", v, s, err)
	}
	if err := VerifyRecordOn(pub, "stele-a", s, "t", []byte("k"), []byte("v"), nil); err != nil {
		t.Fatalf("on its chain: %v", err)
	}
	as1 := s
	as1.Version = 1
	for name, check := range map[string]error{
		"another chain":   VerifyRecordOn(pub, "stele-b", s, "t", []byte("k"), []byte("v"), nil),
		"no chain":        VerifyRecord(pub, s, "t", []byte("k"), []byte("v"), nil),
		"read as v1":      VerifyRecordOn(pub, "stele-a", as1, "t", []byte("k"), []byte("v"), nil),
		"another topic":   VerifyRecordOn(pub, "stele-a", s, "u", []byte("k"), []byte("v"), nil),
		"chain into name": VerifyRecordOn(pub, "stele-", s, "at", []byte("k"), []byte("v"), nil),
	} {
		if !errors.Is(check, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, check)
		}
	}
	v1, _ := ParseSignature([]byte(SignRecord(priv, "alice", 7, "t", []byte("k"), []byte("v"), nil)))
	if v1.Version != 1 {
		t.Fatalf("a v1 signature parses as version %d", v1.Version)
	}
	as2 := v1
	as2.Version = 2
	if err := VerifyRecordOn(pub, "stele-a", as2, "t", []byte("k"), []byte("v"), nil); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a v1 signature read as v2: %v", err)
	}
	if err := VerifyRecordOn(pub, "stele-a", v1, "t", []byte("k"), []byte("v"), nil); err != nil {
		t.Errorf("a v1 signature on a chain (which the chain's version decides to take or not): %v", err)
	}
}

// FuzzParseSignature: a record's signature header (a producer's bytes)
// parses or fails with ErrBadSignature; what parses names a valid
// principal and a 64-byte signature.
func FuzzParseSignature(f *testing.F) {
	priv := ed25519.NewKeyFromSeed(make([]byte, 32))
	f.Add([]byte(SignRecord(priv, "alice", 7, "t", nil, []byte("v"), nil)))
	f.Add([]byte(SignRecordFor(priv, "stele-1", "alice", 7, "t", nil, []byte("v"), nil)))
	f.Add([]byte("v1:a:0:"))
	f.Add([]byte("v1:a:18446744073709551616:AAAA"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSignature(data)
		if err != nil {
			if !errors.Is(err, ErrBadSignature) {
				t.Fatalf("error %v does not wrap ErrBadSignature", err)
			}
			return
		}
		if ValidPrincipal(s.Principal) != nil || len(s.Sig) != ed25519.SignatureSize {
			t.Fatalf("parsed %+v", s)
		}
	})
}

// BenchmarkBatchLeaf: the hashing every broker adds per stored batch for
// its proof (docs/benchmarks.md).
func BenchmarkBatchLeaf(b *testing.B) {
	batch := make([]byte, 16<<10)
	b.SetBytes(int64(len(batch)))
	for b.Loop() {
		BatchLeaf("orders", [16]byte{1}, 3, 1_000_000, batch)
	}
}
