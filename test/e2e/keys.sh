#!/usr/bin/env bash
# keys.sh: key streams and optimistic concurrency from kcat (librdkafka)
# and curl, against `stele serve` (docs/keys.md).
#
# kcat runs with partitioner=murmur2_random, the Java client's and
# franz-go's default, which the HTTP append uses too (librdkafka's own
# default, consistent_random, puts keys elsewhere).
#
#  1. kcat -P -K: writes a key's first event with the header
#     stele-expected-version=-1 ("no event yet"): written. The same again:
#     refused (librdkafka reports the delivery failure and kcat exits
#     non-zero), and nothing of it is written.
#  2. kcat writes the key's next event stating version 0: written.
#  3. curl appends with If-Match: the version kcat left ("1"): 201, version
#     2, in the partition kcat's records went to (Kafka's partitioner); a
#     stale If-Match: 412 with the version.
#  4. curl reads the key's events, and `stele key get` prints them: the
#     three written, in order.
#  5. kcat writes a snapshot record (header stele-snapshot): `stele key
#     get` starts there.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_require_clients
e2e_broker_init
e2e_broker_start

topic=e2e-keys-$$x$RANDOM
e2e_topic_create "$topic" 3
events=http://$BROKER_HTTP/v1/topics/$topic/keys/acct-42/events

# kcat_put VALUE EXPECT produces acct-42:VALUE with the expected version;
# returns kcat's status.
kcat_put() {
	printf 'acct-42:%s\n' "$1" | e2e_timeout 20 kcat -P -b "$BROKER" -t "$topic" -K: \
		-H "stele-expected-version=$2" -X message.send.max.retries=0 -X partitioner=murmur2_random 2>"$E2E_TMP/kcat-put.err"
}

# --- 1. no event yet --------------------------------------------------------
kcat_put opened -1 || fail "kcat, first event expecting none: $(cat "$E2E_TMP/kcat-put.err")"
if kcat_put again -1; then
	fail "kcat, a second 'no event yet': kcat exited 0; want a delivery failure"
fi
grep -qi "failed to validate record\|INVALID_RECORD" "$E2E_TMP/kcat-put.err" ||
	fail "kcat's failure is not INVALID_RECORD (librdkafka: Broker failed to validate record): $(cat "$E2E_TMP/kcat-put.err")"
log "kcat: the second 'no event yet' was refused: $(grep -im1 "validate" "$E2E_TMP/kcat-put.err")"

# --- 2. the next version ----------------------------------------------------
kcat_put credited 0 || fail "kcat, expecting version 0: $(cat "$E2E_TMP/kcat-put.err")"

# --- 3. curl appends at the version kcat left -------------------------------
out=$(curl -s -w '\n%{http_code}' -X POST --data-binary 'audited' -H 'If-Match: "1"' "$events")
[[ $(tail -n1 <<<"$out") == 201 ]] || fail "curl If-Match 1: $out"
grep -q '"offset":2' <<<"$out" || fail "curl If-Match 1: not version 2: $out"
part=$(grep -o '"partition":[0-9]*' <<<"$out")
out=$(curl -s -w '\n%{http_code}' -X POST --data-binary 'stale' -H 'If-Match: "1"' "$events")
[[ $(tail -n1 <<<"$out") == 412 ]] || fail "curl, a stale If-Match: $out"
grep -q '"version":2' <<<"$out" || fail "curl, a stale If-Match: the answer lacks version 2: $out"
log "curl: If-Match 1 appended version 2 ($part); a stale If-Match got 412"

# --- 4. read the key ---------------------------------------------------------
out=$(curl -s "$events")
for v in opened credited audited; do
	grep -q "\"utf8\":\"$v\"" <<<"$out" || fail "GET events lacks $v: $out"
done
grep -q '"utf8":"again"\|"utf8":"stale"' <<<"$out" && fail "GET events has a refused write: $out"
[[ $(grep -o '"partition":[0-9]*' <<<"$out" | sort -u) == "$part" ]] ||
	fail "the key's events are not all in $part: $out"
got=$(e2e_stele key get --http "$BROKER_HTTP" "$topic" acct-42 | tail -n +2 | cut -f4 | tr '\n' ' ')
[[ $got == '"opened" "credited" "audited" ' ]] || fail "stele key get: $got"
log "the key reads back as opened, credited, audited, in $part"

# --- 5. a snapshot from kcat: reads start there --------------------------------
printf 'acct-42:balance 7\n' | e2e_timeout 20 kcat -P -b "$BROKER" -t "$topic" -K: \
	-X partitioner=murmur2_random -H stele-snapshot=1 2>"$E2E_TMP/kcat-put.err" ||
	fail "kcat, a snapshot record: $(cat "$E2E_TMP/kcat-put.err")"
kcat_put closed -1 && fail "kcat: 'no event yet' on a key with events was accepted"
printf 'acct-42:closed\n' | e2e_timeout 20 kcat -P -b "$BROKER" -t "$topic" -K: -X partitioner=murmur2_random ||
	fail "kcat: an event after the snapshot"
got=$(e2e_stele key get --http "$BROKER_HTTP" "$topic" acct-42 | tail -n +2 | cut -f4,5 | tr '\t\n' '| ')
[[ $got == '"balance 7"|yes "closed"| ' ]] || fail "stele key get after kcat's snapshot: $got"
log "kcat's snapshot record is where reads of the key start: $got"
e2e_broker_stop 30
log "PASS"
