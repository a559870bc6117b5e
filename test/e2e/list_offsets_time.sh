#!/usr/bin/env bash
# list_offsets_time.sh: librdkafka's offsetsForTimes (kcat -Q) right after
# each acknowledged kcat produce finds the record just written, on a
# CreateTime topic and on a LogAppendTime one (issue 27: a write
# acknowledged by a broker is visible to every later read on it, the time
# index included).
#
# Each round: kcat -P (acks=all) writes one record (librdkafka stamps it
# with the time of the produce); kcat -C -o -1 -c 1 -f '%o %T' reads the
# last record's offset and timestamp; kcat -Q -t topic:0:T must answer that
# offset for T the record's own timestamp, and on the CreateTime topic also
# for T the time just before the produce.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-40}

e2e_setup
e2e_broker_init
e2e_broker_start

run=lo$$x$RANDOM
create_time=e2e-lo-ct-$run
append_time=e2e-lo-lat-$run
e2e_topic_create "$create_time" 1
e2e_stele topic create "$append_time" --partitions 1 --config message.timestamp.type=LogAppendTime >/dev/null ||
	fail "creating the LogAppendTime topic failed"

# query TOPIC TS prints the offset kcat -Q answers for TS in partition 0.
query() {
	local out
	out=$(e2e_timeout 20 kcat -b "$BROKER" -Q -t "$1:0:$2" 2>&1) || fail "kcat -Q -t $1:0:$2 failed: $out"
	sed -n 's/.* \[0\] offset \(-\?[0-9]*\).*/\1/p' <<<"$out" | head -n 1
}

for topic in "$create_time" "$append_time"; do
	for ((i = 0; i < ROUNDS; i++)); do
		before=$(date +%s%3N)
		printf 'v%d\n' "$i" | e2e_timeout 20 kcat -b "$BROKER" -P -t "$topic" -p 0 -X acks=all -X linger.ms=0 ||
			fail "kcat -P to $topic failed"
		last=$(e2e_timeout 20 kcat -b "$BROKER" -C -t "$topic" -p 0 -o -1 -c 1 -e -f '%o %T\n' 2>/dev/null) ||
			fail "kcat -C -o -1 on $topic failed"
		read -r off rts <<<"$last"
		got=$(query "$topic" "$rts")
		[[ $got == "$off" ]] ||
			fail "$topic round $i: record acknowledged at offset $off with timestamp $rts; kcat -Q for $rts answers offset ${got:-none}"
		if [[ $topic == "$create_time" ]]; then
			got=$(query "$topic" "$before")
			[[ $got == "$off" ]] ||
				fail "$topic round $i: record at offset $off stamped $rts, produced after $before; kcat -Q for $before answers offset ${got:-none}"
		fi
	done
	log "$topic: $ROUNDS rounds of produce then offsetsForTimes found every record"
done
e2e_broker_stop 30
log "PASS"
