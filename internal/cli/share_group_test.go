package cli

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// TestShareGroupCLI: `stele consume --share-group` and `stele share-group`
// against kfake, a broker Stele did not write (KIP-932): three consumers
// of one share group print every record once between them; the group is
// listed, described with its start offset, reset while empty, its
// offsets deleted and the group deleted.
func TestShareGroupCLI(t *testing.T) {
	c := newTestCluster(t, "jobs")
	c.ok("", "config", "alter", "--group", "workers", "--set", "share.auto.offset.reset=earliest")
	var values []string
	for i := range 30 {
		values = append(values, fmt.Sprintf("job-%02d", i))
	}
	c.produceTo("jobs", 0, nil, values...)

	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.run("", "consume", "jobs", "--share-group", "workers", "--timeout-idle", "3s", "--format", "%v\n")
			if r.code != ExitOK {
				t.Errorf("consume --share-group: exit %d: %s", r.code, r.stderr)
				return
			}
			mu.Lock()
			got = append(got, strings.Fields(r.stdout)...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Strings(got)
	if !slices.Equal(got, values) {
		t.Fatalf("three share consumers printed %d records: %v, want each of %d once", len(got), got, len(values))
	}

	r := c.ok("", "share-group", "list", "--output", "json")
	var listed []shareGroupListed
	decodeJSON(t, r.stdout, &listed)
	if len(listed) != 1 || listed[0].Group != "workers" {
		t.Fatalf("share-group list: %+v", listed)
	}
	r = c.ok("", "share-group", "describe", "workers", "--output", "json")
	var described []shareGroupDescribed
	decodeJSON(t, r.stdout, &described)
	if len(described) != 1 || len(described[0].Partitions) != 1 || described[0].Partitions[0].StartOffset != 30 {
		t.Fatalf("share-group describe: %+v", described)
	}
	c.ok("", "share-group", "reset-offsets", "workers", "--topic", "jobs", "--to-offset", "25", "--execute")
	r = c.ok("", "consume", "jobs", "--share-group", "workers", "--timeout-idle", "2s", "--format", "%v\n")
	if got := strings.Fields(r.stdout); !slices.Equal(got, values[25:]) {
		t.Fatalf("after a reset to 25: %v", got)
	}
	c.ok("", "share-group", "delete-offsets", "workers", "--topic", "jobs")

	c.ok("", "config", "alter", "--group", "others", "--set", "share.auto.offset.reset=earliest")
	r = c.ok("", "consume", "jobs", "--share-group", "others", "--max-messages", "5", "--format", "%v\n")
	if got := strings.Fields(r.stdout); !slices.Equal(got, values[:5]) {
		t.Fatalf("--max-messages 5: %v", got)
	}
	c.ok("", "share-group", "delete", "others")
	r = c.run("", "share-group", "describe", "others")
	wantFailure(t, r, ExitFailure, `share group "others" does not exist`)
	wantFailure(t, c.run("", "consume", "jobs", "--share-group", "workers", "--from-beginning"), ExitUsage, "share.auto.offset.reset")
}
