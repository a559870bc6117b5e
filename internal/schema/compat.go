package schema

import (
	"fmt"
	"slices"

	"github.com/hamba/avro/v2"
)

// The compatibility levels, as Confluent's registry names them. A
// subject's level says which earlier versions a new version is checked
// against, and in which direction:
//
//   - BACKWARD: the new schema can read what the latest version wrote
//     (consumers upgrade first).
//   - FORWARD: the latest version can read what the new schema writes
//     (producers upgrade first).
//   - FULL: both.
//   - the _TRANSITIVE levels: the same against every live version, not
//     only the latest.
//   - NONE: no check.
const (
	Backward           = "BACKWARD"
	BackwardTransitive = "BACKWARD_TRANSITIVE"
	Forward            = "FORWARD"
	ForwardTransitive  = "FORWARD_TRANSITIVE"
	Full               = "FULL"
	FullTransitive     = "FULL_TRANSITIVE"
	None               = "NONE"
)

// Levels are the compatibility levels, sorted.
var Levels = []string{Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive, None}

// DefaultLevel is a registry's level until one is set (Confluent's
// default).
const DefaultLevel = Backward

// Transitive reports whether level checks every live version, not only
// the latest.
func Transitive(level string) bool {
	return level == BackwardTransitive || level == ForwardTransitive || level == FullTransitive
}

// ValidLevel reports whether l is a compatibility level.
func ValidLevel(l string) bool { return slices.Contains(Levels, l) }

// Compatible checks s against the live versions of its subject under
// level, earlier given oldest first. It returns why s is incompatible,
// one line per problem, or nil when it is compatible. Schemas of another
// type than s's are incompatible with it.
func Compatible(level string, s *Schema, earlier []*Schema) []string {
	if level == None || len(earlier) == 0 {
		return nil
	}
	check := earlier[len(earlier)-1:]
	if Transitive(level) {
		check = earlier
	}
	backward := level != Forward && level != ForwardTransitive
	forward := level != Backward && level != BackwardTransitive
	var out []string
	for i := len(check) - 1; i >= 0; i-- {
		old := check[i]
		if old.Type != s.Type {
			out = append(out, fmt.Sprintf("the schema is %s, an earlier version %s", s.Type, old.Type))
			continue
		}
		if backward {
			if err := readable(s, old); err != nil {
				out = append(out, fmt.Sprintf("the new schema cannot read data written by an earlier version (%s): %v", level, err))
			}
		}
		if forward {
			if err := readable(old, s); err != nil {
				out = append(out, fmt.Sprintf("an earlier version cannot read data written by the new schema (%s): %v", level, err))
			}
		}
	}
	return out
}

// readable says why reader cannot read what writer wrote. A panic of the
// library is a verdict of incompatibility, the same on every broker.
func readable(reader, writer *Schema) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the schemas break the compatibility check (%v)", r)
		}
	}()
	// A fresh checker each time: hamba/avro's caches its verdicts by the
	// schemas' parsing canonical fingerprints, which leave defaults out.
	if reader.json != nil {
		return jsonReadable(reader, writer)
	}
	if reader.proto != nil {
		return protoReadable(reader, writer)
	}
	return newAvroCompat().Compatible(reader.avro, writer.avro)
}

func newAvroCompat() *avro.SchemaCompatibility { return avro.NewSchemaCompatibility() }
