package proof

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/cometbft/cometbft/types"
)

// subChain is the chain whose validators are those of pool at idx.
func subChain(t testing.TB, pool *chain, idx ...int) *chain {
	t.Helper()
	d := &chain{id: pool.id}
	var vals []*types.Validator
	for _, i := range idx {
		vals = append(vals, types.NewValidator(pool.vals.Validators[i].PubKey, 10))
	}
	d.vals = types.NewValidatorSet(vals)
	for _, v := range d.vals.Validators {
		for _, i := range idx {
			if pk, _ := pool.pvs[i].GetPubKey(); bytes.Equal(pk.Address(), v.Address) {
				d.pvs = append(d.pvs, pool.pvs[i])
			}
		}
	}
	return d
}

// headerServer serves GET /v1/cluster/headers for heights 1..top, the
// header at h made by sets(h) and naming next(h) as the next set, as a
// broker does (the set carried when it is not the genesis one); it counts
// requests.
func headerServer(t *testing.T, genesis *chain, top int64, sets, next func(h int64) *chain, holds func(h int64) bool) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	type entry struct {
		Height       int64  `json:"height"`
		SignedHeader []byte `json:"signed_header"`
		Validators   []byte `json:"validators,omitempty"`
	}
	headers := map[int64]entry{}
	for h := int64(1); h <= top; h++ {
		c := sets(h)
		hd := c.header(h, []byte("app"))
		hd.NextValidatorsHash = next(h).vals.Hash()
		e := entry{Height: h, SignedHeader: c.sign(t, hd, all)}
		if !bytes.Equal(c.vals.Hash(), genesis.vals.Hash()) {
			e.Validators = encodeValidators(t, c.vals)
		}
		if holds == nil || holds(h) {
			headers[h] = e
		}
	}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		from, _ := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
		limit, _ := strconv.ParseInt(r.URL.Query().Get("limit"), 10, 64)
		page := struct {
			Next    int64   `json:"next"`
			Headers []entry `json:"headers"`
		}{Next: from + limit, Headers: []entry{}}
		for h := from; h < from+limit; h++ {
			if e, ok := headers[h]; ok {
				page.Headers = append(page.Headers, e)
			}
		}
		json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestFollowBisects (issue 19, light clients across changes): the genesis
// set {0,1,2,3} becomes {2,3,4,5} at height 20 and {4,5,6,7} at 40, so
// no genesis validator signs height 50. Verifying it fails as not
// vouched for; Follow fetches intermediate headers by bisection, anchors
// those a trusted set vouches for, and then height 50 verifies; Headers
// and proofs follow by themselves.
func TestFollowBisects(t *testing.T) {
	pool := newChain(t, "stele-test", 8)
	a, b, c := subChain(t, pool, 0, 1, 2, 3), subChain(t, pool, 2, 3, 4, 5), subChain(t, pool, 4, 5, 6, 7)
	sets := func(h int64) *chain {
		switch {
		case h < 20:
			return a
		case h < 40:
			return b
		}
		return c
	}
	srv, requests := headerServer(t, a, 60, sets, func(h int64) *chain { return sets(h + 1) }, nil)
	tr := a.trust()
	cl := &Client{HTTP: srv.URL, Trust: tr}
	_, h50, vals50, err := cl.rawHeader(context.Background(), 50, 51)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.VerifyHeaderWith(h50, vals50); !errors.Is(err, ErrUnproven) {
		t.Fatalf("height 50 from the genesis set alone: %v", err)
	} else if h, ok := unvouchedHeight(err); !ok || h != 50 {
		t.Fatalf("height 50 refused as %v, not as unvouched", err)
	}
	requests.Store(0)
	if err := cl.Follow(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.VerifyHeaderWith(h50, vals50); err != nil {
		t.Fatalf("height 50 after following: %v", err)
	}
	t.Logf("followed to height 50 with %d header requests, %d anchors", requests.Load(), len(tr.anchors))
	// A broker that archived only some heights (those whose app hash
	// changed): the pivots are the first headers it holds.
	sparse, _ := headerServer(t, a, 60, sets, func(h int64) *chain { return sets(h + 1) }, func(h int64) bool { return h%7 == 0 || h == 50 })
	scl := &Client{HTTP: sparse.URL, Trust: a.trust()}
	if err := scl.Follow(context.Background(), 50); err != nil {
		t.Fatalf("following over a sparse archive: %v", err)
	}
	// A fresh client's Headers follow by themselves.
	fresh := &Client{HTTP: srv.URL, Trust: a.trust()}
	hs, _, err := fresh.Headers(context.Background(), 55, 1)
	if err != nil || len(hs) != 1 || hs[0].Height != 55 {
		t.Fatalf("Headers at 55 from the genesis: %v, %v", hs, err)
	}
}

// TestFollowRefusesAnUnreachableSet: a broker that serves honest headers
// up to 49 and, at 50, one signed by validators no valid transition
// reached gets Follow's error, however many headers it serves.
func TestFollowRefusesAnUnreachableSet(t *testing.T) {
	pool := newChain(t, "stele-test", 12)
	a, b, c := subChain(t, pool, 0, 1, 2, 3), subChain(t, pool, 2, 3, 4, 5), subChain(t, pool, 4, 5, 6, 7)
	strangers := subChain(t, pool, 8, 9, 10, 11)
	sets := func(h int64) *chain {
		switch {
		case h < 20:
			return a
		case h < 40:
			return b
		case h < 50:
			return c
		}
		return strangers
	}
	// The honest header 49 names c as the next set: the strangers'
	// header 50 is of a set no transition reached.
	srv, _ := headerServer(t, a, 60, sets, func(h int64) *chain {
		if h >= 49 {
			return c
		}
		return sets(h + 1)
	}, nil)
	cl := &Client{HTTP: srv.URL, Trust: a.trust()}
	err := cl.Follow(context.Background(), 50)
	if !errors.Is(err, ErrUnproven) {
		t.Fatalf("following to a set of strangers: %v", err)
	}
	_, h50, vals50, _ := cl.rawHeader(context.Background(), 50, 51)
	if _, err := cl.Trust.VerifyHeaderWith(h50, vals50); !errors.Is(err, ErrUnproven) {
		t.Fatalf("the strangers' header verified after following: %v", err)
	}
	// The honest header before it did verify on the way.
	_, h49, vals49, _ := cl.rawHeader(context.Background(), 49, 50)
	if _, err := cl.Trust.VerifyHeaderWith(h49, vals49); err != nil {
		t.Fatalf("height 49: %v", err)
	}
}
