package kafka

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestMetadataCluster: with a broker directory of three, Metadata lists all
// three as replicas (only broker 0 exists: the client talks to it alone), only those whose validator signs blocks as in-sync and
// as leaders, and spreads leadership between them.
func TestMetadataCluster(t *testing.T) {
	a, b, c := []byte("validator-a"), []byte("validator-b"), []byte("validator-c")
	tb := startTestBrokerSigned(t, [][]byte{a, b}, func(o *Options) {
		o.Brokers = []BrokerInfo{
			{NodeID: 0, Host: o.AdvertisedHost, Port: o.AdvertisedPort, Validator: a},
			{NodeID: 1, Host: "127.0.0.1", Port: 2, Validator: b},
			{NodeID: 2, Host: "127.0.0.1", Port: 3, Validator: c},
		}
	})
	cl := client(t, tb.addr)
	// Two blocks: the second carries the signatures of the first.
	for _, name := range []string{"spread", "other"} {
		if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 8, -1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("spread")
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Brokers) != 3 {
		t.Fatalf("%d brokers listed, want 3", len(resp.Brokers))
	}
	leaders := map[int32]int{}
	for _, p := range resp.Topics[0].Partitions {
		leaders[p.Leader]++
		if len(p.Replicas) != 3 || len(p.ISR) != 2 {
			t.Fatalf("partition %d: replicas %v isr %v", p.Partition, p.Replicas, p.ISR)
		}
	}
	if leaders[2] != 0 {
		t.Errorf("broker 2 (its validator never signs) leads %d partitions", leaders[2])
	}
	if leaders[0] == 0 || leaders[1] == 0 {
		t.Errorf("leadership not spread over the live brokers: %v", leaders)
	}
}

// TestCatchingUpRefusesReads: a broker behind the chain refuses Fetch,
// ListOffsets and OffsetForLeaderEpoch with NOT_LEADER_OR_FOLLOWER (so
// clients retry elsewhere) and serves again once caught up.
func TestCatchingUpRefusesReads(t *testing.T) {
	var behind atomic.Bool
	tb := startTestBroker(t, func(o *Options) { o.CatchingUp = behind.Load })
	cl := client(t, tb.addr, kgo.DefaultProduceTopic("cu"), kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(ctx(t), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	listEnd := func() int16 {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "cu"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		// Straight to broker 0: the client would retry NOT_LEADER itself.
		kresp, err := cl.Broker(0).Request(ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		return kresp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode
	}
	behind.Store(true)
	if code := listEnd(); code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("ListOffsets while catching up: code %d", code)
	}
	behind.Store(false)
	if code := listEnd(); code != 0 {
		t.Fatalf("ListOffsets once caught up: code %d", code)
	}
}

// TestCatchingUpRefusesGroupReads: a broker behind the chain answers
// OffsetFetch, DescribeGroups and ListGroups with the retriable
// COORDINATOR_LOAD_IN_PROGRESS rather than an old view
// (docs/consumer-groups.md).
func TestCatchingUpRefusesGroupReads(t *testing.T) {
	var behind atomic.Bool
	tb := startTestBroker(t, func(o *Options) { o.CatchingUp = behind.Load })
	cl := client(t, tb.addr)
	codes := func() [3]int16 {
		fetch := kmsg.NewPtrOffsetFetchRequest()
		fetch.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g"}}
		desc := kmsg.NewPtrDescribeGroupsRequest()
		desc.Groups = []string{"g"}
		list := kmsg.NewPtrListGroupsRequest()
		var out [3]int16
		for i, req := range []kmsg.Request{fetch, desc, list} {
			kresp, err := cl.Broker(0).Request(ctx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			switch r := kresp.(type) {
			case *kmsg.OffsetFetchResponse:
				out[i] = r.Groups[0].ErrorCode
			case *kmsg.DescribeGroupsResponse:
				out[i] = r.Groups[0].ErrorCode
			case *kmsg.ListGroupsResponse:
				out[i] = r.ErrorCode
			}
		}
		return out
	}
	behind.Store(true)
	load := kerr.CoordinatorLoadInProgress.Code
	if got := codes(); got != [3]int16{load, load, load} {
		t.Fatalf("OffsetFetch, DescribeGroups, ListGroups while catching up: codes %v", got)
	}
	behind.Store(false)
	if got := codes(); got != [3]int16{} {
		t.Fatalf("once caught up: codes %v", got)
	}
}

// TestReadBarrier: in a cluster, what a broker behind the chain without
// knowing it would answer wrongly waits for a read barrier: a fetch past
// the broker's end is OFFSET_OUT_OF_RANGE only once the barrier says the
// broker is current (and answered from the state after it), and
// NOT_LEADER_OR_FOLLOWER when no barrier completes; ListOffsets for the end
// and OffsetForLeaderEpoch likewise. Reads inside the log, and the log
// start, need no barrier.
func TestReadBarrier(t *testing.T) {
	var (
		calls   atomic.Int32
		fail    atomic.Bool
		catchUp atomic.Pointer[func()] // run inside the next barrier
	)
	tb := startTestBroker(t, func(o *Options) {
		o.Barrier = func(ctx context.Context) error {
			calls.Add(1)
			if f := catchUp.Swap(nil); f != nil {
				(*f)()
			}
			if fail.Load() {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
	})
	cl := client(t, tb.addr, kgo.DefaultProduceTopic("rb"), kgo.AllowAutoTopicCreation())
	produce := func(n int) {
		t.Helper()
		for range n {
			if err := cl.ProduceSync(ctx(t), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(1) // the log is offsets 0..0, high watermark 1
	// Straight to broker 0: the client would retry NOT_LEADER itself.
	rawRequest := func(t *testing.T, _ *kgo.Client, req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := cl.Broker(0).Request(ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	fetch := func(offset int64) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MaxBytes = 50, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "rb"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes = offset, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rawRequest(t, cl, req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	listOffset := func(ts int64) kmsg.ListOffsetsResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "rb"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rawRequest(t, cl, req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	epochEnd := func() kmsg.OffsetForLeaderEpochResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.ReplicaID = -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "rb"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.CurrentLeaderEpoch, rp.LeaderEpoch = -1, 0
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rawRequest(t, cl, req).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
	}
	noBarrier := func(what string, f func()) {
		t.Helper()
		before := calls.Load()
		f()
		if n := calls.Load() - before; n != 0 {
			t.Errorf("%s took %d barriers, want none", what, n)
		}
	}

	// Inside the log, at its end (a long poll), and the log start: no barrier.
	noBarrier("a fetch inside the log", func() {
		if p := fetch(0); p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
			t.Errorf("fetch 0: code %d, %d bytes", p.ErrorCode, len(p.RecordBatches))
		}
	})
	noBarrier("a fetch at the end", func() {
		if p := fetch(1); p.ErrorCode != 0 {
			t.Errorf("fetch at the end: code %d", p.ErrorCode)
		}
	})
	noBarrier("ListOffsets earliest", func() {
		if p := listOffset(-2); p.ErrorCode != 0 || p.Offset != 0 {
			t.Errorf("earliest: code %d offset %d", p.ErrorCode, p.Offset)
		}
	})

	// Cut off: no barrier completes.
	fail.Store(true)
	if p := fetch(5); p.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Errorf("fetch past the end, cut off: code %d, want NOT_LEADER_OR_FOLLOWER", p.ErrorCode)
	}
	if p := listOffset(-1); p.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Errorf("ListOffsets latest, cut off: code %d, want NOT_LEADER_OR_FOLLOWER", p.ErrorCode)
	}
	if p := epochEnd(); p.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Errorf("OffsetForLeaderEpoch, cut off: code %d, want NOT_LEADER_OR_FOLLOWER", p.ErrorCode)
	}

	// Current: the offset really is past the end.
	fail.Store(false)
	if p := fetch(5); p.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Errorf("fetch past the end, current: code %d, want OFFSET_OUT_OF_RANGE", p.ErrorCode)
	}
	if p := listOffset(-1); p.ErrorCode != 0 || p.Offset != 1 {
		t.Errorf("ListOffsets latest: code %d offset %d, want 1", p.ErrorCode, p.Offset)
	}
	if p := epochEnd(); p.ErrorCode != 0 || p.EndOffset != 1 {
		t.Errorf("OffsetForLeaderEpoch: code %d end %d, want 1", p.ErrorCode, p.EndOffset)
	}

	// Behind: the barrier brings the records the client had read
	// elsewhere, and the fetch is answered from them.
	more := func() { produce(5) }
	catchUp.Store(&more)
	before := calls.Load()
	if p := fetch(5); p.ErrorCode != 0 || len(p.RecordBatches) == 0 || p.HighWatermark != 6 {
		t.Errorf("fetch past the end of a broker behind: code %d, %d bytes, high watermark %d; want the records at 5", p.ErrorCode, len(p.RecordBatches), p.HighWatermark)
	}
	if n := calls.Load() - before; n != 1 {
		t.Errorf("%d barriers for one fetch, want 1", n)
	}
}

// TestFindCoordinator: a current broker names itself for every group and
// transactional id (every broker serves them all, and the one asked is
// up); one catching up names a broker the chain shows alive, the same one
// for the same key, never one whose validator does not sign
// (docs/consumer-groups.md).
func TestFindCoordinator(t *testing.T) {
	a, b, c := []byte("validator-a"), []byte("validator-b"), []byte("validator-c")
	var behind atomic.Bool
	tb := startTestBrokerSigned(t, [][]byte{a, b}, func(o *Options) {
		o.NodeID = 1
		o.Brokers = []BrokerInfo{
			{NodeID: 0, Host: "127.0.0.1", Port: 2, Validator: a},
			{NodeID: 1, Host: o.AdvertisedHost, Port: o.AdvertisedPort, Validator: b},
			{NodeID: 2, Host: "127.0.0.1", Port: 3, Validator: c},
		}
		o.CatchingUp = behind.Load
	})
	cl := client(t, tb.addr)
	// Kafka 2.7 clients send FindCoordinator v3: one key, no batch.
	cl3 := client(t, tb.addr, kgo.MaxVersions(kversion.V2_7_0()))
	// Two blocks: the second carries the signatures of the first, so the
	// chain shows validators a and b alive.
	for _, name := range []string{"t1", "t2"} {
		if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 1, -1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "orders-consumers", "txn-7"}
	find := func(version int16, typ int8) map[string]kmsg.FindCoordinatorResponseCoordinator {
		t.Helper()
		out := map[string]kmsg.FindCoordinatorResponseCoordinator{}
		if version >= 4 {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.CoordinatorType, req.CoordinatorKeys = typ, keys
			kresp, err := cl.Broker(1).Request(ctx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			for _, co := range kresp.(*kmsg.FindCoordinatorResponse).Coordinators {
				out[co.Key] = co
			}
			return out
		}
		for _, k := range keys {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.CoordinatorType, req.CoordinatorKey = typ, k
			kresp, err := cl3.Broker(1).Request(ctx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			r := kresp.(*kmsg.FindCoordinatorResponse)
			if r.Version != 3 {
				t.Fatalf("FindCoordinator v%d sent, want v3", r.Version)
			}
			out[k] = kmsg.FindCoordinatorResponseCoordinator{Key: k, NodeID: r.NodeID, Host: r.Host, Port: r.Port, ErrorCode: r.ErrorCode}
		}
		return out
	}
	host, port := tb.srv.Addr()
	for _, v := range []int16{3, 4} {
		for _, typ := range []int8{0, 1} {
			for k, co := range find(v, typ) {
				if co.ErrorCode != 0 || co.NodeID != 1 || co.Host != host || co.Port != port {
					t.Fatalf("v%d type %d key %s, current broker: %+v, want node 1 at %s:%d (itself)", v, typ, k, co, host, port)
				}
			}
		}
	}
	if co := find(4, 2)["g0"]; co.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("coordinator type 2: %+v, want INVALID_REQUEST", co)
	}

	behind.Store(true)
	named := map[int32]int{}
	first := find(4, 0)
	for k, co := range first {
		if co.ErrorCode != 0 || (co.NodeID != 0 && co.NodeID != 1) {
			t.Fatalf("key %s, catching up: %+v, want node 0 or 1 (the brokers whose validators sign)", k, co)
		}
		named[co.NodeID]++
	}
	if named[0] == 0 {
		t.Errorf("catching up, every key named this broker (%v): want them spread over the live brokers", named)
	}
	for k, co := range find(3, 0) {
		if co.NodeID != first[k].NodeID {
			t.Errorf("key %s: v3 names node %d, v4 node %d: want the same broker for the same key", k, co.NodeID, first[k].NodeID)
		}
	}
}

// TestPreferredReadReplica (KIP-392): a consumer that names a rack this
// broker is not in, where brokers of the directory are, is told to read
// each partition from one of them (no records, the answer at once); one in
// this broker's rack, of an unknown rack or of none reads here. Metadata
// and DescribeCluster name the racks.
func TestPreferredReadReplica(t *testing.T) {
	a, b, c := []byte("validator-a"), []byte("validator-b"), []byte("validator-c")
	tb := startTestBrokerSigned(t, [][]byte{a, b}, func(o *Options) {
		o.Brokers = []BrokerInfo{
			{NodeID: 0, Host: o.AdvertisedHost, Port: o.AdvertisedPort, Validator: a, Rack: "east"},
			{NodeID: 1, Host: "127.0.0.1", Port: 2, Validator: b, Rack: "west"},
			{NodeID: 2, Host: "127.0.0.1", Port: 3, Validator: c, Rack: "west"},
		}
	})
	cl := client(t, tb.addr)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 4, -1, nil, "racked"); err != nil {
		t.Fatal(err)
	}
	// A record in a partition broker 0 leads (the others do not exist).
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	part := int32(-1)
	for _, mt := range md.Topics {
		for _, mp := range mt.Partitions {
			if mt.Topic != nil && *mt.Topic == "racked" && mp.Leader == 0 {
				part = mp.Partition
			}
		}
	}
	if part < 0 {
		t.Fatal("broker 0 leads no partition of racked")
	}
	pc := client(t, tb.addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := pc.ProduceSync(ctx(t), &kgo.Record{Topic: "racked", Partition: part, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fetch := func(rack string) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.Rack, req.MaxBytes, req.MaxWaitMillis = 11, rack, 1<<20, 5000
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "racked"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = part, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := cl.Broker(0).Request(ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	if p := fetch("west"); (p.PreferredReadReplica != 1 && p.PreferredReadReplica != 2) || len(p.RecordBatches) != 0 || p.HighWatermark != 1 || p.ErrorCode != 0 {
		t.Fatalf("a consumer in rack west: read replica %d, %d record bytes, high watermark %d, code %d", p.PreferredReadReplica, len(p.RecordBatches), p.HighWatermark, p.ErrorCode)
	}
	for _, rack := range []string{"east", "", "north"} {
		if p := fetch(rack); p.PreferredReadReplica != -1 || len(p.RecordBatches) == 0 {
			t.Fatalf("a consumer in rack %q: read replica %d, %d record bytes", rack, p.PreferredReadReplica, len(p.RecordBatches))
		}
	}
	racks := map[int32]string{}
	for _, br := range md.Brokers {
		if br.Rack != nil {
			racks[br.NodeID] = *br.Rack
		}
	}
	if racks[0] != "east" || racks[1] != "west" || racks[2] != "west" {
		t.Fatalf("Metadata racks %v", racks)
	}
	dc, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, br := range dc.Brokers {
		if br.Rack == nil || *br.Rack != racks[br.NodeID] {
			t.Fatalf("DescribeCluster: broker %d rack %v", br.NodeID, br.Rack)
		}
	}
}
