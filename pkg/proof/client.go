package proof

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	cmtjson "github.com/cometbft/cometbft/libs/json"
	"github.com/cometbft/cometbft/types"
)

// ErrTrustChanged: the genesis a broker serves is not the one pinned for
// its chain.
var ErrTrustChanged = errors.New("stele/proof: the cluster's genesis differs from the one pinned")

// Client fetches proofs from one broker's HTTP API and verifies them. The
// broker is not trusted: whatever it returns is checked against Trust.
type Client struct {
	// HTTP is the broker's HTTP API, "host:port" or a URL.
	HTTP  string
	Trust *Trust
	// HC is the HTTP client (nil: one with a 30 s timeout).
	HC *http.Client
}

func (c *Client) base() string {
	if u, err := url.Parse(c.HTTP); err == nil && u.Scheme != "" && u.Host != "" {
		return c.HTTP
	}
	return "http://" + c.HTTP
}

func (c *Client) hc() *http.Client {
	if c.HC != nil {
		return c.HC
	}
	return &http.Client{Timeout: 30 * time.Second}
}

// Fetch returns the broker's proof of the batch holding offset, unverified.
func (c *Client) Fetch(ctx context.Context, topic string, partition int32, offset int64) (*Batch, error) {
	u := c.base() + "/v1/topics/" + url.PathEscape(topic) + "/partitions/" + strconv.Itoa(int(partition)) +
		"/proof?offset=" + strconv.FormatInt(offset, 10)
	var b Batch
	if err := c.get(ctx, u, &b); err != nil {
		return nil, fmt.Errorf("stele/proof: proof of %s-%d offset %d: %w", topic, partition, offset, err)
	}
	return &b, nil
}

// Prove fetches and verifies the proof of the batch holding offset; the
// returned batch is the committed one.
func (c *Client) Prove(ctx context.Context, topic string, partition int32, offset int64) (*Verified, error) {
	b, err := c.Fetch(ctx, topic, partition, offset)
	if err != nil {
		return nil, err
	}
	if b.Topic != topic || b.Partition != partition || offset < b.BaseOffset || offset > b.LastOffset {
		return nil, unproven("asked for %s-%d offset %d, the broker proved %s-%d offsets %d-%d", topic, partition, offset, b.Topic, b.Partition, b.BaseOffset, b.LastOffset)
	}
	return following(ctx, c, func() (*Verified, error) { return c.Trust.Verify(b) })
}

// following runs verify and, when it fails on a header no trusted set
// vouches for, follows the chain to that header (Follow) and runs it once
// more.
func following[T any](ctx context.Context, c *Client, verify func() (T, error)) (T, error) {
	v, err := verify()
	if h, ok := unvouchedHeight(err); ok {
		if ferr := c.Follow(ctx, h); ferr != nil {
			return v, fmt.Errorf("%w (following the validator set's changes: %v)", err, ferr)
		}
		return verify()
	}
	return v, err
}

// rawHeader fetches the first signed header the broker holds at height h
// or above and below until (a broker archives the headers of the heights
// whose app hash changed), with the validator set it names (nil when it
// names the genesis set), unverified.
func (c *Client) rawHeader(ctx context.Context, h, until int64) (height int64, header, vals []byte, err error) {
	var page struct {
		Headers []struct {
			Height       int64  `json:"height"`
			SignedHeader []byte `json:"signed_header"`
			Validators   []byte `json:"validators"`
		} `json:"headers"`
	}
	limit := min(max(until-h, 1), 1000)
	u := c.base() + "/v1/cluster/headers?from=" + strconv.FormatInt(h, 10) + "&limit=" + strconv.FormatInt(limit, 10)
	if err := c.get(ctx, u, &page); err != nil {
		return 0, nil, nil, fmt.Errorf("stele/proof: header %d: %w", h, err)
	}
	if len(page.Headers) == 0 || page.Headers[0].Height < h || page.Headers[0].Height >= max(until, h+1) {
		return 0, nil, nil, fmt.Errorf("stele/proof: the broker holds no header from height %d to %d", h, max(until, h+1)-1)
	}
	e := page.Headers[0]
	return e.Height, e.SignedHeader, e.Validators, nil
}

// maxFollowSteps bounds the headers one Follow fetches: a bisection over
// 2^31 heights takes 31 halvings per change of trust.
const maxFollowSteps = 256

// Follow makes the header at height verifiable when the chain's validator
// set has changed so much since the sets Trust holds that none of them
// vouches for it: as CometBFT's light client bisects, it fetches the
// header halfway between the last height it trusts and the one it wants
// (the first the broker archived from there), anchors it (Trust.Anchor)
// if a trusted set vouches for it, or halves again, until the wanted
// header verifies. Every header is checked; a broker that serves headers
// of a set no valid transition reached gets an error wrapping
// ErrUnproven.
func (c *Client) Follow(ctx context.Context, height int64) error {
	trusted := int64(1) // the genesis set signs the first height
	c.Trust.mu.Lock()
	for _, a := range c.Trust.anchors {
		if a.height < height {
			trusted = max(trusted, a.height)
		}
	}
	c.Trust.mu.Unlock()
	pending := []int64{height}
	for steps := 0; len(pending) > 0; steps++ {
		if steps == maxFollowSteps {
			return unproven("following the validator set to height %d took more than %d headers", height, maxFollowSteps)
		}
		want := pending[len(pending)-1]
		until := want + 1 // the height asked for itself
		if want != height {
			until = pending[len(pending)-2] // a pivot: any height before the one it leads to
		}
		h, b, vals, err := c.rawHeader(ctx, want, until)
		if err != nil {
			return err
		}
		pending[len(pending)-1] = h
		err = c.Trust.Anchor(b, vals)
		if err == nil {
			trusted, pending = h, pending[:len(pending)-1]
			continue
		}
		if _, ok := unvouchedHeight(err); !ok {
			return err
		}
		mid := trusted + (h-trusted)/2
		if mid <= trusted || mid >= h {
			return err // adjacent to a trusted header and still not vouched for
		}
		pending = append(pending, mid)
	}
	return nil
}

// Check verifies a batch read from any broker (a RecordBatch as Fetch
// returns it) against the proof of its base offset: it must be byte for
// byte the batch the cluster committed there.
func (c *Client) Check(ctx context.Context, topic string, partition int32, batch []byte) (*Verified, error) {
	base, _, err := checkBatch(batch)
	if err != nil {
		return nil, unproven("%v", err)
	}
	v, err := c.Prove(ctx, topic, partition, base)
	if err != nil {
		return nil, err
	}
	if v.BaseOffset != base || !bytes.Equal(v.Batch, batch) {
		return nil, unproven("the batch read at %s-%d offset %d is not the one committed there (height %d)", topic, partition, base, v.Height)
	}
	return v, nil
}

// Header is a signed header as Headers returns it, verified.
type Header struct {
	Height  int64
	Hash    []byte // the header's hash (the block id)
	AppHash []byte // the app hash after the block before
	// LastBlock is the hash of the previous height's header: headers link
	// into a chain.
	LastBlock []byte
	Time      time.Time
}

// Headers fetches the signed headers the broker holds from height from on
// (up to limit heights looked at, at most 1000) and verifies each against
// Trust; it returns them and the height to ask from next. A header that
// does not verify is an error wrapping ErrUnproven.
func (c *Client) Headers(ctx context.Context, from, limit int64) ([]Header, int64, error) {
	var page struct {
		Next    int64 `json:"next"`
		Headers []struct {
			Height       int64  `json:"height"`
			SignedHeader []byte `json:"signed_header"`
			Validators   []byte `json:"validators"`
		} `json:"headers"`
	}
	u := c.base() + "/v1/cluster/headers?from=" + strconv.FormatInt(from, 10) + "&limit=" + strconv.FormatInt(limit, 10)
	if err := c.get(ctx, u, &page); err != nil {
		return nil, from, fmt.Errorf("stele/proof: headers from %d: %w", from, err)
	}
	out := make([]Header, 0, len(page.Headers))
	for _, h := range page.Headers {
		sh, err := following(ctx, c, func() (*types.SignedHeader, error) { return c.Trust.VerifyHeaderWith(h.SignedHeader, h.Validators) })
		if err != nil {
			return out, from, err
		}
		if sh.Height != h.Height {
			return out, from, unproven("the header listed at height %d is of height %d", h.Height, sh.Height)
		}
		out = append(out, Header{Height: sh.Height, Hash: sh.Hash(), AppHash: sh.AppHash, LastBlock: sh.LastBlockID.Hash, Time: sh.Time})
	}
	if page.Next <= from && len(page.Headers) == 0 {
		return out, from, nil
	}
	return out, page.Next, nil
}

// Genesis fetches the genesis document the broker serves (unverified:
// only as good as the broker).
func (c *Client) Genesis(ctx context.Context) (*types.GenesisDoc, []byte, error) {
	var raw json.RawMessage
	if err := c.get(ctx, c.base()+"/v1/cluster/genesis", &raw); err != nil {
		return nil, nil, fmt.Errorf("stele/proof: genesis: %w", err)
	}
	doc, err := types.GenesisDocFromJSON(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("stele/proof: genesis: %w", err)
	}
	return doc, raw, nil
}

// PinTrust trusts the genesis pinned in dir for the broker's chain; on
// first use (no file dir/<chain id>.json) it fetches the genesis from the
// broker, pins it and reports pinned = true, so that the caller can warn:
// a first fetch is only as good as the broker it came from. A broker whose
// genesis names other validators than the pinned one gets ErrTrustChanged.
func (c *Client) PinTrust(ctx context.Context, dir string) (t *Trust, pinned bool, err error) {
	doc, raw, err := c.Genesis(ctx)
	if err != nil {
		return nil, false, err
	}
	fetched, err := TrustGenesis(doc)
	if err != nil {
		return nil, false, err
	}
	if doc.ChainID == "" || filepath.Base(doc.ChainID) != doc.ChainID || doc.ChainID[0] == '.' {
		return nil, false, fmt.Errorf("stele/proof: chain id %q cannot name a pin file", doc.ChainID)
	}
	path := filepath.Join(dir, doc.ChainID+".json")
	if mine, err := TrustGenesisFile(path); err == nil {
		if !bytes.Equal(mine.Validators.Hash(), fetched.Validators.Hash()) {
			return nil, false, fmt.Errorf("%w: %s names validators %X, the broker's genesis %X", ErrTrustChanged, path, mine.Validators.Hash(), fetched.Validators.Hash())
		}
		return mine, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("stele/proof: pin: %w", err)
	}
	canonical, err := cmtjson.MarshalIndent(doc, "", "  ")
	if err != nil {
		canonical = raw
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, canonical, 0o600); err != nil {
		return nil, false, fmt.Errorf("stele/proof: pin: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, false, fmt.Errorf("stele/proof: pin: %w", err)
	}
	return fetched, true, nil
}

// get fetches u into v; a non-200 answer is an error with its message.
func (c *Client) get(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s", resp.Status, e.Error)
		}
		return errors.New(resp.Status)
	}
	return json.Unmarshal(body, v)
}

// ProveState fetches and verifies the proof of keys of the committed state
// (GET /v1/state/proof): every key asked must be proven, by its value or its
// absence, and nothing else.
func (c *Client) ProveState(ctx context.Context, keys ...[]byte) (*VerifiedState, error) {
	if len(keys) == 0 || len(keys) > MaxStateProofKeys {
		return nil, fmt.Errorf("stele/proof: %d keys, want 1 to %d", len(keys), MaxStateProofKeys)
	}
	q := url.Values{}
	for _, k := range keys {
		q.Add("key", base64.RawURLEncoding.EncodeToString(k))
	}
	var p StateProof
	if err := c.get(ctx, c.base()+"/v1/state/proof?"+q.Encode(), &p); err != nil {
		return nil, fmt.Errorf("stele/proof: state proof: %w", err)
	}
	if len(p.Entries) != len(keys) {
		return nil, unproven("asked for %d keys, the broker proved %d", len(keys), len(p.Entries))
	}
	for i, k := range keys {
		if !bytes.Equal(p.Entries[i].Key, k) {
			return nil, unproven("asked for key %q, the broker proved %q", k, p.Entries[i].Key)
		}
	}
	return following(ctx, c, func() (*VerifiedState, error) { return c.Trust.VerifyState(&p) })
}
