package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/stele-io/stele/test/harness"
)

// TestKeyVersionsLinearizable: eight HTTP clients, two on each of four
// brokers, read-modify-write five keys of one topic for 20 s: each reads
// the key's latest version from its broker (which may be behind) and
// appends with If-Match on it (If-None-Match: * for none), one append in
// ten unconditional; meanwhile one broker is killed and restarted. Every
// append is recorded with its invocation and completion time and its
// outcome (201: the new version; 412: the version the key was at; no
// answer: unknown), and porcupine checks the history, key by key, against
// a register of versions: no two appends win at one version, no refusal
// reports a version the key was not at. The events the brokers hold end
// equal too.
func TestKeyVersionsLinearizable(t *testing.T) {
	const (
		topic   = "occ"
		keys    = 5
		clients = 8
		runFor  = 20 * time.Second
	)
	seed := runSeed(t)
	c := harness.New(t, harness.Options{})
	c.StartAll()
	harness.CreateTopic(t, c.KafkaAddrs(c.All()...), topic, 1, nil)

	start := time.Now()
	var mu sync.Mutex
	var history []porcupine.Operation
	counts := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(id)))
			node := c.Nodes[id%len(c.Nodes)]
			hc := &http.Client{Timeout: 5 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d", rng.IntN(keys))
				base := "http://" + node.HTTP + "/v1/topics/" + topic + "/keys/" + key + "/events"
				expect := NoExpectation
				if rng.IntN(10) > 0 {
					v, err := latestVersion(hc, base)
					if err != nil {
						time.Sleep(100 * time.Millisecond) // its broker is down
						continue
					}
					expect = v
				}
				req, _ := http.NewRequest("POST", base, strings.NewReader(fmt.Sprintf("c%d-%d", id, rng.Int64())))
				switch {
				case expect == -1:
					req.Header.Set("If-None-Match", "*")
				case expect >= 0:
					req.Header.Set("If-Match", strconv.Quote(strconv.FormatInt(expect, 10)))
				}
				call := time.Since(start).Nanoseconds()
				out := doAppend(hc, req)
				ret := time.Since(start).Nanoseconds()
				if out.Outcome == AppendUnknown {
					ret = math.MaxInt64 // it may take effect at any time from its call on
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: id, Call: call, Return: ret,
					Input: AppendInput{Key: key, Expect: expect}, Output: out})
				counts[out.Outcome]++
				mu.Unlock()
			}
		})
	}
	time.Sleep(runFor / 3)
	victim := int(seed % uint64(len(c.Nodes)))
	c.Kill9(victim)
	time.Sleep(3 * time.Second)
	c.Restart(victim)
	time.Sleep(time.Until(start.Add(runFor)))
	close(stop)
	wg.Wait()
	c.WaitCaughtUp(time.Minute, victim, others(c, []int{victim})...)

	res, info := porcupine.CheckOperationsVerbose(KeyVersionModel(), history, time.Minute)
	t.Logf("%d appends (%d written, %d refused at another version, %d unanswered) on %d keys from %d clients, node%d killed and restarted: %s",
		len(history), counts[AppendOK], counts[AppendConflict], counts[AppendUnknown], keys, clients, victim, res)
	if counts[AppendOK] == 0 || counts[AppendConflict] == 0 {
		t.Errorf("the run had no success or no conflict: it tested nothing")
	}
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("stele-occ-%d.html", seed))
		if err := porcupine.VisualizePath(KeyVersionModel(), info, path); err == nil {
			t.Logf("visualization: %s", path)
		}
		t.Errorf("the appends are not linearizable (%s; seed %d)", res, seed)
	}
	c.CheckAppHashes(time.Minute, c.All()...)
	for k := range keys {
		var first string
		for _, i := range c.All() {
			resp, err := http.Get(fmt.Sprintf("http://%s/v1/topics/%s/keys/k%d/events?limit=10000", c.Nodes[i].HTTP, topic, k))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if i == 0 {
				first = string(body)
			} else if string(body) != first {
				t.Errorf("node%d's events of k%d differ from node0's", i, k)
			}
		}
	}
}

// latestVersion reads the key's latest version from base (GET events):
// the offset of its last event, -1 when it has none.
func latestVersion(hc *http.Client, base string) (int64, error) {
	latest, from := int64(-1), int64(0)
	for {
		resp, err := hc.Get(fmt.Sprintf("%s?from=%d&limit=10000", base, from))
		if err != nil {
			return 0, err
		}
		var page struct {
			Events []struct {
				Offset int64 `json:"offset"`
			} `json:"events"`
			Next int64 `json:"next"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return 0, fmt.Errorf("GET %s: %d %v", base, resp.StatusCode, err)
		}
		if n := len(page.Events); n > 0 {
			latest = page.Events[n-1].Offset
		}
		if len(page.Events) < 10000 {
			return latest, nil
		}
		from = page.Next
	}
}

// doAppend sends an append and reads its outcome.
func doAppend(hc *http.Client, req *http.Request) AppendOutput {
	resp, err := hc.Do(req)
	if err != nil {
		return AppendOutput{Outcome: AppendUnknown}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v struct {
		Offset  int64 `json:"offset"`
		Version int64 `json:"version"`
	}
	switch resp.StatusCode {
	case http.StatusCreated:
		if json.Unmarshal(body, &v) == nil {
			return AppendOutput{Outcome: AppendOK, Version: v.Offset}
		}
	case http.StatusPreconditionFailed:
		if json.Unmarshal(body, &v) == nil {
			return AppendOutput{Outcome: AppendConflict, Version: v.Version}
		}
	}
	return AppendOutput{Outcome: AppendUnknown} // 503 and the like: it may still be written
}
