package stele_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/broker"
	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/stele"
)

// TestClient: a write's height looked up by offset, a table read at that
// height sees it, a tombstone is ErrNotFound, and WaitConsumed returns
// once the group commits past the record (ErrNotYet when it does not).
func TestClient(t *testing.T) {
	f, err := fsm.Open(fsm.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	b := broker.New(f, broker.Options{})
	o := local.New(b.App(), local.Options{})
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.Start(o)
	t.Cleanup(func() { b.Close(); o.Stop() })
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Broker: b}))
	defer srv.Close()
	ctx := context.Background()
	if r, err := b.SubmitOne(ctx, fsm.CreateTopic{Name: "accounts", Partitions: 1, ReplicationFactor: -1,
		Configs: []fsm.ConfigEntry{{Name: "cleanup.policy", Value: "compact"}}}); err != nil || r.Code != 0 {
		t.Fatalf("create: %+v %v", r, err)
	}
	produce := func(key string, value []byte) fsm.Result {
		t.Helper()
		batch, err := record.Build(record.Header{FirstTimestamp: 1_700_000_000_000, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
			[]record.Record{{Key: []byte(key), Value: value, Headers: []record.RecordHeader{{Key: "by", Value: []byte("test")}}}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := b.SubmitOne(ctx, fsm.Produce{Topic: "accounts", Partition: 0, Records: batch})
		if err != nil || r.Code != 0 {
			t.Fatalf("produce: %+v %v", r, err)
		}
		return r
	}
	produce("a", []byte("1"))
	w := produce("a", []byte{0xff, 2})
	c := &stele.HTTP{Addr: srv.Listener.Addr().String()}
	h, err := c.Height(ctx, "accounts", 0, w.BaseOffset)
	if err != nil || h != w.Height {
		t.Fatalf("Height of offset %d: %d %v, want %d", w.BaseOffset, h, err, w.Height)
	}
	e, err := c.Table(ctx, "accounts", []byte("a"), h)
	if err != nil || string(e.Value) != "\xff\x02" || e.Version != w.BaseOffset || e.Height < h || string(e.Headers["by"]) != "test" {
		t.Fatalf("Table a at height %d: %+v %v", h, e, err)
	}
	produce("a", nil)
	if _, err := c.Table(ctx, "accounts", []byte("a"), 0); !errors.Is(err, stele.ErrNotFound) {
		t.Errorf("Table of a deleted key: %v, want ErrNotFound", err)
	}
	if _, err := c.Height(ctx, "accounts", 0, 99); err == nil {
		t.Error("Height of an offset past the end: no error")
	}

	done := make(chan error, 1)
	go func() {
		committed, err := c.WaitConsumed(ctx, "billing", "accounts", 0, w.BaseOffset, 10*time.Second)
		if err == nil && committed <= w.BaseOffset {
			err = errors.New("returned before the group consumed the record")
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if r, err := b.SubmitOne(ctx, fsm.OffsetCommit{Group: "billing", Generation: -1, Topic: "accounts", Partition: 0, Offset: w.BaseOffset + 1, LeaderEpoch: -1}); err != nil || r.Code != 0 {
		t.Fatalf("commit: %+v %v", r, err)
	}
	if err := <-done; err != nil {
		t.Errorf("WaitConsumed: %v", err)
	}
	if _, err := c.WaitConsumed(ctx, "billing", "accounts", 0, w.BaseOffset+5, 100*time.Millisecond); !errors.Is(err, stele.ErrNotYet) {
		t.Errorf("WaitConsumed past what the group committed: %v, want ErrNotYet", err)
	}
}
