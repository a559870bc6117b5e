package cli

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestServeConnectionLimits: stele serve's --max-connections,
// --max-connections-per-ip-overrides (with a host name) reach the Kafka
// listener. With max.connections 3 and localhost limited to 2: a third
// connection from 127.0.0.1 is closed at once; one from 127.0.0.2 (no
// override, default limit) is served, making three; a fourth waits
// unanswered until one of the three closes. /metrics counts both.
func TestServeConnectionLimits(t *testing.T) {
	if ln, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("no 127.0.0.2 to connect from: %v", err)
	} else {
		ln.Close()
	}
	addrs := [3]string{freeAddr(t), freeAddr(t), freeAddr(t)}
	kafkaAddr, httpAddr := addrs[0], addrs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- runCLI(ctx, "", "serve", "--data", t.TempDir(), "--kafka", kafkaAddr, "--http", httpAddr, "--p2p", addrs[2],
			"--log-level", "warn", "--max-connections", "3", "--max-connections-per-ip-overrides", "localhost:2")
	}()
	defer func() {
		cancel()
		if r := <-done; r.code != ExitOK {
			t.Errorf("serve: exit %d\n%s", r.code, r.stderr)
		}
	}()
	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", kafkaAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var a net.Conn
	eventually(t, 30*time.Second, func() error {
		select {
		case r := <-done:
			t.Fatalf("serve exited early: %d\n%s", r.code, r.stderr)
		default:
		}
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}
		c, err := d.Dial("tcp", kafkaAddr)
		if err != nil {
			return err
		}
		if err := apiVersionsV0(c); err != nil {
			c.Close()
			return err
		}
		a = c
		return nil
	})
	defer a.Close()
	b := dial("127.0.0.1")
	if err := apiVersionsV0(b); err != nil {
		t.Fatal(err)
	}
	if err := apiVersionsV0(dial("127.0.0.1")); err == nil {
		t.Fatal("a third connection from localhost (override 2) was answered")
	}
	if err := apiVersionsV0(dial("127.0.0.2")); err != nil {
		t.Fatalf("127.0.0.2 has no override: %v", err)
	}
	waiting := dial("127.0.0.2")
	if err := apiVersionsV0Within(waiting, 500*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a fourth connection beyond max.connections 3: %v, want no answer yet", err)
	}
	a.Close()
	if err := readAnswer(waiting, 5*time.Second); err != nil {
		t.Fatalf("once a connection closed: %v", err)
	}
	if n := metricValue(t, httpAddr, `stele_kafka_connections_refused_total{reason="max_connections_per_ip"}`); n != 1 {
		t.Errorf("refused %v, want 1", n)
	}
	if s := metricValue(t, httpAddr, `stele_kafka_accept_blocked_seconds_total{reason="max_connections"}`); s < 0.4 {
		t.Errorf("accept blocked %v s, want the half second the fourth connection waited", s)
	}
}

// TestServeConnectionLimitsRefused: limits that cannot work stop serve
// before it starts, saying which.
func TestServeConnectionLimitsRefused(t *testing.T) {
	for flag, value := range map[string]string{
		"--max-connections":                  "0",
		"--max-connections-per-ip":           "0",
		"--max-connections-per-ip-overrides": "localhost",
		"--max-connection-creation-rate":     "0",
	} {
		r := runCLI(context.Background(), "", "serve", "--data", t.TempDir(), flag, value)
		wantFailure(t, r, ExitFailure, "max.connection")
	}
}

// apiVersionsV0 sends ApiVersions v0 on c and reads the answer.
func apiVersionsV0(c net.Conn) error { return apiVersionsV0Within(c, 5*time.Second) }

// apiVersionsV0Within is apiVersionsV0 waiting at most d.
func apiVersionsV0Within(c net.Conn, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d))
	req := []byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 7, 0xff, 0xff} // size, key 18, v0, correlation 7, null client id
	if _, err := c.Write(req); err != nil {
		return err
	}
	return readAnswer(c, d)
}

// readAnswer reads the answer to apiVersionsV0's request within d.
func readAnswer(c net.Conn, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return err
	}
	if corr := binary.BigEndian.Uint32(body); corr != 7 {
		return fmt.Errorf("correlation id %d, want 7", corr)
	}
	return nil
}

// metricValue reads one sample from the broker's /metrics.
func metricValue(t *testing.T, httpAddr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no %s", series)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestServeConnectionCreationRate: stele serve's
// --max-connection-creation-rate is the static layer of
// max.connection.creation.rate, described as STATIC_BROKER_CONFIG; stele
// config alter --broker 0 sets the dynamic value over it, described as
// DYNAMIC_BROKER_CONFIG (KIP-226's order).
func TestServeConnectionCreationRate(t *testing.T) {
	addrs := [3]string{freeAddr(t), freeAddr(t), freeAddr(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- runCLI(ctx, "", "serve", "--data", t.TempDir(), "--kafka", addrs[0], "--http", addrs[1], "--p2p", addrs[2],
			"--log-level", "warn", "--max-connection-creation-rate", "1000")
	}()
	defer func() {
		cancel()
		if r := <-done; r.code != ExitOK {
			t.Errorf("serve: exit %d\n%s", r.code, r.stderr)
		}
	}()
	rate := func() (configEntry, error) {
		r := runCLI(ctx, "", "--brokers", addrs[0], "config", "describe", "--broker", "0", "--all", "--output", "json")
		if r.code != ExitOK {
			return configEntry{}, fmt.Errorf("exit %d: %s", r.code, r.stderr)
		}
		var d configsDescribed
		decodeJSON(t, r.stdout, &d)
		for _, e := range d.Configs {
			if e.Name == "max.connection.creation.rate" {
				return e, nil
			}
		}
		return configEntry{}, fmt.Errorf("max.connection.creation.rate not described")
	}
	var e configEntry
	eventually(t, 30*time.Second, func() (err error) {
		select {
		case r := <-done:
			t.Fatalf("serve exited early: %d\n%s", r.code, r.stderr)
		default:
		}
		e, err = rate()
		return err
	})
	if e.Value == nil || *e.Value != "1000" || e.Source != "STATIC_BROKER_CONFIG" || e.ReadOnly {
		t.Errorf("with --max-connection-creation-rate 1000: %+v", e)
	}
	if r := runCLI(ctx, "", "--brokers", addrs[0], "config", "alter", "--broker", "0", "--set", "max.connection.creation.rate=7"); r.code != ExitOK {
		t.Fatalf("config alter: exit %d: %s", r.code, r.stderr)
	}
	e, err := rate()
	if err != nil || e.Value == nil || *e.Value != "7" || e.Source != "DYNAMIC_BROKER_CONFIG" {
		t.Errorf("after config alter --broker 0 --set max.connection.creation.rate=7: %+v %v", e, err)
	}
}
