package kafka

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Kafka's answers without an authorizer: every operation
// AclEntry.supportedOperations lists for the resource type (KIP-430).
var (
	wantTopicOps = []kadm.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationCreate,
		kmsg.ACLOperationDelete, kmsg.ACLOperationAlter, kmsg.ACLOperationDescribe,
		kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs}
	wantGroupOps   = []kadm.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDelete, kmsg.ACLOperationDescribe}
	wantClusterOps = []kadm.ACLOperation{kmsg.ACLOperationCreate, kmsg.ACLOperationAlter, kmsg.ACLOperationDescribe,
		kmsg.ACLOperationClusterAction, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs,
		kmsg.ACLOperationIdempotentWrite}
)

func sameOps(got, want []kadm.ACLOperation) bool {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// TestAuthorizedOperationsKadm: kadm asking for authorized operations (its
// WithAuthorizedOps metadata, DescribeGroups) gets every operation Kafka
// supports on topics, groups and the cluster, as a Kafka broker without
// authorizer answers.
func TestAuthorizedOperationsKadm(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx(t), 1, -1, nil, "ops"); err != nil {
		t.Fatal(err)
	}
	md, err := adm.Metadata(kadm.WithAuthorizedOps(ctx(t)), "ops")
	if err != nil {
		t.Fatal(err)
	}
	if got := md.Topics["ops"].AuthorizedOperations; !sameOps(got, wantTopicOps) {
		t.Errorf("topic operations %v, want %v", got, wantTopicOps)
	}
	// franz-go speaks Metadata v12, which has no cluster operations (v11+
	// moved them to DescribeCluster, tested below).
	groups, err := adm.DescribeGroups(ctx(t), "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if got := groups["nobody"].AuthorizedOperations; !sameOps(got, wantGroupOps) {
		t.Errorf("group operations %v, want %v", got, wantGroupOps)
	}
}

// TestAuthorizedOperationsByVersion: the fields are INT32_MIN unless asked
// for; Metadata answers the cluster's only in v8-10, which carry the field.
func TestAuthorizedOperationsByVersion(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr, kgo.AllowAutoTopicCreation())
	if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 1, -1, nil, "opsv"); err != nil {
		t.Fatal(err)
	}
	const topicBits, clusterBits, groupBits = 3576, 8096, 328
	for v := int16(8); v <= 12; v++ {
		vs := kversion.Stable()
		vs.SetMaxKeyVersion(kmsg.Metadata.Int16(), v) // franz-go sends the highest version it may
		vcl := client(t, addr, kgo.MaxVersions(vs))
		for _, ask := range []bool{false, true} {
			req := kmsg.NewPtrMetadataRequest()
			req.Version = v
			req.IncludeTopicAuthorizedOperations = ask
			req.IncludeClusterAuthorizedOperations = ask
			for _, name := range []string{"opsv", "missing"} {
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr(name)
				req.Topics = append(req.Topics, rt)
			}
			resp := rawRequest(t, vcl, req).(*kmsg.MetadataResponse)
			wantTopic, wantCluster := int32(authorizedOpsUnknown), int32(authorizedOpsUnknown)
			if ask {
				wantTopic = topicBits
				if v <= 10 {
					wantCluster = clusterBits
				}
			}
			for _, mt := range resp.Topics {
				if mt.AuthorizedOperations != wantTopic {
					t.Errorf("Metadata v%d asked %v: topic %s operations %d, want %d", v, ask, *mt.Topic, mt.AuthorizedOperations, wantTopic)
				}
			}
			if v <= 10 && resp.AuthorizedOperations != wantCluster {
				t.Errorf("Metadata v%d asked %v: cluster operations %d, want %d", v, ask, resp.AuthorizedOperations, wantCluster)
			}
		}
	}
	for _, ask := range []bool{false, true} {
		req := kmsg.NewPtrDescribeClusterRequest()
		req.IncludeClusterAuthorizedOperations = ask
		resp := rawRequest(t, cl, req).(*kmsg.DescribeClusterResponse)
		if want := map[bool]int32{false: authorizedOpsUnknown, true: clusterBits}[ask]; resp.ClusterAuthorizedOperations != want {
			t.Errorf("DescribeCluster asked %v: %d, want %d", ask, resp.ClusterAuthorizedOperations, want)
		}
		dg := kmsg.NewPtrDescribeGroupsRequest()
		dg.Groups = []string{"g"}
		dg.IncludeAuthorizedOperations = ask
		dresp := rawRequest(t, cl, dg).(*kmsg.DescribeGroupsResponse)
		if want := map[bool]int32{false: authorizedOpsUnknown, true: groupBits}[ask]; dresp.Groups[0].AuthorizedOperations != want {
			t.Errorf("DescribeGroups asked %v: %d, want %d", ask, dresp.Groups[0].AuthorizedOperations, want)
		}
	}
}
