package topics

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
)

// Views (issue 21, docs/subjects.md), from app version 12 (ViewsVersion).
// A view is a topic created with the config stele.view.from (its sources:
// topics of its own tenant, named as the tenant names them), with
// stele.view.subject (a subject pattern, ">" by default) and
// stele.view.order (partition or global). It is a topic like any other to
// every reader: Metadata, Fetch, ListOffsets, consumer groups, proofs. What
// makes it a view:
//
//   - its records are written by the state machine only, as its sources'
//     records are applied (the views module, fsm/views): a client's
//     Produce, DeleteRecords and CreatePartitions get
//     INVALID_TOPIC_EXCEPTION, as Kafka answers them for its internal
//     topics, and any config change POLICY_VIOLATION, each with a message
//     naming the view;
//   - its partitions: under partition order as many as its widest source
//     (source partition p feeds view partition p, and a source growing
//     past them grows the view); under global order one;
//   - a source is deleted only after its views (POLICY_VIOLATION names
//     them; `stele topic delete --cascade` deletes the views first, in the
//     same request);
//   - its explicit configs are fixed when it is created: retention.ms and
//     retention.bytes are -1 unless given (a view keeps a record while its
//     source does, the views module's trim), cleanup.policy is delete,
//     whatever the cluster-wide log defaults say.
//
// The topics module keeps the rules on the topic; the views module does the
// copying, through AppendDerived, GrowView and MoveLogStart.

// ViewDef is what a view's configs say.
type ViewDef struct {
	From    []string        // the sources, as the view's tenant names them
	Pattern subject.Pattern // stele.view.subject
	Global  bool            // stele.view.order=global
}

// IsView reports whether t is a view.
func IsView(t *Topic) bool { return t.Config.View != nil }

// viewPattern checks a stele.view.subject value.
func viewPattern(v string) error {
	_, err := subject.ParsePattern(v)
	return err
}

// SourceName is the name in the state of a view's source local (as the
// view's tenant names it).
func SourceName(view *Topic, local string) string {
	tenant, _ := core.SplitTenant(view.Name)
	return core.Qualify(tenant, local)
}

// LocalName is a topic's name as its own tenant names it.
func LocalName(t *Topic) string {
	_, local := core.SplitTenant(t.Name)
	return local
}

// ViewsOf returns the live views of which t is a source, by name. The
// index is rebuilt after any topic is created or deleted.
func (f *Topics) ViewsOf(t *Topic) []*Topic {
	if f.viewIndex == nil {
		f.viewIndex = map[string][]*Topic{}
		for _, name := range SortedNames(f.ByName) {
			v := f.ByName[name]
			if v.Deleted || !IsView(v) {
				continue
			}
			for _, src := range v.Config.View.From {
				s := SourceName(v, src)
				f.viewIndex[s] = append(f.viewIndex[s], v)
			}
		}
	}
	return f.viewIndex[t.Name]
}

// viewsChanged drops the view index (a topic was created or deleted).
func (f *Topics) viewsChanged() { f.viewIndex = nil }

// checkView checks a CreateTopic naming stele.view.* configs against the
// state and completes it: its partitions, its retention. It returns the
// command to apply, or why the view cannot be made.
func (f *Topics) checkView(c CreateTopic) (CreateTopic, core.Result) {
	given := map[string]string{}
	for _, e := range c.Configs {
		given[e.Name] = e.Value
	}
	from := splitList(given["stele.view.from"])
	if len(from) == 0 {
		for _, e := range c.Configs {
			if strings.HasPrefix(e.Name, "stele.view.") {
				return c, core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("config %s is for views only: a view names its sources with stele.view.from", e.Name))
			}
		}
		return c, core.Result{}
	}
	if cp, ok := given["cleanup.policy"]; ok && strings.TrimSpace(cp) != "delete" {
		return c, core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("view '%s': cleanup.policy=%s: a view's records are its sources' and are only deleted with them (cleanup.policy=delete)", c.Name, cp))
	}
	if len(c.Assignments) > 0 {
		return c, core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("view '%s': a view's partitions follow its sources; it takes no replica assignment", c.Name))
	}
	tenant, _ := core.SplitTenant(c.Name)
	global := given["stele.view.order"] == "global"
	parts := int32(0)
	seen := map[string]bool{}
	for _, local := range from {
		if seen[local] {
			return c, core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("view '%s': source '%s' is named twice", c.Name, local))
		}
		seen[local] = true
		name := core.Qualify(tenant, local)
		if name == c.Name {
			return c, core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("view '%s' cannot be its own source", c.Name))
		}
		src := f.ByName[name]
		if src == nil || src.Deleted {
			return c, core.Fail(kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("view '%s': source topic '%s' does not exist", c.Name, local))
		}
		if IsView(src) {
			return c, core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("view '%s': source '%s' is itself a view; name its sources instead", c.Name, local))
		}
		parts = max(parts, int32(len(src.Partitions)))
	}
	if global {
		parts = 1
	}
	c.Partitions = parts
	c.Configs = WithViewConfigs(c.Configs)
	return c, core.Result{}
}

// WithViewConfigs is a view's configs with those the state machine fixes
// on a view unless given, appended in this order: cleanup.policy=delete,
// retention.bytes=-1, retention.ms=-1. Fixed, not left to the cluster-wide
// log defaults, which may change: a view keeps what its sources keep, and
// is never compacted. (A front end answering CreateTopics calls it too, so
// that its answer describes what the state machine makes.)
func WithViewConfigs(configs []ConfigEntry) []ConfigEntry {
	out := slices.Clone(configs)
	for _, e := range []ConfigEntry{{"cleanup.policy", "delete"}, {"retention.bytes", "-1"}, {"retention.ms", "-1"}} {
		if !slices.ContainsFunc(configs, func(g ConfigEntry) bool { return g.Name == e.Name }) {
			out = append(out, e)
		}
	}
	return out
}

// ViewPartitions is how many partitions a view over sources of these
// partition counts has: the widest, or one under global order (for a
// front end answering CreateTopics before the command applies).
func ViewPartitions(global bool, sources []int32) int32 {
	if global {
		return 1
	}
	n := int32(0)
	for _, s := range sources {
		n = max(n, s)
	}
	return n
}

// viewRefusal is the answer to a change a client asked of view t.
func viewRefusal(t *Topic, what string) core.Result {
	return core.Fail(kerr.InvalidTopicException.Code, fmt.Sprintf("topic '%s' is a view of %s: %s; it is read-only", LocalName(t), strings.Join(t.Config.View.From, ", "), what))
}

// viewConfigRefusal is the answer to a config change on view t, or on
// the stele.view.* configs of a topic that is not a view.
func viewConfigRefusal(t *Topic, c AlterConfigs) core.Result {
	if IsView(t) {
		return core.Fail(kerr.PolicyViolation.Code, fmt.Sprintf("topic '%s' is a view of %s: its configs are fixed when it is created", LocalName(t), strings.Join(t.Config.View.From, ", ")))
	}
	for _, ch := range c.Changes {
		if strings.HasPrefix(ch.Name, "stele.view.") {
			return core.Fail(kerr.PolicyViolation.Code, fmt.Sprintf("config %s is set only when a view is created (topic '%s' is not a view)", ch.Name, LocalName(t)))
		}
	}
	return core.Result{}
}

// deleteTopicCommand is a client's DeleteTopic: refused while views use
// the topic.
func (f *Topics) deleteTopicCommand(c DeleteTopic) core.Result {
	t, r := f.lookup(c.Name, c.ID)
	if t == nil {
		return r
	}
	if vs := f.ViewsOf(t); len(vs) > 0 {
		names := make([]string, len(vs))
		for i, v := range vs {
			names[i] = LocalName(v)
		}
		return core.Fail(kerr.PolicyViolation.Code, fmt.Sprintf("topic '%s' is a source of the view(s) %s: delete them first (stele topic delete --cascade deletes them with it)", LocalName(t), strings.Join(names, ", ")))
	}
	return f.deleteTopic(c)
}

// AppendDerived appends batch, made by the state machine, to partition p of
// t at its end: the base offset is set, the batch proven as a produced one
// is. (The views module's copies.)
func (f *Topics) AppendDerived(t *Topic, p *Partition, batch []byte) error {
	h, err := record.ParseHeader(batch)
	if err != nil {
		return err
	}
	record.SetBaseOffset(batch, p.Next)
	if err := p.Log.Append(batch, f.BlockTime); err != nil {
		return err
	}
	f.proveAppend(t, p, p.Next, batch)
	p.Next += int64(h.LastOffsetDelta) + 1
	f.dirtyParts[p] = true
	return nil
}

// GrowView gives view t at least n partitions (a source grew).
func (f *Topics) GrowView(t *Topic, n int32) error {
	from := len(t.Partitions)
	if int(n) <= from {
		return nil
	}
	if err := f.addPartitions(t, n); err != nil {
		return err
	}
	assign(t, from, nil)
	f.DirtyTopics[t.Name] = true
	f.MetaChanged = true
	return nil
}

// MoveLogStart moves p's log start up to off, as DeleteRecords does.
func (f *Topics) MoveLogStart(t *Topic, p *Partition, off int64) {
	if off <= p.Start {
		return
	}
	p.Start = min(off, p.Next)
	f.dirtyParts[p] = true
	f.trimmed(t, p)
}

// RecordSubject is a stored record's subject under its topic t's config:
// nil when it has none or it is not valid (now).
func (f *Topics) RecordSubject(t *Topic, hs []record.RecordHeader, value []byte) []byte {
	s, err := recordSubject(&t.Config, hs, value, f.fieldSubject(t))
	if err != nil {
		return nil
	}
	return s
}
