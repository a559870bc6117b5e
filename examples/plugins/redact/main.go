// Command redact is an example plugin (issue 24, pkg/plugin): its produce
// hook removes or masks fields of each record's JSON value before the
// record is stored.
//
// Config:
//
//	fields=card,customer.ssn   the fields, by their paths of member names
//	                            joined by dots (required)
//	mask=***                   replace each field's value with this string
//	                            instead of removing the field
//	non_json=keep              keep a value that is not a JSON object as it
//	                            is; by default its batch is rejected, so a
//	                            record that could not be redacted is never
//	                            stored
//
// A value's members stay in their order and its other bytes as they were
// (whitespace aside: the value is written back compact); a path that
// runs into a member that is not an object matches nothing; a tombstone
// (null value) is kept. Build:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o redact.wasm ./examples/plugins/redact
//
// and deploy (docs/plugins.md):
//
//	stele plugin deploy redact --wasm redact.wasm --topic payments --config fields=card,customer.ssn
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/stele-io/stele/pkg/plugin"
)

func init() { plugin.HandleProduce(redactBatch) }

func main() {}

func redactBatch(b *plugin.Batch) ([]plugin.Record, error) {
	if b.Config["fields"] == "" {
		return nil, errors.New("redact: the config names no fields (fields=a,b.c)")
	}
	var paths [][]string
	for _, f := range strings.Split(b.Config["fields"], ",") {
		paths = append(paths, strings.Split(strings.TrimSpace(f), "."))
	}
	mask, masking := b.Config["mask"]
	for i, r := range b.Records {
		if r.Value == nil {
			continue
		}
		v, err := redact(r.Value, paths, mask, masking)
		if err != nil {
			if b.Config["non_json"] == "keep" {
				continue
			}
			return nil, fmt.Errorf("redact: record %d: %v", i, err)
		}
		b.Records[i].Value = v
	}
	return b.Records, nil
}

// redact rewrites the JSON object value without the members at paths
// (or with mask in their place).
func redact(value []byte, paths [][]string, mask string, masking bool) ([]byte, error) {
	var obj json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(value))
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if dec.More() {
		return nil, errors.New("not one JSON value")
	}
	var out bytes.Buffer
	if err := object(&out, obj, paths, mask, masking); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// object writes the object raw to out, members in their order, redacting
// those paths name (a path of one name: this member; longer: inside it).
func object(out *bytes.Buffer, raw json.RawMessage, paths [][]string, mask string, masking bool) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	out.WriteByte('{')
	first := true
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name := t.(string)
		var member json.RawMessage
		if err := dec.Decode(&member); err != nil {
			return err
		}
		var inner [][]string
		drop := false
		for _, p := range paths {
			switch {
			case p[0] != name:
			case len(p) == 1:
				drop = true
			default:
				inner = append(inner, p[1:])
			}
		}
		if drop && !masking {
			continue
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		key, _ := json.Marshal(name)
		out.Write(key)
		out.WriteByte(':')
		switch {
		case drop:
			m, _ := json.Marshal(mask)
			out.Write(m)
		case len(inner) > 0 && bytes.HasPrefix(bytes.TrimSpace(member), []byte("{")):
			if err := object(out, member, inner, mask, masking); err != nil {
				return err
			}
		default:
			var compact bytes.Buffer
			if err := json.Compact(&compact, member); err != nil {
				return err
			}
			out.Write(compact.Bytes())
		}
	}
	out.WriteByte('}')
	return nil
}
