package groups

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"regexp"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// The consumer group protocol of KIP-848: the broker assigns. Each member
// heartbeats; the group epoch moves whenever membership, a subscription or
// a subscribed topic's partitions change, and a target assignment is
// computed for that epoch by the group's server-side assignor (uniform or
// range). Each member then moves towards its target: partitions it must
// give up are revoked first (it keeps its epoch until it reports it no
// longer owns them), then it takes the target epoch and every partition of
// its target that no other member still holds; the rest come on later
// heartbeats, once released. All of it runs in apply, on block time.

// GroupType tells the protocols apart: a group is driven by one at a time.
type GroupType uint8

// The group types.
const (
	GroupClassic  GroupType = 0
	GroupConsumer GroupType = 1
)

func (t GroupType) String() string {
	if t == GroupConsumer {
		return "consumer"
	}
	return "classic"
}

// ConsumerMember is a member of a KIP-848 consumer group.
type ConsumerMember struct {
	ID, InstanceID, RackID, ClientID, ClientHost string
	Epoch, PrevEpoch                             int32
	RebalanceTimeoutMs                           int32
	Topics                                       []string // sorted
	Regex                                        string
	Assignor                                     string
	// Assigned is what the member was told it owns; Revoking what it was
	// told to give up and has not yet reported released, by
	// RevokeDeadlineMs; Target is its share of the group's target
	// assignment.
	Assigned, Revoking, Target core.TopicPartitions
	RevokeDeadlineMs           int64
	LastSeenMs                 int64
	// Sent is false when the member's assignment changed since it last
	// received it.
	Sent bool
	// re is Regex compiled (a cache, not state).
	re    *regexp.Regexp
	reSrc string
}

// subscribes reports whether m subscribes to topic: by name, or by its
// regular expression as the group last resolved it (resolveRegexes), not
// as it would match now.
func (g *Group) subscribes(m *ConsumerMember, topic string) bool {
	if slices.Contains(m.Topics, topic) {
		return true
	}
	if m.Regex == "" {
		return false
	}
	_, ok := slices.BinarySearch(g.Regexes[m.Regex], topic)
	return ok
}

// matches reports whether the member's regular expression matches topic
// (Kafka's consumer regexes match the whole name).
func (m *ConsumerMember) matches(topic string) bool {
	if m.Regex == "" {
		return false
	}
	if m.re == nil || m.reSrc != m.Regex {
		re, err := regexp.Compile("^(?:" + m.Regex + ")$")
		if err != nil { // CheckCommand refuses these; a stored one matches nothing
			return false
		}
		m.re, m.reSrc = re, m.Regex
	}
	return m.re.MatchString(topic)
}

// resolveRegexes resolves the regular expressions g's members subscribe
// to, at the end of a block. Kafka's coordinator resolves a regex that is
// new to the group asynchronously, after the heartbeat that brought it
// has been answered, and bumps the group epoch when the resolution lands
// (GroupMetadataManager.maybeUpdateRegularExpressions and
// handleRegularExpressionsResult): the heartbeat's answer covers the
// literal topics only, and the regex's topics come at a later epoch.
// Here the end of the block plays the asynchronous task, so the order
// clients see is Kafka's and every broker computes it alike. With
// refresh (the block created or deleted topics) every regex is resolved
// again; Kafka refreshes at a heartbeat once 10 s have passed since the
// last refresh, which has no block-time equivalent that would not delay
// new topics for no reason. Regexes no member uses any more are dropped.
func (f *Coordinator) resolveRegexes(g *Group, refresh bool) (changes []core.Change) {
	used := map[string]*ConsumerMember{}
	for _, m := range g.sortedConsumers() {
		if _, ok := used[m.Regex]; m.Regex != "" && !ok {
			used[m.Regex] = m
		}
	}
	changed := false
	for _, re := range core.SortedKeys(g.Regexes) {
		if used[re] == nil {
			delete(g.Regexes, re)
			changed = true
		}
	}
	for _, re := range core.SortedKeys(used) {
		old, ok := g.Regexes[re]
		if ok && !refresh {
			continue
		}
		matched := []string{}
		for _, name := range topics.SortedNames(f.ByName) {
			if used[re].matches(name) {
				matched = append(matched, name)
			}
		}
		if ok && slices.Equal(old, matched) {
			continue
		}
		g.Regexes[re] = matched
		changed = true
		changes = append(changes, core.Change{Kind: core.ChangeRegexResolved, Name: g.Name, Sub: re, A: int64(len(matched))})
	}
	if changed {
		f.TouchGroup(g)
		f.maybeRetarget(g)
	}
	return changes
}

func (g *Group) sortedConsumers() []*ConsumerMember {
	out := make([]*ConsumerMember, 0, len(g.Consumers))
	for _, id := range core.SortedKeys(g.Consumers) {
		out = append(out, g.Consumers[id])
	}
	return out
}

// consumerState is the KIP-848 group state as Kafka names it.
func (g *Group) consumerState() string {
	if len(g.Consumers) == 0 {
		return "Empty"
	}
	if g.Epoch != g.AssignmentEpoch {
		return "Assigning"
	}
	for _, m := range g.Consumers {
		if m.Epoch != g.AssignmentEpoch || m.Revoking.Count() > 0 || !m.Assigned.Equal(m.Target) {
			return "Reconciling"
		}
	}
	return "Stable"
}

// heldByOthers returns the partitions members other than m hold (assigned
// or being revoked).
func (g *Group) heldByOthers(m *ConsumerMember) core.TopicPartitions {
	held := core.TopicPartitions{}
	for _, o := range g.Consumers {
		if o == m {
			continue
		}
		for _, src := range []core.TopicPartitions{o.Assigned, o.Revoking} {
			for t, ps := range src {
				for _, p := range ps {
					held.Add(t, p)
				}
			}
		}
	}
	return held
}

func (f *Coordinator) consumerGroupHeartbeat(c ConsumerGroupHeartbeat, txIndex, cmdIndex int) core.Result {
	now := f.BlockTime
	g := f.GroupsByName[c.Group]
	switch {
	case g == nil && c.Epoch != 0:
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("group %q does not exist", c.Group))
	case g == nil:
		g = NewGroup(c.Group, now)
		g.Type = GroupConsumer
		f.GroupsByName[c.Group] = g
	case g.Type == GroupClassic && (len(g.Members) > 0 || g.State != GroupEmpty):
		return core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("group %q is a classic group with members, not a consumer group", c.Group))
	case g.Type == GroupClassic:
		// An empty classic group (offsets only) becomes a consumer group.
		g.Type, g.ProtocolType, g.Protocol = GroupConsumer, "consumer", ""
	}
	f.TouchGroup(g)
	switch c.Epoch {
	case 0:
		return f.consumerJoin(g, c, txIndex, cmdIndex)
	case -1, -2:
		m := g.Consumers[c.MemberID]
		if m == nil {
			return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %q is not in group %q", c.MemberID, g.Name))
		}
		if c.Epoch == -2 && m.InstanceID != "" {
			// A static member that will return keeps its place (and its
			// partitions) until its session lapses.
			m.Epoch, m.Revoking, m.LastSeenMs = -2, core.TopicPartitions{}, now
			return core.Result{Group: &core.GroupResult{MemberID: m.ID, Generation: -2}}
		}
		f.removeConsumer(g, m)
		return core.Result{Group: &core.GroupResult{MemberID: m.ID, Generation: -1}}
	}
	m := g.Consumers[c.MemberID]
	if m == nil {
		if c.InstanceID != "" && g.byConsumerInstance(c.InstanceID) != nil {
			return core.Fail(kerr.FencedInstanceID.Code, fmt.Sprintf("instance %q is held by another member", c.InstanceID))
		}
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %q is not in group %q", c.MemberID, g.Name))
	}
	owned := f.ownedByName(c)
	if c.Epoch != m.Epoch {
		// A member that missed our last answer may come back with its
		// previous epoch, as long as it owns nothing it should not.
		if c.Epoch != m.PrevEpoch || owned == nil || owned.Minus(m.Assigned).Count() > 0 {
			return core.Fail(kerr.FencedMemberEpoch.Code, fmt.Sprintf("epoch %d is not member %q's current %d", c.Epoch, m.ID, m.Epoch))
		}
	}
	m.LastSeenMs = now
	f.updateSubscription(g, m, c)
	full := c.TopicsSet && c.OwnedSet && c.RebalanceTimeoutMs > 0
	f.maybeRetarget(g)
	f.reconcile(g, m, owned)
	return f.consumerAnswer(m, full)
}

func (g *Group) byConsumerInstance(instance string) *ConsumerMember {
	for _, id := range core.SortedKeys(g.Consumers) {
		if m := g.Consumers[id]; m.InstanceID == instance {
			return m
		}
	}
	return nil
}

func (f *Coordinator) consumerJoin(g *Group, c ConsumerGroupHeartbeat, txIndex, cmdIndex int) core.Result {
	now := f.BlockTime
	id := c.MemberID
	if id == "" {
		id = f.newMemberID(c.ClientID, txIndex, cmdIndex)
	}
	m := g.Consumers[id]
	if m != nil && m.Epoch != -2 {
		// A member joining again has lost what it owned.
		m.Assigned, m.Revoking, m.Sent = core.TopicPartitions{}, core.TopicPartitions{}, false
	}
	if c.InstanceID != "" {
		if old := g.byConsumerInstance(c.InstanceID); old != nil && old.ID != id {
			if old.Epoch != -2 {
				return core.Fail(kerr.UnreleasedInstanceID.Code, fmt.Sprintf("instance %q is still held by member %q", c.InstanceID, old.ID))
			}
			// The returning static member takes over its old place.
			delete(g.Consumers, old.ID)
			old.ID = id
			m = old
			g.Consumers[id] = m
		}
	}
	epoch, isNew := g.Epoch, m == nil
	if isNew {
		m = &ConsumerMember{ID: id, Assigned: core.TopicPartitions{}, Revoking: core.TopicPartitions{}, Target: core.TopicPartitions{}}
		g.Consumers[id] = m
	}
	m.InstanceID, m.RackID, m.ClientID, m.ClientHost = c.InstanceID, c.RackID, c.ClientID, c.ClientHost
	m.RebalanceTimeoutMs, m.LastSeenMs = c.RebalanceTimeoutMs, now
	if m.Epoch == -2 {
		m.Epoch = m.PrevEpoch
	}
	f.updateSubscription(g, m, c)
	if isNew && g.Epoch == epoch {
		g.Epoch++ // membership changed, if the subscription did not
	}
	f.maybeRetarget(g)
	f.reconcile(g, m, core.TopicPartitions{})
	return f.consumerAnswer(m, true)
}

// updateSubscription applies a heartbeat's subscription and assignor; a
// change moves the group epoch. CheckCommand has vetted both.
func (f *Coordinator) updateSubscription(g *Group, m *ConsumerMember, c ConsumerGroupHeartbeat) {
	if c.RebalanceTimeoutMs > 0 {
		m.RebalanceTimeoutMs = c.RebalanceTimeoutMs
	}
	changed := false
	if c.TopicsSet {
		topics := slices.Clone(c.Topics)
		slices.Sort(topics)
		topics = slices.Compact(topics)
		if !slices.Equal(topics, m.Topics) {
			m.Topics, changed = topics, true
		}
	}
	if c.RegexSet && c.Regex != m.Regex {
		m.Regex, changed = c.Regex, true
	}
	if c.AssignorSet && c.Assignor != m.Assignor {
		m.Assignor, changed = c.Assignor, true
	}
	if changed {
		g.Epoch++
	}
}

// ownedByName maps the partitions a heartbeat reports owning to topic
// names (nil when it reports nothing new). Unknown topic ids are dropped.
func (f *Coordinator) ownedByName(c ConsumerGroupHeartbeat) core.TopicPartitions {
	if !c.OwnedSet {
		return nil
	}
	out := core.TopicPartitions{}
	for _, o := range c.Owned {
		if t := f.ByID[o.ID]; t != nil {
			for _, p := range o.Partitions {
				out.Add(t.Name, p)
			}
		}
	}
	return out
}

func (f *Coordinator) removeConsumer(g *Group, m *ConsumerMember) {
	delete(g.Consumers, m.ID)
	g.Epoch++
	f.TouchGroup(g)
	f.maybeRetarget(g)
	if len(g.Consumers) == 0 {
		g.EmptySinceMs = f.BlockTime
	}
}

// subscriptionDigest summarises what the assignment depends on besides
// membership and subscriptions (which move the epoch themselves): the
// topics the members' subscriptions resolve to (a regular expression
// meets new topics), their partition counts, and the assignor.
func (f *Coordinator) subscriptionDigest(g *Group) string {
	topics := map[string]bool{}
	for _, m := range g.Consumers {
		for _, t := range f.subscribedTopics(g, m) {
			topics[t] = true
		}
	}
	h := sha256.New()
	for _, t := range core.SortedKeys(topics) {
		h.Write([]byte(t))
		h.Write([]byte{0})
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(f.ByName[t].Partitions))))
	}
	h.Write([]byte(g.assignor()))
	return string(h.Sum(nil))
}

// subscribedTopics returns the existing topics m subscribes to, sorted.
func (f *Coordinator) subscribedTopics(g *Group, m *ConsumerMember) []string {
	var out []string
	if m.Regex == "" {
		for _, name := range m.Topics { // sorted
			if f.ByName[name] != nil {
				out = append(out, name)
			}
		}
		return out
	}
	for _, name := range topics.SortedNames(f.ByName) {
		if g.subscribes(m, name) {
			out = append(out, name)
		}
	}
	return out
}

// assignor is the group's assignor: the one most members name (ties to
// the order of ConsumerAssignors), the default when none does.
func (g *Group) assignor() string {
	votes := map[string]int{}
	for _, m := range g.Consumers {
		if m.Assignor != "" {
			votes[m.Assignor]++
		}
	}
	best := ConsumerAssignors[0]
	for _, a := range ConsumerAssignors {
		if votes[a] > votes[best] {
			best = a
		}
	}
	return best
}

// maybeRetarget computes a new target assignment when the group epoch
// moved or what the assignment depends on changed.
func (f *Coordinator) maybeRetarget(g *Group) {
	digest := f.subscriptionDigest(g)
	if g.Epoch == g.AssignmentEpoch && digest == g.SubsDigest {
		return
	}
	if g.Epoch == g.AssignmentEpoch {
		g.Epoch++ // a subscribed topic was created or grew
	}
	g.SubsDigest = digest
	members := g.sortedConsumers()
	var targets map[string]core.TopicPartitions
	if g.assignor() == "range" {
		targets = f.assignRange(g, members)
	} else {
		targets = f.assignUniform(g, members)
	}
	for _, m := range members {
		m.Target = targets[m.ID]
		if m.Target == nil {
			m.Target = core.TopicPartitions{}
		}
	}
	g.AssignmentEpoch = g.Epoch
	f.TouchGroup(g)
}

// assignRange gives each topic's partitions to its subscribers in
// contiguous ranges, by member id order; the first members get one more
// when the partitions do not divide evenly.
func (f *Coordinator) assignRange(g *Group, members []*ConsumerMember) map[string]core.TopicPartitions {
	out := map[string]core.TopicPartitions{}
	for _, name := range topics.SortedNames(f.ByName) {
		var subs []*ConsumerMember
		for _, m := range members {
			if g.subscribes(m, name) {
				subs = append(subs, m)
			}
		}
		if len(subs) == 0 {
			continue
		}
		n := int32(len(f.ByName[name].Partitions))
		per, extra := n/int32(len(subs)), n%int32(len(subs))
		p := int32(0)
		for i, m := range subs {
			k := per
			if int32(i) < extra {
				k++
			}
			for range k {
				if out[m.ID] == nil {
					out[m.ID] = core.TopicPartitions{}
				}
				out[m.ID].Add(name, p)
				p++
			}
		}
	}
	return out
}

// assignUniform spreads every subscribed partition evenly over the members
// subscribing to it, keeping each member's previous target where the
// balance allows (sticky): first every member keeps up to its fair share
// of what it had, then each remaining partition goes to the subscriber
// holding the fewest (its previous owner on a tie, then member id order).
func (f *Coordinator) assignUniform(g *Group, members []*ConsumerMember) map[string]core.TopicPartitions {
	out := map[string]core.TopicPartitions{}
	type tp struct {
		topic string
		p     int32
	}
	var all []tp
	for _, name := range topics.SortedNames(f.ByName) {
		for _, m := range members {
			if g.subscribes(m, name) {
				for p := range int32(len(f.ByName[name].Partitions)) {
					all = append(all, tp{name, p})
				}
				break
			}
		}
	}
	if len(members) == 0 || len(all) == 0 {
		return out
	}
	fair := len(all) / len(members)
	count := map[string]int{}
	taken := map[tp]bool{}
	prev := map[tp]string{}
	for _, m := range members {
		out[m.ID] = core.TopicPartitions{}
		for _, t := range core.SortedKeys(m.Target) {
			for _, p := range m.Target[t] {
				prev[tp{t, p}] = m.ID
				if f.ByName[t] != nil && p < int32(len(f.ByName[t].Partitions)) && g.subscribes(m, t) && count[m.ID] < fair {
					out[m.ID].Add(t, p)
					count[m.ID]++
					taken[tp{t, p}] = true
				}
			}
		}
	}
	for _, x := range all {
		if taken[x] {
			continue
		}
		var best *ConsumerMember
		for _, m := range members {
			if !g.subscribes(m, x.topic) {
				continue
			}
			switch {
			case best == nil, count[m.ID] < count[best.ID]:
				best = m
			case count[m.ID] == count[best.ID] && prev[x] == m.ID:
				best = m
			}
		}
		out[best.ID].Add(x.topic, x.p)
		count[best.ID]++
	}
	return out
}

// reconcile moves m towards its target: revocations first, then the
// target epoch with every target partition no other member holds.
// owned is what the member reports owning (nil: unchanged).
func (f *Coordinator) reconcile(g *Group, m *ConsumerMember, owned core.TopicPartitions) {
	if owned != nil && m.Revoking.Count() > 0 {
		still := core.TopicPartitions{}
		for _, t := range core.SortedKeys(m.Revoking) {
			for _, p := range m.Revoking[t] {
				if owned.Has(t, p) {
					still.Add(t, p)
				}
			}
		}
		if !still.Equal(m.Revoking) {
			m.Revoking = still
			f.TouchGroup(g)
		}
	}
	if m.Revoking.Count() > 0 {
		return // waiting for the member to let go
	}
	if revoke := m.Assigned.Minus(m.Target); revoke.Count() > 0 {
		m.Assigned = m.Assigned.Minus(revoke)
		m.Revoking = revoke
		m.RevokeDeadlineMs = f.BlockTime + int64(m.RebalanceTimeoutMs)
		m.Sent = false
		return
	}
	held := g.heldByOthers(m)
	if add := m.Target.Minus(m.Assigned).Minus(held); add.Count() > 0 {
		for _, t := range core.SortedKeys(add) {
			for _, p := range add[t] {
				m.Assigned.Add(t, p)
			}
		}
		m.Sent = false
	}
	if m.Epoch != g.AssignmentEpoch {
		m.PrevEpoch, m.Epoch = m.Epoch, g.AssignmentEpoch
	}
}

// consumerAnswer is a heartbeat's result: the member's epoch, and its
// assignment when it changed since last sent or the request was full.
func (f *Coordinator) consumerAnswer(m *ConsumerMember, full bool) core.Result {
	r := &core.GroupResult{MemberID: m.ID, Generation: m.Epoch}
	if full || !m.Sent {
		r.Assignment = m.Assigned.Clone()
		r.SendAssignment = true
		m.Sent = true
	}
	return core.Result{Group: r}
}

// consumerTimers expires KIP-848 members whose session lapsed or who did
// not give up revoked partitions within their rebalance timeout.
func (f *Coordinator) consumerTimers(g *Group) (changes []core.Change) {
	now := f.BlockTime
	for _, m := range g.sortedConsumers() {
		switch {
		case now > m.LastSeenMs+ConsumerSessionTimeoutMs:
			changes = append(changes, core.Change{Kind: core.ChangeMemberExpired, Name: g.Name, Sub: m.ID})
		case m.Revoking.Count() > 0 && now > m.RevokeDeadlineMs:
			changes = append(changes, core.Change{Kind: core.ChangeMemberFenced, Name: g.Name, Sub: m.ID})
		default:
			continue
		}
		f.removeConsumer(g, m)
	}
	return changes
}

func (g *Group) consumerDeadline() int64 {
	d := int64(1<<63 - 1)
	for _, m := range g.Consumers {
		d = min(d, m.LastSeenMs+ConsumerSessionTimeoutMs+1)
		if m.Revoking.Count() > 0 {
			d = min(d, m.RevokeDeadlineMs+1)
		}
	}
	return d
}

// consumerSubscribed reports whether a member of a consumer group
// subscribes to topic.
func (g *Group) consumerSubscribed(topic string) bool {
	for _, m := range g.Consumers {
		if g.subscribes(m, topic) {
			return true
		}
	}
	return false
}

// dropTopicFromConsumers retargets a consumer group after one of the
// topics its members subscribe to was deleted (f.topics no longer holds
// it), as Kafka does when the metadata image loses a subscribed topic:
// the group epoch moves, the new target assignment leaves the topic out,
// and each member's next heartbeat revokes the topic's partitions (told
// to give them up, it keeps its epoch until it reports them released;
// a deleted topic's id no longer resolves, so the heartbeat after that
// releases them) before it takes the new epoch. Partitions the member
// was still being asked to revoke are forgotten: it cannot own them any
// longer in a way the group can see.
func (f *Coordinator) dropTopicFromConsumers(g *Group, topic string) {
	for _, m := range g.Consumers {
		delete(m.Revoking, topic)
	}
	f.maybeRetarget(g)
}
