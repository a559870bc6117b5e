package security

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
)

// The security module's client quotas (issue 17, docs/security.md):
// Kafka's quotas per user and client id (KIP-55, KIP-257, KIP-546), as
// replicated state, so every broker enforces the same limits and a
// peer's or a snapshot's quotas are checked like any state. An entity is
// a user, a client id, or both, each named or the default; its quotas are
// producer_byte_rate, consumer_byte_rate, request_percentage and
// controller_mutation_rate. AlterClientQuotas sets and removes one
// entity's quotas. The Quotas view resolves which entity's quota applies
// to a (user, client id), in Kafka's order of precedence (Quota). Each
// broker enforces them on its own connections (internal/kafka).
//
// State, in the metadata store:
//
//	q/<entity>   the entity's quotas, by key

// KindAlterClientQuotas sets and removes one entity's quotas.
const KindAlterClientQuotas core.Kind = 29

// Kafka's quota keys.
const (
	QuotaProducerByteRate       = "producer_byte_rate"
	QuotaConsumerByteRate       = "consumer_byte_rate"
	QuotaRequestPercentage      = "request_percentage"
	QuotaControllerMutationRate = "controller_mutation_rate"
)

// QuotaKeys returns the quota keys Stele keeps, in order.
func QuotaKeys() []string {
	return []string{QuotaConsumerByteRate, QuotaControllerMutationRate, QuotaProducerByteRate, QuotaRequestPercentage}
}

// QuotaName is one side of a quota entity: absent, the default, or a
// name.
type QuotaName struct {
	Set     bool // the entity has this side
	Default bool // the side is the default (Kafka's null name)
	Name    string
}

// QuotaEntity is a quota entity: a user side and a client id side, at
// least one set.
type QuotaEntity struct {
	User, ClientID QuotaName
}

// QuotaOp sets (Remove false) or removes one quota of an entity.
type QuotaOp struct {
	Key    string
	Value  float64
	Remove bool
}

// AlterClientQuotas applies ops to one entity's quotas, all or nothing.
type AlterClientQuotas struct {
	Entity QuotaEntity
	Ops    []QuotaOp
}

func (AlterClientQuotas) Kind() core.Kind { return KindAlterClientQuotas }

func (n QuotaName) Encode(w *core.Writer) {
	switch {
	case !n.Set:
		w.U8(0)
	case n.Default:
		w.U8(1)
	default:
		w.U8(2)
		w.Str(n.Name)
	}
}

func decodeQuotaName(r *core.Reader) QuotaName {
	switch t := r.U8(); t {
	case 0:
		return QuotaName{}
	case 1:
		return QuotaName{Set: true, Default: true}
	case 2:
		return QuotaName{Set: true, Name: r.Str()}
	default:
		r.Fail("quota entity side %d", t)
		return QuotaName{}
	}
}

func (c AlterClientQuotas) Encode(w *core.Writer) {
	c.Entity.User.Encode(w)
	c.Entity.ClientID.Encode(w)
	w.Count(len(c.Ops))
	for _, op := range c.Ops {
		w.Str(op.Key)
		w.I64(int64(math.Float64bits(op.Value)))
		w.Bool(op.Remove)
	}
}

func decodeAlterClientQuotas(r *core.Reader) AlterClientQuotas {
	c := AlterClientQuotas{Entity: QuotaEntity{User: decodeQuotaName(r), ClientID: decodeQuotaName(r)}}
	for i, n := 0, r.Count(10); i < n && r.E == nil; i++ {
		c.Ops = append(c.Ops, QuotaOp{Key: r.Str(), Value: math.Float64frombits(uint64(r.I64())), Remove: r.U8() == 1})
	}
	return c
}

// registerQuotas registers AlterClientQuotas and the quotas' step
// (RegisterSecurity calls it).
func registerQuotas(r *core.Registry) {
	core.RegisterModuleCommand(r, securityOf, KindAlterClientQuotas, "AlterClientQuotas", ModSecurity, decodeAlterClientQuotas,
		func(c core.Command) core.Result { return checkQuotas(c.(AlterClientQuotas)) },
		func(f *Security, c AlterClientQuotas, _ core.CmdAt) core.Result { return f.alterClientQuotas(c) })
	core.RegisterModuleStep(r, securityOf, core.ModuleStep[*Security]{Rank: 130, Name: "client quotas", Module: ModSecurity,
		Empty: emptyQuotas, Load: loadQuotas, Stage: stageQuotas, Publish: publishQuotas})
}

// CheckQuotaEntity says why e cannot hold quotas, in Kafka's words.
func CheckQuotaEntity(e QuotaEntity) error {
	if !e.User.Set && !e.ClientID.Set {
		return fmt.Errorf("Invalid empty client quota entity")
	}
	for _, n := range []QuotaName{e.User, e.ClientID} {
		if n.Set && !n.Default && (n.Name == "" || len(n.Name) > 255 || !utf8.ValidString(n.Name)) {
			return fmt.Errorf("Invalid quota entity name %q (1 to 255 bytes of UTF-8)", n.Name)
		}
	}
	return nil
}

// CheckQuotaValue says why v cannot be the value of quota key, in Kafka's
// words (ClientQuotaControlManager): a known key, a finite value above 0
// (request_percentage at most 100 times the I/O threads, which Stele takes
// as 100 per broker), and the byte rates whole numbers.
func CheckQuotaValue(key string, v float64) error {
	if !slices.Contains(QuotaKeys(), key) {
		return fmt.Errorf("Unknown quota key %s", key)
	}
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v <= 0:
		return fmt.Errorf("Illegal value %v for quota %s: it must be greater than 0", v, key)
	case (key == QuotaProducerByteRate || key == QuotaConsumerByteRate) && (v != math.Trunc(v) || v > math.MaxInt64/2):
		return fmt.Errorf("Illegal value %v for quota %s: it must be a whole number of bytes", v, key)
	}
	return nil
}

func checkQuotas(c AlterClientQuotas) core.Result {
	if err := CheckQuotaEntity(c.Entity); err != nil {
		return core.Fail(kerr.InvalidRequest.Code, err.Error())
	}
	seen := map[string]bool{}
	for _, op := range c.Ops {
		if seen[op.Key] {
			return core.Fail(kerr.InvalidRequest.Code, "Duplicate quota key "+op.Key)
		}
		seen[op.Key] = true
		if !slices.Contains(QuotaKeys(), op.Key) {
			return core.Fail(kerr.InvalidRequest.Code, "Unknown quota key "+op.Key)
		}
		if !op.Remove {
			if err := CheckQuotaValue(op.Key, op.Value); err != nil {
				return core.Fail(kerr.InvalidRequest.Code, err.Error())
			}
		}
	}
	return core.Result{}
}

// quotasState is the security module's state of the client quotas.
type quotasState struct {
	quotas      map[QuotaEntity]map[string]float64
	quotasDirty map[QuotaEntity]bool
	quotasNew   bool
	quotasView  atomic.Pointer[Quotas]
}

func (f *Security) alterClientQuotas(c AlterClientQuotas) core.Result {
	if f.Version < SecurityVersion {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("quotas need app version %d; this chain runs %d (stele cluster upgrade)", SecurityVersion, f.Version))
	}
	next := map[string]float64{}
	for k, v := range f.quotas[c.Entity] {
		next[k] = v
	}
	for _, op := range c.Ops {
		if op.Remove {
			delete(next, op.Key)
		} else {
			next[op.Key] = op.Value
		}
	}
	if len(next) == 0 {
		delete(f.quotas, c.Entity)
	} else {
		f.quotas[c.Entity] = next
	}
	f.quotasDirty[c.Entity], f.quotasNew = true, true
	return core.Result{}
}

func quotaKey(e QuotaEntity) []byte {
	w := &core.Writer{B: []byte("q/")}
	e.User.Encode(w)
	e.ClientID.Encode(w)
	return w.B
}

const quotasPrefix = "q/"

func encodeQuotaValues(m map[string]float64) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	keys := core.SortedKeys(m)
	w.Count(len(keys))
	for _, k := range keys {
		w.Str(k)
		w.I64(int64(math.Float64bits(m[k])))
	}
	return w.B
}

// DecodeQuotas reads one entity's key and value: a valid entity, at least
// one quota, each a valid value, in order and once.
func DecodeQuotas(k, v []byte) (QuotaEntity, map[string]float64, error) {
	kr := &core.Reader{B: bytes.TrimPrefix(k, []byte(quotasPrefix))}
	e := QuotaEntity{User: decodeQuotaName(kr), ClientID: decodeQuotaName(kr)}
	if err := kr.Done(); err != nil {
		return e, nil, fmt.Errorf("stele/fsm: reading a quota entity: %w", err)
	}
	if err := CheckQuotaEntity(e); err != nil {
		return e, nil, fmt.Errorf("stele/fsm: %w: quota entity: %v", core.ErrMalformed, err)
	}
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return e, nil, fmt.Errorf("stele/fsm: quotas: state format %d not supported", ver)
	}
	out := map[string]float64{}
	last := ""
	for i, n := 0, r.Count(9); i < n && r.E == nil; i++ {
		key, val := r.Str(), math.Float64frombits(uint64(r.I64()))
		if r.E != nil {
			break
		}
		if i > 0 && strings.Compare(last, key) >= 0 {
			r.Fail("quotas out of order")
		} else if err := CheckQuotaValue(key, val); err != nil {
			r.Fail("quota: %v", err)
		}
		last = key
		out[key] = val
	}
	if err := r.Done(); err != nil {
		return e, nil, fmt.Errorf("stele/fsm: reading quotas: %w", err)
	}
	if len(out) == 0 {
		return e, nil, fmt.Errorf("stele/fsm: reading quotas: %w: none stored", core.ErrMalformed)
	}
	return e, out, nil
}

func emptyQuotas(f *Security) {
	f.quotas = map[QuotaEntity]map[string]float64{}
	f.quotasDirty = map[QuotaEntity]bool{}
	f.quotasNew = true
}

func loadQuotas(f *Security) error {
	emptyQuotas(f)
	return f.Store.Scan([]byte(quotasPrefix), func(k, v []byte) error {
		e, m, err := DecodeQuotas(k, v)
		if err != nil {
			return err
		}
		f.quotas[e] = m
		return nil
	})
}

func stageQuotas(f *Security, b *core.StateBatch) error {
	es := make([]QuotaEntity, 0, len(f.quotasDirty))
	for e := range f.quotasDirty {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b QuotaEntity) int { return bytes.Compare(quotaKey(a), quotaKey(b)) })
	for _, e := range es {
		if m := f.quotas[e]; len(m) > 0 {
			b.Set(quotaKey(e), encodeQuotaValues(m))
		} else {
			b.Delete(quotaKey(e))
		}
	}
	clear(f.quotasDirty)
	return nil
}

func publishQuotas(f *Security, _ bool) {
	if !f.quotasNew && f.quotasView.Load() != nil {
		return
	}
	f.quotasNew = false
	v := &Quotas{byEntity: make(map[QuotaEntity]map[string]float64, len(f.quotas))}
	for e, m := range f.quotas {
		c := make(map[string]float64, len(m))
		for k, x := range m {
			c[k] = x
		}
		v.byEntity[e] = c
	}
	f.quotasView.Store(v)
}

// Quotas returns the committed client quotas.
func (f *Security) Quotas() *Quotas { return f.quotasView.Load() }

// Quotas is the committed client quotas, as readers see them. Do not
// modify it.
type Quotas struct {
	byEntity map[QuotaEntity]map[string]float64
}

// Empty reports whether no quota is set.
func (q *Quotas) Empty() bool { return q == nil || len(q.byEntity) == 0 }

// Entities returns every entity with its quotas, in a fixed order.
func (q *Quotas) Entities() []QuotaEntity {
	if q == nil {
		return nil
	}
	out := make([]QuotaEntity, 0, len(q.byEntity))
	for e := range q.byEntity {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b QuotaEntity) int { return bytes.Compare(quotaKey(a), quotaKey(b)) })
	return out
}

// Of returns an entity's quotas (nil when it has none).
func (q *Quotas) Of(e QuotaEntity) map[string]float64 {
	if q == nil {
		return nil
	}
	return q.byEntity[e]
}

// Quota returns the quota key applying to a client (user "" for a client
// that did not authenticate) with client id clientID, and the entity it
// comes from, in Kafka's order of precedence (ClientQuotaManager's
// DefaultQuotaCallback): user and client id, user and default client id,
// user, default user and client id, default user and default client id,
// default user, client id, default client id. ok is false when none
// applies.
func (q *Quotas) Quota(user, clientID, key string) (value float64, from QuotaEntity, ok bool) {
	if q.Empty() {
		return 0, QuotaEntity{}, false
	}
	named := func(s string) QuotaName { return QuotaName{Set: true, Name: s} }
	def := QuotaName{Set: true, Default: true}
	var order []QuotaEntity
	if user != "" {
		order = append(order,
			QuotaEntity{User: named(user), ClientID: named(clientID)},
			QuotaEntity{User: named(user), ClientID: def},
			QuotaEntity{User: named(user)},
			QuotaEntity{User: def, ClientID: named(clientID)},
			QuotaEntity{User: def, ClientID: def},
			QuotaEntity{User: def})
	}
	order = append(order, QuotaEntity{ClientID: named(clientID)}, QuotaEntity{ClientID: def})
	for _, e := range order {
		if v, ok := q.byEntity[e][key]; ok {
			return v, e, true
		}
	}
	return 0, QuotaEntity{}, false
}
