// Package stele is a Go client for the parts of Stele's HTTP API that
// Kafka has no place for: read-your-writes across brokers (the height that
// committed a write, reads at or after a height), waiting until a consumer
// group has consumed a record, and compacted topics read as key-value
// tables (docs/read-your-writes.md). Records are still produced and
// consumed with any Kafka client; pkg/proof and pkg/verified check what a
// broker returns.
package stele

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stele-io/stele/pkg/proof"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	// ErrNotFound: the broker answered 404 (no such topic, key or value).
	ErrNotFound = errors.New("stele: not found")
	// ErrNotYet: the broker has not applied the height asked for (503) or
	// the group did not consume the record in time (504); retry, possibly
	// through another broker.
	ErrNotYet = errors.New("stele: not yet")
)

// HTTP is a client of one broker's HTTP API.
type HTTP struct {
	// Addr is the broker's HTTP API, "host:port" or a URL.
	Addr string
	// HC is the HTTP client (nil: one with a 6-minute timeout, longer than
	// the longest wait).
	HC *http.Client
}

// Height returns the height of the block that committed the record at
// offset of the partition: a Kafka producer learns its record's offset
// from the produce answer, and a read with this min height sees it on
// any broker.
func (c *HTTP) Height(ctx context.Context, topic string, partition int32, offset int64) (int64, error) {
	var out struct {
		Height int64 `json:"height"`
	}
	u := "/v1/topics/" + url.PathEscape(topic) + "/partitions/" + strconv.Itoa(int(partition)) + "/offsets/" + strconv.FormatInt(offset, 10)
	if err := c.do(ctx, "GET", u, nil, &out); err != nil {
		return 0, err
	}
	return out.Height, nil
}

// Entry is a key's latest value in a table.
type Entry struct {
	Partition int32
	Version   int64 // the record's offset
	Timestamp time.Time
	Value     []byte
	Headers   map[string][]byte
	// Height is the height the broker had applied when it read: the entry
	// reflects every write committed at or below it.
	Height int64
}

// Table returns the latest value of key in a compacted topic, read once
// the broker has applied minHeight (0: at once). A key without a value,
// or whose latest record is a tombstone, gives ErrNotFound.
func (c *HTTP) Table(ctx context.Context, topic string, key []byte, minHeight int64) (*Entry, error) {
	var out struct {
		Partition int32        `json:"partition"`
		Version   int64        `json:"version"`
		Timestamp int64        `json:"timestamp"`
		Value     *Bytes       `json:"value"`
		Headers   []wireHeader `json:"headers"`
		Height    int64        `json:"height"`
	}
	u := "/v1/tables/" + url.PathEscape(topic) + "/" + url.PathEscape(string(key))
	if minHeight > 0 {
		u += "?min_height=" + strconv.FormatInt(minHeight, 10)
	}
	if err := c.do(ctx, "GET", u, nil, &out); err != nil {
		return nil, err
	}
	e := &Entry{Partition: out.Partition, Version: out.Version, Timestamp: time.UnixMilli(out.Timestamp), Height: out.Height}
	if out.Value != nil {
		e.Value = []byte(*out.Value)
	}
	for _, h := range out.Headers {
		if e.Headers == nil {
			e.Headers = map[string][]byte{}
		}
		if h.Value != nil {
			e.Headers[h.Key] = []byte(*h.Value)
		} else {
			e.Headers[h.Key] = nil
		}
	}
	return e, nil
}

// WaitConsumed blocks until consumer group has committed an offset past
// offset of the partition (it has consumed that record), or timeout
// passes (ErrNotYet; at most 5 minutes, 0 means 30 s). It returns the
// group's committed offset.
func (c *HTTP) WaitConsumed(ctx context.Context, group, topic string, partition int32, offset int64, timeout time.Duration) (int64, error) {
	body, _ := json.Marshal(map[string]any{"topic": topic, "partition": partition, "offset": offset, "group": group, "timeout_ms": timeout.Milliseconds()})
	var out struct {
		Committed int64 `json:"committed"`
	}
	if err := c.do(ctx, "POST", "/v1/wait", body, &out); err != nil {
		return 0, err
	}
	return out.Committed, nil
}

func (c *HTTP) do(ctx context.Context, method, path string, body []byte, v any) error {
	base := c.Addr
	if u, err := url.Parse(base); err != nil || u.Scheme == "" || u.Host == "" {
		base = "http://" + base
	}
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HC
	if hc == nil {
		hc = &http.Client{Timeout: 6 * time.Minute}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		msg := fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, e.Error)
		switch resp.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, msg)
		case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return fmt.Errorf("%w: %s", ErrNotYet, msg)
		}
		return errors.New("stele: " + msg)
	}
	return json.Unmarshal(data, v)
}

// Bytes is a byte string in the API's JSON: {"utf8": "..."} when it is
// valid UTF-8, {"b64": "..."} (standard base64) otherwise.
type Bytes []byte

// MarshalJSON encodes b as the API does.
func (b Bytes) MarshalJSON() ([]byte, error) {
	if utf8.Valid(b) {
		return json.Marshal(struct {
			UTF8 string `json:"utf8"`
		}{string(b)})
	}
	return json.Marshal(struct {
		B64 string `json:"b64"`
	}{base64.StdEncoding.EncodeToString(b)})
}

// UnmarshalJSON decodes either form.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	var v struct {
		UTF8 *string `json:"utf8"`
		B64  *string `json:"b64"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch {
	case v.UTF8 != nil:
		*b = Bytes(*v.UTF8)
	case v.B64 != nil:
		d, err := base64.StdEncoding.DecodeString(*v.B64)
		if err != nil {
			return err
		}
		*b = d
	default:
		return errors.New(`stele: bytes need "utf8" or "b64"`)
	}
	return nil
}

type wireHeader struct {
	Key   string `json:"key"`
	Value *Bytes `json:"value"`
}

// Signer signs records for a principal (docs/signed-producers.md): it adds
// the stele-signature header that the brokers verify against the
// principal's registered key before writing a record. Sign records after
// their topic, key, value and headers are final; the partition may be
// chosen later. A Signer is safe for concurrent use.
type Signer struct {
	Principal string
	Key       ed25519.PrivateKey
	// ChainID binds the signatures to the chain (v2 signatures): a
	// cluster at app version 2 or later, as every new cluster is, takes
	// only those, naming it. Leave it empty (v1 signatures) only for a
	// cluster still at app version 1. SignatureChain tells which.
	ChainID string

	mu  sync.Mutex
	seq uint64
}

// Sign adds r's signature header. Sequences are the time in nanoseconds,
// always above the last one, so they stay unique across the runs of one
// principal on one machine; the cluster refuses a sequence used before.
// Producers of one principal on several machines could meet on a
// nanosecond: give each machine a principal of its own.
func (s *Signer) Sign(r *kgo.Record) {
	s.mu.Lock()
	s.seq = max(s.seq+1, uint64(time.Now().UnixNano()))
	seq := s.seq
	s.mu.Unlock()
	hs := make([]proof.RecordHeader, 0, len(r.Headers))
	for _, h := range r.Headers {
		hs = append(hs, proof.RecordHeader{Key: h.Key, Value: h.Value})
	}
	sig := proof.SignRecordFor(s.Key, s.ChainID, s.Principal, seq, r.Topic, r.Key, r.Value, hs)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: proof.SignatureHeader, Value: []byte(sig)})
}

// appVersionFeature is the ApiVersions feature (KIP-584) a Stele broker
// finalizes at its chain's app version.
const appVersionFeature = "stele.app.version"

// SignatureChain returns the chain a Signer for the cluster cl is
// connected to must bind its signatures to (Signer.ChainID): the cluster
// id of its Metadata, which is the chain id, when the chain runs app
// version 2 or later (the stele.app.version feature of ApiVersions), or
// "" for a chain at version 1 (or a broker older than app versions, which
// lists no such feature), which takes v1 signatures only.
func SignatureChain(ctx context.Context, cl *kgo.Client) (string, error) {
	av, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("stele: ApiVersions: %w", err)
	}
	version := int16(0)
	for _, f := range av.FinalizedFeatures {
		if f.Name == appVersionFeature {
			version = f.MaxVersionLevel
		}
	}
	if version < 2 {
		// A broker older than app versions lists no feature: it takes
		// v1 signatures.
		return "", nil
	}
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Topics = []kmsg.MetadataRequestTopic{} // none: only the cluster
	md, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("stele: Metadata: %w", err)
	}
	if md.ClusterID == nil || *md.ClusterID == "" {
		return "", errors.New("stele: the broker's Metadata names no cluster id")
	}
	return *md.ClusterID, nil
}
