package kafka

import (
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

// versioned sends req at exactly req's version over a fresh connection and
// decodes the answer, so tests can check old versions that kgo would not
// pick.
func versioned(t *testing.T, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	return requestOn(t, rawConn(t, addr), req)
}

// requestOn sends req over the open connection c and returns its answer.
func requestOn(t *testing.T, c net.Conn, req kmsg.Request) kmsg.Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, 42)
	b = binary.BigEndian.AppendUint16(b, 0xffff) // null client id
	if req.IsFlexible() {
		b = append(b, 0) // no header tags
	}
	if _, err := c.Write(frame(req.AppendTo(b))); err != nil {
		t.Fatal(err)
	}
	body, err := readFrame(c)
	if err != nil {
		t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	if corr := int32(binary.BigEndian.Uint32(body)); corr != 42 {
		t.Fatalf("correlation id %d", corr)
	}
	body = body[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() {
		body = body[1:] // no header tags are sent
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("decoding %s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

// admin returns an admin client and a plain one whose records go to the
// partition they name.
func admin(t *testing.T, addr string) (*kadm.Client, *kgo.Client) {
	cl := client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	return kadm.NewClient(cl), cl
}

func mustCreate(t *testing.T, adm *kadm.Client, partitions int32, configs map[string]*string, topics ...string) {
	t.Helper()
	rs, err := adm.CreateTopics(ctx(t), partitions, -1, configs, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("creating %s: %v: %s", r.Topic, r.Err, r.ErrMessage)
		}
	}
}

// partitionCount asks Metadata directly (kadm.ListTopics may answer from
// the client's metadata cache) and returns -1 for a topic that is not there.
func partitionCount(t *testing.T, cl *kgo.Client, topic string) int {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		return -1
	}
	return len(resp.Topics[0].Partitions)
}

func produceN(t *testing.T, cl *kgo.Client, topic string, partition int32, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte(strconv.Itoa(i))}
		if err := cl.ProduceSync(ctx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAdminApiVersions: every admin API is advertised at the versions served.
func TestAdminApiVersions(t *testing.T) {
	adm, _ := admin(t, newTestBroker(t))
	vs, err := adm.ApiVersions(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, bv := range vs {
		for _, r := range adminRoutes() {
			min, max, ok := bv.KeyVersions(r.key)
			if !ok || min != r.min || max != r.max {
				t.Errorf("%s: advertised %d-%d (%v), want %d-%d", kmsg.NameForKey(r.key), min, max, ok, r.min, r.max)
			}
		}
	}
}

// TestApiVersionsFeatures: from v3 ApiVersions lists the app version as
// a feature (KIP-584): supported 1 to the binary's newest, finalized at
// the chain's, as franz-go reads it.
func TestApiVersionsFeatures(t *testing.T) {
	tb := startTestBroker(t, nil)
	cl := client(t, tb.addr)
	// A block, so that the epoch (the committed height) is past genesis.
	if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 1, -1, nil, "features"); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrApiVersionsRequest() // franz-go sends the newest both serve, v4
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.SupportedFeatures) != 1 || len(resp.FinalizedFeatures) != 1 {
		t.Fatalf("features %+v / %+v, want %s alone", resp.SupportedFeatures, resp.FinalizedFeatures, AppVersionFeature)
	}
	sf, ff := resp.SupportedFeatures[0], resp.FinalizedFeatures[0]
	if sf.Name != AppVersionFeature || sf.MinVersion != 1 || sf.MaxVersion != int16(fsm.MaxAppVersion) {
		t.Errorf("supported %+v, want %s 1-%d", sf, AppVersionFeature, fsm.MaxAppVersion)
	}
	if ff.Name != AppVersionFeature || ff.MaxVersionLevel != int16(tb.b.Upgrade().Version) || ff.MaxVersionLevel != int16(fsm.MaxAppVersion) {
		t.Errorf("finalized %+v, want %s at the chain's version %d", ff, AppVersionFeature, fsm.MaxAppVersion)
	}
	if resp.FinalizedFeaturesEpoch < 1 {
		t.Errorf("finalized features epoch %d, want the committed height", resp.FinalizedFeaturesEpoch)
	}
}

func TestCreateTopics(t *testing.T) {
	addr := startTestBroker(t, func(o *Options) { o.DefaultPartitions = 2 }).addr
	adm, cl := admin(t, addr)

	t.Run("created with configs", func(t *testing.T) {
		r, err := adm.CreateTopic(ctx(t), 3, -1, map[string]*string{"retention.ms": kadm.StringPtr("1000")}, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if r.ID == (kadm.TopicID{}) || r.NumPartitions != 3 || r.ReplicationFactor != 1 {
			t.Fatalf("response: %+v", r)
		}
		if c := r.Configs["retention.ms"]; c.MaybeValue() != "1000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
			t.Fatalf("retention.ms in response: %+v", c)
		}
		if c := r.Configs["segment.bytes"]; c.MaybeValue() != "1073741824" || c.Source != kmsg.ConfigSourceDefaultConfig {
			t.Fatalf("segment.bytes in response: %+v", c)
		}
		if n := partitionCount(t, cl, "orders"); n != 3 {
			t.Fatalf("partitions: %d", n)
		}
	})
	t.Run("-1 partitions means num.partitions", func(t *testing.T) {
		mustCreate(t, adm, -1, nil, "defaulted")
		if n := partitionCount(t, cl, "defaulted"); n != 2 {
			t.Fatalf("partitions: %d, want 2", n)
		}
	})
	t.Run("validate only creates nothing", func(t *testing.T) {
		rs, err := adm.ValidateCreateTopics(ctx(t), 4, -1, nil, "dry")
		if err != nil || rs["dry"].Err != nil || rs["dry"].NumPartitions != 4 {
			t.Fatalf("validate: %v %+v", err, rs["dry"])
		}
		if n := partitionCount(t, cl, "dry"); n != -1 {
			t.Fatalf("validate-only created the topic (%d partitions)", n)
		}
		rs, _ = adm.ValidateCreateTopics(ctx(t), 1, -1, nil, "orders")
		if !errors.Is(rs["orders"].Err, kerr.TopicAlreadyExists) {
			t.Fatalf("validate existing: %v", rs["orders"].Err)
		}
	})
	errs := []struct {
		name    string
		topic   string
		parts   int32
		rf      int16
		configs map[string]*string
		want    *kerr.Error
		msg     string
	}{
		{"existing topic", "orders", 1, -1, nil, kerr.TopicAlreadyExists, "already exists"},
		{"invalid name", "bad name", 1, -1, nil, kerr.InvalidTopicException, "illegal"},
		{"colliding name", "orders_eu", 1, -1, nil, kerr.InvalidTopicException, ""},
		{"zero partitions", "zero", 0, -1, nil, kerr.InvalidPartitions, ""},
		{"zero replication", "norf", 1, 0, nil, kerr.InvalidReplicationFactor, ""},
		{"bad value", "badval", 1, -1, map[string]*string{"retention.ms": kadm.StringPtr("soon")}, kerr.InvalidConfig, "retention.ms"},
		{"unknown config", "unknown", 1, -1, map[string]*string{"no.such.config": kadm.StringPtr("1")}, kerr.InvalidConfig, "no.such.config"},
		{"null value", "nullval", 1, -1, map[string]*string{"retention.ms": nil}, kerr.InvalidRequest, "Null value"},
	}
	mustCreate(t, adm, 1, nil, "orders.eu")
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := adm.CreateTopics(ctx(t), tc.parts, tc.rf, tc.configs, tc.topic)
			if err != nil {
				t.Fatal(err)
			}
			r := rs[tc.topic]
			if !errors.Is(r.Err, tc.want) || !strings.Contains(r.ErrMessage, tc.msg) {
				t.Fatalf("got %v %q, want %v with %q", r.Err, r.ErrMessage, tc.want, tc.msg)
			}
			if tc.topic != "orders" && partitionCount(t, cl, tc.topic) != -1 {
				t.Fatalf("topic %s was created", tc.topic)
			}
		})
	}
	t.Run("duplicates and assignments", func(t *testing.T) {
		req := kmsg.NewPtrCreateTopicsRequest()
		for _, name := range []string{"dup", "solo", "dup", "assigned"} {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, -1
			if name == "assigned" {
				rt.NumPartitions = -1
				a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
				a.Replicas = []int32{0}
				rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
			}
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int16{}
		for _, rt := range resp.Topics {
			if _, twice := got[rt.Topic]; twice {
				t.Fatalf("%s answered twice", rt.Topic)
			}
			got[rt.Topic] = rt.ErrorCode
		}
		want := map[string]int16{"dup": kerr.InvalidRequest.Code, "solo": 0, "assigned": 0}
		for name, code := range want {
			if got[name] != code {
				t.Errorf("%s: code %d, want %d", name, got[name], code)
			}
		}
		if partitionCount(t, cl, "solo") != 1 || partitionCount(t, cl, "dup") != -1 {
			t.Fatalf("solo should exist and dup should not")
		}
	})
	t.Run("v2", func(t *testing.T) {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version = 2
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "old-client", 1, 1
		req.Topics = append(req.Topics, rt)
		resp := versioned(t, addr, req).(*kmsg.CreateTopicsResponse)
		if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
			t.Fatalf("v2 answer: %+v", resp.Topics)
		}
		if partitionCount(t, cl, "old-client") != 1 {
			t.Fatal("v2 create did not create")
		}
	})
}

func TestDeleteTopics(t *testing.T) {
	addr := newTestBroker(t)
	adm, cl := admin(t, addr)
	mustCreate(t, adm, 1, nil, "a", "b", "c")

	rs, err := adm.DeleteTopics(ctx(t), "a", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if rs["a"].Err != nil || !errors.Is(rs["missing"].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("delete by name: a=%v missing=%v", rs["a"].Err, rs["missing"].Err)
	}
	if partitionCount(t, cl, "a") != -1 {
		t.Fatal("a still listed")
	}
	mustCreate(t, adm, 2, nil, "a") // the name is free again

	td, err := adm.ListTopics(ctx(t), "b")
	if err != nil {
		t.Fatal(err)
	}
	idB := td["b"].ID
	req := kmsg.NewPtrDeleteTopicsRequest()
	byID := kmsg.NewDeleteTopicsRequestTopic()
	byID.TopicID = idB
	unknown := kmsg.NewDeleteTopicsRequestTopic()
	unknown.TopicID = [16]byte{1, 2, 3}
	both := kmsg.NewDeleteTopicsRequestTopic()
	both.Topic, both.TopicID = kmsg.StringPtr("c"), [16]byte{9}
	req.Topics = append(req.Topics, byID, unknown, both)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Version < 6 || len(resp.Topics) != 3 {
		t.Fatalf("v%d answer: %+v", resp.Version, resp.Topics)
	}
	if r := resp.Topics[0]; r.ErrorCode != 0 || r.Topic == nil || *r.Topic != "b" || r.TopicID != idB {
		t.Fatalf("delete by id: %+v", r)
	}
	if r := resp.Topics[1]; r.ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("unknown id: %+v", r)
	}
	if r := resp.Topics[2]; r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("name and id: %+v", r)
	}
	if b, c := partitionCount(t, cl, "b"), partitionCount(t, cl, "c"); b != -1 || c != 1 {
		t.Fatalf("b has %d partitions, c %d: b should be gone and c still there", b, c)
	}

	old := kmsg.NewPtrDeleteTopicsRequest()
	old.Version = 1
	old.TopicNames = []string{"c", "c"}
	oresp := versioned(t, addr, old).(*kmsg.DeleteTopicsResponse)
	if len(oresp.Topics) != 1 || oresp.Topics[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("v1 duplicate names: %+v", oresp.Topics)
	}
	old.TopicNames = []string{"c"}
	oresp = versioned(t, addr, old).(*kmsg.DeleteTopicsResponse)
	if len(oresp.Topics) != 1 || oresp.Topics[0].ErrorCode != 0 || partitionCount(t, cl, "c") != -1 {
		t.Fatalf("v1 delete: %+v", oresp.Topics)
	}
}

func TestCreatePartitions(t *testing.T) {
	addr := newTestBroker(t)
	adm, cl := admin(t, addr)
	mustCreate(t, adm, 1, nil, "grow")

	if rs, err := adm.CreatePartitions(ctx(t), 2, "grow", "nope"); err != nil || rs["grow"].Err != nil ||
		!errors.Is(rs["nope"].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("create partitions: %v %+v", err, rs)
	}
	if n := partitionCount(t, cl, "grow"); n != 3 {
		t.Fatalf("partitions: %d, want 3", n)
	}
	if rs, err := adm.ValidateCreatePartitions(ctx(t), 5, "grow"); err != nil || rs["grow"].Err != nil {
		t.Fatalf("validate: %v %+v", err, rs)
	}
	if n := partitionCount(t, cl, "grow"); n != 3 {
		t.Fatalf("validate-only changed the count to %d", n)
	}
	if rs, _ := adm.UpdatePartitions(ctx(t), 2, "grow"); !errors.Is(rs["grow"].Err, kerr.InvalidPartitions) {
		t.Fatalf("shrink: %+v", rs["grow"])
	}
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = "grow", 4
	a := kmsg.NewCreatePartitionsRequestTopicAssignment()
	a.Replicas = []int32{0}
	rt.Assignment = append(rt.Assignment, a)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("assignment: %v %+v", err, resp)
	}
	if n := partitionCount(t, cl, "grow"); n != 4 {
		t.Fatalf("partitions after an assigned CreatePartitions: %d, want 4", n)
	}
}

func configOf(t *testing.T, rc kadm.ResourceConfig, name string) kadm.Config {
	t.Helper()
	for _, c := range rc.Configs {
		if c.Key == name {
			return c
		}
	}
	t.Fatalf("%s: no config %s", rc.Name, name)
	return kadm.Config{}
}

func TestDescribeConfigs(t *testing.T) {
	addr := newTestBroker(t)
	adm, cl := admin(t, addr)
	mustCreate(t, adm, 1, map[string]*string{"retention.ms": kadm.StringPtr("1000")}, "cfg")

	rcs, err := adm.DescribeTopicConfigs(ctx(t), "cfg", "missing")
	if err != nil {
		t.Fatal(err)
	}
	topic, _ := rcs.On("cfg", nil)
	ret := configOf(t, topic, "retention.ms")
	if ret.MaybeValue() != "1000" || ret.Source != kmsg.ConfigSourceDynamicTopicConfig || len(ret.Synonyms) != 2 ||
		ret.Synonyms[1].Key != "log.retention.ms" || *ret.Synonyms[1].Value != "604800000" || ret.Synonyms[1].Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("retention.ms: %+v", ret)
	}
	if seg := configOf(t, topic, "segment.bytes"); seg.MaybeValue() != "1073741824" || seg.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("segment.bytes: %+v", seg)
	}
	if missing, _ := rcs.On("missing", nil); !errors.Is(missing.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("missing topic: %v", missing.Err)
	}

	bcs, err := adm.DescribeBrokerConfigs(ctx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	broker, _ := bcs.On("0", nil)
	for name, want := range map[string]string{"broker.id": "0", "num.partitions": "1", "log.dirs": "/tmp",
		"auto.create.topics.enable": "true", "message.max.bytes": "1048588", "log.retention.ms": "604800000",
		"default.replication.factor": "1", "log.cleanup.policy": "delete",
		"max.connections": "2147483647", "max.connections.per.ip": "2147483647", "max.connections.per.ip.overrides": "",
		"max.connection.creation.rate": "2147483647"} {
		if c := configOf(t, broker, name); c.MaybeValue() != want {
			t.Errorf("broker %s = %q, want %q", name, c.MaybeValue(), want)
		}
	}
	if c := configOf(t, broker, "broker.id"); c.Source != kmsg.ConfigSourceStaticBrokerConfig {
		t.Errorf("broker.id source %v", c.Source)
	}
	other := kmsg.NewPtrDescribeConfigsRequest()
	other.Version = 4
	ob := kmsg.NewDescribeConfigsRequestResource()
	ob.ResourceType, ob.ResourceName = kmsg.ConfigResourceTypeBroker, "7"
	other.Resources = append(other.Resources, ob)
	if r := versioned(t, addr, other).(*kmsg.DescribeConfigsResponse).Resources[0]; r.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("another broker's configs: %+v", r)
	}
	if bcs, err = adm.DescribeBrokerConfigs(ctx(t)); err != nil || bcs[0].Err != nil || len(bcs[0].Configs) != 0 {
		t.Errorf("cluster defaults: %v %+v", err, bcs)
	}

	// v3+: named configs only, with types and documentation.
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.IncludeDocumentation = true
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "cfg"
	rr.ConfigNames = []string{"retention.ms", "cleanup.policy", "flush.ms"}
	req.Resources = append(req.Resources, rr)
	br := kmsg.NewDescribeConfigsRequestResource()
	br.ResourceType, br.ResourceName = kmsg.ConfigResourceTypeBroker, "0"
	req.Resources = append(req.Resources, br)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	var topicRes, brokerRes kmsg.DescribeConfigsResponseResource
	for _, r := range resp.Resources {
		if r.ResourceType == kmsg.ConfigResourceTypeTopic {
			topicRes = r
		} else {
			brokerRes = r
		}
	}
	cs := topicRes.Configs
	if len(cs) != 3 {
		t.Fatalf("asked for 3 configs, got %d", len(cs))
	}
	types := map[string]kmsg.ConfigType{}
	for _, c := range cs {
		types[c.Name] = c.ConfigType
		if c.ReadOnly || len(c.ConfigSynonyms) != 0 {
			t.Errorf("%s: read-only %v, synonyms %d", c.Name, c.ReadOnly, len(c.ConfigSynonyms))
		}
		if c.Name == "flush.ms" && (c.Documentation == nil || !strings.Contains(*c.Documentation, "not enforce")) {
			t.Errorf("flush.ms documentation: %v", c.Documentation)
		}
	}
	if types["retention.ms"] != kmsg.ConfigTypeLong || types["cleanup.policy"] != kmsg.ConfigTypeList {
		t.Errorf("types: %v", types)
	}
	if len(brokerRes.Configs) == 0 {
		t.Error("no broker configs")
	}
	for _, c := range brokerRes.Configs {
		// Only the cluster-wide log defaults and the connection limits
		// can be changed at run time.
		_, logDefault := fsm.LookupLogDefault(c.Name)
		_, conn := fsm.LookupBrokerConfig(c.Name)
		if dynamic := logDefault || conn; c.ReadOnly == dynamic {
			t.Errorf("broker config %s: read-only %v", c.Name, c.ReadOnly)
		}
	}

	// v0 has is_default instead of a source.
	old := kmsg.NewPtrDescribeConfigsRequest()
	old.Version = 0
	old.Resources = []kmsg.DescribeConfigsRequestResource{rr}
	oresp := versioned(t, addr, old).(*kmsg.DescribeConfigsResponse)
	for _, c := range oresp.Resources[0].Configs {
		if c.IsDefault != (c.Name != "retention.ms") {
			t.Errorf("v0 %s: is_default %v", c.Name, c.IsDefault)
		}
	}
}

func TestAlterConfigs(t *testing.T) {
	addr := newTestBroker(t)
	adm, _ := admin(t, addr)
	mustCreate(t, adm, 1, map[string]*string{"retention.ms": kadm.StringPtr("1000")}, "alt")
	explicit := func() map[string]string {
		t.Helper()
		rcs, err := adm.DescribeTopicConfigs(ctx(t), "alt")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range rcs[0].Configs {
			if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
				out[c.Key] = c.MaybeValue()
			}
		}
		return out
	}
	alter := func(validate bool, cs ...kadm.AlterConfig) kadm.AlterConfigsResponse {
		t.Helper()
		f := adm.AlterTopicConfigs
		if validate {
			f = adm.ValidateAlterTopicConfigs
		}
		rs, err := f(ctx(t), cs, "alt")
		if err != nil {
			t.Fatal(err)
		}
		return rs[0]
	}

	r := alter(false,
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "segment.ms", Value: kadm.StringPtr("3600000")},
		kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.ms"},
		kadm.AlterConfig{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")})
	if r.Err != nil {
		t.Fatalf("incremental: %v %s", r.Err, r.ErrMessage)
	}
	if got := explicit(); len(got) != 2 || got["segment.ms"] != "3600000" || got["cleanup.policy"] != "delete,compact" {
		t.Fatalf("after incremental alter: %v", got)
	}
	if r = alter(false, kadm.AlterConfig{Op: kadm.SubtractConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := explicit(); got["cleanup.policy"] != "compact" {
		t.Fatalf("after subtract: %v", got)
	}
	if r = alter(true, kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("500")}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := explicit(); got["max.message.bytes"] != "" {
		t.Fatalf("validate-only changed configs: %v", got)
	}
	for name, tc := range map[string]struct {
		validate bool
		cfg      kadm.AlterConfig
		want     *kerr.Error
		msg      string
	}{
		"bad value":           {false, kadm.AlterConfig{Name: "retention.ms", Value: kadm.StringPtr("soon")}, kerr.InvalidConfig, "retention.ms"},
		"bad value validated": {true, kadm.AlterConfig{Name: "retention.ms", Value: kadm.StringPtr("soon")}, kerr.InvalidConfig, "retention.ms"},
		"append to non-list":  {false, kadm.AlterConfig{Op: kadm.AppendConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}, kerr.InvalidConfig, ""},
		"unknown config":      {false, kadm.AlterConfig{Name: "nope", Value: kadm.StringPtr("1")}, kerr.InvalidConfig, "nope"},
		"null value":          {false, kadm.AlterConfig{Name: "retention.ms"}, kerr.InvalidRequest, "Null value"},
		"bad list value":      {true, kadm.AlterConfig{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: kadm.StringPtr("shred")}, kerr.InvalidConfig, "shred"},
	} {
		r := alter(tc.validate, tc.cfg)
		if !errors.Is(r.Err, tc.want) || !strings.Contains(r.ErrMessage, tc.msg) {
			t.Errorf("%s: %v %q, want %v with %q", name, r.Err, r.ErrMessage, tc.want, tc.msg)
		}
	}
	rs, _ := adm.AlterTopicConfigs(ctx(t), []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("1")}}, "missing")
	if !errors.Is(rs[0].Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("unknown topic: %v", rs[0].Err)
	}
	rs, _ = adm.AlterBrokerConfigs(ctx(t), []kadm.AlterConfig{{Name: "num.partitions", Value: kadm.StringPtr("3")}}, 0)
	if !errors.Is(rs[0].Err, kerr.InvalidRequest) || !strings.Contains(rs[0].ErrMessage, "Cannot update these configs dynamically: Set(num.partitions)") {
		t.Errorf("broker alter: %v %q", rs[0].Err, rs[0].ErrMessage)
	}

	// The legacy AlterConfigs replaces every explicit config.
	rs, err := adm.AlterTopicConfigsState(ctx(t), []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("2000")}}, "alt")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("legacy alter: %v %+v", err, rs)
	}
	if got := explicit(); len(got) != 1 || got["max.message.bytes"] != "2000" {
		t.Fatalf("after legacy alter: %v", got)
	}
	rs, _ = adm.ValidateAlterTopicConfigsState(ctx(t), []kadm.AlterConfig{{Name: "segment.bytes", Value: kadm.StringPtr("1")}}, "alt")
	if !errors.Is(rs[0].Err, kerr.InvalidConfig) {
		t.Fatalf("legacy validate of a bad value: %v", rs[0].Err)
	}
	if got := explicit(); got["max.message.bytes"] != "2000" {
		t.Fatalf("legacy validate-only changed configs: %v", got)
	}
}

// TestDeleteRecords: the log start offset moves forward only, and
// ListOffsets earliest follows it (KIP-107).
func TestDeleteRecords(t *testing.T) {
	addr := newTestBroker(t)
	adm, cl := admin(t, addr)
	mustCreate(t, adm, 1, nil, "dr")
	produceN(t, cl, "dr", 0, 10)

	del := func(topic string, partition int32, at int64) kadm.DeleteRecordsResponse {
		t.Helper()
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: topic, Partition: partition, At: at})
		rs, err := adm.DeleteRecords(ctx(t), os)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := rs.Lookup(topic, partition)
		return r
	}
	earliest := func() int64 {
		t.Helper()
		lo, err := adm.ListStartOffsets(ctx(t), "dr")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := lo.Lookup("dr", 0)
		return o.Offset
	}
	if r := del("dr", 0, 4); r.Err != nil || r.LowWatermark != 4 || earliest() != 4 {
		t.Fatalf("delete before 4: %+v, earliest %d", r, earliest())
	}
	if r := del("dr", 0, 2); r.Err != nil || r.LowWatermark != 4 {
		t.Fatalf("delete below the start: %+v", r)
	}
	if r := del("dr", 0, 11); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("delete past the end: %+v", r)
	}
	raw := kmsg.NewPtrDeleteRecordsRequest()
	raw.Version = 2
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = "dr"
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = 3, 1
	rt.Partitions = append(rt.Partitions, rp)
	raw.Topics = append(raw.Topics, rt)
	if p := versioned(t, addr, raw).(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown partition: %+v", p)
	}
	if r := del("dr", 0, -1); r.Err != nil || r.LowWatermark != 10 || earliest() != 10 {
		t.Fatalf("delete all: %+v, earliest %d", r, earliest())
	}
}

func TestDescribeCluster(t *testing.T) {
	addr := newTestBroker(t)
	_, cl := admin(t, addr)
	req := kmsg.NewPtrDescribeClusterRequest()
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	if resp.ErrorCode != 0 || resp.ClusterID != "stele-test" || resp.ControllerID != 0 || len(resp.Brokers) != 1 ||
		resp.Brokers[0].Host != host || strconv.Itoa(int(resp.Brokers[0].Port)) != port ||
		resp.ClusterAuthorizedOperations != authorizedOpsUnknown {
		t.Fatalf("describe cluster: %+v", resp)
	}
	req.IncludeClusterAuthorizedOperations = true
	if resp, err = req.RequestWith(ctx(t), cl); err != nil || resp.ClusterAuthorizedOperations&(1<<kmsg.ACLOperationDescribe) == 0 {
		t.Fatalf("authorized operations: %v %b", err, resp.ClusterAuthorizedOperations)
	}
	req.EndpointType = endpointTypeController
	if resp, err = req.RequestWith(ctx(t), cl); err != nil || resp.ErrorCode != kerr.MismatchedEndpointType.Code {
		t.Fatalf("controller endpoint: %v %+v", err, resp)
	}
	old := kmsg.NewPtrDescribeClusterRequest()
	old.Version = 0
	if oresp := versioned(t, addr, old).(*kmsg.DescribeClusterResponse); oresp.ErrorCode != 0 || len(oresp.Brokers) != 1 {
		t.Fatalf("v0: %+v", oresp)
	}
}

func TestDescribeLogDirs(t *testing.T) {
	addr := newTestBroker(t)
	adm, cl := admin(t, addr)
	mustCreate(t, adm, 2, nil, "ld")
	produceN(t, cl, "ld", 0, 3)

	all, err := adm.DescribeAllLogDirs(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	dirs := all[0]
	d, ok := dirs["/tmp"]
	if len(dirs) != 1 || !ok || d.Err != nil {
		t.Fatalf("log dirs: %+v", dirs)
	}
	p0, ok0 := d.Topics.Lookup("ld", 0)
	p1, ok1 := d.Topics.Lookup("ld", 1)
	if !ok0 || !ok1 || p0.Size <= 0 || p1.Size < 0 || p0.Size <= p1.Size || p0.OffsetLag != 0 {
		t.Fatalf("partitions: %+v %+v", p0, p1)
	}
	if d.TotalBytes <= 0 || d.UsableBytes < 0 || d.UsableBytes > d.TotalBytes {
		t.Fatalf("disk space: total %d usable %d", d.TotalBytes, d.UsableBytes)
	}
	some, err := adm.DescribeAllLogDirs(ctx(t), kadm.TopicsSet{"ld": {1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if ts := some[0]["/tmp"].Topics; len(ts) != 1 || len(ts["ld"]) != 1 {
		t.Fatalf("asked for ld-1: %+v", ts)
	}
	// Unknown topics and partitions are left out; v0 has no disk space.
	req := kmsg.NewPtrDescribeLogDirsRequest()
	req.Version = 0
	for name, parts := range map[string][]int32{"ld": {0, 9}, "missing": {0}} {
		rt := kmsg.NewDescribeLogDirsRequestTopic()
		rt.Topic, rt.Partitions = name, parts
		req.Topics = append(req.Topics, rt)
	}
	resp := versioned(t, addr, req).(*kmsg.DescribeLogDirsResponse)
	if len(resp.Dirs) != 1 || len(resp.Dirs[0].Topics) != 1 || len(resp.Dirs[0].Topics[0].Partitions) != 1 ||
		resp.Dirs[0].Topics[0].Partitions[0].Partition != 0 {
		t.Fatalf("v0 with unknowns: %+v", resp.Dirs)
	}
}

func TestOffsetForLeaderEpoch(t *testing.T) {
	addr := newTestBroker(t)
	adm, cl := admin(t, addr)
	mustCreate(t, adm, 1, nil, "ep")
	produceN(t, cl, "ep", 0, 5)

	rs, err := adm.OffsetForLeaderEpoch(ctx(t), kadm.OffsetForLeaderEpochRequest{"ep": {0: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if r := rs["ep"][0]; r.Err != nil || r.LeaderEpoch != 0 || r.EndOffset != 5 {
		t.Fatalf("epoch 0: %+v", r)
	}
	for _, epoch := range []int32{-1, 3} {
		rs, err = adm.OffsetForLeaderEpoch(ctx(t), kadm.OffsetForLeaderEpochRequest{"ep": {0: epoch}})
		if r := rs["ep"][0]; err != nil || r.Err != nil || r.LeaderEpoch != -1 || r.EndOffset != -1 {
			t.Fatalf("epoch %d: %v %+v, want -1/-1 (unknown epoch)", epoch, err, r)
		}
	}
	fence := func(version int16, current int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.Version = version
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "ep"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.CurrentLeaderEpoch = current
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return versioned(t, addr, req).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
	}
	if p := fence(4, 1); p.ErrorCode != kerr.UnknownLeaderEpoch.Code {
		t.Errorf("current epoch 1: %+v", p)
	}
	if p := fence(4, -5); p.ErrorCode != kerr.FencedLeaderEpoch.Code {
		t.Errorf("current epoch -5: %+v", p)
	}
	if p := fence(0, -1); p.ErrorCode != 0 || p.EndOffset != 5 {
		t.Errorf("v0: %+v", p)
	}
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.Version = 4
	for _, name := range []string{"ep", "missing"} {
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = name
		for _, idx := range []int32{0, 1} {
			rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
			rp.Partition, rp.LeaderEpoch = idx, -7
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp := versioned(t, addr, req).(*kmsg.OffsetForLeaderEpochResponse)
	want := [][]int16{{0, kerr.UnknownTopicOrPartition.Code}, {kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicOrPartition.Code}}
	for i, rt := range resp.Topics {
		for j, rp := range rt.Partitions {
			if rp.ErrorCode != want[i][j] {
				t.Errorf("%s-%d: code %d, want %d", rt.Topic, rp.Partition, rp.ErrorCode, want[i][j])
			}
		}
	}
	// An epoch below every known one answers itself with the log start (Kafka's floor rule).
	if p := resp.Topics[0].Partitions[0]; p.LeaderEpoch != -7 || p.EndOffset != 0 {
		t.Errorf("epoch -7: %+v", p)
	}
}

// adminSample is a well-formed request of each admin API, the fuzz seeds.
func adminSample(key int16) kmsg.Request {
	switch key {
	case 19:
		r := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "fz", 2, -1
		rc := kmsg.NewCreateTopicsRequestTopicConfig()
		rc.Name, rc.Value = "retention.ms", kmsg.StringPtr("1000")
		rt.Configs = append(rt.Configs, rc)
		r.Topics = append(r.Topics, rt)
		return r
	case 20:
		r := kmsg.NewPtrDeleteTopicsRequest()
		r.TopicNames = []string{"fz"}
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr("fz")
		r.Topics = append(r.Topics, rt)
		return r
	case 21:
		r := kmsg.NewPtrDeleteRecordsRequest()
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = "fz"
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Offset = -1
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
		return r
	case 23:
		r := kmsg.NewPtrOffsetForLeaderEpochRequest()
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "fz"
		rt.Partitions = append(rt.Partitions, kmsg.NewOffsetForLeaderEpochRequestTopicPartition())
		r.Topics = append(r.Topics, rt)
		return r
	case 32:
		r := kmsg.NewPtrDescribeConfigsRequest()
		r.IncludeSynonyms, r.IncludeDocumentation = true, true
		for _, typ := range []kmsg.ConfigResourceType{kmsg.ConfigResourceTypeTopic, kmsg.ConfigResourceTypeBroker} {
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = typ, "fz"
			if typ == kmsg.ConfigResourceTypeBroker {
				rr.ResourceName = "0"
			}
			r.Resources = append(r.Resources, rr)
		}
		return r
	case 33:
		r := kmsg.NewPtrAlterConfigsRequest()
		rr := kmsg.NewAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "fz"
		rc := kmsg.NewAlterConfigsRequestResourceConfig()
		rc.Name, rc.Value = "cleanup.policy", kmsg.StringPtr("compact")
		rr.Configs = append(rr.Configs, rc)
		r.Resources = append(r.Resources, rr)
		return r
	case 35:
		return kmsg.NewPtrDescribeLogDirsRequest()
	case 37:
		r := kmsg.NewPtrCreatePartitionsRequest()
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = "fz", 3
		r.Topics = append(r.Topics, rt)
		return r
	case 44:
		r := kmsg.NewPtrIncrementalAlterConfigsRequest()
		rr := kmsg.NewIncrementalAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "fz"
		rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		rc.Name, rc.Op, rc.Value = "cleanup.policy", kmsg.IncrementalAlterConfigOpAppend, kmsg.StringPtr("compact")
		rr.Configs = append(rr.Configs, rc)
		r.Resources = append(r.Resources, rr)
		return r
	}
	return kmsg.RequestForKey(key)
}

// bounded keeps a fuzzed request from asking for thousands of partition
// directories or long waits; everything else is left as decoded.
func bounded(req kmsg.Request) {
	switch r := req.(type) {
	case *kmsg.CreateTopicsRequest:
		r.TimeoutMillis = min(r.TimeoutMillis, 2000)
		for i := range r.Topics {
			r.Topics[i].NumPartitions = min(r.Topics[i].NumPartitions, 4)
		}
	case *kmsg.CreatePartitionsRequest:
		r.TimeoutMillis = min(r.TimeoutMillis, 2000)
		for i := range r.Topics {
			r.Topics[i].Count = min(r.Topics[i].Count, 8)
		}
	case *kmsg.DeleteTopicsRequest:
		r.TimeoutMillis = min(r.TimeoutMillis, 2000)
	case *kmsg.DeleteRecordsRequest:
		r.TimeoutMillis = min(r.TimeoutMillis, 2000)
	}
}

// FuzzAdminRequests feeds arbitrary bodies to every admin handler at every
// version it serves, against a live broker: a body may fail to decode (the
// connection would close), but a decoded request must be answered, without
// panicking, by a response that encodes and decodes again.
func FuzzAdminRequests(f *testing.F) {
	tb := startTestBroker(f, nil)
	// A server of its own that never serves, so its options are fixed
	// before any handler runs, as they are once Serve accepts connections.
	srv := New(tb.b, Options{NodeID: 0, ClusterID: "stele-fuzz", AdvertisedHost: "127.0.0.1", AdvertisedPort: 9092, DataDir: f.TempDir()})
	f.Cleanup(func() { srv.Close() })
	c := newConn(srv, &Listener{Name: "PLAINTEXT"}, nil)
	routes := adminRoutes()
	for i, rt := range routes {
		for v := rt.min; v <= rt.max; v++ {
			req := adminSample(rt.key)
			req.SetVersion(v)
			f.Add(uint8(i), v, req.AppendTo(nil))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, version int16, body []byte) {
		rt := routes[int(which)%len(routes)]
		if version < rt.min || version > rt.max {
			version = rt.min + int16(uint16(version)%uint16(rt.max-rt.min+1))
		}
		req := kmsg.RequestForKey(rt.key)
		req.SetVersion(version)
		if err := req.ReadFrom(body); err != nil {
			return
		}
		bounded(req)
		fn, err := rt.handle(c, req)
		if err != nil {
			t.Fatalf("%s v%d: handler refused a decoded request: %v", kmsg.NameForKey(rt.key), version, err)
		}
		resp := fn()
		if resp == nil {
			t.Fatalf("%s v%d: no response", kmsg.NameForKey(rt.key), version)
		}
		back := req.ResponseKind()
		if err := back.ReadFrom(resp.AppendTo(nil)); err != nil {
			t.Fatalf("%s v%d: response does not decode: %v", kmsg.NameForKey(rt.key), version, err)
		}
	})
}
