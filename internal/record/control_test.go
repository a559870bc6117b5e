package record

import "testing"

func TestMarkerBatch(t *testing.T) {
	for _, commit := range []bool{true, false} {
		b := MarkerBatch(42, 3, commit, 0, 1000)
		h, err := CheckCRC(b)
		if err != nil {
			t.Fatal(err)
		}
		if !h.Control() || !h.Transactional() || h.ProducerID != 42 || h.ProducerEpoch != 3 || h.NumRecords != 1 {
			t.Fatalf("marker header %+v", h)
		}
		if got, ok := MarkerCommits(b); !ok || got != commit {
			t.Fatalf("MarkerCommits = %v, %v; want %v", got, ok, commit)
		}
	}
}
