package security

import (
	"bytes"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
)

// The security module's IP quotas (issue 17, docs/security.md): Kafka's
// quotas of the ip entity type (KIP-612), connection_creation_rate per
// client address or for every address without its own (the default), as
// replicated state like the client quotas (quotas.go), so every broker
// holds the same limits; each enforces them on the connections it accepts
// (internal/kafka). An address is stored in its canonical form, so
// ::ffff:10.0.0.1 and 10.0.0.1 are one entity.
//
// State, in the metadata store:
//
//	w/<ip>   the address's connection_creation_rate (w/ alone: the default)

// KindAlterIPQuotas sets or removes one address's quotas.
const KindAlterIPQuotas core.Kind = 31

// QuotaConnectionCreationRate is the ip entity's one quota key.
const QuotaConnectionCreationRate = "connection_creation_rate"

// AlterIPQuotas applies ops to the quotas of IP (Default: the default
// entity; IP is then empty).
type AlterIPQuotas struct {
	IP      string
	Default bool
	Ops     []QuotaOp
}

func (AlterIPQuotas) Kind() core.Kind { return KindAlterIPQuotas }

func (c AlterIPQuotas) Encode(w *core.Writer) {
	w.Bool(c.Default)
	w.Str(c.IP)
	w.Count(len(c.Ops))
	for _, op := range c.Ops {
		w.Str(op.Key)
		w.I64(int64(math.Float64bits(op.Value)))
		w.Bool(op.Remove)
	}
}

func decodeAlterIPQuotas(r *core.Reader) AlterIPQuotas {
	c := AlterIPQuotas{Default: r.Bool(), IP: r.Str()}
	for i, n := 0, r.Count(10); i < n && r.E == nil; i++ {
		c.Ops = append(c.Ops, QuotaOp{Key: r.Str(), Value: math.Float64frombits(uint64(r.I64())), Remove: r.Bool()})
	}
	return c
}

// registerIPQuotas registers AlterIPQuotas and the IP quotas' step
// (RegisterSecurity calls it).
func registerIPQuotas(r *core.Registry) {
	core.RegisterModuleCommand(r, securityOf, KindAlterIPQuotas, "AlterIPQuotas", ModSecurity, decodeAlterIPQuotas,
		func(c core.Command) core.Result { return checkIPQuotas(c.(AlterIPQuotas)) },
		func(f *Security, c AlterIPQuotas, _ core.CmdAt) core.Result { return f.alterIPQuotas(c) })
	core.RegisterModuleStep(r, securityOf, core.ModuleStep[*Security]{Rank: 135, Name: "ip quotas", Module: ModSecurity,
		Empty: emptyIPQuotas, Load: loadIPQuotas, Stage: stageIPQuotas, Publish: publishIPQuotas})
}

// CanonicalQuotaIP returns the canonical form of an ip entity's name, or
// Kafka's error for a name that is not an IP address.
func CanonicalQuotaIP(s string) (string, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return "", fmt.Errorf("%s is not a valid IP or resolvable host.", s)
	}
	return a.Unmap().String(), nil
}

// CheckIPQuotaValue says why v cannot be connection_creation_rate, in
// Kafka's words: a whole number of connections a second, at least 0.
func CheckIPQuotaValue(key string, v float64) error {
	if key != QuotaConnectionCreationRate {
		return fmt.Errorf("Unknown quota key %s for the ip entity type", key)
	}
	if math.IsNaN(v) || v < 0 || v != math.Trunc(v) || v > math.MaxInt32 {
		return fmt.Errorf("Illegal value %v for quota %s: it must be a whole number of connections a second, 0 or more", v, key)
	}
	return nil
}

func checkIPQuotas(c AlterIPQuotas) core.Result {
	switch {
	case c.Default && c.IP != "":
		return core.Fail(kerr.InvalidRequest.Code, "the default ip entity has no name")
	case !c.Default:
		ip, err := CanonicalQuotaIP(c.IP)
		if err != nil {
			return core.Fail(kerr.InvalidRequest.Code, err.Error())
		}
		if ip != c.IP {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("ip entity %s is not in its canonical form %s", c.IP, ip))
		}
	}
	seen := map[string]bool{}
	for _, op := range c.Ops {
		if seen[op.Key] {
			return core.Fail(kerr.InvalidRequest.Code, "Duplicate quota key "+op.Key)
		}
		seen[op.Key] = true
		if op.Key != QuotaConnectionCreationRate {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("Unknown quota key %s for the ip entity type", op.Key))
		}
		if !op.Remove {
			if err := CheckIPQuotaValue(op.Key, op.Value); err != nil {
				return core.Fail(kerr.InvalidRequest.Code, err.Error())
			}
		}
	}
	return core.Result{}
}

// ipQuotasState is the security module's state of the IP quotas: by
// address ("" the default), connection_creation_rate.
type ipQuotasState struct {
	ipQuotas      map[string]float64
	ipQuotasDirty map[string]bool
	ipQuotasNew   bool
	ipQuotasView  atomic.Pointer[IPQuotas]
}

func (f *Security) alterIPQuotas(c AlterIPQuotas) core.Result {
	if f.Version < SecurityVersion {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("quotas need app version %d; this chain runs %d (stele cluster upgrade)", SecurityVersion, f.Version))
	}
	for _, op := range c.Ops {
		if op.Remove {
			delete(f.ipQuotas, c.IP)
		} else {
			f.ipQuotas[c.IP] = op.Value
		}
	}
	f.ipQuotasDirty[c.IP], f.ipQuotasNew = true, true
	return core.Result{}
}

const ipQuotasPrefix = "w/"

func ipQuotaKey(ip string) []byte { return append([]byte(ipQuotasPrefix), ip...) }

func emptyIPQuotas(f *Security) {
	f.ipQuotas = map[string]float64{}
	f.ipQuotasDirty = map[string]bool{}
	f.ipQuotasNew = true
}

func loadIPQuotas(f *Security) error {
	emptyIPQuotas(f)
	return f.Store.Scan([]byte(ipQuotasPrefix), func(k, v []byte) error {
		ip := string(bytes.TrimPrefix(k, []byte(ipQuotasPrefix)))
		if ip != "" {
			if c, err := CanonicalQuotaIP(ip); err != nil || c != ip {
				return fmt.Errorf("stele/fsm: %w: ip quota entity %q", core.ErrMalformed, ip)
			}
		}
		r := &core.Reader{B: v}
		if ver := r.U8(); ver != core.PersistVersion {
			return fmt.Errorf("stele/fsm: ip quotas: state format %d not supported", ver)
		}
		rate := math.Float64frombits(uint64(r.I64()))
		if err := r.Done(); err != nil {
			return fmt.Errorf("stele/fsm: reading the ip quota of %q: %w", ip, err)
		}
		if err := CheckIPQuotaValue(QuotaConnectionCreationRate, rate); err != nil {
			return fmt.Errorf("stele/fsm: %w: ip quota of %q: %v", core.ErrMalformed, ip, err)
		}
		f.ipQuotas[ip] = rate
		return nil
	})
}

func stageIPQuotas(f *Security, b *core.StateBatch) error {
	for _, ip := range core.SortedKeys(f.ipQuotasDirty) {
		if rate, ok := f.ipQuotas[ip]; ok {
			w := &core.Writer{}
			w.U8(core.PersistVersion)
			w.I64(int64(math.Float64bits(rate)))
			b.Set(ipQuotaKey(ip), w.B)
		} else {
			b.Delete(ipQuotaKey(ip))
		}
	}
	clear(f.ipQuotasDirty)
	return nil
}

func publishIPQuotas(f *Security, _ bool) {
	if !f.ipQuotasNew && f.ipQuotasView.Load() != nil {
		return
	}
	f.ipQuotasNew = false
	v := &IPQuotas{rates: make(map[string]float64, len(f.ipQuotas))}
	for ip, r := range f.ipQuotas {
		v.rates[ip] = r
	}
	f.ipQuotasView.Store(v)
}

// IPQuotas returns the committed IP quotas.
func (f *Security) IPQuotas() *IPQuotas { return f.ipQuotasView.Load() }

// IPQuotas is the committed IP quotas, as readers see them.
type IPQuotas struct {
	rates map[string]float64
}

// IPQuota is one ip entity's quota (Default: the default entity).
type IPQuota struct {
	IP      string
	Default bool
	Rate    float64
}

// Empty reports whether no IP quota is set.
func (q *IPQuotas) Empty() bool { return q == nil || len(q.rates) == 0 }

// ConnectionCreationRate returns the connection_creation_rate that applies
// to ip: its own, else the default's; ok false when neither is set.
func (q *IPQuotas) ConnectionCreationRate(ip netip.Addr) (float64, bool) {
	if q.Empty() {
		return 0, false
	}
	if r, ok := q.rates[ip.Unmap().String()]; ok {
		return r, true
	}
	r, ok := q.rates[""]
	return r, ok
}

// All returns every ip entity's quota, the default first, then by address.
func (q *IPQuotas) All() []IPQuota {
	if q == nil {
		return nil
	}
	out := make([]IPQuota, 0, len(q.rates))
	for _, ip := range slices.Sorted(func(yield func(string) bool) {
		for k := range q.rates {
			if !yield(k) {
				return
			}
		}
	}) {
		out = append(out, IPQuota{IP: ip, Default: ip == "", Rate: q.rates[ip]})
	}
	return out
}
