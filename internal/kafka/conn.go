package kafka

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/listener"
)

// respond produces a request's response once it is ready. It runs on the
// connection's writer, in request order, so it may block (a long-polling
// Fetch, a Produce waiting for its commit). A nil response writes nothing
// (acks=0).
type respond func() kmsg.Response

// route serves one API key at versions min..max.
type route struct {
	key      int16
	min, max int16
	// handle starts serving a decoded request on the connection's reader,
	// in arrival order. Work whose order matters (handing produced batches
	// to the broker) happens here; waiting belongs in the returned respond.
	// An error closes the connection.
	handle func(c *conn, req kmsg.Request) (respond, error)
}

// done wraps an already computed response.
func done(resp kmsg.Response) respond { return func() kmsg.Response { return resp } }

// conn is one client connection.
type conn struct {
	s *Server
	// l is the listener it came in on; raw is the accepted connection,
	// which Close closes, and nc what requests are read from and answers
	// written to: raw, or the TLS connection over it.
	l   *Listener
	raw net.Conn
	nc  net.Conn
	// principal is who the client authenticated as: Kafka's User:ANONYMOUS,
	// a TLS client certificate's subject, mapped, or User:<name> after a
	// SASL login. Set with setPrincipal, read with principalNow.
	principal atomic.Pointer[string]
	// tenant is the tenant c's principal logged in to, "" for the default
	// tenant (tenant_lens.go); set with the principal.
	tenant atomic.Pointer[string]
	// countedTenant is the tenant whose connections quota counts c
	// (tenant_quotas.go); only c's reader and serve touch it.
	countedTenant string
	// host is the client's address as ACLs name hosts.
	host string
	// auth is the SASL authentication of a SASL listener's connection
	// (sasl.go); closeReason says why it is closed after an answer.
	auth        saslConn
	closeReason string
	// mutedUntil is when a client quota's throttle ends (unix ns): the
	// reader takes no request before it (throttle.go).
	mutedUntil atomic.Int64
	// waited is the time this connection's requests spent waiting (for
	// the chain to order their commands, for records to arrive, for a
	// group to form, before a failed login's answer), not yet subtracted
	// from a request's handling time (request_percentage, throttle.go).
	waited   atomic.Int64
	ctx      context.Context
	cancel   context.CancelFunc
	clientID string
	pending  chan pending
	// writeTimedOut is set by the writer before it closes the connection
	// because the client took no byte of a response for WriteTimeout;
	// serve reads it once the writer is done.
	writeTimedOut bool
}

type pending struct {
	corr    int32
	key     int16
	started time.Time
	// handled is how long decoding and starting the request took.
	handled time.Duration
	fn      respond
	// raw, when set, is written as the frame's whole body instead of fn's
	// response: a SASL token after a SaslHandshake v0 (sasl.go).
	raw func() []byte
}

func newConn(s *Server, l *Listener, nc net.Conn) *conn {
	c := &conn{s: s, l: l, raw: nc, nc: nc, pending: make(chan pending, s.opts.MaxInflight)}
	c.setPrincipal(listener.Anonymous)
	if nc != nil { // tests drive handlers without a connection
		if ip := remoteIP(nc); ip.IsValid() {
			c.host = ip.String()
		}
	}
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	return c
}

// serve runs the connection until the client leaves, a request is refused,
// or the server closes.
func (c *conn) serve() {
	defer c.raw.Close()
	defer c.releaseTenant()
	if c.l.TLS != nil {
		if err := c.handshake(); err != nil {
			c.s.metrics.rejected.WithLabelValues("tls_handshake").Inc()
			if c.ctx.Err() == nil {
				c.s.opts.Logger.Info("closing kafka connection", "listener", c.l.Name, "remote", c.raw.RemoteAddr().String(), "reason", err)
			}
			return
		}
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	err := c.readLoop()
	readerCancelled := c.ctx.Err() != nil
	close(c.pending)
	c.cancel() // nobody is left to read what is still pending
	<-writerDone
	switch {
	case c.writeTimedOut:
		c.s.metrics.writeTimeouts.Inc()
		c.s.opts.Logger.Info("closing kafka connection", "remote", c.nc.RemoteAddr().String(), "client_id", c.clientID,
			"reason", fmt.Sprintf("the client took no byte of a response for %v: it stopped reading", c.s.opts.WriteTimeout))
	case errors.Is(err, errCloseAfterAnswer):
		c.s.opts.Logger.Info("closing kafka connection", "listener", c.l.Name, "remote", c.nc.RemoteAddr().String(), "client_id", c.clientID, "reason", c.closeReason)
	case err != nil && !errors.Is(err, io.EOF) && !readerCancelled:
		c.s.opts.Logger.Info("closing kafka connection", "remote", c.nc.RemoteAddr().String(), "client_id", c.clientID, "reason", err)
	}
}

// handshakeTimeout bounds a TLS handshake; Kafka's is the connection's
// idle timeout, which this never exceeds.
const handshakeTimeout = 10 * time.Second

// handshake runs the TLS handshake of a TLS listener's connection and
// takes the client's principal from its certificate, if it gave one.
func (c *conn) handshake() error {
	tc := tls.Server(c.raw, c.l.TLS.Config())
	ctx, cancel := context.WithTimeout(c.ctx, min(handshakeTimeout, c.s.opts.IdleTimeout))
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
		p, err := listener.CertificatePrincipal(c.l.Principals, certs[0])
		if err != nil {
			// Kafka fails the authentication of such a client.
			return err
		}
		if err := c.admitTenant(p); err != nil {
			return err
		}
		c.setPrincipal(p)
	}
	c.nc = tc
	return nil
}

func (c *conn) readLoop() error {
	var size [4]byte
	for {
		if d := time.Until(time.Unix(0, c.mutedUntil.Load())); d > 0 {
			select { // throttled: the channel is muted (KIP-219)
			case <-time.After(d):
			case <-c.ctx.Done():
				return c.ctx.Err()
			}
		}
		// Kafka's connections.max.idle.ms, rearmed at every frame; a frame
		// still arriving when it passes ends the connection too.
		c.nc.SetReadDeadline(time.Now().Add(c.s.opts.IdleTimeout))
		if _, err := io.ReadFull(c.nc, size[:]); err != nil {
			return err
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		if c.auth.rawTokens && n >= 0 && n <= maxRawToken {
			// A SASL token after a SaslHandshake v0: no request header.
			body, err := readRequestBody(c.nc, int(n), &c.s.bodies)
			if err != nil {
				return err
			}
			p, err := c.rawToken(body)
			if err != nil {
				return err
			}
			select {
			case c.pending <- p:
			case <-c.ctx.Done():
				return c.ctx.Err()
			}
			continue
		}
		if n < 8 || n > c.s.opts.MaxRequestBytes {
			c.s.metrics.rejected.WithLabelValues("frame_size").Inc()
			return fmt.Errorf("request frame of %d bytes (socket.request.max.bytes is %d)", n, c.s.opts.MaxRequestBytes)
		}
		body, err := readRequestBody(c.nc, int(n), &c.s.bodies)
		if err != nil {
			return err
		}
		p, err := c.start(body)
		if err != nil && (p.fn == nil || !errors.Is(err, errCloseAfterAnswer)) {
			return err
		}
		select {
		case c.pending <- p:
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
		if err != nil {
			return err // the answer is written, then the connection closed
		}
	}
}

// start decodes one request and starts serving it.
func (c *conn) start(body []byte) (pending, error) {
	r := kbin.Reader{Src: body}
	key, version, corr := r.Int16(), r.Int16(), r.Int32()
	clientID := r.NullableString()
	if r.Complete() != nil {
		c.s.metrics.rejected.WithLabelValues("header").Inc()
		return pending{}, fmt.Errorf("malformed request header")
	}
	if clientID != nil {
		c.clientID = *clientID
	}
	p := pending{corr: corr, key: key, started: time.Now()}
	if err := c.checkSASL(key); err != nil {
		c.s.metrics.rejected.WithLabelValues("sasl_state").Inc()
		return p, err
	}
	rt, ok := c.s.routes[key]
	if !ok {
		c.s.metrics.rejected.WithLabelValues("api_key").Inc()
		return p, fmt.Errorf("unsupported API key %d", key)
	}
	if version < rt.min || version > rt.max {
		if key == apiVersionsKey {
			// KIP-511: answer in v0 with the versions we do serve, without
			// decoding a body we may not understand.
			p.fn = done(c.s.apiVersionsUnsupported())
			return p, nil
		}
		c.s.metrics.rejected.WithLabelValues("api_version").Inc()
		return p, fmt.Errorf("unsupported version %d of %s (served: %d-%d)", version, kmsg.NameForKey(key), rt.min, rt.max)
	}
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
		if r.Complete() != nil {
			c.s.metrics.rejected.WithLabelValues("header").Inc()
			return p, fmt.Errorf("malformed request header tags")
		}
	}
	if err := req.ReadFrom(r.Src); err != nil {
		c.s.metrics.rejected.WithLabelValues("body").Inc()
		return p, fmt.Errorf("malformed %s v%d request: %v", kmsg.NameForKey(key), version, err)
	}
	t0 := time.Now()
	var lens *tenantLens
	if t := c.tenantNow(); t != "" && key != apiVersionsKey && key != saslHandshakeKey && key != saslAuthenticateKey {
		l := newTenantLens(t)
		lens = &l
		lens.in(req)
	}
	fn, err := rt.handle(c, req)
	if lens != nil && fn != nil {
		inner := fn
		fn = func() kmsg.Response {
			resp := inner()
			if resp != nil {
				lens.out(resp)
			}
			return resp
		}
	}
	p.fn = fn // with errCloseAfterAnswer, the answer written before closing
	p.handled = time.Since(t0)
	return p, err
}

func (c *conn) writeLoop() {
	var buf []byte
	broken := false
	for p := range c.pending {
		buf = append(buf[:0], 0, 0, 0, 0)
		if p.raw != nil {
			buf = append(buf, p.raw()...)
		} else {
			t0 := time.Now()
			resp := p.fn()
			if resp == nil || broken {
				continue
			}
			c.chargeRequest(p.key, resp, p.handled+time.Since(t0))
			c.s.metrics.observe(p.key, resp, time.Since(p.started))
			if tc := c.s.tenantMetrics.of(c.tenantNow()); tc != nil {
				tc.requests.Add(1)
			}
			buf = binary.BigEndian.AppendUint32(buf, uint32(p.corr))
			if resp.IsFlexible() && resp.Key() != apiVersionsKey {
				buf = append(buf, 0) // response header v1: no tagged fields
			}
			buf = resp.AppendTo(buf)
		}
		if broken {
			continue
		}
		binary.BigEndian.PutUint32(buf[:4], uint32(len(buf)-4))
		if err := c.write(buf); err != nil {
			broken = true
			c.writeTimedOut = errors.Is(err, os.ErrDeadlineExceeded)
			c.cancel()
			c.nc.Close() // the reader sees the close and stops
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
}

// write writes b whole. Its deadline, WriteTimeout, is rearmed whenever
// bytes went out, so a client that reads slowly is never cut off, but one
// that takes nothing for a whole WriteTimeout gets os.ErrDeadlineExceeded.
func (c *conn) write(b []byte) error {
	for {
		c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
		n, err := c.nc.Write(b)
		if err == nil {
			return nil
		}
		if n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		b = b[n:]
	}
}

// readRequestBody reads an n-byte frame body. It starts with a 64 KiB
// buffer; once that is full, a larger body gets one buffer of its announced
// size if the server's bodyReserve has room for it: the bytes announced by
// the frames being read, summed over every connection, stay under
// bodyReserveBytes, and only a client that has sent its first 64 KiB takes
// any, so announcing a large frame and sending little cannot make the
// broker hold much more than was sent. Without room (or without a reserve,
// reserve == nil) the buffer doubles as bytes arrive, so memory follows
// what the client sent (at most twice it). A 1 MiB body read the second
// way allocates about 2 MiB and copies about 1 MiB, the first way 1 MiB
// and 64 KiB: garbage a tenant producing large batches leaves behind for
// the collector (docs/benchmarks.md, "Noisy neighbour").
func readRequestBody(r io.Reader, n int, reserve *bodyReserve) ([]byte, error) {
	buf := make([]byte, 0, min(n, firstBodyRead))
	reserved := false
	defer func() {
		if reserved {
			reserve.give(n)
		}
	}()
	for len(buf) < n {
		if len(buf) == cap(buf) {
			size := min(n, 2*cap(buf))
			if !reserved && reserve.take(n) {
				reserved, size = true, n
			}
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			buf = grown
		}
		m, err := r.Read(buf[len(buf):min(n, cap(buf))])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < n {
			if errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// firstBodyRead is the buffer a request body starts with: most requests
// fit in it.
const firstBodyRead = 64 << 10

// bodyReserveBytes bounds the sizes of the request bodies, summed over all
// connections, that the broker allocates whole before they have arrived:
// 64 MiB, a 1 MiB produce on each of 64 connections at once; a body that
// does not fit grows as it arrives.
const bodyReserveBytes = 64 << 20

// bodyReserve counts the bytes of bodyReserveBytes that frames being read
// hold (readRequestBody).
type bodyReserve struct{ held atomic.Int64 }

// take reserves n bytes if they fit; a nil reserve has no room.
func (b *bodyReserve) take(n int) bool {
	if b == nil {
		return false
	}
	if b.held.Add(int64(n)) > bodyReserveBytes {
		b.held.Add(-int64(n))
		return false
	}
	return true
}

func (b *bodyReserve) give(n int) { b.held.Add(-int64(n)) }
