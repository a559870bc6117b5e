// Command jsonschema-check is an example plugin (issue 24, pkg/plugin): its
// produce hook validates each record's value against a JSON Schema and
// rejects the batch of any value that does not conform, so that only
// conforming values are stored. Unlike the schema registry's validation
// (docs/schemas.md), the values carry no schema id: the schema is the
// plugin's config.
//
// Config:
//
//	schema={"type":"object",...}   the JSON Schema (draft 2020-12 unless its
//	                               $schema says otherwise; at most 4 KiB,
//	                               a config value's limit); required
//
// A tombstone (null value) passes. Build and deploy (docs/plugins.md):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o jsonschema-check.wasm ./examples/plugins/jsonschema-check
//	stele plugin deploy orders-schema --wasm jsonschema-check.wasm --topic orders --config 'schema={"type":"object","required":["id"]}'
package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/stele-io/stele/pkg/plugin"
)

func init() { plugin.HandleProduce(checkBatch) }

func main() {}

func checkBatch(b *plugin.Batch) ([]plugin.Record, error) {
	text := b.Config["schema"]
	if text == "" {
		return nil, errors.New("jsonschema-check: the config has no schema (schema={...})")
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("jsonschema-check: the schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		return nil, fmt.Errorf("jsonschema-check: the schema: %v", err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		return nil, fmt.Errorf("jsonschema-check: the schema does not compile: %v", err)
	}
	for i, r := range b.Records {
		if r.Value == nil {
			continue
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.Value))
		if err != nil {
			return nil, fmt.Errorf("jsonschema-check: record %d is not JSON: %v", i, err)
		}
		if err := sch.Validate(v); err != nil {
			return nil, fmt.Errorf("jsonschema-check: record %d does not conform: %s", i, oneLine(err))
		}
	}
	return b.Records, nil
}

// oneLine is a validation error's text on one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
