#!/usr/bin/env bash
# views.sh: views (docs/subjects.md#views-a-subject-pattern-as-a-topic-any-kafka-client-reads)
# made with `stele view create` and read by kcat (librdkafka), against
# `stele serve`.
#
#  1. `stele view create` makes fr (orders.*.fr.> of orders, partition
#     order) and everything (> of orders and audit, global order).
#  2. kcat -P writes records with subjects to orders (by key, to its
#     three partitions) and audit, and some without a subject.
#  3. kcat -C reads fr: exactly the matching records, in their own dense
#     offsets, each with a stele-source header naming its source record
#     (partition p of fr holds partition p of orders'); kcat -p 0 reads
#     one partition (an assigned consumer).
#  4. kcat -G reads everything in a consumer group: every record with a
#     subject, once, each source partition's in order; kcat -G reads fr in
#     a group and kcat -p 0 reads everything, the same records.
#  5. kcat cannot write to a view (librdkafka reports the broker's
#     INVALID_TOPIC_EXCEPTION); curl reads a view by subject.
#  6. `stele consume fr --verify` proves every view record, as the view's
#     and as the source record it names.
#  7. `stele view list|describe`; `stele topic delete orders` is refused
#     while views use it; `stele topic delete orders --cascade` deletes
#     them with it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_require_clients
e2e_broker_init
e2e_broker_start

orders=e2e-orders-$$x$RANDOM
audit=$orders-audit
e2e_topic_create "$orders" 3
e2e_topic_create "$audit" 1
genesis=$BROKER_DATA/cometbft/config/genesis.json
export XDG_CONFIG_HOME=$E2E_TMP/config

# --- 1. stele view create ---------------------------------------------------------
out=$(e2e_stele view create fr --from "$orders" --subject 'orders.*.fr.>' 2>&1) || fail "stele view create fr: $out"
log "$out"
out=$(e2e_stele view create everything --from "$orders,$audit" --order global 2>&1) || fail "stele view create everything: $out"
log "$out"
if out=$(e2e_stele view create bad --from "$orders" --subject 'orders.>.x' 2>&1); then
	fail "stele view create with the pattern orders.>.x succeeded: $out"
fi
log "a bad pattern is refused: $out"

# --- 2. kcat writes ------------------------------------------------------------------
# kcat_put TOPIC SUBJECT KEY:VALUE... (no header when SUBJECT is -).
kcat_put() {
	local topic=$1 subj=$2
	shift 2
	local hdr=()
	[[ $subj != - ]] && hdr=(-H "stele-subject=$subj")
	printf '%s\n' "$@" | e2e_timeout 20 kcat -P -b "$BROKER" -t "$topic" -K: "${hdr[@]}" \
		-X message.send.max.retries=0 2>"$E2E_TMP/kcat-put.err"
}
kcat_put "$orders" orders.eu.fr.created a:fr-1 b:fr-2 c:fr-3 a:fr-4 || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
kcat_put "$orders" orders.eu.de.created a:de-1 b:de-2 || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
kcat_put "$audit" audit.login u:login-1 || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
kcat_put "$orders" orders.eu.fr.paid b:fr-paid || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
kcat_put "$orders" - a:plain-1 || fail "kcat: $(cat "$E2E_TMP/kcat-put.err")"
log "kcat wrote 8 records with subjects and 1 without"

# --- 3. kcat reads the partition-order view -----------------------------------------
src=$(e2e_timeout 20 kcat -C -b "$BROKER" -t "$orders" -e -q -f '%p/%o %s\n' | sort -t/ -k1,1n -k2,2n)
got=$(e2e_timeout 20 kcat -C -b "$BROKER" -t fr -e -q -f '%p %o %s %h\n' | sort)
[[ $(wc -l <<<"$got") == 5 ]] || fail "kcat -C fr read: $got"
while read -r p o v h; do
	# The stele-source header names the source record, in the same partition.
	s=$(grep -o "stele-source=[^,]*" <<<"$h") || fail "fr $p/$o $v has no stele-source: $h"
	s=${s#stele-source=}
	[[ ${s%%/*} == "$orders" ]] || fail "fr $p/$o: source $s is not $orders"
	rest=${s#*/}
	[[ ${rest%%/*} == "$p" ]] || fail "fr $p/$o: source $s is in another partition"
	grep -qx "$rest $v" <<<"$src" || fail "fr $p/$o $v: $orders has no $v at $rest: $src"
	[[ $v == fr-* ]] || fail "fr holds $v"
done <<<"$got"
for p in 0 1 2; do
	offs=$(awk -v p="$p" '$1 == p {print $2}' <<<"$got" | sort -n | tr '\n' ' ')
	n=$(awk -v p="$p" '$1 == p' <<<"$got" | wc -l)
	want=$(seq -s ' ' 0 $((n - 1)))
	[[ $n == 0 || $offs == "$want " ]] || fail "fr-$p offsets are '$offs', want dense from 0"
done
log "kcat -C fr: the 5 orders.*.fr.> records, dense offsets, each naming its source"
one=$(e2e_timeout 20 kcat -C -b "$BROKER" -t fr -p 0 -e -q -f '%s\n' | tr '\n' ' ')
want=$(awk '$1 == 0 {print $3}' <<<"$got" | tr '\n' ' ')
[[ $one == "$want" ]] || fail "kcat -C fr -p 0: '$one', want '$want'"
log "kcat -C fr -p 0 (assigned): $one"

# --- 4. a consumer group on the global view ---------------------------------------------
grp=$(e2e_timeout 30 kcat -b "$BROKER" -G e2e-views-$$ -X auto.offset.reset=earliest -c 8 -q -f '%p %o %s %h\n' everything) ||
	fail "kcat -G everything: $grp"
[[ $(wc -l <<<"$grp") == 8 ]] || fail "kcat -G everything read: $grp"
[[ $(awk '{print $1}' <<<"$grp" | sort -u) == 0 ]] || fail "the global view has more than one partition: $grp"
[[ $(awk '{print $2}' <<<"$grp" | tr '\n' ' ') == '0 1 2 3 4 5 6 7 ' ]] || fail "the global view's offsets: $grp"
grep -q ' login-1 .*stele-source='"$audit"'/0/0' <<<"$grp" || fail "the global view lacks audit's record: $grp"
grep -q 'plain-1' <<<"$grp" && fail "the global view holds a record without a subject: $grp"
# Each source partition's records in the source's order.
for p in 0 1 2; do
	want=$(awk -v p="$p" -F'[/ ]' '$1 == p && $3 !~ /^plain/ {print $3}' <<<"$src" | tr '\n' ' ')
	have=$(awk -v s="stele-source=$orders/$p/" 'index($0, s) {print $3}' <<<"$grp" | tr '\n' ' ')
	[[ $have == "$want" ]] || fail "the global view's $orders-$p records: '$have', want '$want'"
done
log "kcat -G everything: 8 records in one partition, each source partition's in order"
# And the other way round: a group on the partition-order view, an
# assigned consumer on the global one.
grp=$(e2e_timeout 30 kcat -b "$BROKER" -G e2e-views-fr-$$ -X auto.offset.reset=earliest -c 5 -q -f '%p %o %s\n' fr | sort) ||
	fail "kcat -G fr: $grp"
[[ $grp == "$(awk '{print $1, $2, $3}' <<<"$got")" ]] || fail "kcat -G fr read '$grp', kcat -C '$got'"
one=$(e2e_timeout 20 kcat -C -b "$BROKER" -t everything -p 0 -e -q -f '%o ' )
[[ $one == '0 1 2 3 4 5 6 7 ' ]] || fail "kcat -C everything -p 0: '$one'"
log "kcat -G fr (a group on the partition-order view) and kcat -p 0 everything agree"

# --- 5. a view is read-only; curl reads it by subject ------------------------------------
if printf 'x\n' | e2e_timeout 20 kcat -P -b "$BROKER" -t fr -X message.send.max.retries=0 2>"$E2E_TMP/kcat-put.err"; then
	fail "kcat wrote to a view"
fi
grep -qi "invalid topic\|INVALID_TOPIC" "$E2E_TMP/kcat-put.err" || fail "kcat's failure writing to a view: $(cat "$E2E_TMP/kcat-put.err")"
log "kcat -P fr: $(grep -im1 "invalid" "$E2E_TMP/kcat-put.err")"
out=$(curl -sfG --data-urlencode 'subject=*.*.*.paid' "http://$BROKER_HTTP/v1/topics/everything/records") || fail "GET everything?subject"
[[ $(grep -o '"partition":' <<<"$out" | wc -l) == 1 ]] && grep -q 'fr-paid' <<<"$out" || fail "curl everything by *.*.*.paid: $out"
log "curl reads the global view by subject"

# --- 6. stele consume --verify on a view --------------------------------------------------
got=$(e2e_stele consume fr --from-beginning --verify --http "$BROKER_HTTP" --genesis "$genesis" \
	--timeout-idle 3s --format '%v\n' 2>"$E2E_TMP/c.err" | sort | tr '\n' ' ') ||
	fail "stele consume fr --verify: $(cat "$E2E_TMP/c.err")"
[[ $got == 'fr-1 fr-2 fr-3 fr-4 fr-paid ' ]] || fail "stele consume fr --verify printed: $got"
grep -q "fr is a view: each record is proven as the view's and as the source record" "$E2E_TMP/c.err" ||
	fail "stele consume fr --verify did not prove the source records: $(cat "$E2E_TMP/c.err")"
grep -q "proven as the view's only" "$E2E_TMP/c.err" && fail "stele consume fr --verify: $(cat "$E2E_TMP/c.err")"
log "stele consume fr --verify: $got, each proven as the view's record and as its source record"

# --- 7. stele view list|describe; deleting a source ---------------------------------------
out=$(e2e_stele view list 2>&1) || fail "stele view list: $out"
grep -q "^fr" <<<"$out" && grep -q "^everything" <<<"$out" || fail "stele view list: $out"
out=$(e2e_stele view describe fr 2>&1) || fail "stele view describe fr: $out"
grep -q 'orders\.\*\.fr\.>' <<<"$out" || fail "stele view describe fr: $out"
if out=$(e2e_stele topic delete "$orders" 2>&1); then
	fail "stele topic delete of a view's source succeeded: $out"
fi
grep -q "source of the view" <<<"$out" || fail "stele topic delete $orders: $out"
log "deleting the source is refused: $out"
out=$(e2e_stele topic delete "$orders" --cascade 2>&1) || fail "stele topic delete --cascade: $out"
out=$(e2e_stele view list --output json 2>&1) || fail "stele view list: $out"
grep -q '"fr"\|"everything"' <<<"$out" && fail "views left after --cascade: $out"
log "stele topic delete --cascade deleted the views with their source"
e2e_broker_stop 30
log "PASS"
