#!/usr/bin/env bash
# list_offsets_ack.sh: issue 27's "ListOffsets by timestamp right after an
# acknowledged produce sometimes finds nothing", tried with the client that
# noticed it against one `stele serve`: librdkafka (confluent-kafka)
# produces one record at a time and, from its delivery report, asks
# offsets_for_times at once on its consumer's own connection, for the
# record's timestamp and the millisecond before (list_offsets_ack.py says
# exactly what is checked). Every answer must be Kafka's, never "nothing".
#
# Configurations: CreateTime and LogAppendTime topics, each with acks=all,
# acks=all idempotent, acks=1 (ROUNDS rounds each), and 4 producers on 4
# partitions at once (ROUNDS/2 rounds each). On the LogAppendTime topics
# the append time is at or after the producer's clock read before
# producing, and a lookup by that time finds the record too: the broker
# stamps with the proposer's clock as it builds the block (app version 2,
# docs/kafka-api.md).
#
#   ROUNDS=100 (default, about 15 s of rounds)   ROUNDS=1000 (the long run)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-100}

e2e_setup
e2e_broker_init
e2e_broker_start

run=la$$x$RANDOM
n=0
# check TYPE PRODUCERS PARTITIONS ROUNDS ACKS IDEMPOTENT
check() {
	local type=$1 producers=$2 partitions=$3 rounds=$4 acks=$5 idem=$6 topic lat=0 out
	n=$((n + 1))
	topic=e2e-la-$run-$n
	if [[ $type == LogAppendTime ]]; then
		lat=1
		e2e_stele topic create "$topic" --partitions "$partitions" --config message.timestamp.type=LogAppendTime >/dev/null ||
			fail "creating $topic failed"
	else
		e2e_topic_create "$topic" "$partitions"
	fi
	out=$(e2e_timeout 300 "$PY" "$E2E_DIR/list_offsets_ack.py" "$BROKER" "$topic" "$rounds" "$producers" "$partitions" \
		"$acks" "$idem" "$lat" 2>&1) || fail "$out"
	log "$(grep -v '^%' <<<"$out")"
}
for type in CreateTime LogAppendTime; do
	check "$type" 1 1 "$ROUNDS" all 0
	check "$type" 1 1 "$ROUNDS" all 1
	check "$type" 1 1 "$ROUNDS" 1 0
	check "$type" 4 4 $((ROUNDS / 2)) all 0
done
e2e_broker_stop 30
log "PASS"
