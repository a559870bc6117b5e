package fsm

import (
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/schemas"
)

// The schemas module's names the broker uses, under the package it imports
// (core_api.go says why).

type (
	RegisterSchema      = schemas.RegisterSchema
	DeleteSchemaVersion = schemas.DeleteSchemaVersion
	DeleteSchemaSubject = schemas.DeleteSchemaSubject
	SetSchemaConfig     = schemas.SetSchemaConfig
	SetSchemaMode       = schemas.SetSchemaMode
	SchemasView         = schemas.View
	SchemaRegistryView  = schemas.TenantView
	StoredSchema        = schemas.Stored
	SchemaVersion       = schemas.Version
	SchemaUse           = schemas.SubjectVersion
	SchemaResult        = core.SchemaResult
)

// SchemasVersion is the app version from which the registry exists.
const SchemasVersion = schemas.SchemasVersion

// ProtobufVersion is the app version from which the registry takes
// Protobuf schemas.
const ProtobufVersion = schemas.ProtobufVersion

// SchemaLatest names a subject's latest live version.
const SchemaLatest = schemas.Latest
