package freeport

import (
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
)

func TestBaseBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	rng := rand.New(rand.NewPCG(1, 2))
	offsets := []int{0, 1, 2, 3, 100, 101, 102, 103, 200, 203, 300, 303}
	for range 20 {
		base, err := Base(rng, offsets...)
		if err != nil {
			t.Fatal(err)
		}
		if base < lowest || base+303 >= low {
			t.Fatalf("base %d: ports %d..%d, want them in [%d, %d)", base, base, base+303, lowest, low)
		}
		for _, o := range offsets {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+o)))
			if err != nil {
				t.Fatalf("port %d handed out but not bindable: %v", base+o, err)
			}
			ln.Close()
		}
	}
}

// A port that is taken is never handed out.
func TestBaseSkipsTakenPorts(t *testing.T) {
	base, err := Span(nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+2)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if bindable(base, []int{0, 1, 2, 3}) {
		t.Fatalf("bindable(%d) with %d held: true", base, base+2)
	}
	if !bindable(base, []int{0, 1, 3}) {
		t.Fatalf("bindable(%d) without the held port: false (listeners of the check not closed?)", base)
	}
}

func TestBaseTooWide(t *testing.T) {
	if _, err := Base(nil, 0, 1<<16); err == nil {
		t.Fatal("a span wider than the port space was accepted")
	}
	if _, err := Base(nil, -1); err == nil {
		t.Fatal("a negative offset was accepted")
	}
}

func TestAddr(t *testing.T) {
	a, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("Addr() = %s, not bindable: %v", a, err)
	}
	ln.Close()
}
