package httpapi

// The schema registry (issue 22, docs/schemas.md): the routes of
// Confluent's Schema Registry REST API, served from the replicated
// registry (internal/fsm/schemas), so Confluent's serializers and clients
// point at a broker's HTTP port unchanged. Reads are served from the
// broker's committed state; changes are commands ordered like any other,
// answered when committed.
//
// Served: /subjects (with ?deleted, ?subjectPrefix), /subjects/{s}/versions
// (GET with ?deleted, POST to register with ?normalize),
// /subjects/{s}/versions/{v} (GET with ?deleted, DELETE with ?permanent),
// /subjects/{s}/versions/{v}/schema, /subjects/{s}/versions/{v}/referencedby,
// POST /subjects/{s} (lookup, with ?normalize and ?deleted), DELETE
// /subjects/{s} (with ?permanent), /schemas/ids/{id} (with ?subject),
// /schemas/ids/{id}/schema, /schemas/ids/{id}/versions,
// /schemas/ids/{id}/subjects, /schemas/types, /config and /config/{s} (GET
// with ?defaultToGlobal, PUT, DELETE), /mode (GET, PUT), and POST
// /compatibility/subjects/{s}/versions[/{v}] (with ?verbose). Errors are
// Confluent's bodies, {"error_code": 40401, "message": ...}, with its
// statuses.
//
// Not served (docs/schemas.md): Protobuf (Avro and JSON Schema are
// parsed), the IMPORT mode and subject-level modes, contexts,
// metadata and rule sets (accepted in a body and ignored), and ACLs on
// single subjects: a request needs DESCRIBE (reads) or ALTER (changes) on
// the CLUSTER resource, a tenant's user on its tenant's own.
//
// A tenant's user reaches its tenant's registry only, by the same routes.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/fsm/schemas"
	"github.com/stele-io/stele/internal/schema"
)

// registryContentType is the media type Confluent's registry answers with.
const registryContentType = "application/vnd.schemaregistry.v1+json"

// maxRegistryBody bounds a request body: a schema of schema.MaxText bytes,
// JSON-escaped, with its references.
const maxRegistryBody = 2 << 20

// registryRoutes are the registry's patterns, each with its handler.
func registryRoutes(opts Options) map[string]http.Handler {
	h := func(f func(Options, http.ResponseWriter, *http.Request)) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f(opts, w, r) })
	}
	return map[string]http.Handler{
		"GET /subjects":                                             h(srSubjects),
		"GET /subjects/{subject}/versions":                          h(srVersions),
		"POST /subjects/{subject}/versions":                         h(srRegister),
		"GET /subjects/{subject}/versions/{version}":                h(srVersion),
		"GET /subjects/{subject}/versions/{version}/schema":         h(srVersionSchema),
		"GET /subjects/{subject}/versions/{version}/referencedby":   h(srReferencedBy),
		"DELETE /subjects/{subject}/versions/{version}":             h(srDeleteVersion),
		"POST /subjects/{subject}":                                  h(srLookup),
		"DELETE /subjects/{subject}":                                h(srDeleteSubject),
		"GET /schemas/ids/{id}":                                     h(srSchemaByID),
		"GET /schemas/ids/{id}/schema":                              h(srSchemaTextByID),
		"GET /schemas/ids/{id}/versions":                            h(srIDVersions),
		"GET /schemas/ids/{id}/subjects":                            h(srIDSubjects),
		"GET /schemas/types":                                        h(srTypes),
		"GET /config":                                               h(srConfigGet),
		"PUT /config":                                               h(srConfigPut),
		"DELETE /config":                                            h(srConfigDelete),
		"GET /config/{subject}":                                     h(srConfigGet),
		"PUT /config/{subject}":                                     h(srConfigPut),
		"DELETE /config/{subject}":                                  h(srConfigDelete),
		"GET /mode":                                                 h(srModeGet),
		"PUT /mode":                                                 h(srModePut),
		"POST /compatibility/subjects/{subject}/versions":           h(srCompatibility),
		"POST /compatibility/subjects/{subject}/versions/{version}": h(srCompatibility),
	}
}

// RegistryError is the body of a refusal, as Confluent's registry writes it.
type RegistryError struct {
	ErrorCode int    `json:"error_code"`
	Message   string `json:"message"`
}

// srError answers a refusal with Confluent's code ec: the status is its
// first three digits (40401 → 404, 409 → 409).
func srError(w http.ResponseWriter, ec int, format string, args ...any) {
	status := ec
	for status >= 1000 {
		status /= 10
	}
	srJSON(w, status, RegistryError{ErrorCode: ec, Message: fmt.Sprintf(format, args...)})
}

func srJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", registryContentType)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// registryTenant is the tenant whose registry r reaches.
func registryTenant(r *http.Request) string {
	t, _ := r.Context().Value(tenantKey{}).(string)
	return t
}

func srView(opts Options, r *http.Request) *fsm.SchemaRegistryView {
	return opts.Broker.Schemas().Tenant(registryTenant(r))
}

func boolParam(r *http.Request, name string) bool {
	v, _ := strconv.ParseBool(r.URL.Query().Get(name))
	return v
}

// parseVersion reads a version in a path: a number from 1, or "latest"
// (-1 too, as Confluent's registry reads it).
func parseVersion(w http.ResponseWriter, s string) (int32, bool) {
	if s == "latest" || s == "-1" {
		return fsm.SchemaLatest, true
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil || v < 1 {
		srError(w, schemas.ErrInvalidVersion, "The specified version '%s' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"", s)
		return 0, false
	}
	return int32(v), true
}

// SchemaVersionBody is a subject's version as GET answers it.
type SchemaVersionBody struct {
	Subject    string       `json:"subject"`
	Version    int32        `json:"version"`
	ID         int32        `json:"id"`
	SchemaType string       `json:"schemaType,omitempty"`
	References []schema.Ref `json:"references,omitempty"`
	Schema     string       `json:"schema"`
}

// schemaType is the schemaType field of an answer: omitted for Avro, as
// Confluent's registry omits it.
func schemaType(t string) string {
	if t == schema.TypeAvro {
		return ""
	}
	return t
}

func srSubjects(opts Options, w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("subjectPrefix")
	// Without the cluster's DESCRIBE, the subjects of the topics the
	// principal may DESCRIBE (registryACL).
	all := allowed(r, fsm.ACLResourceCluster, fsm.ACLOpDescribe, ownClusterName(r))
	out := []string{}
	for _, s := range srView(opts, r).Subjects(boolParam(r, "deleted")) {
		if !strings.HasPrefix(s, prefix) {
			continue
		}
		if !all {
			if topic, ok := subjectTopic(s); !ok || !allowed(r, fsm.ACLResourceTopic, fsm.ACLOpDescribe, qualified(r, topic)) {
				continue
			}
		}
		out = append(out, s)
	}
	srJSON(w, http.StatusOK, out)
}

func srVersions(opts Options, w http.ResponseWriter, r *http.Request) {
	subject := r.PathValue("subject")
	vs, ok := srView(opts, r).Versions(subject, boolParam(r, "deleted"))
	if !ok {
		srError(w, schemas.ErrSubjectNotFound, "Subject '%s' not found.", subject)
		return
	}
	out := make([]int32, len(vs))
	for i, v := range vs {
		out[i] = v.Version
	}
	srJSON(w, http.StatusOK, out)
}

// findVersion finds the path's subject and version, or answers why not.
func findVersion(opts Options, w http.ResponseWriter, r *http.Request) (fsm.SchemaVersion, *fsm.StoredSchema, bool) {
	subject := r.PathValue("subject")
	v, ok := parseVersion(w, r.PathValue("version"))
	if !ok {
		return fsm.SchemaVersion{}, nil, false
	}
	tv := srView(opts, r)
	if !tv.HasSubject(subject) {
		srError(w, schemas.ErrSubjectNotFound, "Subject '%s' not found.", subject)
		return fsm.SchemaVersion{}, nil, false
	}
	ver, st, ok := tv.Version(subject, v, boolParam(r, "deleted"))
	if !ok {
		if _, live := tv.Versions(subject, false); !live && !boolParam(r, "deleted") {
			srError(w, schemas.ErrSubjectNotFound, "Subject '%s' not found.", subject)
		} else {
			srError(w, schemas.ErrVersionNotFound, "Version %s not found.", r.PathValue("version"))
		}
		return fsm.SchemaVersion{}, nil, false
	}
	return ver, st, true
}

func srVersion(opts Options, w http.ResponseWriter, r *http.Request) {
	ver, st, ok := findVersion(opts, w, r)
	if ok {
		srJSON(w, http.StatusOK, SchemaVersionBody{Subject: r.PathValue("subject"), Version: ver.Version, ID: st.ID,
			SchemaType: schemaType(st.Type), References: st.Refs, Schema: st.Text})
	}
}

func srVersionSchema(opts Options, w http.ResponseWriter, r *http.Request) {
	if _, st, ok := findVersion(opts, w, r); ok {
		w.Header().Set("Content-Type", registryContentType)
		w.Write([]byte(st.Text))
	}
}

func srReferencedBy(opts Options, w http.ResponseWriter, r *http.Request) {
	ver, _, ok := findVersion(opts, w, r)
	if !ok {
		return
	}
	tv := srView(opts, r)
	subject := r.PathValue("subject")
	out := []int32{}
	for _, id := range tv.IDs() {
		st, _ := tv.Schema(id)
		for _, ref := range st.Refs {
			if ref.Subject == subject && ref.Version == ver.Version && len(tv.Uses(id, false)) > 0 {
				out = append(out, id)
				break
			}
		}
	}
	srJSON(w, http.StatusOK, out)
}

// RegisterBody is the body of a registration, a lookup or a compatibility
// check. Metadata and rule sets are accepted and ignored.
type RegisterBody struct {
	Schema     string          `json:"schema"`
	SchemaType string          `json:"schemaType,omitempty"`
	References []schema.Ref    `json:"references,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
	RuleSet    json.RawMessage `json:"ruleSet,omitempty"`
	// ID and Version are a registration's in IMPORT mode, which is not
	// served: a registration that names an id is refused.
	ID      int32 `json:"id,omitempty"`
	Version int32 `json:"version,omitempty"`
}

// decodeRegisterBody reads a RegisterBody, or answers why it cannot.
func decodeRegisterBody(w http.ResponseWriter, r *http.Request) (RegisterBody, bool) {
	var b RegisterBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRegistryBody)).Decode(&b); err != nil {
		srError(w, 422, "Unprocessable entity: the body is not {schema, schemaType, references}: %v", err)
		return b, false
	}
	if b.Schema == "" {
		srError(w, schemas.ErrInvalidSchema, "Invalid schema: empty schema")
		return b, false
	}
	return b, true
}

// srSubmit submits c and answers its refusal; ok is false when it was
// refused (answered).
func srSubmit(opts Options, w http.ResponseWriter, r *http.Request, c fsm.Command) (*fsmSchemaResult, bool) {
	if res := fsm.CheckCommand(c); res.Code != 0 {
		ec := schemas.ErrInvalidSubject
		if res.Schema != nil && res.Schema.ErrorCode != 0 {
			ec = int(res.Schema.ErrorCode)
		}
		srError(w, ec, "%s", res.Message)
		return nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := opts.Broker.SubmitOne(ctx, c)
	switch {
	case err != nil:
		srError(w, 50002, "the change was not confirmed (it may still be applied): %v", err)
		return nil, false
	case res.Code != 0:
		ec := schemas.ErrRegistryStore
		if res.Schema != nil && res.Schema.ErrorCode != 0 {
			ec = int(res.Schema.ErrorCode)
		}
		srError(w, ec, "%s", res.Message)
		return nil, false
	}
	w.Header().Set(HeightHeader, strconv.FormatInt(res.Height, 10))
	out := &fsmSchemaResult{}
	if res.Schema != nil {
		out.SchemaResult = *res.Schema
	}
	return out, true
}

// fsmSchemaResult is what a committed command said.
type fsmSchemaResult struct{ fsm.SchemaResult }

// registryACL is what a registry route needs: DESCRIBE on the CLUSTER
// resource to read (lookups and compatibility checks change nothing),
// ALTER to change; a tenant's user, on its tenant's own CLUSTER resource.
//
// A route about one subject is also granted, as Confluent's Topic ACL
// Authorizer grants it, by an ACL on the topic the subject belongs to
// under TopicNameStrategy (<topic>-key, <topic>-value): DESCRIBE reads
// the subject (its versions, lookups, its level), WRITE changes it
// (registrations, deletes, its level) and checks compatibility against
// it. Confluent's asks READ to read; DESCRIBE is what Kafka's READ and
// WRITE both imply, so a producer that may write a topic reads its
// schemas too. A route about one schema id is granted by DESCRIBE on the
// topic of any subject that has the id. GET /subjects answers a principal
// without the cluster ACL the subjects whose topics it may DESCRIBE. The
// registry's own level and mode stay the cluster's.
func registryACL(pattern string) routeACL {
	op := fsm.ACLOpAlter
	if strings.HasPrefix(pattern, "GET ") || strings.HasPrefix(pattern, "POST /compatibility/") || pattern == "POST /subjects/{subject}" {
		op = fsm.ACLOpDescribe
	}
	acl := routeACL{resourceType: fsm.ACLResourceCluster, op: op, name: ownClusterName}
	switch {
	case pattern == "GET /subjects":
		acl.topicOp, acl.filtered = fsm.ACLOpDescribe, true
	case strings.Contains(pattern, "{id}"):
		acl.topicOp = fsm.ACLOpDescribe
	case strings.Contains(pattern, "{subject}"):
		acl.topicOp = fsm.ACLOpDescribe
		if op == fsm.ACLOpAlter || strings.HasPrefix(pattern, "POST /compatibility/") {
			acl.topicOp = fsm.ACLOpWrite
		}
	}
	return acl
}

// subjectTopic is the topic subject belongs to under TopicNameStrategy.
func subjectTopic(subject string) (string, bool) {
	for _, suffix := range []string{"-value", "-key"} {
		if t, ok := strings.CutSuffix(subject, suffix); ok && t != "" {
			return t, true
		}
	}
	return "", false
}

// registrySubjectsOf are the subjects r's route is about: its subject, or
// the subjects that have its schema id (deleted ones too).
func registrySubjectsOf(opts Options, r *http.Request) []string {
	if s := r.PathValue("subject"); s != "" {
		return []string{s}
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 32)
	if err != nil {
		return nil
	}
	var out []string
	for _, u := range srView(opts, r).Uses(int32(id), true) {
		out = append(out, u.Subject)
	}
	return out
}

func srRegister(opts Options, w http.ResponseWriter, r *http.Request) {
	b, ok := decodeRegisterBody(w, r)
	if !ok {
		return
	}
	if b.ID > 0 {
		srError(w, schemas.ErrOperationNotPermitted, "a schema id may be given only in IMPORT mode, which this registry does not serve (docs/schemas.md): register without one")
		return
	}
	res, ok := srSubmit(opts, w, r, fsm.RegisterSchema{Tenant: registryTenant(r), Subject: r.PathValue("subject"),
		Type: b.SchemaType, Text: b.Schema, Refs: b.References, Normalize: boolParam(r, "normalize")})
	if ok {
		srJSON(w, http.StatusOK, struct {
			ID int32 `json:"id"`
		}{res.ID})
	}
}

func srLookup(opts Options, w http.ResponseWriter, r *http.Request) {
	b, ok := decodeRegisterBody(w, r)
	if !ok {
		return
	}
	subject := r.PathValue("subject")
	tv := srView(opts, r)
	if !tv.HasSubject(subject) {
		srError(w, schemas.ErrSubjectNotFound, "Subject '%s' not found.", subject)
		return
	}
	p, err := schema.Parse(schema.Def{Type: b.SchemaType, Text: b.Schema, Refs: b.References}, tv.Resolver())
	if err != nil {
		srError(w, schemas.ErrInvalidSchema, "Error while looking up schema under subject %s: %v", subject, err)
		return
	}
	ver, st, ok := tv.Lookup(subject, p, boolParam(r, "deleted"))
	if !ok {
		srError(w, schemas.ErrSchemaNotFound, "Schema not found")
		return
	}
	srJSON(w, http.StatusOK, SchemaVersionBody{Subject: subject, Version: ver.Version, ID: st.ID,
		SchemaType: schemaType(st.Type), References: st.Refs, Schema: st.Text})
}

func srDeleteVersion(opts Options, w http.ResponseWriter, r *http.Request) {
	v, ok := parseVersion(w, r.PathValue("version"))
	if !ok {
		return
	}
	res, ok := srSubmit(opts, w, r, fsm.DeleteSchemaVersion{Tenant: registryTenant(r), Subject: r.PathValue("subject"),
		Version: v, Permanent: boolParam(r, "permanent")})
	if ok {
		srJSON(w, http.StatusOK, res.Version)
	}
}

func srDeleteSubject(opts Options, w http.ResponseWriter, r *http.Request) {
	res, ok := srSubmit(opts, w, r, fsm.DeleteSchemaSubject{Tenant: registryTenant(r), Subject: r.PathValue("subject"),
		Permanent: boolParam(r, "permanent")})
	if ok {
		out := res.Versions
		if out == nil {
			out = []int32{}
		}
		srJSON(w, http.StatusOK, out)
	}
}

// findID finds the path's schema id, or answers why not.
func findID(opts Options, w http.ResponseWriter, r *http.Request) (*fsm.StoredSchema, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 32)
	var st *fsm.StoredSchema
	ok := err == nil
	if ok {
		st, ok = srView(opts, r).Schema(int32(id))
	}
	if !ok {
		srError(w, schemas.ErrSchemaNotFound, "Schema %s not found", r.PathValue("id"))
	}
	return st, ok
}

func srSchemaByID(opts Options, w http.ResponseWriter, r *http.Request) {
	st, ok := findID(opts, w, r)
	if ok {
		srJSON(w, http.StatusOK, struct {
			SchemaType string       `json:"schemaType,omitempty"`
			References []schema.Ref `json:"references,omitempty"`
			Schema     string       `json:"schema"`
		}{schemaType(st.Type), st.Refs, st.Text})
	}
}

func srSchemaTextByID(opts Options, w http.ResponseWriter, r *http.Request) {
	if st, ok := findID(opts, w, r); ok {
		w.Header().Set("Content-Type", registryContentType)
		w.Write([]byte(st.Text))
	}
}

func srIDVersions(opts Options, w http.ResponseWriter, r *http.Request) {
	st, ok := findID(opts, w, r)
	if ok {
		out := srView(opts, r).Uses(st.ID, boolParam(r, "deleted"))
		if out == nil {
			out = []fsm.SchemaUse{}
		}
		srJSON(w, http.StatusOK, out)
	}
}

func srIDSubjects(opts Options, w http.ResponseWriter, r *http.Request) {
	st, ok := findID(opts, w, r)
	if ok {
		out := []string{}
		for _, u := range srView(opts, r).Uses(st.ID, boolParam(r, "deleted")) {
			if len(out) == 0 || out[len(out)-1] != u.Subject {
				out = append(out, u.Subject)
			}
		}
		srJSON(w, http.StatusOK, out)
	}
}

// srTypes lists the schema types the chain's app version takes: Protobuf
// from fsm.ProtobufVersion.
func srTypes(opts Options, w http.ResponseWriter, _ *http.Request) {
	types := schema.Types
	if opts.Broker.Upgrade().Version < fsm.ProtobufVersion {
		types = slices.DeleteFunc(slices.Clone(types), func(t string) bool { return t == schema.TypeProtobuf })
	}
	srJSON(w, http.StatusOK, types)
}

// ConfigBody is a compatibility level as GET /config answers it
// (compatibilityLevel) and PUT takes it (compatibility).
type ConfigBody struct {
	Compatibility      string `json:"compatibility,omitempty"`
	CompatibilityLevel string `json:"compatibilityLevel,omitempty"`
}

func srConfigGet(opts Options, w http.ResponseWriter, r *http.Request) {
	tv := srView(opts, r)
	subject := r.PathValue("subject")
	level := tv.Level
	if subject != "" {
		level = tv.SubjectLevel(subject)
		if level == "" && !boolParam(r, "defaultToGlobal") {
			srError(w, schemas.ErrSubjectLevelNotSet, "Subject '%s' does not have subject-level compatibility configured", subject)
			return
		}
	}
	if level == "" {
		level = tv.EffectiveLevel("")
	}
	srJSON(w, http.StatusOK, ConfigBody{CompatibilityLevel: level})
}

func srConfigPut(opts Options, w http.ResponseWriter, r *http.Request) {
	var b ConfigBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&b); err != nil {
		srError(w, 422, "Unprocessable entity: the body is not {compatibility}: %v", err)
		return
	}
	level := strings.ToUpper(b.Compatibility)
	if level == "" {
		level = strings.ToUpper(b.CompatibilityLevel)
	}
	if !schema.ValidLevel(level) {
		srError(w, schemas.ErrInvalidLevel, "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive")
		return
	}
	if _, ok := srSubmit(opts, w, r, fsm.SetSchemaConfig{Tenant: registryTenant(r), Subject: r.PathValue("subject"), Level: level}); ok {
		srJSON(w, http.StatusOK, ConfigBody{Compatibility: level})
	}
}

func srConfigDelete(opts Options, w http.ResponseWriter, r *http.Request) {
	tv := srView(opts, r)
	subject := r.PathValue("subject")
	old := tv.Level
	if subject != "" {
		old = tv.SubjectLevel(subject)
	}
	if subject == "" && old == "" {
		old = tv.EffectiveLevel("")
	}
	if _, ok := srSubmit(opts, w, r, fsm.SetSchemaConfig{Tenant: registryTenant(r), Subject: subject, Remove: true}); ok {
		// Confluent's registry answers its Config (compatibilityLevel);
		// some clients (franz-go's) read compatibility: both.
		srJSON(w, http.StatusOK, ConfigBody{CompatibilityLevel: old, Compatibility: old})
	}
}

// ModeBody is the registry's mode.
type ModeBody struct {
	Mode string `json:"mode"`
}

func srModeGet(opts Options, w http.ResponseWriter, r *http.Request) {
	srJSON(w, http.StatusOK, ModeBody{Mode: srView(opts, r).EffectiveMode()})
}

func srModePut(opts Options, w http.ResponseWriter, r *http.Request) {
	var b ModeBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&b); err != nil {
		srError(w, 422, "Unprocessable entity: the body is not {mode}: %v", err)
		return
	}
	mode := strings.ToUpper(b.Mode)
	if mode != schemas.ModeReadWrite && mode != schemas.ModeReadOnly {
		srError(w, schemas.ErrInvalidMode, "Invalid mode. Valid values are READWRITE and READONLY (IMPORT is not served: docs/schemas.md)")
		return
	}
	if _, ok := srSubmit(opts, w, r, fsm.SetSchemaMode{Tenant: registryTenant(r), Mode: mode}); ok {
		srJSON(w, http.StatusOK, ModeBody{Mode: mode})
	}
}

// CompatibilityBody answers a compatibility check.
type CompatibilityBody struct {
	IsCompatible bool     `json:"is_compatible"`
	Messages     []string `json:"messages,omitempty"`
}

// srCompatibility checks a schema against a version of a subject (in the
// direction of the subject's level), or without a version (or with
// "latest") against the versions a registration would be checked against.
func srCompatibility(opts Options, w http.ResponseWriter, r *http.Request) {
	b, ok := decodeRegisterBody(w, r)
	if !ok {
		return
	}
	subject := r.PathValue("subject")
	tv := srView(opts, r)
	v := int32(fsm.SchemaLatest)
	if s := r.PathValue("version"); s != "" {
		if v, ok = parseVersion(w, s); !ok {
			return
		}
	}
	p, err := schema.Parse(schema.Def{Type: b.SchemaType, Text: b.Schema, Refs: b.References}, tv.Resolver())
	if err != nil {
		srError(w, schemas.ErrInvalidSchema, "Invalid schema: %v", err)
		return
	}
	level := tv.EffectiveLevel(subject)
	var against []*fsm.StoredSchema
	if v == fsm.SchemaLatest && r.PathValue("version") == "" {
		vs, _ := tv.Versions(subject, false)
		for _, x := range vs {
			st, _ := tv.Schema(x.ID)
			against = append(against, st)
		}
	} else {
		if !tv.HasSubject(subject) {
			srError(w, schemas.ErrSubjectNotFound, "Subject '%s' not found.", subject)
			return
		}
		_, st, ok := tv.Version(subject, v, false)
		if !ok {
			srError(w, schemas.ErrVersionNotFound, "Version %s not found.", r.PathValue("version"))
			return
		}
		against = []*fsm.StoredSchema{st}
	}
	var earlier []*schema.Schema
	for _, st := range against {
		old, err := tv.Parse(st)
		if err != nil {
			srError(w, schemas.ErrRegistryStore, "schema %d does not parse: %v", st.ID, err)
			return
		}
		earlier = append(earlier, old)
	}
	problems := schema.Compatible(level, p, earlier)
	out := CompatibilityBody{IsCompatible: len(problems) == 0}
	if boolParam(r, "verbose") {
		out.Messages = problems
		if out.Messages == nil {
			out.Messages = []string{}
		}
	}
	srJSON(w, http.StatusOK, out)
}
