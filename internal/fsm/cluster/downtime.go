package cluster

// Demotion after downtime (docs/cluster.md, "Membership"): with the
// cluster-wide broker config stele.validator.downtime.ms above 0, from
// app version 7, a validator whose last commit signature (the chain's own
// record, trust's liveness.go) is older than that much block time is
// demoted to a replica at the start of a block, so a dead broker stops
// costing every n-th height a timeout_propose. One validator a block, the
// first by address; only when the validators left that are signing hold
// more than two thirds of the power it leaves (membershipGuard), so
// demotions never stop the chain. A validator promoted again is measured
// from its promotion's block time until it signs, and a validator never
// seen signing (a chain younger than its first commit) is not demoted.
// Validators promote a demoted broker back with stele cluster promote.

import (
	"fmt"
	"strconv"

	"github.com/stele-io/stele/internal/fsm/core"
)

// downtimeMs is stele.validator.downtime.ms as the block applies it (0:
// off).
func (f *Cluster) downtimeMs() int64 {
	v, ok := f.BrokerCfgs[""][ValidatorDowntimeConfig]
	if !ok {
		return 0
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return 0 // the config's check refuses such values
	}
	return ms
}

// demoteDowntime demotes the first validator, by address, that has signed
// nothing for the configured downtime, if the guard allows it.
func (f *Cluster) demoteDowntime() {
	if f.Version < MembershipVersion {
		return
	}
	limit := f.downtimeMs()
	vs := f.Trust.Validators()
	if limit <= 0 || vs == nil {
		return
	}
	signers, now := f.Trust.Liveness()
	last := make(map[[20]byte]int64, len(signers))
	for _, s := range signers {
		if len(s.Address) == 20 {
			last[[20]byte(s.Address)] = s.LastTimeMs
		}
	}
	for _, v := range vs.Validators() { // in address order
		t, seen := last[v.Address]
		if !seen {
			continue
		}
		if r, ok := f.validatorRecs[v.Address]; ok && r.ChangedAtMs > t {
			t = r.ChangedAtMs // promoted since it last signed
		}
		if now-t <= limit {
			continue
		}
		if res := f.membershipGuard(vs, []powerChange{{validator: v.Address}}); res.Code != 0 {
			continue
		}
		f.setValidatorRecord(ValidatorRecord{Address: v.Address, PubKey: v.PubKey, Power: 0, Reason: ReasonDowntime})
		f.ValidatorUpdates = append(f.ValidatorUpdates, core.ValidatorUpdate{PubKey: append([]byte(nil), v.PubKey...), Power: 0})
		f.opts.Logger.Warn("validator demoted after downtime", "validator", fmt.Sprintf("%X", v.Address),
			"last_signed_ms_ago", now-t, "downtime_ms", limit, "height", f.Height)
		return
	}
}
