package httpapi

// GET /v1/asyncapi (issue 22, docs/schemas.md "AsyncAPI"): an AsyncAPI 3.0
// document of the cluster as the requester's tenant sees it, built from
// the committed state: a server per broker the directory names (or this
// broker), a channel per topic and view with its Kafka binding (partitions,
// replicas, the topic configs Kafka's binding describes), a receive
// operation for every channel and a send operation for every topic but
// views, and a message per channel: its value's schema (the latest version
// of <topic>-value in the registry, in AsyncAPI's Avro or JSON Schema
// format), its
// key's (<topic>-key) in its Kafka binding, the stele-subject header, and
// the subjects seen (x-stele-subjects: the first 100 in byte order, with
// their record counts). The document validates against AsyncAPI's 3.0.0 JSON Schema
// (TestAsyncAPIValidates).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/schema"
)

// asyncAPIVersion is the AsyncAPI specification the document follows.
const asyncAPIVersion = "3.0.0"

// kafkaBindingVersion is the version of AsyncAPI's Kafka bindings used.
const kafkaBindingVersion = "0.5.0"

// avroSchemaFormat names Avro payloads in AsyncAPI.
const avroSchemaFormat = "application/vnd.apache.avro;version=1.9.0"

// maxAsyncAPISubjects bounds the subjects listed per channel.
const maxAsyncAPISubjects = 100

type obj = map[string]any

func serveAsyncAPI(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		doc, err := asyncAPI(opts, registryTenant(r))
		if err != nil {
			httpError(w, http.StatusInternalServerError, "building the AsyncAPI document: %v", err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(doc)
	}
}

// asyncAPI is the document of tenant's topics ("" the default tenant's).
func asyncAPI(opts Options, tenant string) (obj, error) {
	height, _ := opts.Broker.Info()
	title, version := "Stele", "0"
	var servers obj
	if opts.Cluster != nil {
		st := opts.Cluster()
		title = "Stele chain " + st.ChainID
		version = fmt.Sprintf("%d.%d.0", st.AppVersion, st.Height)
		for _, v := range st.Validators {
			if v.Kafka != "" {
				if servers == nil {
					servers = obj{}
				}
				servers[fmt.Sprintf("broker-%d", v.NodeID)] = obj{"host": v.Kafka, "protocol": "kafka",
					"description": fmt.Sprintf("broker %d (%s), a validator with power %d", v.NodeID, v.Name, v.Power)}
			}
		}
	}
	if servers == nil && opts.KafkaAddr != nil {
		if addr := opts.KafkaAddr(); addr != "" {
			servers = obj{fmt.Sprintf("broker-%d", opts.NodeID): obj{"host": addr, "protocol": "kafka", "description": "this broker"}}
		}
	}
	desc := fmt.Sprintf("The topics and views of a Stele cluster as of height %d, with the schemas of its registry. Every broker serves every topic; produce and fetch through any.", height)
	if tenant != "" {
		title += " (tenant " + tenant + ")"
		desc = fmt.Sprintf("The topics and views of tenant %s of a Stele cluster as of height %d, with the schemas of its registry.", tenant, height)
	}
	doc := obj{
		"asyncapi":           asyncAPIVersion,
		"info":               obj{"title": title, "version": version, "description": desc},
		"defaultContentType": "application/octet-stream",
	}
	if servers != nil {
		doc["servers"] = servers
	}
	channels, operations, messages := obj{}, obj{}, obj{}
	reg := opts.Broker.Schemas().Tenant(tenant)
	for _, t := range opts.Broker.View().Topics() {
		owner, name := fsm.SplitTenant(t.Name)
		if owner != tenant || strings.HasPrefix(name, "__") {
			continue
		}
		// A topic's name is a valid AsyncAPI component key as it is
		// (letters, digits, '.', '-' and '_', as Kafka's topic names are).
		id := name
		ch := obj{"address": name, "messages": obj{"record": obj{"$ref": "#/components/messages/" + id}},
			"bindings": obj{"kafka": kafkaTopicBinding(t)}}
		from, view := t.Configs["stele.view.from"]
		if view {
			ch["description"] = fmt.Sprintf("A view (read-only) of %s: their records whose subject matches %s, in %s order (docs/subjects.md).",
				from, t.Configs["stele.view.subject"], orDefault(t.Configs["stele.view.order"], "partition"))
		} else {
			ch["description"] = fmt.Sprintf("Topic %s: %d partitions.", name, len(t.Partitions))
		}
		channels[id] = ch
		operations[id+".receive"] = obj{"action": "receive", "channel": obj{"$ref": "#/channels/" + id},
			"summary": "Consume " + name}
		if !view {
			operations[id+".send"] = obj{"action": "send", "channel": obj{"$ref": "#/channels/" + id},
				"summary": "Produce to " + name}
		}
		msg, err := channelMessage(opts, reg, t, name)
		if err != nil {
			return nil, err
		}
		messages[id] = msg
	}
	doc["channels"] = channels
	doc["operations"] = operations
	doc["components"] = obj{"messages": messages}
	return doc, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// kafkaTopicBinding is a topic's Kafka channel binding.
func kafkaTopicBinding(t *fsm.TopicView) obj {
	cfg := obj{}
	var policy []string
	for _, p := range strings.Split(orDefault(t.Configs["cleanup.policy"], "delete"), ",") {
		if p = strings.TrimSpace(p); p == "compact" || p == "delete" {
			policy = append(policy, p)
		}
	}
	if len(policy) > 0 {
		cfg["cleanup.policy"] = policy
	}
	num := func(name string, v int64) {
		if v >= -1 {
			cfg[name] = v
		}
	}
	num("retention.ms", t.Config.RetentionMs)
	num("retention.bytes", t.Config.RetentionBytes)
	num("delete.retention.ms", t.Config.DeleteRetentionMs)
	num("max.message.bytes", int64(t.Config.MaxMessageBytes))
	if c := t.Config.ValueSchema; c.On() {
		cfg["confluent.value.schema.validation"] = true
		cfg["confluent.value.subject.name.strategy"] = c.Strategy
	}
	if c := t.Config.KeySchema; c.On() {
		cfg["confluent.key.schema.validation"] = true
		cfg["confluent.key.subject.name.strategy"] = c.Strategy
	}
	b := obj{"topic": t.Name, "partitions": len(t.Partitions), "topicConfiguration": cfg, "bindingVersion": kafkaBindingVersion}
	if t.ReplicationFactor > 0 {
		b["replicas"] = int(t.ReplicationFactor)
	}
	return b
}

// channelMessage is the message of a topic's channel.
func channelMessage(opts Options, reg *fsm.SchemaRegistryView, t *fsm.TopicView, name string) (obj, error) {
	msg := obj{
		"name":  "record",
		"title": "A record of " + name,
		"headers": obj{"type": "object", "properties": obj{
			"stele-subject": obj{"type": "string", "description": "the record's subject: dotted tokens (docs/subjects.md)"},
		}},
	}
	kb := obj{"bindingVersion": kafkaBindingVersion}
	if p, ok := latestSchema(reg, name+"-value"); ok {
		msg["payload"] = p
		msg["contentType"] = "application/octet-stream"
		kb["schemaIdLocation"] = "payload"
		kb["schemaIdPayloadEncoding"] = "confluent"
	}
	if k, ok := latestSchema(reg, name+"-key"); ok {
		kb["key"] = k
	}
	msg["bindings"] = obj{"kafka": kb}
	if from := t.Configs["stele.subject.from"]; from != "" {
		msg["description"] = "Each record's subject comes from " + from + " (stele.subject.from)."
	}
	counts, err := opts.Broker.SubjectCounts(t.Name, nil, nil, maxAsyncAPISubjects)
	if err != nil {
		return nil, err
	}
	if len(counts) > 0 {
		subs := make([]obj, len(counts))
		for i, c := range counts {
			subs[i] = obj{"subject": string(c.Subject), "records": strconv.FormatUint(c.Records, 10)}
		}
		msg["x-stele-subjects"] = subs
	}
	return msg, nil
}

// protobufSchemaFormat names a Protobuf payload's format in AsyncAPI, by
// the syntax its file declares (canonical: its canonical form, whose
// tokens a space apart open with the syntax statement when it has one).
func protobufSchemaFormat(canonical string) string {
	if strings.HasPrefix(canonical, `syntax = "proto3"`) || strings.HasPrefix(canonical, `syntax = 'proto3'`) {
		return "application/vnd.google.protobuf;version=3"
	}
	return "application/vnd.google.protobuf;version=2"
}

// jsonSchemaFormat names JSON Schema payloads in AsyncAPI (draft-07, as
// the registry reads a schema without $schema).
const jsonSchemaFormat = "application/schema+json;version=draft-07"

// latestSchema is the latest live version of subject as an AsyncAPI
// multi-format schema.
func latestSchema(reg *fsm.SchemaRegistryView, subject string) (obj, bool) {
	_, st, ok := reg.Version(subject, fsm.SchemaLatest, false)
	if !ok {
		return nil, false
	}
	format := avroSchemaFormat
	switch st.Type {
	case schema.TypeAvro:
	case schema.TypeJSON:
		format = jsonSchemaFormat
	case schema.TypeProtobuf:
		// The .proto file's text, as AsyncAPI's Protobuf schema parser
		// reads it.
		format = protobufSchemaFormat(st.Canonical)
		return obj{"schemaFormat": format, "schema": st.Text}, true
	default:
		return nil, false
	}
	var s any
	if err := json.Unmarshal([]byte(st.Text), &s); err != nil {
		return nil, false
	}
	return obj{"schemaFormat": format, "schema": s}, true
}
