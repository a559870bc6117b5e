package kafka

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzFrame feeds arbitrary request frames (everything after the size) to a
// connection's decoder and the handler it routes to: each either is refused
// (the connection would close) or is answered with a response that encodes;
// nothing panics. Seeds are well-formed requests of every served API.
func FuzzFrame(f *testing.F) {
	tb := startTestBroker(f, nil)
	srv := New(tb.b, Options{NodeID: 0, ClusterID: "stele-fuzz", AdvertisedHost: "127.0.0.1", AdvertisedPort: 9092, DataDir: f.TempDir(), AutoCreateTopics: true})
	f.Cleanup(func() { srv.Close() })
	for _, r := range srv.routes {
		for v := r.min; v <= r.max; v++ {
			req := kmsg.RequestForKey(r.key)
			req.SetVersion(v)
			body := binary.BigEndian.AppendUint16(nil, uint16(r.key))
			body = binary.BigEndian.AppendUint16(body, uint16(v))
			body = binary.BigEndian.AppendUint32(body, 1)
			body = binary.BigEndian.AppendUint16(body, 1)
			body = append(body, 'c')
			if req.IsFlexible() {
				body = append(body, 0)
			}
			f.Add(req.AppendTo(body))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := newConn(srv, &Listener{Name: "PLAINTEXT"}, nil)
		var cancel context.CancelFunc
		c.ctx, cancel = context.WithTimeout(c.ctx, 200*time.Millisecond)
		defer cancel()
		p, err := c.start(body)
		if err != nil || p.fn == nil {
			return
		}
		if resp := p.fn(); resp != nil {
			resp.AppendTo(nil)
		}
	})
}
