package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSON Schema (santhosh-tekuri/jsonschema): a schema without $schema is
// read as draft-07, as Confluent's registry reads it. References are
// resolved through the registry only: a reference's name is the URL the
// schema's $ref uses ("customer.json", or an absolute URL), and nothing is
// ever loaded from a file or the network (noLoader), so every broker
// compiles the same schema alike.

// jsonBase is the base URL of a registered JSON schema and of the
// relative names of its references.
const jsonBase = "https://schemas.stele.invalid/"

// mainURL is the URL the schema being parsed is compiled under.
const mainURL = jsonBase + "schema.json"

// noLoader loads nothing: a $ref to anything but the schema itself and its
// references is refused.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("%s is not a reference of the schema: name it in its references", u)
}

// refURL is the URL a reference named name stands for.
func refURL(name string) string {
	if u, err := url.Parse(name); err == nil && u.IsAbs() {
		return name
	}
	return jsonBase + strings.TrimPrefix(name, "/")
}

// decodeJSONDoc decodes a JSON document as the JSON Schema library reads
// it (numbers as json.Number, so none is rounded).
func decodeJSONDoc(text string) (any, error) {
	return jsonschema.UnmarshalJSON(strings.NewReader(text))
}

// Numbers are read exactly (math/big, by the library and by the
// compatibility check), whose cost grows with a number's exponent: a
// number of a schema or a payload may have at most maxNumberDigits digits
// and an exponent of at most maxExponent, so no crafted number makes the
// apply slow.
const (
	maxNumberDigits = 400
	maxExponent     = 400
)

// checkNumbers says why a number in v is too large to read.
func checkNumbers(v any, depth int) error {
	if depth > 512 {
		return fmt.Errorf("values nest deeper than 512")
	}
	switch x := v.(type) {
	case json.Number:
		s := strings.TrimPrefix(string(x), "-")
		mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
		if len(mant) > maxNumberDigits {
			return fmt.Errorf("number %.20s... has more than %d digits", s, maxNumberDigits)
		}
		if hasExp {
			exp = strings.TrimLeft(strings.TrimLeft(exp, "+-"), "0")
			if len(exp) > 3 || len(exp) == 3 && exp > "400" {
				return fmt.Errorf("number %s has an exponent beyond %d", s, maxExponent)
			}
		}
	case map[string]any:
		for _, e := range x {
			if err := checkNumbers(e, depth+1); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkNumbers(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// jsonParse parses a JSON Schema d.
func (p *parser) jsonParse(d Def) (*Schema, error) {
	doc, err := decodeJSONDoc(d.Text)
	if err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrInvalid, err)
	}
	if err := checkNumbers(doc, 0); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, ok := doc.(map[string]any); !ok {
		if _, ok := doc.(bool); !ok {
			return nil, fmt.Errorf("%w: a JSON schema is an object or a boolean", ErrInvalid)
		}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.UseLoader(noLoader{})
	docs := map[string]any{mainURL: doc}
	if err := p.jsonRefs(c, d.Refs, docs, 0); err != nil {
		return nil, err
	}
	if err := c.AddResource(mainURL, doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	compiled, err := c.Compile(mainURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	canon, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &Schema{Def: d, Canonical: string(canon), json: &jsonSchema{compiled: compiled, docs: docs}}, nil
}

// jsonRefs adds the references (and theirs) to c and docs.
func (p *parser) jsonRefs(c *jsonschema.Compiler, refs []Ref, docs map[string]any, depth int) error {
	for _, r := range refs {
		d, err := p.reference(r, depth, TypeJSON)
		if err != nil {
			return err
		}
		u := refURL(r.Name)
		if _, seen := docs[u]; seen {
			continue
		}
		doc, err := decodeJSONDoc(d.Text)
		if err == nil {
			err = checkNumbers(doc, 0)
		}
		if err != nil {
			return fmt.Errorf("%w: reference %q: %v", ErrInvalid, r.Name, err)
		}
		docs[u] = doc
		if err := c.AddResource(u, doc); err != nil {
			return fmt.Errorf("%w: reference %q: %v", ErrInvalid, r.Name, err)
		}
		if err := p.jsonRefs(c, d.Refs, docs, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// jsonSchema is a compiled JSON Schema and the documents it was compiled
// from (by URL), which the compatibility check reads.
type jsonSchema struct {
	compiled *jsonschema.Schema
	docs     map[string]any
}

// validateJSON checks that payload is one JSON value valid under s.
func (s *Schema) validateJSON(payload []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: the payload breaks the validator (%v)", ErrPayload, r)
		}
	}()
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: not JSON: %v", ErrPayload, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: more than one JSON value", ErrPayload)
	}
	if _, err := dec.Token(); err == nil {
		return fmt.Errorf("%w: bytes after the JSON value", ErrPayload)
	}
	if err := checkNumbers(v, 0); err != nil {
		return fmt.Errorf("%w: %v", ErrPayload, err)
	}
	if err := s.json.compiled.Validate(v); err != nil {
		return fmt.Errorf("%w: %s", ErrPayload, oneLine(err.Error()))
	}
	return nil
}

// oneLine is a validator's report on one line, at most 400 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 400 {
		s = s[:400] + " ..."
	}
	return s
}
