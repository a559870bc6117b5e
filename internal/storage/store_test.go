package storage

import (
	"errors"
	"fmt"
	"testing"
)

func TestStore(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	for i := 0; i < 5; i++ {
		b.Set(fmt.Appendf(nil, "t/%d", i), fmt.Appendf(nil, "v%d", i))
	}
	b.Set([]byte("u/1"), []byte("other"))
	b.Set([]byte("\xff\xff"), []byte("edge"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	v, ok, err := s.Get([]byte("t/3"))
	if err != nil || !ok || string(v) != "v3" {
		t.Fatalf("%q %t %v", v, ok, err)
	}
	if _, ok, _ := s.Get([]byte("t/9")); ok {
		t.Fatal("found a missing key")
	}
	var keys []string
	if err := s.Scan([]byte("t/"), func(k, v []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[t/0 t/1 t/2 t/3 t/4]" {
		t.Fatal(keys)
	}
	keys = nil
	if err := s.ScanReverse([]byte("t/"), func(k, v []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[t/4 t/3 t/2 t/1 t/0]" {
		t.Fatal("ScanReverse:", keys)
	}
	// Seek: every other key, by seeking past the next one.
	keys = nil
	if err := s.Seek([]byte("t/"), PrefixEnd([]byte("t/")), func(k, v []byte) ([]byte, error) {
		keys = append(keys, string(k))
		return append(append([]byte{}, k[:len(k)-1]...), k[len(k)-1]+2), nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[t/0 t/2 t/4]" {
		t.Fatal("Seek:", keys)
	}
	stop := errors.New("stop")
	if err := s.Scan(nil, func(k, v []byte) error { return stop }); err != stop {
		t.Fatal(err)
	}
	if err := s.ScanReverse(nil, func(k, v []byte) error { return stop }); err != stop {
		t.Fatal(err)
	}

	b = s.NewBatch()
	b.Delete([]byte("t/0"))
	b.DeletePrefix([]byte("t/"))
	b.DeletePrefix([]byte("\xff"))
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys = nil
	s.Scan(nil, func(k, v []byte) error { keys = append(keys, string(k)); return nil })
	if fmt.Sprint(keys) != "[u/1]" {
		t.Fatalf("after deletes: %v", keys)
	}
}
