package schemas

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/schema"
)

// Validation on produce (docs/schemas.md): a topic whose
// stele.key.schema.validation or stele.value.schema.validation is id or
// full takes a produce only when every record's key (or value) is in
// Confluent's wire format with a schema id registered, in the topic's
// tenant's registry, under the subject its subject name strategy names;
// a Protobuf schema's id must be followed by message indexes naming one
// of its messages (whose full name RecordNameStrategy takes); full also
// decodes the payload with that schema (schema.Validate). A
// null key or value passes (a tombstone has no schema). A batch with any
// record that fails is refused whole with INVALID_RECORD, every failing
// record listed (KIP-467's record errors) with the reason; nothing is
// written. The check is a produce check of the topics module's (rank 40,
// after keys' versions, signatures and the tenant's stored bytes), so it
// runs in the deterministic apply: every broker gives the same verdict.

// maxParsed bounds the parsed schemas the module keeps for validation.
const maxParsed = 1024

// parsedKey names a parsed schema: its tenant and id, and the stored
// schema it was parsed from (a tenant deleted and made again gives ids
// anew).
type parsedKey struct {
	tenant string
	id     int32
}

type parsedEntry struct {
	from *Stored
	s    *schema.Schema
	err  error
}

func registerValidation(h *topics.TopicHooks) {
	h.ProduceChecks.Register(40, "schema validation", ModSchemas, func(tm *topics.Topics, pr *topics.Producing) (core.Result, func()) {
		cfg := pr.T.Config
		if !cfg.KeySchema.On() && !cfg.ValueSchema.On() {
			return core.Result{}, nil
		}
		return schemasOf(tm.Machine).validate(pr), nil
	})
}

func (f *Schemas) validate(pr *topics.Producing) core.Result {
	tenant, topic := core.SplitTenant(pr.T.Name)
	g := f.regs[tenant]
	cfg := pr.T.Config
	var bad topics.RecordErrors
	for i, b := range pr.Batches {
		if pr.Dup[i] {
			continue
		}
		base := pr.Bases[i]
		_, err := record.Each(b, func(rec *record.Record) error {
			if msg := f.check(g, topic, cfg.KeySchema, "key", rec.Key); msg != "" {
				bad.Add(base+rec.OffsetDelta, msg)
			} else if msg := f.check(g, topic, cfg.ValueSchema, "value", rec.Value); msg != "" {
				bad.Add(base+rec.OffsetDelta, msg)
			}
			return nil
		})
		if err != nil {
			// The topics module decoded the batch already.
			return core.Fail(record.ErrorCode(err), err.Error())
		}
	}
	if bad.Len() > 0 {
		return bad.Result(kerr.InvalidRecord.Code)
	}
	return core.Result{}
}

// check says why data (a record's key or value: what) breaks c, or "".
func (f *Schemas) check(g *registry, topic string, c topics.SchemaCheck, what string, data []byte) string {
	if !c.On() || data == nil {
		return ""
	}
	id, payload, err := schema.ParseWire(data)
	if err != nil {
		return fmt.Sprintf("the %s is not in Confluent's wire format (a magic byte 0 and a 4-byte schema id): %v", what, err)
	}
	var st *Stored
	if g != nil {
		st = g.schemas[id]
	}
	if st == nil {
		return fmt.Sprintf("the %s's schema id %d is not registered", what, id)
	}
	var parsed *schema.Schema
	subject := topic + "-" + what
	if c.Strategy != topics.TopicNameStrategy || c.Level == topics.SchemaValidationFull || st.Type == schema.TypeProtobuf {
		if parsed, err = f.parsed(g, st); err != nil {
			return fmt.Sprintf("the %s's schema id %d does not parse: %v", what, id, err)
		}
	}
	if st.Type == schema.TypeProtobuf {
		// Protobuf's wire format names the message after the id.
		if err := parsed.CheckIndexes(payload); err != nil {
			return fmt.Sprintf("the %s's Protobuf message indexes do not name a message of schema id %d: %v", what, id, err)
		}
	}
	if c.Strategy != topics.TopicNameStrategy {
		name, ok := parsed.RecordNameOf(payload)
		if !ok {
			return fmt.Sprintf("the %s's schema id %d has no record name (an Avro named type's, a JSON schema's title, a Protobuf message's), which %s needs", what, id, c.Strategy)
		}
		subject = name
		if c.Strategy == topics.TopicRecordNameStrategy {
			subject = topic + "-" + subject
		}
	}
	if !registeredUnder(g, subject, id) {
		return fmt.Sprintf("the %s's schema id %d is not registered under subject %q (%s)", what, id, subject, c.Strategy)
	}
	if c.Level == topics.SchemaValidationFull {
		if err := parsed.Validate(payload); err != nil {
			return fmt.Sprintf("the %s does not decode with schema id %d: %v", what, id, err)
		}
	}
	return ""
}

// registeredUnder reports whether a live version of subject has id.
func registeredUnder(g *registry, subject string, id int32) bool {
	s := g.subjects[subject]
	if s == nil {
		return false
	}
	for _, v := range s.Versions {
		if v.ID == id && !v.Deleted {
			return true
		}
	}
	return false
}

// parsed is st parsed (with its references), kept for the next records.
// What is kept changes only how fast the answer comes, never the answer.
func (f *Schemas) parsed(g *registry, st *Stored) (*schema.Schema, error) {
	k := parsedKey{g.tenant, st.ID}
	if e, ok := f.parsedCache[k]; ok && e.from == st {
		return e.s, e.err
	}
	s, err := schema.Parse(st.Def(), g.resolver())
	if f.parsedCache == nil || len(f.parsedCache) >= maxParsed {
		f.parsedCache = map[parsedKey]parsedEntry{}
	}
	f.parsedCache[k] = parsedEntry{from: st, s: s, err: err}
	return s, err
}
