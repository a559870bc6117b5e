package kafka

// ApiVersions: v0-4
// Behavior:
//  * Lists exactly the APIs and versions this broker serves.
//  * A request at a version above 4 is answered in the v0 format with
//    UNSUPPORTED_VERSION and the supported range, without decoding its body
//    (KIP-511), so clients fall back to a version both sides know.
//  * From v3, the features (KIP-584): one, stele.app.version, supported
//    from 1 to the newest app version this binary runs and finalized at
//    the chain's committed app version (docs/cluster.md, "The app
//    version"), with the committed height as the epoch. Kafka's own
//    features (metadata.version, kraft.version) are not listed: Stele has
//    no KRaft metadata log. `stele produce --sign` reads it to choose the
//    signature its chain takes.

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleApiVersions(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ApiVersionsRequest)
	resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = c.s.apiKeys()
	if r.Version >= 3 {
		st := c.s.b.Upgrade()
		sf := kmsg.NewApiVersionsResponseSupportedFeature()
		sf.Name, sf.MinVersion, sf.MaxVersion = AppVersionFeature, 1, int16(st.MaxVersion)
		ff := kmsg.NewApiVersionsResponseFinalizedFeature()
		ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = AppVersionFeature, int16(st.Version), int16(st.Version)
		resp.SupportedFeatures = []kmsg.ApiVersionsResponseSupportedFeature{sf}
		resp.FinalizedFeatures = []kmsg.ApiVersionsResponseFinalizedFeature{ff}
		resp.FinalizedFeaturesEpoch = st.Height
	}
	return done(resp), nil
}

// AppVersionFeature is the feature ApiVersions (v3 on) lists for the
// chain's app version.
const AppVersionFeature = "stele.app.version"

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
