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
#  7. The example encrypt, one module on two hooks of a third topic: its
#     produce hook (deployed as encrypt) seals kcat's values into AES-GCM
#     envelopes; its fetch hook (deployed as decrypt, --hook fetch) opens
#     them only for the principals in readers=. With readers=User:nobody
#     kcat and stele consume (franz-go) read envelopes; with the same
#     module redeployed with readers=User:ANONYMOUS they read the values
#     sent. The key (a secret. config) is never shown by describe.
#  8. The example ratelimit (records=2, counted in the plugin's state):
#     kcat's batch of three records of one key is refused with
#     INVALID_RECORD; redeployed with over=drop, records=1, a batch of five
#     is stored as one.
# e2e-limit: 420
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

# --- 7. encrypt and decrypt: one module, two hooks -------------------------------------
secret=$topic-secret
e2e_topic_create "$secret" 1
enc=$E2E_TMP/encrypt.wasm
(cd "$root" && GOOS=wasip1 GOARCH=wasm e2e_timeout 240 go build -buildmode=c-shared -o "$enc" ./examples/plugins/encrypt) ||
	fail "building examples/plugins/encrypt"
key=$(head -c 32 /dev/urandom | base64)
out=$(plugin deploy encrypt --wasm "$enc" --topic "$secret" --config "secret.key.k1=$key" 2>&1) ||
	fail "stele plugin deploy encrypt: $out"
log "$out"
out=$(plugin deploy decrypt --wasm "$enc" --topic "$secret" --hook fetch --config "secret.key.k1=$key" --config readers=User:nobody 2>&1) ||
	fail "stele plugin deploy decrypt --hook fetch: $out"
log "$out"
printf '%s
' 'card 4111-1111' 'card 5500-0000' | e2e_timeout 20 kcat -P -b "$BROKER" -t "$secret" -k acct \
	-X message.send.max.retries=0 2>"$E2E_TMP/kcat-put.err" || fail "kcat into $secret: $(cat "$E2E_TMP/kcat-put.err")"
# An envelope: STE1, the key's ID (a length byte and k1), a 12-byte nonce,
# the 14 bytes sealed and a 16-byte tag: 49 bytes.
got=$(e2e_timeout 20 kcat -C -b "$BROKER" -t "$secret" -e -q -f '%o %S\n')
[[ $got == $'0 49\n1 49' ]] || fail "kcat, not a reader, read values of sizes: $got (want two envelopes of 49 bytes)"
n=$(e2e_timeout 20 kcat -C -b "$BROKER" -t "$secret" -e -q -f '%s\n' | grep -ac '^STE1')
[[ $n == 2 ]] || fail "kcat, not a reader: $n values begin with STE1, want 2"
consume() { e2e_timeout 30 "$STELE_BIN" consume "$secret" --brokers "$BROKER" --from-beginning --max-messages 2 2>/dev/null; }
got=$(consume) || fail "stele consume $secret"
! grep -qa 4111 <<<"$got" && grep -qa STE1 <<<"$got" || fail "stele consume, not a reader, read: $got"
log "not a reader: kcat and stele consume read envelopes"
out=$(plugin deploy decrypt --wasm "$enc" --topic "$secret" --hook fetch --config "secret.key.k1=$key" --config readers=User:ANONYMOUS 2>&1) ||
	fail "stele plugin deploy decrypt again: $out"
grep -q "ran already" <<<"$out" || fail "redeploying decrypt uploaded the module again: $out"
got=$(e2e_timeout 20 kcat -C -b "$BROKER" -t "$secret" -e -q -f '%o %k %s\n')
[[ $got == $'0 acct card 4111-1111\n1 acct card 5500-0000' ]] || fail "kcat, a reader, read: $got"
got=$(consume) || fail "stele consume $secret"
[[ $got == $'card 4111-1111\ncard 5500-0000' ]] || fail "stele consume, a reader, read: $got"
out=$(plugin describe decrypt 2>&1) || fail "stele plugin describe decrypt: $out"
grep -q "secret.key.k1=\[hidden\] readers=User:ANONYMOUS" <<<"$out" || fail "stele plugin describe decrypt: $out"
! grep -qF "$key" <<<"$out" || fail "stele plugin describe shows the key"
log "a reader: kcat and stele consume read the values sent; describe hides the key: $(grep config <<<"$out")"

# --- 8. ratelimit: counts in the plugin's state -----------------------------------------
limited=$topic-limited
e2e_topic_create "$limited" 1
rl=$E2E_TMP/ratelimit.wasm
(cd "$root" && GOOS=wasip1 GOARCH=wasm e2e_timeout 240 go build -buildmode=c-shared -o "$rl" ./examples/plugins/ratelimit) ||
	fail "building examples/plugins/ratelimit"
out=$(plugin deploy ratelimit --wasm "$rl" --topic "$limited" --config records=2 2>&1) || fail "stele plugin deploy ratelimit: $out"
log "$out"
# One batch (linger.ms=200), so one block and one second of block time.
kcat_batch() {
	seq "$1" | e2e_timeout 20 kcat -P -b "$BROKER" -t "$limited" -k clicker -X linger.ms=200 \
		-X message.send.max.retries=0 2>"$E2E_TMP/kcat-put.err"
}
if kcat_batch 3; then
	fail "kcat: three records of one key in a second were stored with records=2"
fi
grep -qi "failed to validate record\|INVALID_RECORD" "$E2E_TMP/kcat-put.err" ||
	fail "kcat's failure is not INVALID_RECORD: $(cat "$E2E_TMP/kcat-put.err")"
out=$(plugin deploy ratelimit --wasm "$rl" --topic "$limited" --config records=1 --config over=drop 2>&1) ||
	fail "stele plugin deploy ratelimit over=drop: $out"
kcat_batch 5 || fail "kcat, over=drop: $(cat "$E2E_TMP/kcat-put.err")"
got=$(e2e_timeout 20 kcat -C -b "$BROKER" -t "$limited" -e -q -f '%k=%s\n')
[[ $got == "clicker=1" ]] || fail "ratelimit over=drop stored: $got (want clicker=1)"
log "ratelimit: three of one key refused with records=2; five stored as one with records=1 over=drop"
e2e_broker_stop 30
log "PASS"
