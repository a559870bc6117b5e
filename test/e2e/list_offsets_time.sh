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
#
# Then the timestamps a consumer sees: librdkafka (confluent-kafka) produces
# records stamped a day ago to both topics, its delivery reports giving each
# record's offset and timestamp (on the LogAppendTime topic the
# log_append_time of the produce answer); kcat -C -f '%o %T %k' and -J must
# show the producer's timestamp with type create on the CreateTime topic,
# and the delivery report's append time with type logappend on the
# LogAppendTime one (Kafka stamps the batch header; consumers read it).
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
day_ago=$(($(date +%s%3N) - 86400000))
for topic in "$create_time" "$append_time"; do
	reports=$E2E_TMP/reports-$topic.txt
	e2e_timeout 60 "$PY" - "$BROKER" "$topic" "$day_ago" >"$reports" <<'EOF' || fail "confluent-kafka produce to $topic failed"
import sys
from confluent_kafka import Producer, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME
bootstrap, topic, ts = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
reports, errors = [], []
def report(err, msg):
    if err is not None:
        errors.append(str(err))
    else:
        kind, t = msg.timestamp()
        name = {TIMESTAMP_CREATE_TIME: "create", TIMESTAMP_LOG_APPEND_TIME: "logappend"}.get(kind, "unknown")
        reports.append((msg.offset(), t, msg.key().decode(), name))
for i in range(5):
    p.produce(topic, key=f"k{i}", value=b"v", partition=0, timestamp=ts + i, on_delivery=report)
    p.flush(20)
if errors or len(reports) != 5:
    sys.exit(f"delivery reports {reports}, errors {errors}")
for off, t, key, name in reports:
    print(off, t, key, name)
EOF
	read -r first _ <"$reports"
	want_type=create
	[[ $topic == "$append_time" ]] && want_type=logappend
	while read -r off t key kind; do
		[[ $kind == "$want_type" ]] ||
			fail "$topic: librdkafka's delivery report for offset $off has timestamp type $kind, want $want_type"
		if [[ $want_type == create ]]; then
			[[ $t == $((day_ago + ${key#k})) ]] ||
				fail "$topic: delivery report for offset $off: timestamp $t, want the producer's $((day_ago + ${key#k}))"
		else
			((t > day_ago + 60000)) ||
				fail "$topic: delivery report for offset $off: log_append_time $t is the producer's time, not the append time"
		fi
	done <"$reports"
	got=$(e2e_timeout 20 kcat -b "$BROKER" -C -t "$topic" -p 0 -o "$first" -c 5 -e -f '%o %T %k\n' 2>/dev/null) ||
		fail "kcat -C -o $first on $topic failed"
	want=$(cut -d' ' -f1-3 "$reports")
	[[ $got == "$want" ]] ||
		fail "$topic: kcat -C -f '%o %T %k' shows"$'\n'"$got"$'\n'"where the delivery reports say"$'\n'"$want"
	types=$(e2e_timeout 20 kcat -b "$BROKER" -C -t "$topic" -p 0 -o "$first" -c 5 -e -J 2>/dev/null |
		"$PY" -c 'import json, sys; print(" ".join(sorted({json.loads(l)["tstype"] for l in sys.stdin if l.strip()})))') ||
		fail "kcat -C -J on $topic failed"
	[[ $types == "$want_type" ]] || fail "$topic: kcat -J shows timestamp types '$types', want $want_type"
	log "$topic: kcat shows the records with type $want_type and the timestamps librdkafka's delivery reports gave"
done
e2e_broker_stop 30
log "PASS"
