#!/usr/bin/env bash
# kcat.sh: kcat and librdkafka against `stele serve`, unchanged, with a crash.
#
#  1. `stele topic create` a 3-partition topic; `kcat -L` (text and JSON)
#     shows the broker at its loopback address and the topic's partitions.
#  2. kcat -P -K: produces 10,000 keyed records with acks=all; kcat -C -e
#     reads them back (key, value, partition, offset): every record exactly
#     once, dense offsets, each key in one partition, per-key order.
#  3. Crash: acked_producer.py (librdkafka, like kcat, with delivery reports;
#     retries on, max.in.flight 1) produces to a second topic; once some
#     thousands are acknowledged the broker gets `kill -9` and is restarted
#     on the same data dir while the producer keeps going. Then kcat reads
#     it all: every acknowledged record at the offset acknowledged, those
#     acknowledged before the crash exactly once, per-partition order of the
#     producer's sequence, nothing never sent; retry copies are counted.
#  4. The first topic reads back byte for byte as before the crash, and the
#     broker stops cleanly on SIGTERM.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=10000         # records produced by kcat -P
KEYS=100        # distinct keys
PARTS=3
CRASH_N=12000   # records produced across the crash
CRASH_RATE=6000 # ... per second
CRASH_AT=3000   # acknowledgements before the kill -9
CRASH_KEYS=30
KCAT_FMT='%p\t%o\t%k\t%s\n'

e2e_setup
e2e_broker_init
e2e_broker_start

run=kc$$x$RANDOM
topic=e2e-kcat-$run
e2e_topic_create "$topic" "$PARTS"

# kcat_read TOPIC OUT reads every partition of TOPIC from the beginning to
# its end (-e) into OUT as partition, offset, key, value. librdkafka logs a
# Fetch response it cannot parse and fetches again, so such a log line fails
# the read at once instead of at the deadline.
kcat_read() {
	local err=$E2E_TMP/kcat-consume-$1.log pid deadline=$((SECONDS + 30)) rc=0
	e2e_bg pid kcat -C -b "$BROKER" -t "$1" -o beginning -e -f "$KCAT_FMT" >"$2" 2>"$err"
	while kill -0 "$pid" 2>/dev/null; do
		if grep -q "PROTOERR\|Protocol parse failure\|invalid MessageSetSize" "$err"; then
			fail "kcat -C -t $1: librdkafka cannot parse Stele's Fetch response:"$'\n'"$(grep -m 3 "PROTOERR" "$err")"
		fi
		((SECONDS < deadline)) || fail "kcat -C -t $1 did not reach the end of every partition in 30s ($(wc -l <"$2") records read): $(tail -n 3 "$err")"
		sleep 0.1
	done
	wait "$pid" || rc=$?
	e2e_forget "$pid"
	((rc == 0)) || fail "kcat -C -t $1 exited with status $rc: $(tail -n 5 "$err")"
}

# --- 1. metadata ------------------------------------------------------------
meta=$(e2e_timeout 20 kcat -L -b "$BROKER" -t "$topic" 2>&1) || fail "kcat -L failed: $meta"
grep -q "broker 0 at $BROKER" <<<"$meta" || fail "kcat -L does not list broker 0 at $BROKER:"$'\n'"$meta"
grep -q "topic \"$topic\" with $PARTS partitions" <<<"$meta" ||
	fail "kcat -L does not show $topic with $PARTS partitions:"$'\n'"$meta"
e2e_timeout 20 kcat -L -J -b "$BROKER" -t "$topic" >"$E2E_TMP/metadata.json" 2>&1 || fail "kcat -L -J failed"
"$PY" - "$E2E_TMP/metadata.json" "$BROKER" "$topic" "$PARTS" <<'EOF' || fail "kcat -L -J metadata is wrong"
import json, sys
path, broker, topic, parts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
md = json.load(open(path))
brokers = {b["id"]: b["name"] for b in md["brokers"]}
assert list(brokers.values()) == [broker], "brokers %s, want only %s" % (brokers, broker)
ts = [t for t in md["topics"] if t["topic"] == topic]
assert len(ts) == 1 and "error" not in ts[0], "topic entry %s" % ts
ps = sorted(ts[0]["partitions"], key=lambda p: p["partition"])
assert [p["partition"] for p in ps] == list(range(parts)), "partitions %s" % ps
for p in ps:
    assert "error" not in p, "partition error %s" % p
    assert p["leader"] in brokers, "partition %d leader %s is not a listed broker" % (p["partition"], p["leader"])
    assert [r["id"] for r in p["replicas"]] == [p["leader"]], "replicas %s" % p["replicas"]
    assert [r["id"] for r in p["isrs"]] == [p["leader"]], "isrs %s" % p["isrs"]
EOF
log "kcat -L: broker and $PARTS partitions as expected"

# --- 2. produce 10,000 keyed records with kcat, read them back ---------------
"$PY" - "$run" "$N" "$KEYS" >"$E2E_TMP/records.txt" <<EOF
import sys
sys.path.insert(0, "$E2E_DIR")
import e2elib
run, n, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.stdout.write("".join("%s:%s\n" % (e2elib.key_of(s, keys), e2elib.value_of(run, s)) for s in range(n)))
EOF
t0=$SECONDS
e2e_timeout 30 kcat -P -b "$BROKER" -t "$topic" -K : -X acks=all <"$E2E_TMP/records.txt" 2>"$E2E_TMP/kcat-produce.err" ||
	fail "kcat -P failed: $(tail -n 5 "$E2E_TMP/kcat-produce.err")"
if grep -qi "fail\|error" "$E2E_TMP/kcat-produce.err"; then
	fail "kcat -P reported errors: $(head -n 5 "$E2E_TMP/kcat-produce.err")"
fi
log "kcat -P: $N records produced in $((SECONDS - t0))s"
t0=$SECONDS
kcat_read "$topic" "$E2E_TMP/kcat-read-1.txt"
log "kcat -C: $(wc -l <"$E2E_TMP/kcat-read-1.txt") records read in $((SECONDS - t0))s"
out=$("$PY" "$E2E_DIR/check_log.py" --name "kcat round trip" --records "$E2E_TMP/kcat-read-1.txt" \
	--run "$run" --count "$N" --keys "$KEYS" --partitions "$PARTS" 2>&1) || fail "$out"
log "$out"

# --- 3. kill -9 mid-produce, restart, check every acknowledged record --------
ctopic=e2e-crash-$run
e2e_topic_create "$ctopic" "$PARTS"
acked=$E2E_TMP/acked.txt
: >"$acked"
e2e_bg producer "$PY" "$E2E_DIR/acked_producer.py" --bootstrap "$BROKER" --topic "$ctopic" \
	--run "$run" --count "$CRASH_N" --keys "$CRASH_KEYS" --rate "$CRASH_RATE" --acked "$acked" \
	--deadline 60 2>"$E2E_TMP/producer.log"
deadline=$((SECONDS + 30))
until (($(wc -l <"$acked") >= CRASH_AT)); do
	kill -0 "$producer" 2>/dev/null ||
		fail "the producer exited with $(wc -l <"$acked") of $CRASH_N acknowledged before the crash"
	((SECONDS < deadline)) || fail "only $(wc -l <"$acked") records acknowledged after 30s"
	sleep 0.05
done
height=$(e2e_height)
e2e_broker_kill9
# Acknowledgements the dead broker had already sent may still be on their way
# to the file: counting a little later only lets the check below cover more.
sleep 0.2
before=$(wc -l <"$acked")
((before < CRASH_N)) || fail "the producer had all $CRASH_N records acknowledged before the kill: nothing was in flight"
log "crash: $before of $CRASH_N records acknowledged when the broker died (height $height)"
t0=$SECONDS
e2e_broker_start 60
after=$(e2e_height)
((after >= height)) || fail "after the restart the broker is at height $after, below $height before the crash"
e2e_wait_pid "$producer" 65 || fail "acked_producer.py failed: $(tail -n 5 "$E2E_TMP/producer.log")"
log "$(tail -n 1 "$E2E_TMP/producer.log") (finished $((SECONDS - t0))s after the restart began)"
kcat_read "$ctopic" "$E2E_TMP/kcat-read-crash.txt"
out=$("$PY" "$E2E_DIR/check_log.py" --name "kill -9 mid-produce" --records "$E2E_TMP/kcat-read-crash.txt" \
	--run "$run" --count "$CRASH_N" --keys "$CRASH_KEYS" --partitions "$PARTS" \
	--acked "$acked" --acked-before-crash "$before" 2>&1) || fail "$out"
log "$out"

# --- 4. the first topic survived the crash; SIGTERM stops cleanly -----------
kcat_read "$topic" "$E2E_TMP/kcat-read-2.txt"
# kcat interleaves partitions as their fetches return: compare sorted reads.
sort "$E2E_TMP/kcat-read-1.txt" >"$E2E_TMP/kcat-read-1.sorted"
sort "$E2E_TMP/kcat-read-2.txt" >"$E2E_TMP/kcat-read-2.sorted"
cmp -s "$E2E_TMP/kcat-read-1.sorted" "$E2E_TMP/kcat-read-2.sorted" ||
	fail "$topic reads differently after the crash: $(diff "$E2E_TMP/kcat-read-1.sorted" "$E2E_TMP/kcat-read-2.sorted" | head -n 6)"
log "$topic reads back identical after the crash"
e2e_broker_stop 30
log "PASS"
