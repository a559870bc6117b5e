package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
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

// TestNeverTwice: a process is never handed the same port twice, even
// when the first is not bound yet.
func TestNeverTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 1500 {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
}

// TestBlocksApartAcrossProcesses: another process (this test binary, run
// again) claims blocks of its own: none of the ports it is handed lies in
// a block this process holds.
func TestBlocksApartAcrossProcesses(t *testing.T) {
	if os.Getenv("FREEPORT_CHILD") != "" {
		p, err := Base(nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("port %d\n", p)
		return
	}
	if _, err := Addr(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	mine := slices.Clone(mu.blocks)
	mu.Unlock()
	if len(mine) == 0 {
		t.Skip("no block could be locked here")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestBlocksApartAcrossProcesses$")
	cmd.Env = append(os.Environ(), "FREEPORT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	var p int
	if _, err := fmt.Sscanf(string(out), "port %d", &p); err != nil {
		t.Fatalf("child said %q", out)
	}
	for _, b := range mine {
		if p >= b && p < b+blockSize {
			t.Fatalf("the child was handed port %d, in block %d that this process holds", p, b)
		}
	}
}
