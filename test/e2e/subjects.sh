#!/usr/bin/env bash
# subjects.sh: subjects from kcat (librdkafka), read by pattern with curl
# and `stele consume --subject`, against `stele serve` (docs/subjects.md).
#
#  1. kcat -P writes records with the header stele-subject (orders.eu.fr.*,
#     orders.us.*, and one audit.login), and some without.
#  2. kcat writes a record whose subject is invalid (orders..x): librdkafka
#     reports INVALID_RECORD, kcat exits non-zero, nothing is written.
#  3. curl reads by pattern (orders.*.fr.>, orders.>, audit.*, >, a literal):
#     exactly the matching records; NDJSON; a bad pattern is 400.
#  4. `stele consume --subject` prints the same records; `stele subject
#     list` lists the subjects with their counts.
#  5. kcat reads the whole topic: the records are the ones kcat wrote,
#     headers and all (a subject is an ordinary header to Kafka clients).
#  6. A topic with stele.subject.from=json:/type and
#     stele.subject.required=true: kcat's JSON records are read by their
#     type; a record without one is refused.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_require_clients
e2e_broker_init
e2e_broker_start

topic=e2e-subjects-$$x$RANDOM
e2e_topic_create "$topic" 3
records="http://$BROKER_HTTP/v1/topics/$topic/records"

# kcat_put SUBJECT VALUE... produces each VALUE with the header
# stele-subject=SUBJECT (none when SUBJECT is -); returns kcat's status.
kcat_put() {
	local subj=$1
	shift
	local hdr=()
	[[ $subj != - ]] && hdr=(-H "stele-subject=$subj")
	printf '%s\n' "$@" | e2e_timeout 20 kcat -P -b "$BROKER" -t "$topic" "${hdr[@]}" \
		-X message.send.max.retries=0 2>"$E2E_TMP/kcat-put.err"
}

# --- 1. subjects from kcat -----------------------------------------------------
kcat_put orders.eu.fr.created fr-1 fr-2 fr-3 || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
kcat_put orders.eu.fr.paid fr-paid || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
kcat_put orders.eu.de.created de-1 de-2 || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
kcat_put orders.us.ny.created us-1 || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
kcat_put audit.login login-1 || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
kcat_put - plain-1 plain-2 || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
log "kcat wrote 8 records with subjects and 2 without"

# --- 2. an invalid subject ------------------------------------------------------
if kcat_put 'orders..x' bad-1; then
	fail "kcat, subject orders..x: kcat exited 0; want a delivery failure"
fi
grep -qi "failed to validate record\|INVALID_RECORD" "$E2E_TMP/kcat-put.err" ||
	fail "kcat's failure is not INVALID_RECORD: $(cat "$E2E_TMP/kcat-put.err")"
log "kcat: subject orders..x was refused: $(grep -im1 "validate\|invalid" "$E2E_TMP/kcat-put.err")"

# --- 3. curl reads by pattern -----------------------------------------------------
# values PATTERN prints the values a read by PATTERN returns, sorted.
values() {
	local out
	out=$(curl -sfG --data-urlencode "subject=$1" -H 'Accept: application/x-ndjson' "$records") ||
		fail "GET records?subject=$1 failed"
	# The record's own value comes just before its headers (the subject's).
	{ grep -o '"value":{"utf8":"[^"]*"},"headers"' <<<"$out" || true; } | sed 's/.*"utf8":"\([^"]*\)".*/\1/' | sort | tr '\n' ' '
}
check() {
	local got
	got=$(values "$1")
	[[ $got == "$2" ]] || fail "subject=$1: got '$got', want '$2'"
	log "subject=$1: $got"
}
check 'orders.*.fr.>' 'fr-1 fr-2 fr-3 fr-paid '
check 'orders.>' 'de-1 de-2 fr-1 fr-2 fr-3 fr-paid us-1 '
check 'orders.eu.de.created' 'de-1 de-2 '
check 'audit.*' 'login-1 '
check '>' 'de-1 de-2 fr-1 fr-2 fr-3 fr-paid login-1 us-1 '
check '*' ''
grep -q 'bad-1' <<<"$(curl -sfG --data-urlencode 'subject=>' "$records")" && fail "the refused record was written"
code=$(curl -s -o /dev/null -w '%{http_code}' -G --data-urlencode 'subject=orders.>.x' "$records")
[[ $code == 400 ]] || fail "subject=orders.>.x: $code, want 400"

# --- 4. stele consume --subject, stele subject list -----------------------------
got=$(e2e_stele consume "$topic" --http "$BROKER_HTTP" --subject 'orders.eu.>' --from-beginning --timeout-idle 2s 2>/dev/null | sort | tr '\n' ' ')
[[ $got == 'de-1 de-2 fr-1 fr-2 fr-3 fr-paid ' ]] || fail "stele consume --subject orders.eu.>: $got"
log "stele consume --subject orders.eu.>: $got"
got=$(e2e_stele subject list "$topic" --http "$BROKER_HTTP" | tail -n +2 | tr '\t\n' '= ')
[[ $got == 'audit.login=1 orders.eu.de.created=2 orders.eu.fr.created=3 orders.eu.fr.paid=1 orders.us.ny.created=1 ' ]] ||
	fail "stele subject list: $got"
log "stele subject list: $got"

# --- 5. to Kafka clients a subject is a header ------------------------------------
got=$(e2e_timeout 20 kcat -C -b "$BROKER" -t "$topic" -e -q -f '%h|%s\n' | sort | tr '\n' ' ')
grep -q 'stele-subject=orders.eu.fr.paid|fr-paid' <<<"$got" || fail "kcat -C: $got"
[[ $(wc -w <<<"$got") == 10 ]] || fail "kcat -C read $(wc -w <<<"$got") records, want 10: $got"
log "kcat reads all 10 records, subjects as headers"

# --- 6. subjects from JSON, required ------------------------------------------------
jtopic=$topic-json
out=$(e2e_stele topic create "$jtopic" --partitions 1 --config stele.subject.from=json:/type --config stele.subject.required=true 2>&1) ||
	fail "stele topic create $jtopic: $out"
printf '%s\n' '{"type":"user.signup","id":1}' '{"type":"user.login","id":2}' '{"type":"user.signup","id":3}' |
	e2e_timeout 20 kcat -P -b "$BROKER" -t "$jtopic" 2>"$E2E_TMP/kcat-put.err" || fail "kcat JSON: $(cat "$E2E_TMP/kcat-put.err")"
if printf '%s\n' '{"id":4}' | e2e_timeout 20 kcat -P -b "$BROKER" -t "$jtopic" -X message.send.max.retries=0 2>"$E2E_TMP/kcat-put.err"; then
	fail "kcat: a JSON record without a type was accepted where a subject is required"
fi
out=$(curl -sfG --data-urlencode 'subject=user.signup' "http://$BROKER_HTTP/v1/topics/$jtopic/records") || fail "GET $jtopic records"
[[ $(grep -o '"partition":' <<<"$out" | wc -l) == 2 ]] || fail "JSON subjects: $out"
log "JSON subjects: user.signup read twice; a record without a type refused"
e2e_broker_stop 30
log "PASS"
