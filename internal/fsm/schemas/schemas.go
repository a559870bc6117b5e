// Package schemas is the state machine's schema registry (issue 22,
// docs/schemas.md): the schemas of each tenant, its subjects and their
// versions, its compatibility levels and its mode, as Confluent's Schema
// Registry keeps them, but in the replicated, authenticated state: every
// broker assigns the same ids and versions and answers the same, and any
// of it can be proven against a signed header like all state.
//
// Each tenant (the default tenant "" included) has a registry of its own:
// its own ids, counted from 1, its subjects, its levels and its mode; no
// command or read reaches another tenant's. Five commands, applied from
// app version 13 (SchemasVersion; Protobuf schemas from 14,
// ProtobufVersion): RegisterSchema (a schema under a
// subject: the same schema registered again under the subject answers its
// version; otherwise it is checked against the subject's live versions at
// the subject's compatibility level, or the registry's, and becomes the
// next version, with the id the tenant already gave the same schema or the
// next one), DeleteSchemaVersion and DeleteSchemaSubject (soft, then hard
// with Permanent, as Confluent's registry deletes: a hard delete needs a
// soft one first, and a version another schema references cannot be
// deleted), SetSchemaConfig (a compatibility level, the registry's or a
// subject's) and SetSchemaMode (READWRITE or READONLY). A refusal carries
// the error code Confluent's registry gives (core.SchemaResult) beside a
// Kafka code.
//
// Parsing and compatibility are package schema's (internal/schema), which
// decides the same on every broker. What two schemas being "the same"
// means is stored with each (its canonical form), so a later library that
// spelled the form otherwise would not change what the state holds.
//
// It uses cluster (the app version) and topics (whose produce checks
// validate records against the registry: validate.go). The tenants module removes a
// deleted tenant's registry (RemoveTenant) and tells it which tenants
// exist (TenantExists).
//
// State, in the metadata store (tenant is "" for the default tenant):
//
//	h/m/<tenant>                    the registry: next id, level, mode
//	h/i/<tenant> 0x00 <u32 id>      a schema: type, text, references, canonical form
//	h/s/<tenant> 0x00 <subject>     a subject: its level and versions
package schemas

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/schema"
)

// ModSchemas is the schemas module.
const ModSchemas core.Module = "schemas"

// The schemas module's commands.
const (
	KindRegisterSchema      core.Kind = 37
	KindDeleteSchemaVersion core.Kind = 38
	KindDeleteSchemaSubject core.Kind = 39
	KindSetSchemaConfig     core.Kind = 40
	KindSetSchemaMode       core.Kind = 41
)

// SchemasVersion is the app version from which the registry exists.
const SchemasVersion = 13

// ProtobufVersion is the app version from which the registry takes
// Protobuf schemas; under version 13 registering one is refused as an
// invalid schema, as version 13's binaries refuse it.
const ProtobufVersion = 14

// The registry's modes.
const (
	ModeReadWrite = "READWRITE"
	ModeReadOnly  = "READONLY"
)

// Modes are the modes a registry may be in.
var Modes = []string{ModeReadOnly, ModeReadWrite}

// Error codes of Confluent's Schema Registry that the commands answer
// (SchemaResult.ErrorCode), and the REST API with them.
const (
	ErrSubjectNotFound       = 40401
	ErrVersionNotFound       = 40402
	ErrSchemaNotFound        = 40403
	ErrSubjectSoftDeleted    = 40404
	ErrSubjectNotSoftDeleted = 40405
	ErrVersionSoftDeleted    = 40406
	ErrVersionNotSoftDeleted = 40407
	ErrSubjectLevelNotSet    = 40408
	ErrIncompatible          = 409
	ErrInvalidSchema         = 42201
	ErrInvalidVersion        = 42202
	ErrInvalidLevel          = 42203
	ErrInvalidMode           = 42204
	ErrOperationNotPermitted = 42205
	ErrReferenceExists       = 42206
	ErrInvalidSubject        = 42208
	ErrRegistryStore         = 50001
)

// Latest is the version that names a subject's latest live version.
const Latest = -1

// Limits of one registry's contents: they bound what one command costs.
const (
	// MaxSubject bounds a subject's name, in bytes.
	MaxSubject = 1024
	// MaxVersions bounds the versions one subject holds, deleted or not.
	MaxVersions = 10000
)

// RegisterSchema registers a schema under a subject.
type RegisterSchema struct {
	Tenant  string
	Subject string
	Type    string
	Text    string
	Refs    []schema.Ref
	// Normalize stores and compares the schema in its canonical form
	// (Confluent's ?normalize=true).
	Normalize bool
}

// DeleteSchemaVersion deletes one version of a subject (Latest: its
// latest live one): soft, or with Permanent hard.
type DeleteSchemaVersion struct {
	Tenant    string
	Subject   string
	Version   int32
	Permanent bool
}

// DeleteSchemaSubject deletes every version of a subject: soft, or with
// Permanent hard (the subject's level goes too).
type DeleteSchemaSubject struct {
	Tenant    string
	Subject   string
	Permanent bool
}

// SetSchemaConfig sets (or with Remove removes) the compatibility level of
// a subject, or with Subject "" of the registry.
type SetSchemaConfig struct {
	Tenant  string
	Subject string
	Level   string
	Remove  bool
}

// SetSchemaMode sets the registry's mode.
type SetSchemaMode struct {
	Tenant string
	Mode   string
}

func (RegisterSchema) Kind() core.Kind      { return KindRegisterSchema }
func (DeleteSchemaVersion) Kind() core.Kind { return KindDeleteSchemaVersion }
func (DeleteSchemaSubject) Kind() core.Kind { return KindDeleteSchemaSubject }
func (SetSchemaConfig) Kind() core.Kind     { return KindSetSchemaConfig }
func (SetSchemaMode) Kind() core.Kind       { return KindSetSchemaMode }

func (c RegisterSchema) Encode(w *core.Writer) {
	w.Str(c.Tenant)
	w.Str(c.Subject)
	w.Str(c.Type)
	w.Str(c.Text)
	encodeRefs(w, c.Refs)
	w.Bool(c.Normalize)
}

func encodeRefs(w *core.Writer, refs []schema.Ref) {
	w.Count(len(refs))
	for _, r := range refs {
		w.Str(r.Name)
		w.Str(r.Subject)
		w.I32(r.Version)
	}
}

func decodeRefs(r *core.Reader) []schema.Ref {
	var refs []schema.Ref
	for i, n := 0, r.Count(6); i < n && r.E == nil; i++ {
		refs = append(refs, schema.Ref{Name: r.Str(), Subject: r.Str(), Version: r.I32()})
	}
	return refs
}

func decodeRegisterSchema(r *core.Reader) RegisterSchema {
	return RegisterSchema{Tenant: r.Str(), Subject: r.Str(), Type: r.Str(), Text: r.Str(), Refs: decodeRefs(r), Normalize: r.Bool()}
}

func (c DeleteSchemaVersion) Encode(w *core.Writer) {
	w.Str(c.Tenant)
	w.Str(c.Subject)
	w.I32(c.Version)
	w.Bool(c.Permanent)
}

func decodeDeleteSchemaVersion(r *core.Reader) DeleteSchemaVersion {
	return DeleteSchemaVersion{Tenant: r.Str(), Subject: r.Str(), Version: r.I32(), Permanent: r.Bool()}
}

func (c DeleteSchemaSubject) Encode(w *core.Writer) {
	w.Str(c.Tenant)
	w.Str(c.Subject)
	w.Bool(c.Permanent)
}

func decodeDeleteSchemaSubject(r *core.Reader) DeleteSchemaSubject {
	return DeleteSchemaSubject{Tenant: r.Str(), Subject: r.Str(), Permanent: r.Bool()}
}

func (c SetSchemaConfig) Encode(w *core.Writer) {
	w.Str(c.Tenant)
	w.Str(c.Subject)
	w.Str(c.Level)
	w.Bool(c.Remove)
}

func decodeSetSchemaConfig(r *core.Reader) SetSchemaConfig {
	return SetSchemaConfig{Tenant: r.Str(), Subject: r.Str(), Level: r.Str(), Remove: r.Bool()}
}

func (c SetSchemaMode) Encode(w *core.Writer) {
	w.Str(c.Tenant)
	w.Str(c.Mode)
}

func decodeSetSchemaMode(r *core.Reader) SetSchemaMode {
	return SetSchemaMode{Tenant: r.Str(), Mode: r.Str()}
}

// fail is a refusal with Confluent's code ec beside the Kafka code.
func fail(code int16, ec int32, msg string) core.Result {
	return core.Result{Code: code, Message: msg, Schema: &core.SchemaResult{ErrorCode: ec}}
}

// CheckSubject says why s cannot be a subject's name.
func CheckSubject(s string) error {
	switch {
	case s == "":
		return errors.New("a subject needs a name")
	case len(s) > MaxSubject:
		return fmt.Errorf("subject of %d bytes: at most %d", len(s), MaxSubject)
	case !utf8.ValidString(s):
		return errors.New("a subject's name is UTF-8")
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("a subject's name has no control characters")
	}
	return nil
}

func checkTenant(t string) error {
	if t == "" {
		return nil
	}
	return core.ValidTenantName(t)
}

// checkCommand is every schema command's stateless check.
func checkCommand(c core.Command) core.Result {
	var tenant, subject string
	needSubject := true
	switch c := c.(type) {
	case RegisterSchema:
		tenant, subject = c.Tenant, c.Subject
		if len(c.Text) > schema.MaxText || len(c.Refs) > schema.MaxRefs {
			return fail(kerr.InvalidRequest.Code, ErrInvalidSchema, fmt.Sprintf("a schema is at most %d bytes with %d references", schema.MaxText, schema.MaxRefs))
		}
		for _, r := range c.Refs {
			if CheckSubject(r.Subject) != nil || (r.Version < 1 && r.Version != Latest) {
				return fail(kerr.InvalidRequest.Code, ErrInvalidSchema, fmt.Sprintf("reference %q names no subject version", r.Name))
			}
		}
	case DeleteSchemaVersion:
		tenant, subject = c.Tenant, c.Subject
		if c.Version < 1 && c.Version != Latest {
			return fail(kerr.InvalidRequest.Code, ErrInvalidVersion, fmt.Sprintf("version %d: a version is a number from 1, or latest", c.Version))
		}
	case DeleteSchemaSubject:
		tenant, subject = c.Tenant, c.Subject
	case SetSchemaConfig:
		tenant, subject, needSubject = c.Tenant, c.Subject, c.Subject != ""
		if !c.Remove && !schema.ValidLevel(c.Level) {
			return fail(kerr.InvalidRequest.Code, ErrInvalidLevel, fmt.Sprintf("compatibility level %q: one of %v", c.Level, schema.Levels))
		}
	case SetSchemaMode:
		tenant, needSubject = c.Tenant, false
		if !slices.Contains(Modes, c.Mode) {
			return fail(kerr.InvalidRequest.Code, ErrInvalidMode, fmt.Sprintf("mode %q: one of %v", c.Mode, Modes))
		}
	}
	if err := checkTenant(tenant); err != nil {
		return fail(kerr.InvalidRequest.Code, ErrInvalidSubject, err.Error())
	}
	if needSubject {
		if err := CheckSubject(subject); err != nil {
			return fail(kerr.InvalidRequest.Code, ErrInvalidSubject, err.Error())
		}
	}
	return core.Result{}
}

// Schemas is the schemas module, its part of a state machine.
type Schemas struct {
	*core.Machine
	cluster *cluster.Cluster

	// TenantExists reports whether a tenant other than the default one
	// exists (set by the tenants module; nil: none does).
	TenantExists func(tenant string) bool

	regs map[string]*registry // by tenant; never nil once loaded
	// parsedCache holds schemas parsed for validation (validate.go).
	parsedCache map[parsedKey]parsedEntry
	// reads holds schemas parsed for reads by subject (field.go).
	reads readParses
	dirty dirtySet
	fresh map[string]bool // tenants changed since the last publish
	view  viewPointer
}

// NewSchemas is the schemas module of the machine m.
func NewSchemas(m *core.Machine, c *cluster.Cluster) *Schemas {
	return &Schemas{Machine: m, cluster: c}
}

// schemasOf is the schemas module of the machine m.
func schemasOf(m *core.Machine) *Schemas {
	return m.App.(interface{ SchemasModule() *Schemas }).SchemasModule()
}

// RegisterSchemas registers the schemas module: its commands, its
// state's step and its check of produced records (validate.go).
func RegisterSchemas(r *core.Registry, h *topics.TopicHooks) {
	registerValidation(h)
	core.RegisterModuleCommand(r, schemasOf, KindRegisterSchema, "RegisterSchema", ModSchemas, decodeRegisterSchema, checkCommand,
		func(f *Schemas, c RegisterSchema, _ core.CmdAt) core.Result {
			return f.apply(c.Tenant, func(g *registry) core.Result { return f.register(g, c) })
		})
	core.RegisterModuleCommand(r, schemasOf, KindDeleteSchemaVersion, "DeleteSchemaVersion", ModSchemas, decodeDeleteSchemaVersion, checkCommand,
		func(f *Schemas, c DeleteSchemaVersion, _ core.CmdAt) core.Result {
			return f.apply(c.Tenant, func(g *registry) core.Result { return f.deleteVersion(g, c) })
		})
	core.RegisterModuleCommand(r, schemasOf, KindDeleteSchemaSubject, "DeleteSchemaSubject", ModSchemas, decodeDeleteSchemaSubject, checkCommand,
		func(f *Schemas, c DeleteSchemaSubject, _ core.CmdAt) core.Result {
			return f.apply(c.Tenant, func(g *registry) core.Result { return f.deleteSubject(g, c) })
		})
	core.RegisterModuleCommand(r, schemasOf, KindSetSchemaConfig, "SetSchemaConfig", ModSchemas, decodeSetSchemaConfig, checkCommand,
		func(f *Schemas, c SetSchemaConfig, _ core.CmdAt) core.Result {
			return f.apply(c.Tenant, func(g *registry) core.Result { return f.setConfig(g, c) })
		})
	core.RegisterModuleCommand(r, schemasOf, KindSetSchemaMode, "SetSchemaMode", ModSchemas, decodeSetSchemaMode, checkCommand,
		func(f *Schemas, c SetSchemaMode, _ core.CmdAt) core.Result {
			return f.apply(c.Tenant, func(g *registry) core.Result { return f.setMode(g, c) })
		})
	core.RegisterModuleStep(r, schemasOf, core.ModuleStep[*Schemas]{Rank: 138, Name: "schemas", Module: ModSchemas,
		Empty: emptySchemas, Load: loadSchemas, Stage: stageSchemas, Publish: publishSchemas})
}

// apply runs do on tenant's registry (made when missing) after the
// checks every command shares: the app version and the tenant.
func (f *Schemas) apply(tenant string, do func(*registry) core.Result) core.Result {
	if v := f.cluster.Version; v < SchemasVersion {
		return fail(kerr.UnsupportedVersion.Code, ErrOperationNotPermitted, fmt.Sprintf("the schema registry needs app version %d; this chain runs %d (stele cluster upgrade)", SchemasVersion, v))
	}
	if tenant != "" && (f.TenantExists == nil || !f.TenantExists(tenant)) {
		return fail(kerr.InvalidRequest.Code, ErrInvalidSubject, fmt.Sprintf("tenant %s does not exist", tenant))
	}
	g := f.regs[tenant]
	created := g == nil
	if created {
		g = newRegistry(tenant)
		f.regs[tenant] = g
	}
	r := do(g)
	if created && r.Code != 0 && g.empty() {
		// A refused command leaves no registry behind (none was stored).
		delete(f.regs, tenant)
	}
	return r
}
