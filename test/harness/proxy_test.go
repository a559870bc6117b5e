package harness

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestLinkProxy checks the proxy itself: bytes pass both ways, Cut ends open
// connections and refuses new ones, Heal lets them through again.
func TestLinkProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	p, err := NewLinkProxy(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	roundTrip := func(c net.Conn, msg string) error {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if !bytes.Equal(buf, []byte(msg)) {
			return errors.New("echo mismatch: " + string(buf))
		}
		return nil
	}
	c1, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if err := roundTrip(c1, "hello"); err != nil {
		t.Fatalf("through the healed proxy: %v", err)
	}

	p.Cut()
	if err := roundTrip(c1, "after cut"); err == nil {
		t.Fatal("a connection open before Cut still carries bytes")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := roundTrip(c2, "new while cut"); err == nil {
		t.Fatal("a connection made while cut carries bytes")
	}

	p.Heal()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := roundTrip(c3, "healed"); err != nil {
		t.Fatalf("after Heal: %v", err)
	}

	// One-way loss: the bytes of one direction vanish, the connection
	// stays open, and carries both ways again after Heal.
	silent := func(c net.Conn, msg string) bool {
		c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatalf("write during one-way loss: %v (the connection must stay open)", err)
		}
		n, _ := c.Read(make([]byte, len(msg)))
		return n == 0
	}
	for _, dir := range []*atomic.Bool{&p.dropUp, &p.dropDown} {
		dir.Store(true)
		if !silent(c3, "lost") {
			t.Fatal("bytes came back through a link losing one direction")
		}
		p.Heal()
		if err := roundTrip(c3, "back"); err != nil {
			t.Fatalf("after one-way loss and Heal: %v", err)
		}
	}
}
