package topics

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/schema"
	"github.com/stele-io/stele/internal/subject"
)

// Topic configs by app version. A config added by an app version
// (ConfigDef.Since) is unknown under the versions before it, as it is to
// the binaries that predate it: a CreateTopics or AlterConfigs naming it
// gets INVALID_CONFIG, "unknown topic config name", with the result those
// binaries give, so brokers of mixed binaries agree on every result while
// an upgrade is under way. The gate runs before the command's own check
// (the check knows every config), under the old versions only.

// SubjectsVersion is the app version from which records have subjects
// (docs/subjects.md): the topic configs stele.subject.from and
// stele.subject.required, and a produce's check of each record's subject
// (produce.go). Under older versions the stele-subject header is a header
// like any other.
const SubjectsVersion = 11

// ViewsVersion is the app version from which a topic may be a view
// (views.go, docs/subjects.md): the topic configs stele.view.from,
// stele.view.subject and stele.view.order, and the copying of matching
// records into views as their sources' records are applied.
const ViewsVersion = 12

// SchemaValidationVersion is the app version from which a topic may
// require its records' keys and values to be written with registered
// schemas (schema_configs.go, docs/schemas.md): the topic configs
// stele.key.schema.validation, stele.value.schema.validation and their
// subject name strategies, which the schemas module checks on produce.
const SchemaValidationVersion = 13

// SubjectFieldVersion is the app version from which a record's subject
// may come from a field of its schema-encoded value
// (stele.subject.from=field:PATH, docs/subjects.md): below it the value is
// refused as version 13's binaries refuse it (INVALID_CONFIG).
const SubjectFieldVersion = 14

// newestConfigSince is the highest Since of any topic config.
const newestConfigSince = SchemaValidationVersion

// SubjectFrom checks a stele.subject.from value: "header", "json:" and
// an RFC 6901 JSON Pointer, or "field:" and a schema field's path.
func SubjectFrom(v string) error {
	if v == "header" {
		return nil
	}
	if path, ok := strings.CutPrefix(v, "field:"); ok {
		if _, err := ParseFieldPath(path); err != nil {
			return fmt.Errorf("invalid value %s for configuration stele.subject.from: %v", v, err)
		}
		return nil
	}
	ptr, ok := strings.CutPrefix(v, "json:")
	if !ok {
		return fmt.Errorf("invalid value %s for configuration stele.subject.from: want header, json: and a JSON Pointer such as json:/type, or field: and a schema field's path such as field:customer.region", v)
	}
	if _, err := subject.ParsePointer(ptr); err != nil {
		return fmt.Errorf("invalid value %s for configuration stele.subject.from: %v", v, err)
	}
	return nil
}

// ParseFieldPath reads a field path: field names joined by '.', at most
// schema.MaxFieldPath of them.
func ParseFieldPath(path string) ([]string, error) {
	names := strings.Split(path, ".")
	if len(names) > schema.MaxFieldPath {
		return nil, fmt.Errorf("a field path names at most %d fields", schema.MaxFieldPath)
	}
	for _, n := range names {
		if n == "" || len(n) > 255 {
			return nil, fmt.Errorf("a field path is field names of 1 to 255 bytes joined by '.'")
		}
	}
	return names, nil
}

// validateConfigAt is ValidateConfig under app version v: a value v does
// not take is refused as its binaries refuse it.
func validateConfigAt(name, value string, v uint32) error {
	if err := ValidateConfig(name, value); err != nil {
		return err
	}
	if name == "stele.subject.from" && v < SubjectFieldVersion && strings.HasPrefix(value, "field:") {
		return fmt.Errorf("invalid value %s for configuration stele.subject.from: want header, or json: and a JSON Pointer such as json:/type", value)
	}
	return nil
}

// namesNewValue reports whether c sets a topic config to a value app
// version v does not take.
func namesNewValue(c core.Command, v uint32) bool {
	if v >= SubjectFieldVersion {
		return false
	}
	switch c := c.(type) {
	case CreateTopic:
		for _, e := range c.Configs {
			if e.Name == "stele.subject.from" && strings.HasPrefix(e.Value, "field:") {
				return true
			}
		}
	case AlterConfigs:
		for _, ch := range c.Changes {
			if ch.Op == OpSet && ch.Name == "stele.subject.from" && strings.HasPrefix(ch.Value, "field:") {
				return true
			}
		}
	}
	return false
}

// configKnownAt reports whether the topic config name exists under app
// version v.
func configKnownAt(name string, v uint32) bool {
	d, ok := LookupConfig(name)
	return ok && d.Since <= v
}

// namesNewConfig reports whether c names a topic config that app version
// v does not have.
func namesNewConfig(c core.Command, v uint32) bool {
	switch c := c.(type) {
	case CreateTopic:
		for _, e := range c.Configs {
			if d, ok := LookupConfig(e.Name); ok && d.Since > v {
				return true
			}
		}
	case AlterConfigs:
		for _, ch := range c.Changes {
			if d, ok := LookupConfig(ch.Name); ok && d.Since > v {
				return true
			}
		}
	}
	return false
}

// registerConfigVersions registers the gate (RegisterTopics calls it).
// After the tenants module's gate on names (rank 5), which has checked
// the name the way the command's version wants.
func registerConfigVersions(r *core.Registry) {
	r.RegisterCommandGate(core.CommandGate{Rank: 6, Name: "topic configs by app version", Module: ModTopics, BeforeCheck: true,
		Run: func(m *core.Machine, c core.Command) (core.Result, bool) {
			v := m.BlockAppVersion()
			if (v >= newestConfigSince || !namesNewConfig(c, v)) && !namesNewValue(c, v) {
				return core.Result{}, true
			}
			res := checkTopicCommandAt(c, ValidStateTopicName, v)
			if res.Code == 0 {
				// Unreachable: the check refuses a config v does not
				// know. Refuse it here all the same.
				res = core.Fail(kerr.InvalidConfig.Code, "a topic config this app version does not have")
			}
			return res, false
		}})
}
