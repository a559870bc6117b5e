#!/usr/bin/env bash
# plugins.sh: a WebAssembly plugin (docs/plugins.md) deployed with `stele
# plugin deploy` on `stele serve`, and kcat (librdkafka) producing through
# it.
#
#  1. The example plugin redact is built with the Go SDK
#     (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared) and deployed on a topic
#     with fields=card,customer.ssn; a file that is not WebAssembly is
#     refused before anything is sent.
#  2. kcat -P writes JSON records; kcat -C reads them back without the
#     fields.
#  3. kcat -P writes a value that is not JSON: librdkafka reports the
#     broker's INVALID_RECORD, and nothing of that batch is stored.
#  4. The same module deployed again with mask=### (no upload) masks the
#     fields of the next records; `stele plugin list|describe` show it.
#  5. `stele plugin remove`: records are stored as sent again.
#  6. The example jsonschema-check, deployed on a second topic with a JSON
#     Schema: kcat's conforming values are stored, a value that does not
#     conform is refused with INVALID_RECORD.
# e2e-limit: 300
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_require_clients
e2e_broker_init
e2e_broker_start

topic=e2e-payments-$$x$RANDOM
e2e_topic_create "$topic" 1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# --- 1. build and deploy redact -----------------------------------------------------
wasm=$E2E_TMP/redact.wasm
(cd "$root" && GOOS=wasip1 GOARCH=wasm e2e_timeout 240 go build -buildmode=c-shared -o "$wasm" ./examples/plugins/redact) ||
	fail "building examples/plugins/redact"
log "built redact.wasm: $(wc -c <"$wasm") bytes"
plugin() { e2e_timeout 120 "$STELE_BIN" plugin "$@" --http "$BROKER_HTTP"; }
printf 'not wasm' >"$E2E_TMP/bad.wasm"
if out=$(plugin deploy bad --wasm "$E2E_TMP/bad.wasm" --topic "$topic" 2>&1); then
	fail "deploying a file that is not WebAssembly succeeded: $out"
fi
grep -q "cannot be a plugin" <<<"$out" || fail "deploying a file that is not WebAssembly: $out"
log "a file that is not WebAssembly is refused: $out"
out=$(plugin deploy redact --wasm "$wasm" --topic "$topic" --config fields=card,customer.ssn 2>&1) ||
	fail "stele plugin deploy redact: $out"
log "$out"

# --- 2. kcat writes through it --------------------------------------------------------
kcat_put() {
	printf '%s\n' "$@" | e2e_timeout 20 kcat -P -b "$BROKER" -t "$topic" \
		-X message.send.max.retries=0 2>"$E2E_TMP/kcat-put.err"
}
kcat_put '{"id":1,"card":"4111","customer":{"name":"Ada","ssn":"123"}}' '{"id":2,"note":"no card"}' ||
	fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
got=$(e2e_timeout 20 kcat -C -b "$BROKER" -t "$topic" -e -q -f '%o %s\n')
want=$'0 {"id":1,"customer":{"name":"Ada"}}\n1 {"id":2,"note":"no card"}'
[[ $got == "$want" ]] || fail "kcat read through redact: $got; want $want"
log "kcat read the records redacted"

# --- 3. a value redact cannot read ----------------------------------------------------
if kcat_put 'not json'; then
	fail "kcat: a value that is not JSON was stored through redact"
fi
grep -qi "failed to validate record\|INVALID_RECORD" "$E2E_TMP/kcat-put.err" ||
	fail "kcat's failure is not INVALID_RECORD: $(cat "$E2E_TMP/kcat-put.err")"
log "kcat: a value that is not JSON was refused: $(grep -im1 "validate\|invalid" "$E2E_TMP/kcat-put.err")"

# --- 4. another config of the same module ------------------------------------------------
out=$(plugin deploy redact --wasm "$wasm" --topic "$topic" --config fields=card --config 'mask=###' 2>&1) ||
	fail "stele plugin deploy redact again: $out"
grep -q "ran already" <<<"$out" || fail "redeploying the same module uploaded it again: $out"
kcat_put '{"id":3,"card":"5500"}' || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
got=$(e2e_timeout 20 kcat -C -b "$BROKER" -t "$topic" -o 2 -e -q -f '%o %s\n')
[[ $got == '2 {"id":3,"card":"###"}' ]] || fail "kcat read through the masking config: $got"
out=$(plugin list 2>&1) || fail "stele plugin list: $out"
grep -q "^redact *$topic *produce *active" <<<"$out" || fail "stele plugin list: $out"
out=$(plugin describe redact 2>&1) || fail "stele plugin describe: $out"
grep -q 'config  fields=card mask=###' <<<"$out" || fail "stele plugin describe: $out"
log "the new config masks; stele plugin list and describe show it"

# --- 5. removed ----------------------------------------------------------------------
out=$(plugin remove redact 2>&1) || fail "stele plugin remove: $out"
kcat_put '{"id":4,"card":"kept"}' || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
got=$(e2e_timeout 20 kcat -C -b "$BROKER" -t "$topic" -o 3 -e -q -f '%o %s\n')
[[ $got == '3 {"id":4,"card":"kept"}' ]] || fail "after stele plugin remove, kcat read: $got"
out=$(plugin list 2>&1) || fail "stele plugin list: $out"
! grep -q redact <<<"$out" || fail "stele plugin list after the removal: $out"
log "removed: records are stored as sent"

# --- 6. jsonschema-check ---------------------------------------------------------------
checked=$topic-checked
e2e_topic_create "$checked" 1
jsc=$E2E_TMP/jsonschema-check.wasm
(cd "$root" && GOOS=wasip1 GOARCH=wasm e2e_timeout 240 go build -buildmode=c-shared -o "$jsc" ./examples/plugins/jsonschema-check) ||
	fail "building examples/plugins/jsonschema-check"
out=$(plugin deploy orders-schema --wasm "$jsc" --topic "$checked" \
	--config 'schema={"type":"object","required":["id"],"properties":{"id":{"type":"integer"}}}' 2>&1) ||
	fail "stele plugin deploy jsonschema-check: $out"
log "$out"
printf '%s\n' '{"id":1}' '{"id":2,"note":"x"}' | e2e_timeout 20 kcat -P -b "$BROKER" -t "$checked" \
	-X message.send.max.retries=0 2>"$E2E_TMP/kcat-put.err" || fail "kcat, conforming values: $(cat "$E2E_TMP/kcat-put.err")"
if printf '%s\n' '{"id":"three"}' | e2e_timeout 20 kcat -P -b "$BROKER" -t "$checked" -X message.send.max.retries=0 2>"$E2E_TMP/kcat-put.err"; then
	fail "kcat: a value that does not conform was stored"
fi
grep -qi "failed to validate record\|INVALID_RECORD" "$E2E_TMP/kcat-put.err" ||
	fail "kcat's failure is not INVALID_RECORD: $(cat "$E2E_TMP/kcat-put.err")"
got=$(e2e_timeout 20 kcat -C -b "$BROKER" -t "$checked" -e -q -f '%o %s\n')
[[ $got == $'0 {"id":1}\n1 {"id":2,"note":"x"}' ]] || fail "kcat read $checked: $got"
log "jsonschema-check: conforming values stored, a value that does not conform refused"
e2e_broker_stop 30
log "PASS"
