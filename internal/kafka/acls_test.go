package kafka

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// aclRow is one line of the ACL matrix: an API call by alice that needs
// one operation on one resource, and the error code it gets without it.
type aclRow struct {
	name   string
	rt     kmsg.ACLResourceType
	res    string
	op     kmsg.ACLOperation
	denied int16
	call   func(ctx context.Context, cl *kgo.Client) int16
}

// TestACLMatrix (issue 17): on a broker whose listener authenticates
// (allow.everyone.if.no.acl.found false), every API alice calls is refused
// with Kafka's code until the admin grants her the one operation it needs
// on its resource, and then is served; a topic she may not describe is
// refused the same whether it exists or not; a DENY overrides the ALLOW.
// Reference: Kafka's KafkaApis authorization of each API.
func TestACLMatrix(t *testing.T) {
	tb, addr := startSASLBroker(t, nil)
	admin := kadm.NewClient(scramClient(t, addr, AdminUser, "admin-secret", true))
	if _, err := admin.AlterUserSCRAMs(ctx(t), nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "pw"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lo", "pr", "fe", "dc", "ac", "doomed", "trimmed", "grown", "hidden", "olep", "dp", "vsrc"} {
		if _, err := admin.CreateTopic(ctx(t), 1, -1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	alice := scramClient(t, addr, "alice", "pw", false, kgo.RequestRetries(0))
	// A producer that asks no producer id: an idempotent one would need
	// IDEMPOTENT_WRITE or WRITE on some topic first (CLUSTER_AUTHORIZATION_FAILED).
	plainProducer := func() *kgo.Client {
		return scramClient(t, addr, "alice", "pw", false, kgo.RequestRetries(0), kgo.DisableIdempotentWrite(), kgo.RecordRetries(0))
	}
	grant := func(rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) {
		t.Helper()
		req := kmsg.NewPtrCreateACLsRequest()
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = rt, name, kmsg.ACLResourcePatternTypeLiteral
		c.Principal, c.Host, c.Operation, c.PermissionType = "User:alice", "*", op, perm
		req.Creations = append(req.Creations, c)
		resp, err := req.RequestWith(ctx(t), scramClient(t, addr, AdminUser, "admin-secret", true))
		if err != nil || resp.Results[0].ErrorCode != 0 {
			t.Fatalf("create ACL: %v %+v", err, resp)
		}
	}
	topicCode := func(name string, build func() kmsg.Request, code func(kmsg.Response) int16) func(context.Context, *kgo.Client) int16 {
		return func(ctx context.Context, cl *kgo.Client) int16 {
			// One broker's answer, unsharded: kgo would merge or look up.
			resp, err := cl.Broker(0).Request(ctx, build())
			var ke *kerr.Error
			if errors.As(err, &ke) {
				// kgo looks a sharded request's topics up first, and
				// returns the lookup's refusal.
				return ke.Code
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return code(resp)
		}
	}
	rows := []aclRow{
		{"ListOffsets", kmsg.ACLResourceTypeTopic, "lo", kmsg.ACLOperationDescribe, kerr.TopicAuthorizationFailed.Code,
			topicCode("ListOffsets", func() kmsg.Request {
				r := kmsg.NewPtrListOffsetsRequest()
				rt := kmsg.NewListOffsetsRequestTopic()
				rt.Topic = "lo"
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Timestamp = -1
				rt.Partitions = append(rt.Partitions, rp)
				r.Topics = append(r.Topics, rt)
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode })},
		{"Produce", kmsg.ACLResourceTypeTopic, "pr", kmsg.ACLOperationWrite, kerr.TopicAuthorizationFailed.Code,
			func(ctx context.Context, cl *kgo.Client) int16 {
				err := plainProducer().ProduceSync(ctx, &kgo.Record{Topic: "pr", Value: []byte("x")}).FirstErr()
				var ke *kerr.Error
				if errors.As(err, &ke) {
					return ke.Code
				}
				if err != nil {
					t.Fatalf("produce: %v", err)
				}
				return 0
			}},
		{"Fetch", kmsg.ACLResourceTypeTopic, "fe", kmsg.ACLOperationRead, kerr.TopicAuthorizationFailed.Code,
			topicCode("Fetch", func() kmsg.Request {
				r := kmsg.NewPtrFetchRequest()
				r.Version, r.MaxBytes = 12, 1<<20
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic = "fe"
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.PartitionMaxBytes = 1 << 20
				rt.Partitions = append(rt.Partitions, rp)
				r.Topics = append(r.Topics, rt)
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode })},
		{"CreateTopics", kmsg.ACLResourceTypeTopic, "fresh", kmsg.ACLOperationCreate, kerr.TopicAuthorizationFailed.Code,
			topicCode("CreateTopics", func() kmsg.Request {
				r := kmsg.NewPtrCreateTopicsRequest()
				rt := kmsg.NewCreateTopicsRequestTopic()
				rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "fresh", 1, -1
				r.Topics = append(r.Topics, rt)
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode })},
		{"DeleteTopics", kmsg.ACLResourceTypeTopic, "doomed", kmsg.ACLOperationDelete, kerr.TopicAuthorizationFailed.Code,
			topicCode("DeleteTopics", func() kmsg.Request {
				r := kmsg.NewPtrDeleteTopicsRequest()
				r.TopicNames = []string{"doomed"}
				rt := kmsg.NewDeleteTopicsRequestTopic()
				rt.Topic = kmsg.StringPtr("doomed")
				r.Topics = append(r.Topics, rt)
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode })},
		{"DeleteRecords", kmsg.ACLResourceTypeTopic, "trimmed", kmsg.ACLOperationDelete, kerr.TopicAuthorizationFailed.Code,
			topicCode("DeleteRecords", func() kmsg.Request {
				r := kmsg.NewPtrDeleteRecordsRequest()
				rt := kmsg.NewDeleteRecordsRequestTopic()
				rt.Topic = "trimmed"
				rp := kmsg.NewDeleteRecordsRequestTopicPartition()
				rp.Offset = 0
				rt.Partitions = append(rt.Partitions, rp)
				r.Topics = append(r.Topics, rt)
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0].ErrorCode })},
		{"CreatePartitions", kmsg.ACLResourceTypeTopic, "grown", kmsg.ACLOperationAlter, kerr.TopicAuthorizationFailed.Code,
			topicCode("CreatePartitions", func() kmsg.Request {
				r := kmsg.NewPtrCreatePartitionsRequest()
				rt := kmsg.NewCreatePartitionsRequestTopic()
				rt.Topic, rt.Count = "grown", 2
				r.Topics = append(r.Topics, rt)
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode })},
		{"DescribeConfigs topic", kmsg.ACLResourceTypeTopic, "dc", kmsg.ACLOperationDescribeConfigs, kerr.TopicAuthorizationFailed.Code,
			topicCode("DescribeConfigs", func() kmsg.Request {
				r := kmsg.NewPtrDescribeConfigsRequest()
				rr := kmsg.NewDescribeConfigsRequestResource()
				rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "dc"
				r.Resources = append(r.Resources, rr)
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.DescribeConfigsResponse).Resources[0].ErrorCode })},
		{"IncrementalAlterConfigs topic", kmsg.ACLResourceTypeTopic, "ac", kmsg.ACLOperationAlterConfigs, kerr.TopicAuthorizationFailed.Code,
			topicCode("IncrementalAlterConfigs", func() kmsg.Request {
				r := kmsg.NewPtrIncrementalAlterConfigsRequest()
				rr := kmsg.NewIncrementalAlterConfigsRequestResource()
				rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "ac"
				c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
				c.Name, c.Value = "retention.ms", kmsg.StringPtr("3600000")
				rr.Configs = append(rr.Configs, c)
				r.Resources = append(r.Resources, rr)
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode })},
		{"DescribeConfigs broker", kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationDescribeConfigs, kerr.ClusterAuthorizationFailed.Code,
			topicCode("DescribeConfigs", func() kmsg.Request {
				r := kmsg.NewPtrDescribeConfigsRequest()
				rr := kmsg.NewDescribeConfigsRequestResource()
				rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBroker, "0"
				r.Resources = append(r.Resources, rr)
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.DescribeConfigsResponse).Resources[0].ErrorCode })},
		{"DescribeLogDirs", kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationDescribe, kerr.ClusterAuthorizationFailed.Code,
			topicCode("DescribeLogDirs", func() kmsg.Request {
				r := kmsg.NewPtrDescribeLogDirsRequest()
				r.Version = 4
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.DescribeLogDirsResponse).ErrorCode })},
		{"OffsetFetch", kmsg.ACLResourceTypeGroup, "g-of", kmsg.ACLOperationDescribe, kerr.GroupAuthorizationFailed.Code,
			topicCode("OffsetFetch", func() kmsg.Request {
				r := kmsg.NewPtrOffsetFetchRequest()
				r.Group = "g-of"
				g := kmsg.NewOffsetFetchRequestGroup()
				g.Group = "g-of"
				r.Groups = append(r.Groups, g)
				return r
			}, func(r kmsg.Response) int16 {
				if resp := r.(*kmsg.OffsetFetchResponse); len(resp.Groups) > 0 {
					return resp.Groups[0].ErrorCode // v8+, which kgo picks
				}
				return r.(*kmsg.OffsetFetchResponse).ErrorCode
			})},
		{"DescribeGroups", kmsg.ACLResourceTypeGroup, "g-dg", kmsg.ACLOperationDescribe, kerr.GroupAuthorizationFailed.Code,
			topicCode("DescribeGroups", func() kmsg.Request {
				r := kmsg.NewPtrDescribeGroupsRequest()
				r.Groups = []string{"g-dg"}
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode })},
		{"Heartbeat", kmsg.ACLResourceTypeGroup, "g-hb", kmsg.ACLOperationRead, kerr.GroupAuthorizationFailed.Code,
			topicCode("Heartbeat", func() kmsg.Request {
				r := kmsg.NewPtrHeartbeatRequest()
				r.Group, r.MemberID = "g-hb", "nobody"
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.HeartbeatResponse).ErrorCode })},
		{"DeleteGroups", kmsg.ACLResourceTypeGroup, "g-del", kmsg.ACLOperationDelete, kerr.GroupAuthorizationFailed.Code,
			topicCode("DeleteGroups", func() kmsg.Request {
				r := kmsg.NewPtrDeleteGroupsRequest()
				r.Groups = []string{"g-del"}
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode })},
		{"InitProducerId transactional", kmsg.ACLResourceTypeTransactionalId, "tx-1", kmsg.ACLOperationWrite, kerr.TransactionalIDAuthorizationFailed.Code,
			topicCode("InitProducerId", func() kmsg.Request {
				r := kmsg.NewPtrInitProducerIDRequest()
				r.TransactionalID, r.TransactionTimeoutMillis = kmsg.StringPtr("tx-1"), 10000
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.InitProducerIDResponse).ErrorCode })},
		{"DescribeTransactions", kmsg.ACLResourceTypeTransactionalId, "tx-2", kmsg.ACLOperationDescribe, kerr.TransactionalIDAuthorizationFailed.Code,
			topicCode("DescribeTransactions", func() kmsg.Request {
				r := kmsg.NewPtrDescribeTransactionsRequest()
				r.TransactionalIDs = []string{"tx-2"}
				return r
			}, func(r kmsg.Response) int16 {
				return r.(*kmsg.DescribeTransactionsResponse).TransactionStates[0].ErrorCode
			})},
		{"OffsetForLeaderEpoch", kmsg.ACLResourceTypeTopic, "olep", kmsg.ACLOperationDescribe, kerr.TopicAuthorizationFailed.Code,
			topicCode("OffsetForLeaderEpoch", func() kmsg.Request {
				r := kmsg.NewPtrOffsetForLeaderEpochRequest()
				r.ReplicaID = -1
				rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
				rt.Topic = "olep"
				rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
				rp.CurrentLeaderEpoch, rp.LeaderEpoch = -1, 0
				rt.Partitions = append(rt.Partitions, rp)
				r.Topics = append(r.Topics, rt)
				return r
			}, func(r kmsg.Response) int16 {
				return r.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0].ErrorCode
			})},
		{"DescribeProducers", kmsg.ACLResourceTypeTopic, "dp", kmsg.ACLOperationRead, kerr.TopicAuthorizationFailed.Code,
			topicCode("DescribeProducers", func() kmsg.Request {
				r := kmsg.NewPtrDescribeProducersRequest()
				rt := kmsg.NewDescribeProducersRequestTopic()
				rt.Topic, rt.Partitions = "dp", []int32{0}
				r.Topics = append(r.Topics, rt)
				return r
			}, func(r kmsg.Response) int16 {
				return r.(*kmsg.DescribeProducersResponse).Topics[0].Partitions[0].ErrorCode
			})},
		{"OffsetDelete", kmsg.ACLResourceTypeGroup, "g-od", kmsg.ACLOperationDelete, kerr.GroupAuthorizationFailed.Code,
			topicCode("OffsetDelete", func() kmsg.Request {
				r := kmsg.NewPtrOffsetDeleteRequest()
				r.Group = "g-od"
				rt := kmsg.NewOffsetDeleteRequestTopic()
				rt.Topic = "dp"
				rt.Partitions = append(rt.Partitions, kmsg.NewOffsetDeleteRequestTopicPartition())
				r.Topics = append(r.Topics, rt)
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.OffsetDeleteResponse).ErrorCode })},
		{"ConsumerGroupHeartbeat", kmsg.ACLResourceTypeGroup, "g-cgh", kmsg.ACLOperationRead, kerr.GroupAuthorizationFailed.Code,
			topicCode("ConsumerGroupHeartbeat", func() kmsg.Request {
				r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
				r.Group, r.MemberID, r.MemberEpoch = "g-cgh", "m-acl-matrix-0000000000", 0
				r.RebalanceTimeoutMillis = 10000
				r.SubscribedTopicNames = []string{"dp"}
				r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode })},
		{"AddOffsetsToTxn", kmsg.ACLResourceTypeTransactionalId, "tx-ao", kmsg.ACLOperationWrite, kerr.TransactionalIDAuthorizationFailed.Code,
			topicCode("AddOffsetsToTxn", func() kmsg.Request {
				r := kmsg.NewPtrAddOffsetsToTxnRequest()
				r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Group = "tx-ao", 1, 0, "g-ao"
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.AddOffsetsToTxnResponse).ErrorCode })},
		{"TxnOffsetCommit", kmsg.ACLResourceTypeTransactionalId, "tx-to", kmsg.ACLOperationWrite, kerr.TransactionalIDAuthorizationFailed.Code,
			topicCode("TxnOffsetCommit", func() kmsg.Request {
				r := kmsg.NewPtrTxnOffsetCommitRequest()
				r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Group = "tx-to", 1, 0, "g-to"
				rt := kmsg.NewTxnOffsetCommitRequestTopic()
				rt.Topic = "dp"
				rt.Partitions = append(rt.Partitions, kmsg.NewTxnOffsetCommitRequestTopicPartition())
				r.Topics = append(r.Topics, rt)
				return r
			}, func(r kmsg.Response) int16 {
				return r.(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
			})},
		{"FindCoordinator", kmsg.ACLResourceTypeGroup, "finders", kmsg.ACLOperationDescribe, kerr.GroupAuthorizationFailed.Code,
			topicCode("FindCoordinator", func() kmsg.Request {
				r := kmsg.NewPtrFindCoordinatorRequest()
				r.Version, r.CoordinatorKeys = 4, []string{"finders"}
				return r
			}, func(r kmsg.Response) int16 { return r.(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode })},
	}
	// A view (docs/subjects.md) needs READ on its sources besides CREATE
	// on itself: else it would read for alice what she may not.
	grant(kmsg.ACLResourceTypeTopic, "myview", kmsg.ACLOperationCreate, kmsg.ACLPermissionTypeAllow)
	rows = append(rows, aclRow{"CreateTopics of a view", kmsg.ACLResourceTypeTopic, "vsrc", kmsg.ACLOperationRead, kerr.TopicAuthorizationFailed.Code,
		topicCode("CreateTopics", func() kmsg.Request {
			r := kmsg.NewPtrCreateTopicsRequest()
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "myview", -1, -1
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name, c.Value = "stele.view.from", kmsg.StringPtr("vsrc")
			rt.Configs = append(rt.Configs, c)
			r.Topics = append(r.Topics, rt)
			return r
		}, func(r kmsg.Response) int16 { return r.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode })})
	for _, row := range rows {
		if got := row.call(ctx(t), alice); got != row.denied {
			t.Errorf("%s without %s on %s %q: code %d, want %d", row.name, row.op, row.rt, row.res, got, row.denied)
		}
		grant(row.rt, row.res, row.op, kmsg.ACLPermissionTypeAllow)
		if got := row.call(ctx(t), alice); got == row.denied {
			t.Errorf("%s with %s on %s %q: still refused (%d)", row.name, row.op, row.rt, row.res, got)
		}
	}

	// Metadata: a denied topic is refused alike whether it exists or not,
	// and left out of the all-topics list.
	md := func(topics ...string) *kmsg.MetadataResponse {
		r := kmsg.NewPtrMetadataRequest()
		for _, name := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(name)
			r.Topics = append(r.Topics, rt)
		}
		if topics == nil {
			r.Topics = nil
		}
		resp, err := r.RequestWith(ctx(t), alice)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, m := range md("hidden", "no-such-topic").Topics {
		if m.ErrorCode != kerr.TopicAuthorizationFailed.Code || len(m.Partitions) != 0 {
			t.Errorf("Metadata of %s without DESCRIBE: code %d, %d partitions", *m.Topic, m.ErrorCode, len(m.Partitions))
		}
	}
	var listed []string
	for _, m := range md().Topics {
		listed = append(listed, *m.Topic)
	}
	// Visible: lo and olep (DESCRIBE), pr (WRITE), fe, dp and vsrc (READ),
	// trimmed (DELETE) and grown (ALTER) imply DESCRIBE; dc, ac, hidden do
	// not; doomed is gone.
	slices.Sort(listed)
	if want := []string{"dp", "fe", "grown", "lo", "olep", "pr", "trimmed", "vsrc"}; !slices.Equal(listed, want) {
		t.Errorf("all-topics Metadata lists %v, want %v", listed, want)
	}
	grant(kmsg.ACLResourceTypeTopic, "pr", kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeDeny)
	if err := plainProducer().ProduceSync(ctx(t), &kgo.Record{Topic: "pr", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("produce under a DENY beside the ALLOW: %v", err)
	}
	req := kmsg.NewPtrCreateACLsRequest()
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType, c.ResourceName, c.ResourcePatternType, c.Principal, c.Host, c.Operation, c.PermissionType =
		kmsg.ACLResourceTypeTopic, "hidden", kmsg.ACLResourcePatternTypeLiteral, "User:alice", "*", kmsg.ACLOperationAll, kmsg.ACLPermissionTypeAllow
	req.Creations = append(req.Creations, c)
	if resp, err := req.RequestWith(ctx(t), alice); err != nil || resp.Results[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("alice grants herself a topic: %v %+v, want CLUSTER_AUTHORIZATION_FAILED", err, resp)
	}
	if n := tb.b.ACLs().NumBindings(); n != len(rows)+2 { // a grant per row, the DENY, CREATE on myview
		t.Errorf("%d ACLs, want %d", n, len(rows)+2)
	}
}
