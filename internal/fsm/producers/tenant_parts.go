package producers

import "github.com/stele-io/stele/internal/fsm/core"

// What the producers module keeps of a tenant (issue 18, docs/tenants.md),
// for the tenants module: the transactional ids whose names read as the
// tenant's (tenant~id, core/names.go).

// TxnIDsReadingAs returns the transactional ids whose names read as
// tenant's, sorted.
func (f *TxnCoordinator) TxnIDsReadingAs(tenant string) []string {
	var out []string
	for _, id := range core.SortedKeys(f.Txns) {
		if t, _ := core.SplitTenant(id); t == tenant {
			out = append(out, id)
		}
	}
	return out
}

// FirstTxnIDReadingAs returns the first, by name, of the transactional ids
// that read as tenant's, or "": one pass, without sorting every id.
func (f *TxnCoordinator) FirstTxnIDReadingAs(tenant string) string {
	first := ""
	for id := range f.Txns {
		if t, _ := core.SplitTenant(id); t == tenant && (first == "" || id < first) {
			first = id
		}
	}
	return first
}

// RemoveTenantTxns aborts the tenant's ongoing transactions (their abort
// markers are written as a timed-out transaction's are) and forgets its
// transactional ids. It returns how many ids it removed.
func (f *TxnCoordinator) RemoveTenantTxns(tenant string) int {
	ids := f.TxnIDsReadingAs(tenant)
	for _, id := range ids {
		t := f.Txns[id]
		if t.State == TxnOngoing {
			f.endTxn(t, false)
		}
		delete(f.Txns, id)
		delete(f.txnByPID, t.ProducerID)
		f.dirtyTxns[id] = true
	}
	return len(ids)
}
