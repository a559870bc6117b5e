package kafka

// ApiVersions: v0-4
// Behavior:
//  * Lists exactly the APIs and versions this broker serves.
//  * A request at a version above 4 is answered in the v0 format with
//    UNSUPPORTED_VERSION and the supported range, without decoding its body
//    (KIP-511), so clients fall back to a version both sides know.
// Not done: feature flags (finalized and supported features are empty).

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleApiVersions(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ApiVersionsRequest)
	resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = c.s.apiKeys()
	return done(resp), nil
}

func (s *Server) apiVersionsUnsupported() kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = s.apiKeys()
	return resp
}

func (s *Server) apiKeys() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(s.routes))
	for _, r := range s.routes {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = r.key, r.min, r.max
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}
