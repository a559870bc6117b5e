#!/usr/bin/env bash
# idempotence.sh: idempotent producers (KIP-98, without transactions)
# against one `stele serve`, with real clients, unchanged. Each scenario gets
# a fresh 3-partition topic and reports ok or FAILED with its time; the test
# fails if any did.
#
#  1. confluent-kafka with enable.idempotence=true (acks=all implied) sends
#     N keyed records with headers, as fast as it goes, collecting delivery
#     reports: every record acknowledged exactly once at a distinct offset;
#     a plain consumer reading every partition from the beginning finds each
#     record exactly once, at the acknowledged offset, in per-key send order,
#     offsets dense; librdkafka acquired exactly one producer id and logged
#     no fatal error (idem_roundtrip.py).
#  2. The same producer, paced, with request.timeout.ms=2000 and
#     socket.timeout.ms=2500 (librdkafka times a Produce out after the lesser
#     of socket.timeout.ms and the message's remaining message.timeout.ms,
#     60s): once STOP_AT records are produced the broker gets SIGSTOP, and
#     SIGCONT STOP_S seconds later. The requests in flight time out in the
#     client, which reconnects and sends them again with the same sequence
#     numbers, while the broker, once resumed, still reads and orders the
#     first copies from the old connection. Checked as in 1 (still exactly
#     once, no gaps, one producer id, no fatal error), and librdkafka must
#     have logged a timed-out Produce, or the pause tested nothing. The
#     broker's Produce answers by error code during the scenario are shown
#     (from /metrics): a REQUEST_TIMED_OUT there is a batch the broker had
#     queued for ordering, so stored, that the producer never saw succeed:
#     its retry was one the broker had to recognise as a duplicate.
#  3. kcat -P -K : -X enable.idempotence=true produces N lines; kcat -C -e
#     reads the topic: exactly N records, each line once, offsets dense,
#     per-key order (idem_kcat_check.py).
#  4. DescribeProducers v0 (idem_describe.py, which speaks the protocol
#     itself: neither confluent-kafka 1.7's AdminClient nor kafka-python
#     2.0.2 can send it): ApiVersions advertises InitProducerId and
#     DescribeProducers; every partition of the topics of 1-3 lists exactly
#     the producer id librdkafka acquired there, epoch 0, last sequence =
#     records in the partition - 1, a last timestamp within the production,
#     no transaction; a partition that does not exist answers
#     UNKNOWN_TOPIC_OR_PARTITION.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The helpers import e2elib and confluent_roundtrip: no __pycache__ in the tree.
export PYTHONDONTWRITEBYTECODE=1

PARTS=3
KEYS=50
N=5000       # records of scenario 1
PAUSE_N=6000 # records of scenario 2 ...
RATE=1000    # ... per second
STOP_AT=1500 # records produced before SIGSTOP
STOP_S=5     # seconds the broker stays stopped
KCAT_N=4000  # lines of kcat -P
KCAT_FMT='%p\t%o\t%k\t%s\n'

e2e_setup
e2e_broker_init
e2e_broker_start

run=id$$x$RANDOM
failed=()

# py LIMIT SCRIPT ARGS... runs one of the Python scripts with a deadline.
py() {
	local limit=$1 script=$2
	shift 2
	e2e_timeout "$limit" "$PY" "$E2E_DIR/$script" --bootstrap "$BROKER" "$@"
}

# now_ms prints the wall clock in milliseconds.
now_ms() { date +%s%3N; }

# produce_answers prints the broker's count of Produce responses by error
# code, from /metrics, as "ERROR COUNT" lines (nothing if it does not answer).
produce_answers() {
	curl -sf --max-time 5 "http://$BROKER_HTTP/metrics" |
		sed -n 's/^stele_kafka_requests_total{api="Produce",error="\([^"]*\)"} \([0-9.e+]*\)$/\1 \2/p' || true
}

# --- 1. confluent-kafka, enable.idempotence=true -------------------------------

confluent_idempotent() {
	local topic=e2e-idem-confluent-$run
	e2e_topic_create "$topic" "$PARTS"
	py 28 idem_roundtrip.py --topic "$topic" --count "$N" --keys "$KEYS" --partitions "$PARTS" \
		--summary "$E2E_TMP/summary-confluent.json" --client-log "$E2E_TMP/client-confluent.txt" --deadline 25
}

# --- 2. the same, across a SIGSTOP of the broker -------------------------------

paused_broker() {
	local topic=e2e-idem-pause-$run rc=0 before after
	e2e_topic_create "$topic" "$PARTS"
	before=$(produce_answers)
	py 38 idem_roundtrip.py --topic "$topic" --count "$PAUSE_N" --keys "$KEYS" --partitions "$PARTS" \
		--rate "$RATE" --request-timeout-ms 2000 --socket-timeout-ms 2500 \
		--stop-pid "$BROKER_PID" --stop-after "$STOP_AT" --stop-seconds "$STOP_S" \
		--summary "$E2E_TMP/summary-pause.json" --client-log "$E2E_TMP/client-pause.txt" --deadline 35 || rc=$?
	# Whatever happened to the producer, the broker runs on.
	kill -CONT "$BROKER_PID" 2>/dev/null || true
	after=$(produce_answers)
	echo "broker's Produce answers during the scenario, by error code: $(
		awk 'NR == FNR { n[$1] = $2; next } $2 - n[$1] > 0 { printf "%s%s %d", sep, $1, $2 - n[$1]; sep = ", " }' \
			<(printf '%s\n' "$before") <(printf '%s\n' "$after")
	)"
	return "$rc"
}

# --- 3. kcat -P -X enable.idempotence=true -------------------------------------

kcat_idempotent() {
	local topic=e2e-idem-kcat-$run first last pid rc=0 deadline
	e2e_topic_create "$topic" "$PARTS"
	"$PY" - "$run" "$KCAT_N" "$KEYS" >"$E2E_TMP/kcat-in.txt" <<-EOF
		import sys
		sys.path.insert(0, "$E2E_DIR")
		import e2elib
		run, count, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
		sys.stdout.write("".join("%s:%s\n" % (e2elib.key_of(s, keys), e2elib.value_of(run, s)) for s in range(count)))
	EOF
	first=$(now_ms)
	e2e_timeout 20 kcat -P -b "$BROKER" -t "$topic" -K : -X enable.idempotence=true -d eos \
		<"$E2E_TMP/kcat-in.txt" 2>"$E2E_TMP/kcat-produce.log" || fail "kcat -P failed: $(grep -v '^%7|' "$E2E_TMP/kcat-produce.log" | tail -n 5)"
	last=$(now_ms)
	echo "kcat -P: $KCAT_N lines in $((last - first)) ms"
	# kcat -C -e: every partition from the beginning to its end.
	e2e_bg pid kcat -C -b "$BROKER" -t "$topic" -o beginning -e -f "$KCAT_FMT" \
		>"$E2E_TMP/kcat-records.txt" 2>"$E2E_TMP/kcat-consume.log"
	e2e_wait_pid "$pid" 20 || rc=$?
	((rc == 0)) || fail "kcat -C exited with status $rc: $(tail -n 5 "$E2E_TMP/kcat-consume.log")"
	"$PY" "$E2E_DIR/idem_kcat_check.py" --run "$run" --count "$KCAT_N" --keys "$KEYS" --partitions "$PARTS" \
		--topic "$topic" --records "$E2E_TMP/kcat-records.txt" --kcat-log "$E2E_TMP/kcat-produce.log" \
		--first-ms "$first" --last-ms "$last" --summary "$E2E_TMP/summary-kcat.json"
}

# --- 4. DescribeProducers -------------------------------------------------------

describe_producers() {
	local s summaries=()
	for s in confluent pause kcat; do
		if [[ -f $E2E_TMP/summary-$s.json ]]; then
			summaries+=("$E2E_TMP/summary-$s.json")
		else
			echo "no summary of the $s scenario (it failed): its topic is not described"
		fi
	done
	((${#summaries[@]} > 0)) || fail "no scenario left a producer to describe"
	py 12 idem_describe.py "${summaries[@]}"
}

# The limits add up to 115s, under run.sh's 150s per test with the broker's
# start and stop; a passing run takes about a fifth of that.
scenario confluent-kafka 30 confluent_idempotent
scenario sigstop 40 paused_broker
scenario kcat 30 kcat_idempotent
scenario describe-producers 15 describe_producers
((${#failed[@]} == 0)) || fail "idempotent producers failed in: ${failed[*]}"
e2e_broker_stop 30
log "PASS"
