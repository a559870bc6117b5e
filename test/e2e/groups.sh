#!/usr/bin/env bash
# groups.sh: Kafka's classic consumer group protocol against one `stele
# serve`, with real clients, unchanged. Each scenario gets a fresh topic and
# group and reports ok or FAILED with its time; the test fails if any did.
#
#  1. kcat: two `kcat -G` members of one group on a 6-partition topic split
#     the partitions (their assignments disjoint, together all six), then
#     read the N keyed records produced by kcat -P each exactly once between
#     them; SIGTERM makes them commit (librdkafka auto-commit) and leave:
#     Consumer.committed() says the high watermarks and kafka-python's
#     describe_consumer_groups() says Empty. After M more records a
#     third `kcat -G` of the group (stopped by SIGINT) reads exactly the M
#     new ones: it resumed at the committed offsets.
#  2. confluent-kafka: subscribe, read all, commit synchronously, close; a
#     second consumer of the group reads nothing old, then exactly the new
#     records; committed offsets via Consumer.committed()
#     (group_confluent.py).
#  3. kafka-python: the same with KafkaConsumer(group_id=...) and
#     committed(tp), and KafkaAdminClient's list_consumer_groups() and
#     describe_consumer_groups() show the group, Stable with its member and
#     its assignment, then Empty (group_kafkapython.py).
#  4. failover: two confluent-kafka members (session.timeout.ms=6000), one
#     killed with SIGKILL mid-stream; the survivor gets its partitions within
#     the session timeout (plus the rejoin) and every record is processed,
#     duplicates after the dead member's last commit counted, not failed
#     (group_failover.py, group_member.py).
#  5. static members: two confluent-kafka members with group.instance.id
#     close (librdkafka sends no LeaveGroup for them); the group stays
#     Stable with both until their session timeout, and kafka-python's
#     delete_consumer_groups() succeeds within 3 s after it, on a chain
#     with nothing else to do (group_static.py).
# e2e-limit: 200
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The helpers import e2elib and group_lib: no __pycache__ left in the tree.
export PYTHONDONTWRITEBYTECODE=1

PARTS=6
KEYS=60
KCAT_N=3000 # records the two kcat -G members read
KCAT_M=600  # records the third one reads after they left
PY_N=2000   # records of the confluent-kafka and kafka-python scenarios
PY_M=500    # ... produced for their second consumer
FO_N=4000   # records produced during the failover ...
FO_RATE=400 # ... per second
FO_KILL=600 # records the doomed member reads before SIGKILL
FO_SESSION_MS=6000
KCAT_FMT='%p\t%o\t%k\t%s\n'

e2e_setup
e2e_broker_init
e2e_broker_start

run=gr$$x$RANDOM
failed=()

# py LIMIT SCRIPT ARGS... runs one of the Python scripts with a deadline
# (SIGTERM, which they turn into a clean exit, then SIGKILL).
py() {
	local limit=$1 script=$2
	shift 2
	e2e_timeout "$limit" "$PY" "$E2E_DIR/$script" --bootstrap "$BROKER" "$@"
}

# --- 1. kcat -G ---------------------------------------------------------------

# kcat_assigned LOG prints the partitions a kcat -G member holds, one a
# line, from the last "Group ... rebalanced" message in its stderr LOG;
# nothing before its first assignment or after a revocation.
kcat_assigned() {
	local last
	last=$(grep 'rebalanced' "$1" | tail -n 1) || true
	[[ $last == *"assigned:"* ]] || return 0
	grep -o '\[[0-9]*\]' <<<"${last#*assigned:}" | tr -d '[]'
}

# kcat_member VAR NAME GROUP TOPIC starts `kcat -G` (unbuffered output,
# reading from the start when the group has no offset) with its records in
# NAME.records and its messages in NAME.log.
kcat_member() {
	e2e_bg "$1" kcat -b "$BROKER" -G "$3" -u -X auto.offset.reset=earliest -f "$KCAT_FMT" "$4" \
		>"$E2E_TMP/$2.records" 2>"$E2E_TMP/$2.log"
}

# kcat_produce TOPIC FIRST LAST produces records FIRST..LAST-1 with kcat -P.
kcat_produce() {
	"$PY" - "$run" "$2" "$3" "$KEYS" >"$E2E_TMP/kcat-produce.txt" <<-EOF
		import sys
		sys.path.insert(0, "$E2E_DIR")
		import e2elib
		run, first, last, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
		sys.stdout.write("".join("%s:%s\n" % (e2elib.key_of(s, keys), e2elib.value_of(run, s)) for s in range(first, last)))
	EOF
	e2e_timeout 30 kcat -P -b "$BROKER" -t "$1" -K : -X acks=all <"$E2E_TMP/kcat-produce.txt" \
		2>"$E2E_TMP/kcat-produce.err" || fail "kcat -P failed: $(tail -n 5 "$E2E_TMP/kcat-produce.err")"
	if grep -qi "fail\|error" "$E2E_TMP/kcat-produce.err"; then
		fail "kcat -P reported errors: $(head -n 5 "$E2E_TMP/kcat-produce.err")"
	fi
}

# kcat_wait_read LIMIT WANT NAME... waits until the members NAME... have
# read WANT records together, failing on a librdkafka protocol error.
kcat_wait_read() {
	local limit=$1 want=$2 deadline=$(($1 + SECONDS)) got n
	shift 2
	while :; do
		got=0
		for n in "$@"; do
			got=$((got + $(wc -l <"$E2E_TMP/$n.records")))
			if grep -q "PROTOERR\|Protocol parse failure\|ERROR" "$E2E_TMP/$n.log"; then
				fail "kcat -G member $n: $(grep -m 3 "PROTOERR\|Protocol parse failure\|ERROR" "$E2E_TMP/$n.log")"
			fi
		done
		((got < want)) || break
		((SECONDS < deadline)) || fail "kcat -G members $* read $got of $want records in ${limit}s"
		sleep 0.1
	done
	# Anything read twice would show up right behind the last record.
	sleep 1
}

# kcat_stop SIGNAL NAME PID stops a kcat -G member, which then commits its
# offsets and leaves the group: it must exit 0 within 15s, revoking its
# partitions on the way out.
kcat_stop() {
	local rc=0
	kill "-$1" "$3" 2>/dev/null || true
	e2e_wait_pid "$3" 15 || rc=$?
	((rc == 0)) || fail "kcat -G member $2 exited with status $rc after SIG$1: $(tail -n 3 "$E2E_TMP/$2.log")"
	grep -q "revoked:" "$E2E_TMP/$2.log" || fail "kcat -G member $2 exited after SIG$1 without revoking its partitions"
}

kcat_group() {
	local topic=e2e-groups-kcat-$run group=e2e-groups-kcat-$run a b c deadline t0 pa pb all
	e2e_topic_create "$topic" "$PARTS"
	t0=$SECONDS
	kcat_member a kcat-a "$group" "$topic"
	kcat_member b kcat-b "$group" "$topic"
	all=$(seq 0 $((PARTS - 1)) | tr '\n' ' ')
	deadline=$((SECONDS + 20))
	while :; do
		pa=$(kcat_assigned "$E2E_TMP/kcat-a.log" | tr '\n' ' ')
		pb=$(kcat_assigned "$E2E_TMP/kcat-b.log" | tr '\n' ' ')
		[[ -n $pa && -n $pb && $(tr ' ' '\n' <<<"$pa $pb" | grep . | sort -n | tr '\n' ' ') == "$all" ]] && break
		kill -0 "$a" 2>/dev/null || fail "kcat -G member a exited: $(tail -n 3 "$E2E_TMP/kcat-a.log")"
		kill -0 "$b" 2>/dev/null || fail "kcat -G member b exited: $(tail -n 3 "$E2E_TMP/kcat-b.log")"
		((SECONDS < deadline)) || fail "two kcat -G members did not split the $PARTS partitions in 20s: a holds [$pa], b holds [$pb]"
		sleep 0.1
	done
	log "kcat -G members a and b split the partitions after $((SECONDS - t0))s: a [${pa% }], b [${pb% }]"
	t0=$SECONDS
	kcat_produce "$topic" 0 "$KCAT_N"
	kcat_wait_read 20 "$KCAT_N" kcat-a kcat-b
	log "kcat -P produced $KCAT_N records; the members read them in $((SECONDS - t0))s (1s of that waiting for strays)"
	kcat_stop TERM kcat-a "$a"
	kcat_stop TERM kcat-b "$b"
	log "SIGTERM: both members exited 0 after revoking their partitions"
	"$PY" "$E2E_DIR/group_kcat_check.py" --run "$run" --keys "$KEYS" --partitions "$PARTS" \
		--first 0 --last "$KCAT_N" "$E2E_TMP/kcat-a.records" "$E2E_TMP/kcat-b.records" >&2 ||
		fail "the two kcat -G members did not read every record exactly once"
	py 20 group_committed.py --group "$group" --topic "$topic" --partitions "$PARTS" --empty >&2 ||
		fail "the kcat -G members did not commit the end of every partition and leave on their way out"

	kcat_produce "$topic" "$KCAT_N" $((KCAT_N + KCAT_M))
	t0=$SECONDS
	kcat_member c kcat-c "$group" "$topic"
	kcat_wait_read 25 "$KCAT_M" kcat-c
	log "a third kcat -G member read $KCAT_M records $((SECONDS - t0))s after it started (joining an empty group)"
	kcat_stop INT kcat-c "$c"
	"$PY" "$E2E_DIR/group_kcat_check.py" --run "$run" --keys "$KEYS" --partitions "$PARTS" \
		--first "$KCAT_N" --last $((KCAT_N + KCAT_M)) --resume-from "$E2E_TMP/kcat-a.records" \
		--resume-from "$E2E_TMP/kcat-b.records" "$E2E_TMP/kcat-c.records" >&2 ||
		fail "the third kcat -G member did not resume at the committed offsets"
	py 20 group_committed.py --group "$group" --topic "$topic" --partitions "$PARTS" --empty >&2 ||
		fail "the third kcat -G member did not commit and leave on SIGINT"
}

# --- 2-4. Python clients ------------------------------------------------------

confluent_group() {
	local topic=e2e-groups-confluent-$run
	e2e_topic_create "$topic" "$PARTS"
	py 25 group_confluent.py --topic "$topic" --partitions "$PARTS" --count "$PY_N" --more "$PY_M" \
		--keys "$KEYS" --deadline 23
}

kafkapython_group() {
	local topic=e2e-groups-kafkapython-$run
	e2e_topic_create "$topic" "$PARTS"
	py 27 group_kafkapython.py --topic "$topic" --partitions "$PARTS" --count "$PY_N" --more "$PY_M" \
		--keys "$KEYS" --deadline 25
}

failover_group() {
	local topic=e2e-groups-failover-$run
	e2e_topic_create "$topic" "$PARTS"
	py 37 group_failover.py --topic "$topic" --partitions "$PARTS" --count "$FO_N" --keys "$KEYS" \
		--rate "$FO_RATE" --kill-after "$FO_KILL" --session-timeout "$FO_SESSION_MS" \
		--dir "$E2E_TMP" --deadline 35
}

static_group() {
	local topic=e2e-groups-static-$run
	e2e_topic_create "$topic" "$PARTS"
	py 20 group_static.py --topic "$topic" --partitions "$PARTS" --session-timeout "$FO_SESSION_MS" --deadline 18
}

# The limits add up to 153s, under run.sh's limit for this test (groups.sh
# is given 200s there) with the broker's start and stop; a passing run takes
# about half of that.
scenario kcat 35 kcat_group
scenario confluent-kafka 28 confluent_group
scenario kafka-python 30 kafkapython_group
scenario failover 40 failover_group
scenario static 20 static_group
((${#failed[@]} == 0)) || fail "consumer groups failed with: ${failed[*]}"
e2e_broker_stop 30
log "PASS"
