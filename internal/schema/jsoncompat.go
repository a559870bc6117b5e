package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// JSON Schema compatibility. A reader schema can read what a writer wrote
// when every instance valid under the writer is valid under the reader:
// the reader "covers" the writer. jsonCovers proves that keyword by
// keyword, as Confluent's registry compares JSON schemas (its
// JsonSchemaDiff), and reports what it cannot prove:
//
//   - types: the writer's types must be the reader's (integer counts as a
//     number), and a writer without a type allows every type;
//   - objects: a property the reader declares that the writer does not is
//     fine when the writer's content model is closed (additionalProperties
//     false: it never writes it) and refused when it is open (the writer
//     may have written anything under that name: "a property added to an
//     open content model"); a property the writer declares that the reader
//     does not must be taken by the reader's additionalProperties (refused
//     when the reader is closed); each property both declare is compared
//     in turn; the reader may not require what the writer does not, nor be
//     closed where the writer is open;
//   - arrays: items compared, bounds (minItems, maxItems) no narrower,
//     uniqueItems not added;
//   - numbers and strings: bounds (minimum, maximum and their exclusive
//     forms, minLength, maxLength) no narrower, multipleOf dividing the
//     writer's, pattern and format unchanged; enum and const: the reader's
//     values a superset of the writer's;
//   - combinations: anyOf and oneOf alike, a writer alternative covered by
//     some reader alternative; allOf: every reader member covers the
//     writer, a writer member covered is enough; not and if/then/else
//     must be unchanged;
//   - $ref is followed (within the schema and into its references), a
//     cycle taken as proven once entered.
//
// Numbers are compared exactly (math/big from their decimal text), never
// in floating point. Where it cannot prove coverage it says so: the check
// errs on the side of refusing, as Confluent's does.

// jsonReadable says why reader cannot read what writer wrote.
func jsonReadable(reader, writer *Schema) error {
	if writer.json == nil {
		return fmt.Errorf("the earlier version is %s, not JSON", writer.Type)
	}
	if canonicalJSON(reader.json.docs) == canonicalJSON(writer.json.docs) {
		return nil // the same schema, references and all
	}
	c := &jsonCompare{r: reader.json, w: writer.json, seen: map[[2]string]bool{}}
	c.covers(jsonNode{reader.json.docs[mainURL], mainURL}, jsonNode{writer.json.docs[mainURL], mainURL}, "#")
	if len(c.problems) > 0 {
		sort.Strings(c.problems)
		if len(c.problems) > 10 {
			c.problems = append(c.problems[:10], fmt.Sprintf("and %d more", len(c.problems)-10))
		}
		return fmt.Errorf("%s", strings.Join(c.problems, "; "))
	}
	return nil
}

// jsonNode is a schema node and the URL of the document it is in (for
// its $refs).
type jsonNode struct {
	v   any
	doc string
}

type jsonCompare struct {
	r, w     *jsonSchema
	seen     map[[2]string]bool
	problems []string
	steps    int
}

// maxCompareSteps bounds a comparison's work.
const maxCompareSteps = 100_000

func (c *jsonCompare) fail(path, format string, args ...any) {
	c.problems = append(c.problems, path+": "+fmt.Sprintf(format, args...))
}

// resolve follows n's $ref (repeatedly) in s's documents; key names the
// node for cycle detection ("" when n has no $ref).
func resolve(s *jsonSchema, n jsonNode) (jsonNode, string, error) {
	key := ""
	for range 32 {
		m, ok := n.v.(map[string]any)
		if !ok {
			return n, key, nil
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return n, key, nil
		}
		base, err := url.Parse(n.doc)
		if err != nil {
			return n, key, err
		}
		u, err := base.Parse(ref)
		if err != nil {
			return n, key, fmt.Errorf("$ref %q: %v", ref, err)
		}
		frag := u.Fragment
		u.Fragment = ""
		doc, ok := s.docs[u.String()]
		if !ok {
			return n, key, fmt.Errorf("$ref %q names no document of the schema", ref)
		}
		v, err := pointer(doc, frag)
		if err != nil {
			return n, key, fmt.Errorf("$ref %q: %v", ref, err)
		}
		key = u.String() + "#" + frag
		n = jsonNode{v, u.String()}
	}
	return n, key, fmt.Errorf("$refs nest deeper than 32")
}

// pointer follows a JSON Pointer fragment (RFC 6901) in doc.
func pointer(doc any, frag string) (any, error) {
	if frag == "" {
		return doc, nil
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, fmt.Errorf("fragment %q is not a JSON Pointer", frag)
	}
	v := doc
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, fmt.Errorf("%q not found", tok)
			}
		case []any:
			i := -1
			fmt.Sscanf(tok, "%d", &i)
			if i < 0 || i >= len(x) {
				return nil, fmt.Errorf("index %q out of range", tok)
			}
			v = x[i]
		default:
			return nil, fmt.Errorf("%q not found", tok)
		}
	}
	return v, nil
}

// covers proves that reader node rn covers writer node wn.
func (c *jsonCompare) covers(rn, wn jsonNode, path string) {
	if c.steps++; c.steps > maxCompareSteps {
		if c.steps == maxCompareSteps+1 {
			c.fail(path, "the schemas are too large to compare")
		}
		return
	}
	rn, rkey, err := resolve(c.r, rn)
	if err != nil {
		c.fail(path, "the new schema: %v", err)
		return
	}
	wn, wkey, err := resolve(c.w, wn)
	if err != nil {
		c.fail(path, "the earlier schema: %v", err)
		return
	}
	if rkey != "" || wkey != "" {
		k := [2]string{rkey, wkey}
		if c.seen[k] {
			return // a cycle: proven as far as it goes
		}
		c.seen[k] = true
	}
	r, w := rn.v, wn.v
	if rb, ok := r.(bool); ok {
		if !rb && !isFalse(w) {
			c.fail(path, "the reader accepts nothing")
		}
		return
	}
	if isFalse(w) {
		return
	}
	rm, _ := r.(map[string]any)
	wm, ok := w.(map[string]any)
	if !ok {
		wm = map[string]any{} // true: anything
	}
	if rm == nil {
		return
	}
	if walt := alternatives(wm); walt != nil && alternatives(rm) == nil {
		// The writer writes one of its alternatives: the reader must
		// read each.
		for i, a := range walt {
			c.covers(rn, jsonNode{a, wn.doc}, fmt.Sprintf("%s (alternative %d of the earlier schema)", path, i))
		}
		return
	}
	c.combinators(rn, wn, rm, wm, path)
	c.typesCover(rm, wm, path)
	c.enumCovers(rm, wm, path)
	c.boundsCover(rm, wm, path)
	c.objectsCover(rn, wn, rm, wm, path)
	c.arraysCover(rn, wn, rm, wm, path)
	// Keywords compared whole: the reader's must be the writer's.
	for _, k := range []string{"pattern", "format", "not", "if", "then", "else", "patternProperties", "dependencies", "dependentRequired",
		"dependentSchemas", "propertyNames", "contains", "minContains", "maxContains", "uniqueItems", "prefixItems", "additionalItems",
		"unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"} {
		rv, rok := rm[k]
		if !rok {
			continue
		}
		if k == "uniqueItems" && rv == false {
			continue
		}
		if wv, wok := wm[k]; !wok || canonicalJSON(rv) != canonicalJSON(wv) {
			c.fail(path, "%s added or changed", k)
		}
	}
}

func isFalse(v any) bool { b, ok := v.(bool); return ok && !b }

// canonicalJSON is v's JSON with sorted keys.
func canonicalJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// typeSet is a schema's types (nil: every type).
func typeSet(m map[string]any) []string {
	switch t := m["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func (c *jsonCompare) typesCover(rm, wm map[string]any, path string) {
	rt, wt := typeSet(rm), typeSet(wm)
	if rt == nil {
		return
	}
	if wt == nil {
		c.fail(path, "the reader's types %v narrow the writer's (any type)", rt)
		return
	}
	for _, t := range wt {
		if !slices.Contains(rt, t) && !(t == "integer" && slices.Contains(rt, "number")) {
			c.fail(path, "type %s is no longer accepted (the reader takes %v)", t, rt)
		}
	}
}

// values is a schema's enum or const values, canonical (nil: no limit).
func values(m map[string]any) []string {
	if v, ok := m["const"]; ok {
		return []string{canonicalJSON(v)}
	}
	if e, ok := m["enum"].([]any); ok {
		out := make([]string, len(e))
		for i, v := range e {
			out[i] = canonicalJSON(v)
		}
		return out
	}
	return nil
}

func (c *jsonCompare) enumCovers(rm, wm map[string]any, path string) {
	rv, wv := values(rm), values(wm)
	if rv == nil {
		return
	}
	if wv == nil {
		c.fail(path, "enum or const added")
		return
	}
	for _, v := range wv {
		if !slices.Contains(rv, v) {
			c.fail(path, "value %s is no longer accepted", v)
		}
	}
}

// number reads a JSON number exactly.
func number(v any) (*big.Rat, bool) {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = string(x)
	case string:
		return nil, false
	default:
		s = canonicalJSON(x)
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

// boundsCover compares the numeric bounds: for each lower bound of the
// reader, the writer's must be as high; for each upper bound as low.
func (c *jsonCompare) boundsCover(rm, wm map[string]any, path string) {
	lower := [][2]string{{"minimum", "exclusiveMinimum"}, {"minLength", ""}, {"minItems", ""}, {"minProperties", ""}}
	upper := [][2]string{{"maximum", "exclusiveMaximum"}, {"maxLength", ""}, {"maxItems", ""}, {"maxProperties", ""}}
	check := func(pair [2]string, lowerBound bool) {
		rb, rex, rok := bound(rm, pair)
		if !rok {
			return
		}
		wb, wex, wok := bound(wm, pair)
		if !wok {
			c.fail(path, "%s added", pair[0])
			return
		}
		cmp := wb.Cmp(rb)
		if !lowerBound {
			cmp = -cmp
		}
		// The writer's bound must be at least as tight: beyond the
		// reader's, or equal and not looser (exclusive in the reader
		// only).
		if cmp < 0 || cmp == 0 && rex && !wex {
			c.fail(path, "%s narrowed", pair[0])
		}
	}
	for _, p := range lower {
		check(p, true)
	}
	for _, p := range upper {
		check(p, false)
	}
	if rmo, ok := number(rm["multipleOf"]); ok && rm["multipleOf"] != nil {
		wmo, ok := number(wm["multipleOf"])
		if !ok || wm["multipleOf"] == nil || !new(big.Rat).Quo(wmo, rmo).IsInt() {
			c.fail(path, "multipleOf added or changed")
		}
	}
}

// bound is a schema's bound of a pair (inclusive keyword, exclusive
// keyword): the tighter one when both are given; draft-04's boolean
// exclusive forms are read too.
func bound(m map[string]any, pair [2]string) (v *big.Rat, exclusive, ok bool) {
	if x, has := m[pair[0]]; has {
		if v, ok = number(x); ok {
			if b, isBool := m[pair[1]].(bool); isBool && b {
				exclusive = true
			}
		}
	}
	if pair[1] == "" {
		return v, exclusive, ok
	}
	if x, has := m[pair[1]]; has {
		if e, eok := number(x); eok {
			if !ok || e.Cmp(v) >= 0 && strings.HasPrefix(pair[0], "min") || e.Cmp(v) <= 0 && strings.HasPrefix(pair[0], "max") {
				return e, true, true
			}
		}
	}
	return v, exclusive, ok
}

// additional is a schema's additionalProperties: nil when open (absent
// or true), false when closed, else the schema.
func additional(m map[string]any) any {
	a, ok := m["additionalProperties"]
	if !ok || a == true {
		return nil
	}
	return a
}

func (c *jsonCompare) objectsCover(rn, wn jsonNode, rm, wm map[string]any, path string) {
	rp, _ := rm["properties"].(map[string]any)
	wp, _ := wm["properties"].(map[string]any)
	ra, wa := additional(rm), additional(wm)
	for _, name := range slices.Sorted(maps.Keys(rp)) {
		p := path + "/properties/" + name
		if wv, ok := wp[name]; ok {
			c.covers(jsonNode{rp[name], rn.doc}, jsonNode{wv, wn.doc}, p)
			continue
		}
		switch {
		case isFalse(wa):
			// The writer never writes it.
		case wa != nil:
			c.covers(jsonNode{rp[name], rn.doc}, jsonNode{wa, wn.doc}, p)
		default:
			c.covers(jsonNode{rp[name], rn.doc}, jsonNode{true, wn.doc}, p+" (a property added to an open content model)")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(wp)) {
		if _, ok := rp[name]; ok {
			continue
		}
		p := path + "/properties/" + name
		switch {
		case isFalse(ra):
			c.fail(p, "a property removed from a closed content model")
		case ra != nil:
			c.covers(jsonNode{ra, rn.doc}, jsonNode{wp[name], wn.doc}, p)
		}
	}
	// Names the writer's patternProperties let it write that the reader
	// would not take.
	if wpp, ok := wm["patternProperties"]; ok && ra != nil && canonicalJSON(wpp) != canonicalJSON(rm["patternProperties"]) {
		c.fail(path, "the earlier schema's patternProperties are not the new one's, which is not open")
	}
	if ra != nil && !isFalse(wa) {
		if wa == nil {
			c.fail(path, "additionalProperties narrowed (the writer's content model is open)")
		} else {
			c.covers(jsonNode{ra, rn.doc}, jsonNode{wa, wn.doc}, path+"/additionalProperties")
		}
	}
	req := func(m map[string]any) []string {
		var out []string
		if a, ok := m["required"].([]any); ok {
			for _, x := range a {
				if s, ok := x.(string); ok {
					out = append(out, s)
				}
			}
		}
		return out
	}
	wreq := req(wm)
	for _, name := range req(rm) {
		if !slices.Contains(wreq, name) {
			c.fail(path, "property %s is required now", name)
		}
	}
}

func (c *jsonCompare) arraysCover(rn, wn jsonNode, rm, wm map[string]any, path string) {
	ri, rok := rm["items"]
	if !rok {
		return
	}
	wi, wok := wm["items"]
	if !wok {
		wi = true
	}
	rt, rTuple := ri.([]any)
	wt, wTuple := wi.([]any)
	switch {
	case rTuple != wTuple || rTuple && len(rt) != len(wt):
		if canonicalJSON(ri) != canonicalJSON(wi) {
			c.fail(path, "items changed between a list and a schema")
		}
	case rTuple:
		for i := range rt {
			c.covers(jsonNode{rt[i], rn.doc}, jsonNode{wt[i], wn.doc}, fmt.Sprintf("%s/items/%d", path, i))
		}
	default:
		c.covers(jsonNode{ri, rn.doc}, jsonNode{wi, wn.doc}, path+"/items")
	}
}

// alternatives are a node's anyOf or oneOf members (nil: none).
func alternatives(m map[string]any) []any {
	for _, k := range []string{"anyOf", "oneOf"} {
		if a, ok := m[k].([]any); ok {
			return a
		}
	}
	return nil
}

// combinators compares allOf, anyOf and oneOf.
func (c *jsonCompare) combinators(rn, wn jsonNode, rm, wm map[string]any, path string) {
	if all, ok := rm["allOf"].([]any); ok {
		for i, m := range all {
			c.covers(jsonNode{m, rn.doc}, wn, fmt.Sprintf("%s/allOf/%d", path, i))
		}
	}
	ralt := alternatives(rm)
	if ralt == nil {
		return
	}
	// Each writer alternative (or the writer itself) must be covered by
	// some reader alternative; a trial that fails leaves no problem.
	walt := alternatives(wm)
	if walt == nil {
		walt = []any{wn.v}
	}
	for i, w := range walt {
		found := false
		for _, r := range ralt {
			trial := &jsonCompare{r: c.r, w: c.w, seen: maps.Clone(c.seen), steps: c.steps}
			trial.covers(jsonNode{r, rn.doc}, jsonNode{w, wn.doc}, path)
			c.steps = trial.steps
			if len(trial.problems) == 0 {
				found = true
				break
			}
		}
		if !found {
			c.fail(path, "alternative %d of the earlier schema is covered by none of the new one's", i)
		}
	}
}
