package schema

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Protobuf compatibility, as Confluent's registry decides it: the
// original schema (the writer's) and the update (the reader's) are
// compared message by message (by name, nested messages within their
// message) and field by field (by number), and the update can read what
// the original wrote unless a difference is one of these:
//
//   - PACKAGE_CHANGED: the files' packages differ.
//   - MESSAGE_REMOVED: a message of the original is gone.
//   - REQUIRED_FIELD_ADDED, REQUIRED_FIELD_REMOVED: a proto2 required
//     field came or went.
//   - FIELD_KIND_CHANGED: a field changed between scalar (enums are
//     scalars), message and map.
//   - FIELD_SCALAR_KIND_CHANGED: a scalar changed between the groups
//     whose encodings read each other: int32, int64, uint32, uint64, bool
//     and enums; sint32 and sint64; string and bytes; fixed32 and
//     sfixed32; fixed64 and sfixed64; float; double.
//   - FIELD_NUMERIC_LABEL_CHANGED: a numeric field's label changed
//     (repeated, required, an explicit optional, none).
//   - FIELD_NAMED_TYPE_CHANGED: a message field's type changed name (its
//     name within its package), or the message it names changed in a way
//     this list refuses.
//   - ONEOF_FIELD_REMOVED: a member of a oneof that is still there is gone.
//   - MULTIPLE_FIELDS_MOVED_TO_ONEOF, FIELD_MOVED_TO_EXISTING_ONEOF: a
//     oneof now joins fields that were independent before.
//
// Everything else is compatible: messages and enums added, enums removed,
// enum constants added, removed or renamed, fields added or removed (not
// required ones), renamed, moved out of a oneof, oneofs added or removed
// whole, string and bytes fields changing label, messages reordered.
// Confluent's rules are the same in both directions, so FORWARD checks
// the same list with the schemas' roles swapped.

// protoReadable says why reader cannot read what writer wrote.
func protoReadable(reader, writer *Schema) error {
	d := &protoDiff{seen: map[[2]protoreflect.FullName]bool{}}
	d.file(writer.proto, reader.proto)
	if len(d.out) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(d.out, "; "))
}

// protoDiff collects the incompatible differences between an original
// and an update, each as its kind and the path where it is.
type protoDiff struct {
	out  []string
	path []string
	seen map[[2]protoreflect.FullName]bool
}

func (d *protoDiff) add(kind string) {
	d.out = append(d.out, kind+" #/"+strings.Join(d.path, "/"))
}

func (d *protoDiff) at(p string, f func()) {
	d.path = append(d.path, p)
	f()
	d.path = d.path[:len(d.path)-1]
}

func (d *protoDiff) file(o, u protoreflect.FileDescriptor) {
	if o.Package() != u.Package() {
		d.add("PACKAGE_CHANGED")
	}
	d.types(o.Messages(), u.Messages())
}

// types compares the messages of a file or of a message by name. Enums
// make only compatible differences.
func (d *protoDiff) types(o, u protoreflect.MessageDescriptors) {
	om, um := map[protoreflect.Name]protoreflect.MessageDescriptor{}, map[protoreflect.Name]protoreflect.MessageDescriptor{}
	var names []protoreflect.Name
	for _, m := range messages(o) {
		om[m.Name()] = m
		names = append(names, m.Name())
	}
	for _, m := range messages(u) {
		um[m.Name()] = m
		if om[m.Name()] == nil {
			names = append(names, m.Name())
		}
	}
	slices.Sort(names)
	for _, n := range names {
		d.at(string(n), func() {
			switch {
			case um[n] == nil:
				d.add("MESSAGE_REMOVED")
			case om[n] != nil:
				d.message(om[n], um[n])
			}
		})
	}
}

// fieldsOf indexes a message's fields by number, with the (real, not
// proto3-optional) oneof each belongs to.
type fieldsOf struct {
	byNum  map[protoreflect.FieldNumber]protoreflect.FieldDescriptor
	oneof  map[protoreflect.FieldNumber]protoreflect.Name
	oneofs map[protoreflect.Name]protoreflect.OneofDescriptor
}

func collect(m protoreflect.MessageDescriptor) fieldsOf {
	f := fieldsOf{map[protoreflect.FieldNumber]protoreflect.FieldDescriptor{}, map[protoreflect.FieldNumber]protoreflect.Name{}, map[protoreflect.Name]protoreflect.OneofDescriptor{}}
	fs := m.Fields()
	for i := 0; i < fs.Len(); i++ {
		fd := fs.Get(i)
		f.byNum[fd.Number()] = fd
		if oo := fd.ContainingOneof(); oo != nil && !oo.IsSynthetic() {
			f.oneof[fd.Number()] = oo.Name()
			f.oneofs[oo.Name()] = oo
		}
	}
	return f
}

func (d *protoDiff) message(o, u protoreflect.MessageDescriptor) {
	key := [2]protoreflect.FullName{o.FullName(), u.FullName()}
	if d.seen[key] {
		return
	}
	d.seen[key] = true
	of, uf := collect(o), collect(u)
	// A oneof gone with every member is a deletion, which is compatible.
	deleted := map[protoreflect.Name]bool{}
	for name, oo := range of.oneofs {
		if uf.oneofs[name] != nil {
			continue
		}
		survives := false
		for i := 0; i < oo.Fields().Len(); i++ {
			if uf.byNum[oo.Fields().Get(i).Number()] != nil {
				survives = true
			}
		}
		deleted[name] = !survives
	}
	// A oneof of the update joining fields that were independent.
	uos := u.Oneofs()
	for i := 0; i < uos.Len(); i++ {
		oo := uos.Get(i)
		if oo.IsSynthetic() {
			continue
		}
		groups := map[string]bool{}
		movedIn := 0
		for j := 0; j < oo.Fields().Len(); j++ {
			n := oo.Fields().Get(j).Number()
			if g, ok := of.oneof[n]; ok {
				groups["oneof:"+string(g)] = true
			} else if of.byNum[n] != nil {
				groups["field:"+strconv.Itoa(int(n))] = true
				movedIn++
			}
		}
		if len(groups) > 1 {
			d.at(string(oo.Name()), func() {
				if movedIn > 1 {
					d.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF")
				} else {
					d.add("FIELD_MOVED_TO_EXISTING_ONEOF")
				}
			})
		}
	}
	var nums []protoreflect.FieldNumber
	for n := range of.byNum {
		nums = append(nums, n)
	}
	for n := range uf.byNum {
		if of.byNum[n] == nil {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	for _, n := range nums {
		ofd, ufd := of.byNum[n], uf.byNum[n]
		tag := strconv.Itoa(int(n))
		switch {
		case ufd == nil:
			if g, ok := of.oneof[n]; ok {
				if !deleted[g] {
					d.at(string(g), func() { d.at(tag, func() { d.add("ONEOF_FIELD_REMOVED") }) })
				}
			} else if ofd.Cardinality() == protoreflect.Required {
				d.at(tag, func() { d.add("REQUIRED_FIELD_REMOVED") })
			}
		case ofd == nil:
			if _, ok := uf.oneof[n]; !ok && ufd.Cardinality() == protoreflect.Required {
				d.at(tag, func() { d.add("REQUIRED_FIELD_ADDED") })
			}
		default:
			cmp := func() { d.field(label(ofd), label(ufd), ofd, ufd) }
			if g, ok := uf.oneof[n]; ok {
				d.at(string(g), func() { d.at(tag, cmp) })
			} else {
				d.at(tag, cmp)
			}
		}
	}
	d.types(o.Messages(), u.Messages())
}

// label is a field's label as it is written: "repeated", "required", an
// explicit "optional", or none (proto3's implicit presence, oneof members,
// maps).
func label(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return ""
	case fd.Cardinality() == protoreflect.Repeated:
		return "repeated"
	case fd.Cardinality() == protoreflect.Required:
		return "required"
	case fd.HasOptionalKeyword():
		return "optional"
	}
	return ""
}

// field compares two fields' types (and, for scalars, labels).
func (d *protoDiff) field(ol, ul string, o, u protoreflect.FieldDescriptor) {
	ok, uk := fieldKind(o), fieldKind(u)
	switch {
	case ok != uk:
		d.add("FIELD_KIND_CHANGED")
	case ok == "map":
		d.field("", "", o.MapKey(), u.MapKey())
		d.field("", "", o.MapValue(), u.MapValue())
	case ok == "scalar":
		os, us := scalarKind(o), scalarKind(u)
		if os != us {
			d.add("FIELD_SCALAR_KIND_CHANGED")
		} else if ol != ul && os != "string_or_bytes" {
			d.add("FIELD_NUMERIC_LABEL_CHANGED")
		}
	default:
		d.messageType(o.Message(), u.Message())
	}
}

func fieldKind(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "map"
	case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
		return "message"
	}
	return "scalar"
}

// scalarKind is the group of scalars whose encodings read each other.
func scalarKind(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.BoolKind, protoreflect.EnumKind:
		return "number"
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return "signed"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "string_or_bytes"
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return "fixed32"
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return "fixed64"
	case protoreflect.FloatKind:
		return "float"
	}
	return "double"
}

// localName is a type's name within its package.
func localName(m protoreflect.MessageDescriptor) string {
	n, pkg := string(m.FullName()), string(m.ParentFile().Package())
	if pkg != "" {
		return strings.TrimPrefix(n, pkg+".")
	}
	return n
}

// messageType compares the messages two fields name: by their names
// within their packages, then (they may come from different imports) by
// their contents, which must be compatible.
func (d *protoDiff) messageType(o, u protoreflect.MessageDescriptor) {
	on, un := localName(o), localName(u)
	if on != un {
		d.add("FIELD_NAMED_TYPE_CHANGED")
		return
	}
	sub := &protoDiff{seen: d.seen, path: strings.Split(on, ".")}
	sub.message(o, u)
	if len(sub.out) > 0 {
		d.out = append(d.out, sub.out...)
		d.add("FIELD_NAMED_TYPE_CHANGED")
	}
}
