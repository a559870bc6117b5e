package httpapi

// Share groups over HTTP (docs/share-groups.md, docs/openapi.json), for
// clients without KIP-932: the same replicated share groups the Kafka
// APIs serve, a member named by the client.
//
// POST /v1/share-groups/{group}/acquire {"member", "topic",
// "max_records", "wait_ms", "key_prefix", "subject"}: the member (joined
// when it is not in the group, its subscription widened to the topic when
// needed; each call is also its heartbeat) acquires up to max_records
// records (default 100, at most 10000) of the topic's partitions; with
// nothing to acquire it waits up to wait_ms (default 0, at most 30000)
// for records. With key_prefix or subject (a pattern, docs/subjects.md)
// it acquires only the records whose key starts with the prefix and
// whose subject matches (app version 16); the others stay available to
// the group's other acquisitions.
//
// POST /v1/share-groups/{group}/acknowledge {"member", "acks": [{"topic",
// "partition", "offset", "type"}]}: accept, release, reject or renew
// records the member holds, by offset; each partition's are applied all
// or none, and its error is answered per ack.
//
// DELETE /v1/share-groups/{group}/members/{member}: the member leaves;
// what it holds is released.
//
// GET /v1/share-groups and GET /v1/share-groups/{group}: the groups,
// their members and share partitions (start offset, records in flight).
//
// A member that makes no call for share.session.timeout.ms (45 s) is
// removed and its records released. Authorization: READ on the group and
// the topic to acquire and acknowledge, DELETE on the group to remove a
// member, DESCRIBE on the group to read it.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
)

// Limits of an acquisition over HTTP.
const (
	defaultShareRecords = 100
	maxShareRecords     = 10000
	maxShareWait        = 30 * time.Second
)

// ShareAcquireRequest is the body of POST /v1/share-groups/{group}/acquire.
type ShareAcquireRequest struct {
	Member     string `json:"member"`
	Topic      string `json:"topic"`
	MaxRecords int32  `json:"max_records,omitempty"`
	WaitMs     int64  `json:"wait_ms,omitempty"`
	// KeyPrefix and Subject filter what is acquired.
	KeyPrefix string `json:"key_prefix,omitempty"`
	Subject   string `json:"subject,omitempty"`
}

// ShareRecord is one record acquired.
type ShareRecord struct {
	Topic         string        `json:"topic"`
	Partition     int32         `json:"partition"`
	Offset        int64         `json:"offset"`
	Timestamp     int64         `json:"timestamp"`
	Key           *Bytes        `json:"key"`
	Value         *Bytes        `json:"value"`
	Headers       []EventHeader `json:"headers,omitempty"`
	DeliveryCount int16         `json:"delivery_count"`
}

// ShareAcquired is the answer to an acquisition: the records, and until
// when (ms since the epoch, by this broker's clock) their locks hold.
type ShareAcquired struct {
	Member      string        `json:"member"`
	Records     []ShareRecord `json:"records"`
	LockedUntil int64         `json:"locked_until"`
}

// ShareAck is one acknowledgement.
type ShareAck struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Type      string `json:"type"` // accept, release, reject or renew
	Error     string `json:"error,omitempty"`
}

// ShareAckRequest is the body of POST /v1/share-groups/{group}/acknowledge.
type ShareAckRequest struct {
	Member string     `json:"member"`
	Acks   []ShareAck `json:"acks"`
}

// ShareAcked is its answer: each ack with its error, if any.
type ShareAcked struct {
	Acks []ShareAck `json:"acks"`
}

// ShareGroupInfo is a share group as GET /v1/share-groups shows it.
type ShareGroupInfo struct {
	Group      string             `json:"group"`
	State      string             `json:"state"`
	Epoch      int32              `json:"epoch"`
	Members    []ShareMemberInfo  `json:"members"`
	Partitions []SharePartitionOf `json:"partitions"`
	Configs    map[string]string  `json:"configs"`
}

// ShareMemberInfo is a member of a share group.
type ShareMemberInfo struct {
	Member   string             `json:"member"`
	ClientID string             `json:"client_id"`
	Topics   []string           `json:"topics"`
	Assigned map[string][]int32 `json:"assigned"`
}

// SharePartitionOf is a share partition of a group.
type SharePartitionOf struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	StartOffset int64  `json:"start_offset"`
	InFlight    int    `json:"in_flight"`
	Acquired    int    `json:"acquired"`
}

var ackTypes = map[string]int8{"accept": 1, "release": 2, "reject": 3, "renew": 4}

// shareStatus is the HTTP status of a share command's refusal.
func shareStatus(code int16) int {
	switch code {
	case kerr.GroupIDNotFound.Code, kerr.UnknownMemberID.Code, kerr.UnknownTopicOrPartition.Code:
		return http.StatusNotFound
	case kerr.InvalidRecordState.Code:
		return http.StatusConflict
	case kerr.UnsupportedVersion.Code:
		return http.StatusNotImplemented
	}
	return http.StatusBadRequest
}

// sharesOff answers 501 when the chain runs an app version without share
// groups (their commands would not be ordered).
func sharesOff(opts Options, w http.ResponseWriter) bool {
	if v := opts.Broker.Upgrade().Version; v < fsm.ShareGroupsVersion {
		httpError(w, http.StatusNotImplemented, "share groups need app version %d; this chain runs %d (stele cluster upgrade)", fsm.ShareGroupsVersion, v)
		return true
	}
	return false
}

func serveShareAcquire(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if sharesOff(opts, w) {
			return
		}
		group := r.PathValue("group")
		var req ShareAcquireRequest
		if !decodeBody(w, r, &req, `{"member", "topic", "max_records", "wait_ms", "key_prefix", "subject"}`) {
			return
		}
		if req.Member == "" || req.Topic == "" {
			httpError(w, http.StatusBadRequest, "an acquisition names its member and topic")
			return
		}
		topic := qualified(r, req.Topic)
		if !allowed(r, fsm.ACLResourceTopic, fsm.ACLOpRead, topic) {
			httpError(w, http.StatusForbidden, "not authorized to read topic %q", req.Topic)
			return
		}
		t := opts.Broker.View().Topic(topic)
		if t == nil {
			httpError(w, http.StatusNotFound, "topic %q does not exist", req.Topic)
			return
		}
		n := req.MaxRecords
		switch {
		case n == 0:
			n = defaultShareRecords
		case n < 0 || n > maxShareRecords:
			httpError(w, http.StatusBadRequest, "max_records %d: from 1 to %d", n, maxShareRecords)
			return
		}
		wait := min(time.Duration(max(req.WaitMs, 0))*time.Millisecond, maxShareWait)
		deadline := time.Now().Add(wait)
		ctx, cancel := context.WithTimeout(r.Context(), wait+30*time.Second)
		defer cancel()

		base := fsm.ShareAcquire{Group: group, MemberID: req.Member, MaxRecords: n}
		for p := range t.Partitions {
			base.Parts = append(base.Parts, fsm.SharePart{Topic: topic, Partition: int32(p), Acquire: true})
		}
		var acquire fsm.Command = base
		if req.KeyPrefix != "" || req.Subject != "" {
			if v := opts.Broker.Upgrade().Version; v < fsm.ShareFilterVersion {
				httpError(w, http.StatusNotImplemented, "acquiring by key prefix or subject needs app version %d; this chain runs %d (stele cluster upgrade)", fsm.ShareFilterVersion, v)
				return
			}
			if req.Subject != "" {
				if _, err := subject.ParsePattern(req.Subject); err != nil {
					httpError(w, http.StatusBadRequest, "subject pattern %q: %v", req.Subject, err)
					return
				}
			}
			acquire = fsm.FilteredShareAcquire{ShareAcquire: base, Filter: fsm.ShareFilter{KeyPrefix: []byte(req.KeyPrefix), Subject: req.Subject}}
		}
		var res fsm.Result
		for {
			hb := shareHeartbeat(opts, group, req.Member, topic)
			rs, errs := opts.Broker.Submit(ctx, hb, acquire)
			if err := errors.Join(errs...); err != nil {
				httpError(w, http.StatusServiceUnavailable, "the acquisition was not confirmed: %v", err)
				return
			}
			if rs[0].Code != 0 {
				httpError(w, shareStatus(rs[0].Code), "%s: %s", kerr.ErrorForCode(rs[0].Code), rs[0].Message)
				return
			}
			res = rs[1]
			if res.Code != 0 || sharesAcquired(res) || !time.Now().Before(deadline) {
				break
			}
			if !awaitShare(ctx, opts, group, t, deadline) {
				break
			}
		}
		if res.Code != 0 {
			httpError(w, shareStatus(res.Code), "%s: %s", kerr.ErrorForCode(res.Code), res.Message)
			return
		}
		out := ShareAcquired{Member: req.Member, Records: []ShareRecord{}, LockedUntil: time.Now().UnixMilli() + int64(res.Share.LockMs)}
		view := opts.Broker.View()
		for _, p := range res.Share.Parts {
			if len(p.Acquired) == 0 {
				continue
			}
			recs, err := readShared(view, p)
			if err != nil {
				httpError(w, http.StatusInternalServerError, "reading %s-%d: %v", req.Topic, p.Partition, err)
				return
			}
			out.Records = append(out.Records, recs...)
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// shareHeartbeat is the heartbeat an HTTP call of member sends: a join,
// a subscription widened to topic, or the member's current epoch.
func shareHeartbeat(opts Options, group, member, topic string) fsm.ShareGroupHeartbeat {
	hb := fsm.ShareGroupHeartbeat{Group: group, MemberID: member, ClientID: "http"}
	if g := opts.Broker.ShareGroups().Group(group); g != nil {
		for _, m := range g.Members {
			if m.ID != member {
				continue
			}
			hb.Epoch = m.Epoch
			if topic != "" && !slices.Contains(m.Topics, topic) {
				hb.TopicsSet, hb.Topics = true, slices.Sorted(slices.Values(append(slices.Clone(m.Topics), topic)))
			}
			return hb
		}
	}
	if topic != "" {
		hb.TopicsSet, hb.Topics = true, []string{topic}
	}
	return hb
}

func sharesAcquired(r fsm.Result) bool {
	if r.Share == nil {
		return false
	}
	for _, p := range r.Share.Parts {
		if len(p.Acquired) > 0 {
			return true
		}
	}
	return false
}

// awaitShare waits until t grows or the group's share partitions of t
// change (a record acknowledged, released or its lock expired, which may
// make one acquirable: available records that key ordering or a filter
// holds back do not wake it), or the deadline.
func awaitShare(ctx context.Context, opts Options, group string, t *fsm.TopicView, deadline time.Time) bool {
	hwm := func() (n int64) {
		for _, p := range t.Partitions {
			n += p.HighWatermark()
		}
		return n
	}
	parts := func() (out []fsm.SharePartView) {
		if g := opts.Broker.ShareGroups().Group(group); g != nil {
			for _, p := range g.Parts {
				if p.Topic == t.Name {
					out = append(out, p)
				}
			}
		}
		return out
	}
	start, was := hwm(), parts()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		changed := opts.Broker.Changed()
		if hwm() > start {
			return true
		}
		if !slices.Equal(parts(), was) {
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// readShared reads the records p acquired.
func readShared(view *fsm.View, p fsm.SharePartResult) ([]ShareRecord, error) {
	tp := view.Partition(p.Topic, p.Partition)
	if tp == nil {
		return nil, fsm.ErrPartitionGone
	}
	deliveries := func(o int64) (int16, bool) {
		for _, a := range p.Acquired {
			if o >= a.First && o <= a.Last {
				return a.Deliveries, true
			}
		}
		return 0, false
	}
	first, last := p.Acquired[0].First, p.Acquired[len(p.Acquired)-1].Last
	var out []ShareRecord
	for off := first; off <= last; {
		data, err := tp.ReadWith(off, 1<<20, fsm.ReadOptions{})
		if err != nil {
			return nil, err
		}
		if len(data) == 0 {
			break
		}
		batches, err := record.Split(data)
		if err != nil {
			return nil, err
		}
		for _, b := range batches {
			h, err := record.Each(b, func(rec *record.Record) error {
				d, ok := deliveries(rec.Offset)
				if !ok {
					return nil
				}
				sr := ShareRecord{Topic: p.Topic, Partition: p.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp,
					Key: bytesOrNull(rec.Key), Value: bytesOrNull(rec.Value), DeliveryCount: d}
				for _, hd := range rec.Headers {
					sr.Headers = append(sr.Headers, EventHeader{Key: hd.Key, Value: bytesOrNull(hd.Value)})
				}
				out = append(out, sr)
				return nil
			})
			if err != nil {
				return nil, err
			}
			if h.BaseOffset > last {
				return out, nil
			}
			off = h.LastOffset() + 1
		}
	}
	return out, nil
}

func serveShareAck(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if sharesOff(opts, w) {
			return
		}
		group := r.PathValue("group")
		var req ShareAckRequest
		if !decodeBody(w, r, &req, `{"member", "acks": [{"topic", "partition", "offset", "type"}]}`) {
			return
		}
		if req.Member == "" || len(req.Acks) == 0 || len(req.Acks) > maxShareRecords {
			httpError(w, http.StatusBadRequest, "an acknowledgement names its member and 1 to %d acks", maxShareRecords)
			return
		}
		type key struct {
			topic     string
			partition int32
		}
		byPart := map[key][]int{}
		var order []key
		renew := false
		for i, a := range req.Acks {
			typ, ok := ackTypes[strings.ToLower(a.Type)]
			if !ok {
				httpError(w, http.StatusBadRequest, "ack %d: type %q is not accept, release, reject or renew", i, a.Type)
				return
			}
			renew = renew || typ == 4
			topic := qualified(r, a.Topic)
			if !allowed(r, fsm.ACLResourceTopic, fsm.ACLOpRead, topic) {
				httpError(w, http.StatusForbidden, "not authorized to read topic %q", a.Topic)
				return
			}
			k := key{topic, a.Partition}
			if _, seen := byPart[k]; !seen {
				order = append(order, k)
			}
			byPart[k] = append(byPart[k], i)
		}
		cmd := fsm.ShareAcquire{Group: group, MemberID: req.Member, Renew: renew}
		for _, k := range order {
			idx := byPart[k]
			slices.SortFunc(idx, func(a, b int) int { return int(req.Acks[a].Offset - req.Acks[b].Offset) })
			part := fsm.SharePart{Topic: k.topic, Partition: k.partition}
			for _, i := range idx {
				a := req.Acks[i]
				typ := ackTypes[strings.ToLower(a.Type)]
				if n := len(part.Acks); n > 0 && part.Acks[n-1].Last == a.Offset-1 && part.Acks[n-1].Types[0] == typ {
					part.Acks[n-1].Last = a.Offset
					continue
				}
				part.Acks = append(part.Acks, fsm.ShareAckBatch{First: a.Offset, Last: a.Offset, Types: []int8{typ}})
			}
			cmd.Parts = append(cmd.Parts, part)
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		rs, errs := opts.Broker.Submit(ctx, shareHeartbeat(opts, group, req.Member, ""), cmd)
		if err := errors.Join(errs...); err != nil {
			httpError(w, http.StatusServiceUnavailable, "the acknowledgement was not confirmed: %v", err)
			return
		}
		for _, res := range rs {
			if res.Code != 0 {
				httpError(w, shareStatus(res.Code), "%s: %s", kerr.ErrorForCode(res.Code), res.Message)
				return
			}
		}
		out := ShareAcked{Acks: req.Acks}
		for i, p := range rs[1].Share.Parts {
			if code := p.AckCode; code != 0 {
				for _, j := range byPart[order[i]] {
					out.Acks[j].Error = kerr.ErrorForCode(code).Error()
				}
			}
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func serveShareLeave(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if sharesOff(opts, w) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		res, err := opts.Broker.SubmitOne(ctx, fsm.ShareGroupHeartbeat{Group: r.PathValue("group"), MemberID: r.PathValue("member"), Epoch: -1})
		switch {
		case err != nil:
			httpError(w, http.StatusServiceUnavailable, "the leave was not confirmed: %v", err)
		case res.Code != 0:
			httpError(w, shareStatus(res.Code), "%s: %s", kerr.ErrorForCode(res.Code), res.Message)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}
}

func shareGroupInfo(g *fsm.ShareGroupView) ShareGroupInfo {
	out := ShareGroupInfo{Group: g.Name, State: g.State, Epoch: g.Epoch, Members: []ShareMemberInfo{}, Partitions: []SharePartitionOf{}, Configs: map[string]string{}}
	for k, v := range g.Configs {
		out.Configs[k] = v
	}
	for _, m := range g.Members {
		out.Members = append(out.Members, ShareMemberInfo{Member: m.ID, ClientID: m.ClientID, Topics: m.Topics, Assigned: m.Assigned})
	}
	for _, p := range g.Parts {
		out.Partitions = append(out.Partitions, SharePartitionOf{Topic: p.Topic, Partition: p.Partition, StartOffset: p.Start, InFlight: p.InFlight, Acquired: p.Acquired})
	}
	return out
}

func serveShareGroups(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out := []ShareGroupInfo{}
		for _, g := range opts.Broker.ShareGroups().Groups() {
			if !allowed(r, fsm.ACLResourceGroup, fsm.ACLOpDescribe, g.Name) {
				continue
			}
			if t, ok := r.Context().Value(tenantKey{}).(string); ok && t != "" {
				if owner, _ := fsm.SplitTenant(g.Name); owner != t {
					continue
				}
			}
			out = append(out, shareGroupInfo(g))
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func serveShareGroup(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g := opts.Broker.ShareGroups().Group(r.PathValue("group"))
		if g == nil {
			httpError(w, http.StatusNotFound, "share group %q does not exist", r.PathValue("group"))
			return
		}
		writeJSON(w, http.StatusOK, shareGroupInfo(g))
	}
}
