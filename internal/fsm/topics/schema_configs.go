package topics

import (
	"fmt"
	"strings"
)

// Schema validation's topic configs (docs/schemas.md), from app version 13
// (SchemaValidationVersion): stele.key.schema.validation and
// stele.value.schema.validation say what each record's key and value
// must be, stele.key.subject.name.strategy and
// stele.value.subject.name.strategy under which registry subject its
// schema id must be registered. The names follow Confluent Server's
// confluent.value.schema.validation and confluent.value.subject.name.strategy;
// a strategy is named as Confluent's serializers name it, by its short
// name or its Java class. The schemas module checks produced records
// against them (schemas/validate.go).

// The values of stele.*.schema.validation.
const (
	SchemaValidationNone = "none"
	SchemaValidationID   = "id"
	SchemaValidationFull = "full"
)

// SchemaValidations are the values of stele.*.schema.validation, sorted.
var SchemaValidations = []string{SchemaValidationFull, SchemaValidationID, SchemaValidationNone}

// The subject name strategies.
const (
	TopicNameStrategy       = "TopicNameStrategy"
	RecordNameStrategy      = "RecordNameStrategy"
	TopicRecordNameStrategy = "TopicRecordNameStrategy"
)

// strategyPackage is the Java package of Confluent's strategies.
const strategyPackage = "io.confluent.kafka.serializers.subject."

// SchemaCheck is what a topic requires of its records' keys or values.
type SchemaCheck struct {
	// Level is SchemaValidationNone, SchemaValidationID or
	// SchemaValidationFull.
	Level string
	// Strategy is TopicNameStrategy, RecordNameStrategy or
	// TopicRecordNameStrategy.
	Strategy string
}

// On reports whether the records are checked.
func (c SchemaCheck) On() bool {
	return c.Level == SchemaValidationID || c.Level == SchemaValidationFull
}

// schemaCheck resolves a validation level and a strategy's name.
func schemaCheck(level, strategy string) SchemaCheck {
	return SchemaCheck{Level: level, Strategy: strings.TrimPrefix(strategy, strategyPackage)}
}

// SubjectNameStrategy checks a stele.*.subject.name.strategy value.
func SubjectNameStrategy(v string) error {
	switch strings.TrimPrefix(v, strategyPackage) {
	case TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy:
		return nil
	}
	return fmt.Errorf("invalid value %s for a subject name strategy: TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy (or %s and one of them)", v, strategyPackage)
}
