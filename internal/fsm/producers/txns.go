package producers

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// Transactions (KIP-98). The transaction coordinator is the state machine
// itself: InitProducerId with a transactional id, AddPartitionsToTxn,
// AddOffsetsToTxn, TxnOffsetCommit and EndTxn are commands. Because one
// ordered log decides every commit and abort, EndTxn writes its markers to
// every partition of the transaction in the block that applies it: there
// is no prepared state that a crash could leave half done, and a
// transaction appears whole on every broker or not at all.

// The transaction command kinds.
const (
	KindAddPartitionsToTxn core.Kind = 17
	KindAddOffsetsToTxn    core.Kind = 18
	KindEndTxn             core.Kind = 19
	KindTxnOffsetCommit    core.Kind = 20
)

// Transaction limits: Kafka's transaction.max.timeout.ms and
// transactional.id.expiration.ms.
const (
	MaxTransactionTimeoutMs     = 900_000
	TransactionalIDExpirationMs = 7 * 24 * 60 * 60 * 1000
)

// AddPartitionsToTxn adds one partition to a producer's transaction.
type AddPartitionsToTxn struct {
	TransactionalID string
	ProducerID      int64
	Epoch           int16
	Topic           string
	Partition       int32
}

// AddOffsetsToTxn adds a group's offsets to a producer's transaction.
type AddOffsetsToTxn struct {
	TransactionalID string
	ProducerID      int64
	Epoch           int16
	Group           string
}

// TxnOffsetCommit commits one partition's offset for a group within a
// transaction: it takes effect when the transaction commits.
type TxnOffsetCommit struct {
	TransactionalID string
	ProducerID      int64
	Epoch           int16
	Group           string
	MemberID        string
	InstanceID      string
	Generation      int32
	Topic           string
	Partition       int32
	Offset          int64
	LeaderEpoch     int32
	Metadata        string
}

// EndTxn commits or aborts a producer's transaction.
type EndTxn struct {
	TransactionalID string
	ProducerID      int64
	Epoch           int16
	Commit          bool
}

func (AddPartitionsToTxn) Kind() core.Kind { return KindAddPartitionsToTxn }
func (AddOffsetsToTxn) Kind() core.Kind    { return KindAddOffsetsToTxn }
func (TxnOffsetCommit) Kind() core.Kind    { return KindTxnOffsetCommit }
func (EndTxn) Kind() core.Kind             { return KindEndTxn }

func (c AddPartitionsToTxn) Encode(w *core.Writer) {
	w.Str(c.TransactionalID)
	w.I64(c.ProducerID)
	w.I16(c.Epoch)
	w.Str(c.Topic)
	w.I32(c.Partition)
}

func (c AddOffsetsToTxn) Encode(w *core.Writer) {
	w.Str(c.TransactionalID)
	w.I64(c.ProducerID)
	w.I16(c.Epoch)
	w.Str(c.Group)
}

func (c TxnOffsetCommit) Encode(w *core.Writer) {
	w.Str(c.TransactionalID)
	w.I64(c.ProducerID)
	w.I16(c.Epoch)
	w.Str(c.Group)
	w.Str(c.MemberID)
	w.Str(c.InstanceID)
	w.I32(c.Generation)
	w.Str(c.Topic)
	w.I32(c.Partition)
	w.I64(c.Offset)
	w.I32(c.LeaderEpoch)
	w.Str(c.Metadata)
}

func (c EndTxn) Encode(w *core.Writer) {
	w.Str(c.TransactionalID)
	w.I64(c.ProducerID)
	w.I16(c.Epoch)
	w.Bool(c.Commit)
}

// registerTxnCommands registers the transactions' commands
// (RegisterProducers calls it).
func registerTxnCommands(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleCommand(r, producersOf, KindAddPartitionsToTxn, "AddPartitionsToTxn", ModProducers,
		func(r *core.Reader) AddPartitionsToTxn {
			return AddPartitionsToTxn{TransactionalID: r.Str(), ProducerID: r.I64(), Epoch: r.I16(), Topic: r.Str(), Partition: r.I32()}
		}, checkTxnCommand,
		func(f *TxnCoordinator, c AddPartitionsToTxn, _ core.CmdAt) core.Result {
			return f.addPartitionsToTxn(c)
		})
	core.RegisterModuleCommand(r, producersOf, KindAddOffsetsToTxn, "AddOffsetsToTxn", ModProducers,
		func(r *core.Reader) AddOffsetsToTxn {
			return AddOffsetsToTxn{TransactionalID: r.Str(), ProducerID: r.I64(), Epoch: r.I16(), Group: r.Str()}
		}, checkTxnCommand,
		func(f *TxnCoordinator, c AddOffsetsToTxn, _ core.CmdAt) core.Result { return f.addOffsetsToTxn(c) })
	core.RegisterModuleCommand(r, producersOf, KindTxnOffsetCommit, "TxnOffsetCommit", ModProducers,
		func(r *core.Reader) TxnOffsetCommit {
			return TxnOffsetCommit{TransactionalID: r.Str(), ProducerID: r.I64(), Epoch: r.I16(), Group: r.Str(), MemberID: r.Str(),
				InstanceID: r.Str(), Generation: r.I32(), Topic: r.Str(), Partition: r.I32(), Offset: r.I64(), LeaderEpoch: r.I32(),
				Metadata: r.Str()}
		}, checkTxnCommand,
		func(f *TxnCoordinator, c TxnOffsetCommit, _ core.CmdAt) core.Result { return f.txnOffsetCommit(c) })
	core.RegisterModuleCommand(r, producersOf, KindEndTxn, "EndTxn", ModProducers,
		func(r *core.Reader) EndTxn {
			return EndTxn{TransactionalID: r.Str(), ProducerID: r.I64(), Epoch: r.I16(), Commit: r.Bool()}
		}, checkTxnCommand,
		func(f *TxnCoordinator, c EndTxn, _ core.CmdAt) core.Result { return f.applyEndTxn(c) })
}

func checkTxnCommand(c core.Command) core.Result {
	switch c := c.(type) {
	case InitProducerID:
		if c.TransactionalID != "" && (c.TimeoutMs <= 0 || c.TimeoutMs > MaxTransactionTimeoutMs) {
			return core.Fail(kerr.InvalidTransactionTimeout.Code, fmt.Sprintf("transaction timeout %d ms is outside [1, %d] (transaction.max.timeout.ms)", c.TimeoutMs, MaxTransactionTimeoutMs))
		}
	case AddPartitionsToTxn:
		if c.TransactionalID == "" {
			return core.Fail(kerr.InvalidRequest.Code, "the transactional id is empty")
		}
	case AddOffsetsToTxn:
		if c.TransactionalID == "" {
			return core.Fail(kerr.InvalidRequest.Code, "the transactional id is empty")
		}
		return groups.CheckGroupIDs(c.Group, "", "")
	case TxnOffsetCommit:
		if c.TransactionalID == "" {
			return core.Fail(kerr.InvalidRequest.Code, "the transactional id is empty")
		}
		return groups.CheckGroupCommand(groups.OffsetCommit{Group: c.Group, MemberID: c.MemberID, InstanceID: c.InstanceID, Topic: c.Topic,
			Offset: c.Offset, Metadata: c.Metadata})
	case EndTxn:
		if c.TransactionalID == "" {
			return core.Fail(kerr.InvalidRequest.Code, "the transactional id is empty")
		}
	}
	return core.Result{}
}

// TxnState is a transaction's state, named as Kafka names them.
type TxnState uint8

// The transaction states. There is no Prepare state: EndTxn completes in
// the block that applies it.
const (
	TxnEmpty TxnState = iota
	TxnOngoing
	TxnCompleteCommit
	TxnCompleteAbort
)

func (s TxnState) String() string {
	switch s {
	case TxnEmpty:
		return "Empty"
	case TxnOngoing:
		return "Ongoing"
	case TxnCompleteCommit:
		return "CompleteCommit"
	case TxnCompleteAbort:
		return "CompleteAbort"
	}
	return fmt.Sprintf("TxnState(%d)", uint8(s))
}

// Txn is one transactional id's state.
type Txn struct {
	ID         string
	ProducerID int64
	Epoch      int16
	TimeoutMs  int32
	State      TxnState
	Partitions core.TopicPartitions
	Groups     []string // sorted
	// Offsets are TxnOffsetCommits waiting for the commit, by group, then
	// topic, then partition.
	Offsets map[string]map[string]map[int32]groups.CommittedOffset
	// StartMs is when the ongoing transaction began; LastMs when the id
	// was last used (both block time).
	StartMs, LastMs int64
}

// txnCheck finds a transaction for a request naming pid and epoch.
func (f *TxnCoordinator) txnCheck(id string, pid int64, epoch int16) (*Txn, core.Result) {
	t := f.Txns[id]
	switch {
	case t == nil || t.ProducerID != pid:
		return nil, core.Fail(kerr.InvalidProducerIDMapping.Code, fmt.Sprintf("transactional id %q does not belong to producer %d", id, pid))
	case epoch < t.Epoch:
		return nil, core.Fail(kerr.ProducerFenced.Code, fmt.Sprintf("producer %d epoch %d was fenced by epoch %d", pid, epoch, t.Epoch))
	case epoch > t.Epoch:
		return nil, core.Fail(kerr.InvalidProducerEpoch.Code, fmt.Sprintf("producer %d has epoch %d, not %d", pid, t.Epoch, epoch))
	}
	return t, core.Result{}
}

func (f *TxnCoordinator) touchTxn(t *Txn) {
	t.LastMs = f.BlockTime
	f.dirtyTxns[t.ID] = true
}

// begin makes t ongoing if it was not.
func (f *TxnCoordinator) begin(t *Txn) {
	if t.State != TxnOngoing {
		t.State, t.StartMs = TxnOngoing, f.BlockTime
		t.Partitions, t.Groups, t.Offsets = core.TopicPartitions{}, nil, map[string]map[string]map[int32]groups.CommittedOffset{}
		f.txnsDue = min(f.txnsDue, t.StartMs+int64(t.TimeoutMs))
	}
}

// txnProduceCheck applies the transaction rules to one batch of producer
// h.ProducerID: a transactional batch needs an ongoing transaction of the
// producer's current epoch to which the partition was added; a producer
// with an ongoing transaction writes only transactional batches.
func (f *TxnCoordinator) txnProduceCheck(topic string, part int32, h record.Header) core.Result {
	var t *Txn
	if id, ok := f.txnByPID[h.ProducerID]; ok {
		t = f.Txns[id]
	}
	switch {
	case h.Transactional() && t == nil:
		return core.Fail(kerr.InvalidTxnState.Code, fmt.Sprintf("producer %d has no transactional id", h.ProducerID))
	case h.Transactional() && h.ProducerEpoch < t.Epoch:
		return core.Fail(kerr.InvalidProducerEpoch.Code, fmt.Sprintf("producer %d epoch %d was fenced by epoch %d", h.ProducerID, h.ProducerEpoch, t.Epoch))
	case h.Transactional() && (t.State != TxnOngoing || !t.Partitions.Has(topic, part)):
		return core.Fail(kerr.InvalidTxnState.Code, fmt.Sprintf("%s-%d was not added to producer %d's transaction (AddPartitionsToTxn)", topic, part, h.ProducerID))
	case !h.Transactional() && t != nil && t.State == TxnOngoing:
		return core.Fail(kerr.InvalidTxnState.Code, fmt.Sprintf("producer %d has an open transaction: its batches must be transactional", h.ProducerID))
	}
	return core.Result{}
}

// initTxnProducer is InitProducerID with a transactional id: a new
// producer, or the next epoch of the existing one (fencing the previous
// epoch), aborting a transaction it left open.
func (f *TxnCoordinator) initTxnProducer(c InitProducerID) core.Result {
	t := f.Txns[c.TransactionalID]
	if t == nil {
		t = &Txn{ID: c.TransactionalID, ProducerID: f.nextProducerID, Partitions: core.TopicPartitions{}}
		f.nextProducerID++
		f.MetaChanged = true
		f.Txns[t.ID] = t
	} else {
		if t.State == TxnOngoing {
			f.bumpEpoch(t)
			f.endTxn(t, false)
		}
		f.bumpEpoch(t)
	}
	t.TimeoutMs, t.State = c.TimeoutMs, TxnEmpty
	f.txnByPID[t.ProducerID] = t.ID
	f.touchTxn(t)
	return core.Result{ProducerID: t.ProducerID, ProducerEpoch: t.Epoch}
}

// bumpEpoch moves t to its next epoch, or to a new producer id when the
// epoch would overflow.
func (f *TxnCoordinator) bumpEpoch(t *Txn) {
	if t.Epoch < 1<<15-2 {
		t.Epoch++
		return
	}
	delete(f.txnByPID, t.ProducerID)
	t.ProducerID, t.Epoch = f.nextProducerID, 0
	f.nextProducerID++
	f.MetaChanged = true
	f.txnByPID[t.ProducerID] = t.ID
}

func (f *TxnCoordinator) addPartitionsToTxn(c AddPartitionsToTxn) core.Result {
	t, r := f.txnCheck(c.TransactionalID, c.ProducerID, c.Epoch)
	if t == nil {
		return r
	}
	tp := f.ByName[c.Topic]
	if tp == nil || c.Partition < 0 || int(c.Partition) >= len(tp.Partitions) {
		return core.Fail(kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("%s-%d does not exist", c.Topic, c.Partition))
	}
	f.begin(t)
	t.Partitions.Add(c.Topic, c.Partition)
	f.touchTxn(t)
	return core.Result{}
}

func (f *TxnCoordinator) addOffsetsToTxn(c AddOffsetsToTxn) core.Result {
	t, r := f.txnCheck(c.TransactionalID, c.ProducerID, c.Epoch)
	if t == nil {
		return r
	}
	f.begin(t)
	if !slices.Contains(t.Groups, c.Group) {
		t.Groups = append(t.Groups, c.Group)
		slices.Sort(t.Groups)
	}
	f.touchTxn(t)
	return core.Result{}
}

func (f *TxnCoordinator) txnOffsetCommit(c TxnOffsetCommit) core.Result {
	t, r := f.txnCheck(c.TransactionalID, c.ProducerID, c.Epoch)
	if t == nil {
		return r
	}
	if t.State != TxnOngoing || !slices.Contains(t.Groups, c.Group) {
		return core.Fail(kerr.InvalidTxnState.Code, fmt.Sprintf("group %q was not added to the transaction (AddOffsetsToTxn)", c.Group))
	}
	tp := f.ByName[c.Topic]
	if tp == nil || c.Partition < 0 || int(c.Partition) >= len(tp.Partitions) {
		return core.Fail(kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("%s-%d does not exist", c.Topic, c.Partition))
	}
	// KIP-447: a member's commit is checked against the group, so that a
	// zombie of an older generation cannot commit.
	if g := f.GroupsByName[c.Group]; g != nil && c.MemberID != "" {
		if g.Type == groups.GroupConsumer {
			m := g.Consumers[c.MemberID]
			switch {
			case m == nil:
				return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %q is not in group %q", c.MemberID, g.Name))
			case c.Generation != m.Epoch:
				return core.Fail(kerr.StaleMemberEpoch.Code, fmt.Sprintf("epoch %d is not member %q's current %d", c.Generation, m.ID, m.Epoch))
			}
		} else if _, r := g.GroupCheck(c.MemberID, c.InstanceID, c.Generation); r.Code != 0 {
			return r
		}
	}
	byTopic := t.Offsets[c.Group]
	if byTopic == nil {
		byTopic = map[string]map[int32]groups.CommittedOffset{}
		t.Offsets[c.Group] = byTopic
	}
	if byTopic[c.Topic] == nil {
		byTopic[c.Topic] = map[int32]groups.CommittedOffset{}
	}
	byTopic[c.Topic][c.Partition] = groups.CommittedOffset{Offset: c.Offset, LeaderEpoch: c.LeaderEpoch, Metadata: c.Metadata}
	f.touchTxn(t)
	return core.Result{}
}

func (f *TxnCoordinator) applyEndTxn(c EndTxn) core.Result {
	t, r := f.txnCheck(c.TransactionalID, c.ProducerID, c.Epoch)
	if t == nil {
		return r
	}
	switch {
	case t.State == TxnOngoing:
		f.endTxn(t, c.Commit)
	case t.State == TxnCompleteCommit && c.Commit, t.State == TxnCompleteAbort && !c.Commit:
		// A retry of the EndTxn that completed it.
	default:
		return core.Fail(kerr.InvalidTxnState.Code, fmt.Sprintf("transaction %q is %s: nothing to %s", t.ID, t.State, map[bool]string{true: "commit", false: "abort"}[c.Commit]))
	}
	f.touchTxn(t)
	return core.Result{}
}

// endTxn writes t's markers to every partition it wrote to, applies its
// offsets on commit, and completes it.
func (f *TxnCoordinator) endTxn(t *Txn, commit bool) {
	for _, name := range core.SortedKeys(t.Partitions) {
		tp := f.ByName[name]
		if tp == nil {
			continue // deleted since; its data went with it
		}
		for _, part := range t.Partitions[name] {
			if int(part) < len(tp.Partitions) {
				f.WriteMarker(tp.Partitions[part], t.ProducerID, t.Epoch, commit)
			}
		}
	}
	if commit {
		for _, group := range core.SortedKeys(t.Offsets) {
			g := f.GroupsByName[group]
			if g == nil {
				g = groups.NewGroup(group, f.BlockTime)
				f.GroupsByName[group] = g
			}
			for _, topic := range core.SortedKeys(t.Offsets[group]) {
				if f.ByName[topic] == nil {
					continue
				}
				for p, o := range t.Offsets[group][topic] {
					o.CommitTimeMs = f.BlockTime
					if g.Offsets[topic] == nil {
						g.Offsets[topic] = map[int32]groups.CommittedOffset{}
					}
					g.Offsets[topic][p] = o
					f.DirtyOffsets[groups.OffsetRef{Group: group, Topic: topic, Partition: p}] = true
				}
			}
			f.TouchGroup(g)
		}
	}
	t.State = TxnCompleteAbort
	if commit {
		t.State = TxnCompleteCommit
	}
	t.Partitions, t.Groups, t.Offsets = core.TopicPartitions{}, nil, nil
	f.dirtyTxns[t.ID] = true
}

// txnTimers aborts, at the end of a block, the transactions whose timeout
// passed in block time (bumping the epoch, which fences the producer that
// let it lapse, as Kafka does).
func (f *TxnCoordinator) txnTimers() (changes []core.Change) {
	if f.BlockTime < f.txnsDue {
		return nil
	}
	next := int64(1<<63 - 1)
	for _, id := range core.SortedKeys(f.Txns) {
		t := f.Txns[id]
		if t.State != TxnOngoing {
			continue
		}
		if due := t.StartMs + int64(t.TimeoutMs); f.BlockTime >= due {
			f.bumpEpoch(t)
			f.endTxn(t, false)
			f.touchTxn(t)
			changes = append(changes, core.Change{Kind: core.ChangeTxnTimedOut, Name: id})
		} else {
			next = min(next, due)
		}
	}
	f.txnsDue = next
	return changes
}

// expireTxnIDs forgets, in housekeeping, transactional ids unused for
// transactional.id.expiration.ms.
func (f *TxnCoordinator) expireTxnIDs() (changes []core.Change) {
	for _, id := range core.SortedKeys(f.Txns) {
		t := f.Txns[id]
		if t.State != TxnOngoing && t.LastMs+TransactionalIDExpirationMs <= f.BlockTime {
			delete(f.Txns, id)
			delete(f.txnByPID, t.ProducerID)
			f.dirtyTxns[id] = true
			changes = append(changes, core.Change{Kind: core.ChangeTxnIDExpired, Name: id})
		}
	}
	return changes
}

// TxnInfo describes a transactional id (DescribeTransactions,
// ListTransactions).
type TxnInfo struct {
	ID         string
	ProducerID int64
	Epoch      int16
	TimeoutMs  int32
	State      TxnState
	StartMs    int64
	Partitions core.TopicPartitions
}

// Transactions returns the committed transactional ids, sorted.
func (f *TxnCoordinator) Transactions() []TxnInfo {
	v := f.txnView.Load()
	if v == nil {
		return nil
	}
	return *v
}

func (f *TxnCoordinator) publishTxns() {
	if f.txnView.Load() != nil && len(f.dirtyTxns) == 0 {
		return
	}
	out := make([]TxnInfo, 0, len(f.Txns))
	for _, id := range core.SortedKeys(f.Txns) {
		t := f.Txns[id]
		out = append(out, TxnInfo{ID: t.ID, ProducerID: t.ProducerID, Epoch: t.Epoch, TimeoutMs: t.TimeoutMs,
			State: t.State, StartMs: t.StartMs, Partitions: t.Partitions.Clone()})
	}
	f.txnView.Store(&out)
}

// The transactions' keys in the metadata store:
//
//	x/<transactional id>  a transaction
//
// (a partition's aborted transactions are the topics module's:
// partition_txns.go).

func TxnKey(id string) []byte { return append([]byte("x/"), id...) }

func EncodeTxn(t *Txn) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.I64(t.ProducerID)
	w.I16(t.Epoch)
	w.I32(t.TimeoutMs)
	w.U8(uint8(t.State))
	core.EncodeTopicPartitions(w, t.Partitions)
	w.Count(len(t.Groups))
	for _, g := range t.Groups {
		w.Str(g)
	}
	groupIDs := core.SortedKeys(t.Offsets)
	w.Count(len(groupIDs))
	for _, g := range groupIDs {
		w.Str(g)
		topicNames := core.SortedKeys(t.Offsets[g])
		w.Count(len(topicNames))
		for _, topic := range topicNames {
			w.Str(topic)
			parts := groups.SortedPartitions(t.Offsets[g][topic])
			w.Count(len(parts))
			for _, p := range parts {
				o := t.Offsets[g][topic][p]
				w.I32(p)
				w.I64(o.Offset)
				w.I32(o.LeaderEpoch)
				w.Str(o.Metadata)
			}
		}
	}
	w.I64(t.StartMs)
	w.I64(t.LastMs)
	return w.B
}

func DecodeTxn(id string, v []byte) (*Txn, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: transaction %q: state format %d not supported", id, ver)
	}
	t := &Txn{ID: id, ProducerID: r.I64(), Epoch: r.I16(), TimeoutMs: r.I32(), State: TxnState(r.U8()),
		Partitions: core.DecodeTopicPartitions(r), Offsets: map[string]map[string]map[int32]groups.CommittedOffset{}}
	for i, n := 0, r.Count(1); i < n; i++ {
		t.Groups = append(t.Groups, r.Str())
	}
	for i, n := 0, r.Count(2); i < n; i++ {
		g := r.Str()
		t.Offsets[g] = map[string]map[int32]groups.CommittedOffset{}
		for j, nt := 0, r.Count(2); j < nt; j++ {
			topic := r.Str()
			t.Offsets[g][topic] = map[int32]groups.CommittedOffset{}
			for k, np := 0, r.Count(18); k < np; k++ {
				p := r.I32()
				t.Offsets[g][topic][p] = groups.CommittedOffset{Offset: r.I64(), LeaderEpoch: r.I32(), Metadata: r.Str()}
			}
		}
	}
	t.StartMs, t.LastMs = r.I64(), r.I64()
	return t, r.Done()
}

// persistTxns adds the block's transaction changes to the state batch.
func (f *TxnCoordinator) persistTxns(b *core.StateBatch) {
	for _, id := range core.SortedKeys(f.dirtyTxns) {
		if t := f.Txns[id]; t != nil {
			b.Set(TxnKey(id), EncodeTxn(t))
		} else {
			b.Delete(TxnKey(id))
		}
	}
}

// loadTxns reads the transactions, then every partition's aborted list
// (the topics module's, until load is a step of each module).
func (f *TxnCoordinator) loadTxns() error {
	return f.Store.Scan([]byte("x/"), func(k, v []byte) error {
		t, err := DecodeTxn(string(k[2:]), v)
		if err != nil {
			return fmt.Errorf("stele/fsm: transaction %q: %w", k[2:], err)
		}
		f.Txns[t.ID] = t
		f.txnByPID[t.ProducerID] = t.ID
		return nil
	})
}

// registerTxnSteps registers the transactions' hooks on the topics,
// their timers and their step (RegisterProducers calls it).
func registerTxnSteps(r *core.Registry, h *topics.TopicHooks) {
	// Published after the groups (rank 90): the earliest timer due is the
	// groups' or the transactions'.
	h.BatchChecks.Register(10, "transactions", ModProducers, func(tm *topics.Topics, t *topics.Topic, p *topics.Partition, h record.Header) core.Result {
		f := producersOf(tm.Machine)
		return f.txnProduceCheck(t.Name, p.Index, h)
	})
	h.Housekeepers.Register(20, "transactional ids' expiry", ModProducers, func(tm *topics.Topics) []core.Change { f := producersOf(tm.Machine); return f.expireTxnIDs() })
	core.RegisterModuleBlockEnd(r, producersOf, core.ModuleBlockEnd[*TxnCoordinator]{Rank: 20, Name: "transaction timeouts", Module: ModProducers, Run: (*TxnCoordinator).txnTimers})
	core.RegisterModuleStep(r, producersOf, core.ModuleStep[*TxnCoordinator]{Rank: 110, Name: "transactions", Module: ModProducers,
		Empty: func(f *TxnCoordinator) {
			f.producersState = producersState{
				Txns:      map[string]*Txn{},
				txnByPID:  map[int64]string{},
				dirtyTxns: map[string]bool{},
			}
		},
		Load:  loadTxnState,
		Stage: func(f *TxnCoordinator, b *core.StateBatch) error { f.persistTxns(b); return nil },
		Publish: func(f *TxnCoordinator, _ bool) {
			f.publishTxns()
			f.DueView.Store(min(f.DueView.Load(), f.txnsDue))
		},
		Forget: func(f *TxnCoordinator) { clear(f.dirtyTxns) }})
}
