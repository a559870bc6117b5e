package kafka

// The lies a Byzantine broker can tell a Kafka client, built here so that
// tests can show what a client that does not verify cannot catch
// (docs/reliability.md; docs/trust.md's verifying client must catch every
// one). Only the test-only stelebyzantine build tells them
// (byzantine_on.go, STELE_BYZANTINE); production builds never call these.
// Every forged answer is well formed: batches keep valid CRCs, so a client
// has no way to tell it from the truth.

import (
	"crypto/sha512"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

// Fetch lies, by their STELE_BYZANTINE names.
const (
	lieAlterRecords   = "alter-records"   // a record's value changed
	lieDropBatch      = "drop-batch"      // one batch of several left out
	lieReorderRecords = "reorder-records" // two records' values swapped
	lieForgeWatermark = "forge-watermark" // the high watermark reported 1000 above the truth (Fetch and ListOffsets)
	// lieMetadata: Metadata names this broker the leader of every
	// partition and the only broker, so clients send it everything.
	lieMetadata = "lie-metadata"
	// lieForgeAdmin: every command stele.admin.signed gates is submitted
	// wrapped in a SignedAdmin whose signature this broker made up, naming
	// the principal admin, and unsigned as well: the honest brokers must
	// refuse both (docs/security.md, "Signed administration").
	lieForgeAdmin = "forge-admin"
	// lieRewriteTenant (rewrite-tenant=NAME): every tenant's name in the
	// commands this broker submits for its clients is moved into tenant
	// NAME (a produce of acme's client to its orders, acme~orders in the
	// state, is submitted to NAME~orders): the honest brokers must refuse
	// what the other tenant's client signed (docs/tenants.md).
	lieRewriteTenant = "rewrite-tenant"
)

// rewriteTenant returns cmds with every top-level name field (Topic, Name,
// Group, TransactionalID) that names a tenant other than to moved into to.
func rewriteTenant(cmds []fsm.Command, to string) []fsm.Command {
	out := slices.Clone(cmds)
	for i, c := range cmds {
		v := reflect.New(reflect.TypeOf(c)).Elem()
		v.Set(reflect.ValueOf(c))
		if v.Kind() != reflect.Struct {
			continue
		}
		for _, field := range []string{"Topic", "Name", "Group", "TransactionalID"} {
			f := v.FieldByName(field)
			if !f.IsValid() || f.Kind() != reflect.String {
				continue
			}
			if t, local := fsm.SplitTenant(f.String()); t != "" && t != to {
				f.SetString(to + string(fsm.TenantSep) + local)
			}
		}
		out[i] = v.Interface().(fsm.Command)
	}
	return out
}

// rewriteTarget is the tenant rewrite-tenant=NAME names, "" if none.
func rewriteTarget(set map[string]bool) string {
	for m := range set {
		if t, ok := strings.CutPrefix(m, lieRewriteTenant+"="); ok {
			return t
		}
	}
	return ""
}

// forgeAdmin returns cmds with each gated command replaced by one wrapped
// in a SignedAdmin with a made-up signature, followed by the gated
// commands unsigned (forge-admin); the first len(cmds) outcomes answer the
// client.
func forgeAdmin(cmds []fsm.Command) []fsm.Command {
	out := slices.Clone(cmds)
	for i, c := range cmds {
		if !fsm.AdminGated(c) {
			continue
		}
		b := fsm.EncodeCommand(c)
		sig := sha512.Sum512(b) // 64 bytes, the size of a signature, of nobody's key
		out[i] = fsm.SignedAdmin{Principal: "admin", Seq: uint64(time.Now().UnixNano()), Signature: sig[:], Command: b}
		out = append(out, c)
	}
	return out
}

// forgedPrefix starts every value alterRecords forges.
const forgedPrefix = "forged:"

// lies returns the lies named in modes (STELE_BYZANTINE's comma-separated
// list) that this front-end knows.
func lies(modes string) map[string]bool {
	out := map[string]bool{}
	for _, m := range strings.Split(modes, ",") {
		switch m {
		case lieAlterRecords, lieDropBatch, lieReorderRecords, lieForgeWatermark, lieMetadata, lieForgeAdmin:
			out[m] = true
		}
		if t, ok := strings.CutPrefix(m, lieRewriteTenant+"="); ok && fsm.ValidTenantName(t) == nil {
			out[m] = true
		}
	}
	return out
}

// lieAboutFetch applies the Fetch lies of set to one partition's answer:
// its record batches and high watermark.
func lieAboutFetch(set map[string]bool, data []byte, hwm int64) ([]byte, int64) {
	if set[lieAlterRecords] {
		data = editFirstDataBatch(data, 1, func(recs []record.Record) {
			recs[0].Value = append([]byte(forgedPrefix), recs[0].Value...)
		})
	}
	if set[lieReorderRecords] {
		data = editFirstDataBatch(data, 2, func(recs []record.Record) {
			recs[0].Value, recs[1].Value = recs[1].Value, recs[0].Value
		})
	}
	if set[lieDropBatch] {
		data = dropSecondBatch(data)
	}
	if set[lieForgeWatermark] && hwm >= 0 {
		hwm += 1000
	}
	return data, hwm
}

// editFirstDataBatch rewrites the first data batch of data holding at
// least min records with edit, re-encoded with a valid CRC; data is
// returned unchanged when there is none or it does not decode.
func editFirstDataBatch(data []byte, min int, edit func([]record.Record)) []byte {
	batches, err := record.Split(data)
	if err != nil {
		return data
	}
	for i, b := range batches {
		h, recs, err := record.Records(b)
		if err != nil || h.Control() || len(recs) < min {
			continue
		}
		for k := range recs { // the batch aliases data, which is rebuilt below
			recs[k].Value = slices.Clone(recs[k].Value)
		}
		edit(recs)
		forged, err := record.Build(h, recs)
		if err != nil {
			return data
		}
		out := make([]byte, 0, len(data)+len(forged))
		for j, o := range batches {
			if j == i {
				out = append(out, forged...)
			} else {
				out = append(out, o...)
			}
		}
		return out
	}
	return data
}

// dropSecondBatch leaves out the second of several batches: the client
// sees the offsets jump over it.
func dropSecondBatch(data []byte) []byte {
	batches, err := record.Split(data)
	if err != nil || len(batches) < 2 {
		return data
	}
	out := make([]byte, 0, len(data))
	for j, b := range batches {
		if j != 1 {
			out = append(out, b...)
		}
	}
	return out
}
