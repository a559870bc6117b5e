#!/usr/bin/env bash
# signed.sh: signed producers (docs/signed-producers.md) against `stele
# serve`, with `stele produce --sign` writing and kcat (librdkafka) reading,
# tampering and replaying.
#
#  1. A key is generated and registered for alice; a topic takes records
#     signed by alice only (stele.signed.by=alice).
#  2. `stele produce --sign` writes three records; kcat reads them back
#     with their stele-signature headers, v2: bound to the chain, which a
#     new cluster (app version 2 on) takes only.
#  3. kcat writes: an unsigned record, alice's signature over another value
#     (tampered), a copy of a record alice signed (a replay), and that copy
#     with its signature relabelled v1 (naming no chain): each is
#     refused (INVALID_RECORD, librdkafka's "Broker failed to validate
#     record"), and nothing of them is in the log.
#  4. The key rotates only with the old key's endorsement; the old key's
#     signatures are refused after it, the new key's taken.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_require_clients
e2e_broker_init
e2e_broker_start

topic=e2e-signed-$$x$RANDOM
e2e_stele topic create "$topic" --partitions 1 --config stele.signed.by=alice >/dev/null || fail "topic create with stele.signed.by"
export STELE_HTTP=$BROKER_HTTP

# --- 1. alice's key --------------------------------------------------------------
pub=$("$STELE_BIN" producer-key generate --out "$E2E_TMP/alice.key") || fail "producer-key generate"
[[ $(stat -c %a "$E2E_TMP/alice.key") == 600 ]] || fail "the key file is not mode 600"
out=$(e2e_stele producer-key register alice --key "$E2E_TMP/alice.key") || fail "producer-key register: $out"
[[ $(e2e_stele producer-key show alice) == "$pub" ]] || fail "producer-key show alice is not the key registered"
log "alice registered $pub"

# --- 2. signed records, read by kcat --------------------------------------------
printf 'a:1\nb:2\nc:3\n' | e2e_stele produce "$topic" --key-separator : --sign "$E2E_TMP/alice.key" --principal alice 2>"$E2E_TMP/p.err" ||
	fail "stele produce --sign: $(cat "$E2E_TMP/p.err")"
e2e_timeout 20 kcat -C -b "$BROKER" -t "$topic" -e -f '%k|%s|%h\n' >"$E2E_TMP/read.txt" 2>/dev/null || fail "kcat -C"
[[ $(wc -l <"$E2E_TMP/read.txt") == 3 ]] || fail "kcat read: $(cat "$E2E_TMP/read.txt")"
grep -q '^b|2|stele-signature=v2:alice:[0-9]*:' "$E2E_TMP/read.txt" || fail "kcat read no signature: $(cat "$E2E_TMP/read.txt")"
sig=$(sed -n 's/^a|1|stele-signature=//p' "$E2E_TMP/read.txt")
log "three signed records read back; a's signature $(cut -c1-40 <<<"$sig")..."

# --- 3. unsigned, tampered, replayed: refused ------------------------------------
kcat_put() { # KEY VALUE [HEADER]
	local h=()
	[[ -n ${3:-} ]] && h=(-H "stele-signature=$3")
	printf '%s:%s\n' "$1" "$2" | e2e_timeout 20 kcat -P -b "$BROKER" -t "$topic" -p 0 -K: "${h[@]}" \
		-X message.send.max.retries=0 2>"$E2E_TMP/kcat.err"
}
for c in "unsigned|x|" "tampered|a|forged|$sig" "replayed|a|1|$sig" "relabelled v1|a|1|${sig/#v2:/v1:}"; do
	IFS='|' read -r what key value header <<<"$c"
	if kcat_put "$key" "$value" "$header"; then
		fail "kcat, $what: written; want a refusal"
	fi
	grep -qi "failed to validate record\|INVALID_RECORD" "$E2E_TMP/kcat.err" || fail "kcat, $what: $(cat "$E2E_TMP/kcat.err")"
done
e2e_timeout 20 kcat -C -b "$BROKER" -t "$topic" -e -f '%k|%s\n' >"$E2E_TMP/read2.txt" 2>/dev/null || fail "kcat -C"
[[ $(tr '\n' ' ' <"$E2E_TMP/read2.txt") == 'a|1 b|2 c|3 ' ]] || fail "the log changed: $(cat "$E2E_TMP/read2.txt")"
log "kcat's unsigned, tampered, replayed and relabelled records were refused; the log holds alice's three"

# --- 4. rotation -----------------------------------------------------------------
"$STELE_BIN" producer-key generate --out "$E2E_TMP/alice2.key" >/dev/null || fail "generate the second key"
if out=$(e2e_stele producer-key register alice --key "$E2E_TMP/alice2.key" 2>&1); then
	fail "a new key for alice without endorsement was registered: $out"
fi
grep -q "endorsed" <<<"$out" || fail "rotation without endorsement: $out"
e2e_stele producer-key register alice --key "$E2E_TMP/alice2.key" --endorse-with "$E2E_TMP/alice.key" >/dev/null ||
	fail "rotation endorsed by the old key"
if printf 'd:4\n' | e2e_stele produce "$topic" --key-separator : --sign "$E2E_TMP/alice.key" --principal alice 2>"$E2E_TMP/p.err"; then
	fail "the old key signed after rotation"
fi
printf 'e:5\n' | e2e_stele produce "$topic" --key-separator : --sign "$E2E_TMP/alice2.key" --principal alice 2>"$E2E_TMP/p.err" ||
	fail "the new key: $(cat "$E2E_TMP/p.err")"
e2e_timeout 20 kcat -C -b "$BROKER" -t "$topic" -e -f '%k|%s\n' >"$E2E_TMP/read3.txt" 2>/dev/null || fail "kcat -C"
[[ $(tr '\n' ' ' <"$E2E_TMP/read3.txt") == 'a|1 b|2 c|3 e|5 ' ]] || fail "after rotation: $(cat "$E2E_TMP/read3.txt")"
log "the key rotated with the old key's endorsement; the old key is refused, the new one taken"
e2e_broker_stop 30
log "PASS"
