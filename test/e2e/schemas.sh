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

topic=e2e-schemas-$$x$RANDOM
e2e_stele topic create "$topic" --partitions 1 --config stele.value.schema.validation=full >/dev/null ||
	fail "topic create with stele.value.schema.validation=full"
registry=http://$BROKER_HTTP

# --- 1. confluent-kafka ----------------------------------------------------------
out=$(e2e_timeout 90 "$PY" "$E2E_DIR/schemas_confluent.py" --bootstrap "$BROKER" --registry "$registry" --topic "$topic" 2>&1) ||
	fail "schemas_confluent.py: $out"
printf '%s\n' "$out" | sed 's/^/    /' >&2
log "1. confluent-kafka's registry client and librdkafka: ok"

# --- 2. confluent-kafka's JSON serializer -------------------------------------------
jtopic=e2e-schemas-json-$$x$RANDOM
e2e_stele topic create "$jtopic" --partitions 1 --config stele.value.schema.validation=full >/dev/null ||
	fail "topic create $jtopic"
out=$(e2e_timeout 90 "$PY" "$E2E_DIR/schemas_json_confluent.py" --bootstrap "$BROKER" --registry "$registry" --topic "$jtopic" 2>&1) ||
	fail "schemas_json_confluent.py: $out"
printf '%s\n' "$out" | sed 's/^/    /' >&2
log "2. confluent-kafka's JSONSerializer and JSONDeserializer: ok"

# --- 3. Protobuf ------------------------------------------------------------------
ptopic=e2e-schemas-proto-$$x$RANDOM
e2e_stele topic create "$ptopic" --partitions 1 --config stele.value.schema.validation=full >/dev/null ||
	fail "topic create $ptopic"
out=$(e2e_timeout 90 "$PY" "$E2E_DIR/schemas_protobuf_confluent.py" --bootstrap "$BROKER" --registry "$registry" --topic "$ptopic" 2>&1) ||
	fail "schemas_protobuf_confluent.py: $out"
printf '%s\n' "$out" | sed 's/^/    /' >&2
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
