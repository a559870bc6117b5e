#!/usr/bin/env bash
# schemas.sh: the schema registry with clients we did not write, against
# `stele serve` (docs/schemas.md).
#
#  1. confluent-kafka's SchemaRegistryClient registers, looks up and checks
#     schemas; librdkafka produces Avro records (written with Apache Avro's
#     Python library) to a topic with stele.value.schema.validation=full:
#     the valid ones are delivered, each invalid one refused with
#     INVALID_RECORD; a consumer reads back exactly the valid ones
#     (schemas_confluent.py).
#  2. confluent-kafka's JSONSerializer registers its JSON Schema and writes
#     through a validating topic; what the schema refuses is refused
#     (INVALID_RECORD); JSONDeserializer reads back the valid records
#     (schemas_json_confluent.py).
#  3. confluent-kafka's SchemaRegistryClient registers Protobuf schemas (an
#     import as a reference) and checks their compatibility; librdkafka
#     produces Protobuf values through a validating topic; the typed read
#     gives them in Protobuf's JSON mapping (schemas_protobuf_confluent.py).
#  4. curl: Confluent's error bodies; `stele schema list` and `get`.
#  5. A broker restart keeps the registry: same ids, same answers.
# e2e-limit: 240
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_require_clients
e2e_require_debian_python requests=python3-requests avro=python3-avro jsonschema=python3-jsonschema
e2e_broker_init
e2e_broker_start

registry=http://$BROKER_HTTP

# validating_part SCRIPT TOPIC: TOPIC made with
# stele.value.schema.validation=full, then SCRIPT (a Python client) run
# against it and the registry.
validating_part() {
	e2e_stele topic create "$2" --partitions 1 --config stele.value.schema.validation=full >/dev/null ||
		fail "topic create $2 with stele.value.schema.validation=full"
	local out
	out=$(e2e_timeout 90 "$PY" "$E2E_DIR/$1" --bootstrap "$BROKER" --registry "$registry" --topic "$2" 2>&1) ||
		fail "$1: $out"
	printf '%s\n' "$out" | sed 's/^/    /' >&2
}

# --- 1. confluent-kafka ----------------------------------------------------------
topic=e2e-schemas-$$x$RANDOM
validating_part schemas_confluent.py "$topic"
log "1. confluent-kafka's registry client and librdkafka: ok"

# --- 2. confluent-kafka's JSON serializer -------------------------------------------
validating_part schemas_json_confluent.py "e2e-schemas-json-$$x$RANDOM"
log "2. confluent-kafka's JSONSerializer and JSONDeserializer: ok"

# --- 3. Protobuf ------------------------------------------------------------------
validating_part schemas_protobuf_confluent.py "e2e-schemas-proto-$$x$RANDOM"
log "3. Protobuf with confluent-kafka's registry client and librdkafka: ok"

# --- 4. curl and stele schema ----------------------------------------------------
body=$(curl -s -w ' %{http_code}' "$registry/subjects/nope/versions/1")
[[ $body == '{"error_code":40401,'*' 404' ]] || fail "unknown subject: $body"
body=$(curl -s -w ' %{http_code}' -X POST -H 'Content-Type: application/vnd.schemaregistry.v1+json' \
	--data '{"schema":"{\"type\":\"recrod\"}"}' "$registry/subjects/x/versions")
[[ $body == '{"error_code":42201,'*' 422' ]] || fail "invalid schema: $body"
list=$(e2e_stele schema list --http "$BROKER_HTTP") || fail "stele schema list"
grep -Eq "^$topic-value +3 +3 " <<<"$list" || fail "stele schema list: $list"
e2e_stele schema get "$topic-value" --version 2 --http "$BROKER_HTTP" 2>/dev/null | grep -q '"qty"' || fail "stele schema get"
before=$(curl -sf "$registry/schemas/ids/2")
log "4. curl and stele schema: ok"

# --- 5. a restart keeps the registry ---------------------------------------------
e2e_broker_stop 30
e2e_broker_start
after=$(curl -sf "$registry/schemas/ids/2")
[[ -n $before && $after == "$before" ]] || fail "schema 2 after a restart: $after, before: $before"
body=$(curl -sf -X POST -H 'Content-Type: application/vnd.schemaregistry.v1+json' \
	--data '{"schema":"{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"shop\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"},{\"name\":\"item\",\"type\":\"string\"}]}"}' \
	"$registry/subjects/$topic-value/versions") || fail "register again after a restart"
[[ $body == '{"id":1}' ]] || fail "v1 again after a restart: $body"
log "5. the registry after a restart: ok"
e2e_broker_stop 30
log "PASS"
