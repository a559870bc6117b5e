package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// frames is n framed copies of req, correlation ids 0..n-1.
func frames(req kmsg.Request, n int) []byte {
	var out []byte
	for i := range n {
		b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
		b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
		b = binary.BigEndian.AppendUint32(b, uint32(i))
		b = binary.BigEndian.AppendUint16(b, 0xffff) // null client id
		if req.IsFlexible() {
			b = append(b, 0) // no header tags
		}
		out = append(out, frame(req.AppendTo(b))...)
	}
	return out
}

// apiVersionsFrames is n framed ApiVersions v3 requests.
func apiVersionsFrames(n int) []byte {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "stele-test", "1"
	return frames(req, n)
}

func openConns(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.conns)
}

// TestStalledReaderClosed: a client that keeps sending requests and never
// reads a response fills the socket buffers; the broker's write then takes
// no byte for WriteTimeout and the broker closes the connection, counting
// it, instead of holding a goroutine and its queued responses forever.
func TestStalledReaderClosed(t *testing.T) {
	tb := startTestBroker(t, func(o *Options) { o.WriteTimeout = 300 * time.Millisecond })
	// Responses of about 1.6 MB each fill the socket buffers (a few MB
	// each way on loopback) after a few requests.
	cl := client(t, tb.addr, kgo.ProducerBatchCompression(kgo.NoCompression()))
	mustCreate(t, kadm.NewClient(cl), 1, nil, "stall")
	for i := range 8 {
		r := &kgo.Record{Topic: "stall", Value: bytes.Repeat([]byte{byte(i)}, 200<<10)}
		if err := cl.ProduceSync(ctx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(11)
	fetch.ReplicaID, fetch.MaxBytes = -1, 4<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "stall"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 4 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	burst := frames(fetch, 16)
	cl.Close()
	waitFor(t, 5*time.Second, "the producer's connections to close", func() error {
		if n := openConns(tb.srv); n != 0 {
			return fmt.Errorf("%d connections open", n)
		}
		return nil
	})

	c := rawConn(t, tb.addr)
	c.SetDeadline(time.Time{})
	wrote := make(chan error, 1)
	go func() {
		for {
			if _, err := c.Write(burst); err != nil {
				wrote <- err
				return
			}
		}
	}()
	waitFor(t, 20*time.Second, "the broker closing the stalled connection", func() error {
		if n := testutil.ToFloat64(tb.srv.metrics.writeTimeouts); n != 1 {
			return errors.New("no write timeout counted")
		}
		if n := openConns(tb.srv); n != 0 {
			return errors.New("the connection is still open")
		}
		return nil
	})
	// The client's writes fail too once the broker has closed (reset).
	select {
	case err := <-wrote:
		t.Logf("the client's write: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the client can still write to a connection the broker closed")
	}
	if err := client(t, tb.addr).Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestSlowReaderNotClosed: a client that reads its responses slowly, a few
// bytes at a time, with pauses shorter than WriteTimeout but adding up to
// many times it, gets them whole: the deadline is rearmed whenever bytes
// go out. (net.Pipe has no buffer, so every byte waits for the reader.)
func TestSlowReaderNotClosed(t *testing.T) {
	tb := startTestBroker(t, nil)
	srv := New(tb.b, Options{ClusterID: "stele-test", DataDir: "/tmp", AdvertisedHost: "127.0.0.1", AdvertisedPort: 1,
		WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { srv.Close() })
	peer, end := net.Pipe()
	t.Cleanup(func() { peer.Close() })
	c := newConn(srv, &Listener{Name: "PLAINTEXT"}, end)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.serve()
	}()
	if _, err := peer.Write(apiVersionsFrames(2)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	start := time.Now()
	for time.Since(start) < time.Second { // five write timeouts
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.CopyN(&got, peer, 16); err != nil {
			t.Fatalf("after %d bytes: %v", got.Len(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	for corr := range uint32(2) {
		var size [4]byte
		if _, err := io.ReadFull(io.MultiReader(&got, peer), size[:]); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(io.MultiReader(&got, peer), body); err != nil {
			t.Fatalf("response %d: %v", corr, err)
		}
		if binary.BigEndian.Uint32(body) != corr {
			t.Fatalf("response %d has correlation id %d", corr, binary.BigEndian.Uint32(body))
		}
	}
	if n := testutil.ToFloat64(srv.metrics.writeTimeouts); n != 0 {
		t.Fatalf("%v write timeouts for a client that kept reading", n)
	}
	peer.Close()
	<-done
}
