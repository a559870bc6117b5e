#!/usr/bin/env bash
# conformance.sh: issue 27's protocol items with clients Stele did not
# write (librdkafka through kcat and confluent-kafka, kafka-python), against
# one `stele serve` node.
#
#  1. conform_admin.py (confluent-kafka AdminClient and kafka-python): manual
#     replica assignments in CreateTopics / CreatePartitions, and bad ones
#     refused with INVALID_REPLICA_ASSIGNMENT; deprecated topic configs
#     (message.format.version=3.0-IV1) accepted and described; authorized
#     operations in Metadata v8 and DescribeGroups v3; BROKER_LOGGER
#     IncrementalAlterConfigs changing a log level (a DEBUG line appears in
#     this broker's log); a BROKER config Kafka cannot change refused as
#     Kafka refuses it; a cluster-wide log default (BROKER "") set,
#     described as DYNAMIC_DEFAULT_BROKER_CONFIG, inherited by a topic and
#     removed, and refused per broker; a per-broker connection limit
#     (kafka-python alter_configs on BROKER "0",
#     max.connections.per.ip.overrides) applied at run time, described as
#     DYNAMIC_BROKER_CONFIG and removed; max.connection.creation.rate set
#     on BROKER "0" the same way holds (never refuses) a burst of 60
#     connections. See the script's comment for each check.
#  2. kcat -L (text and JSON) shows the assigned topic's partitions with
#     replicas [0], leader 0, isr [0].
#  3. KIP-74: kcat -C with fetch.max.bytes=1000 and
#     max.partition.fetch.bytes=600 reads an 8-partition topic of one-record
#     batches (~270 bytes each) to the end: every record once, dense
#     offsets, no protocol error; and every FetchResponse librdkafka
#     receives (debug=protocol) is at most fetch.max.bytes plus the
#     response's per-partition headers. Without KIP-74 a response would
#     carry up to 8 x 600 bytes of records.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FETCH_PARTS=8
FETCH_PER_PART=20
FETCH_MAX=1000      # fetch.max.bytes (librdkafka wants >= message.max.bytes, min 1000)
PART_FETCH_MAX=600  # max.partition.fetch.bytes: two batches
VALUE_BYTES=200

e2e_setup
e2e_broker_init
e2e_broker_start

run=cf$$x$RANDOM
prefix=e2e-conf-$run

# --- 1. admin items ----------------------------------------------------------
t0=$SECONDS
out=$(e2e_timeout 90 "$PY" "$E2E_DIR/conform_admin.py" --bootstrap "$BROKER" --prefix "$prefix" \
	--broker-log "$BROKER_LOG" 2>&1) || {
	printf '%s\n' "$out" | sed "s/^/    /" >&2
	fail "conform_admin.py failed"
}
printf '%s\n' "$out" | sed "s/^/    /" >&2
log "admin items: ok ($((SECONDS - t0))s)"

# --- 2. kcat -L shows the assignment -----------------------------------------
assigned=$prefix-assigned
meta=$(e2e_timeout 20 kcat -L -b "$BROKER" -t "$assigned" 2>&1) || fail "kcat -L -t $assigned failed: $meta"
for p in 0 1 2; do
	grep -q "partition $p, leader 0, replicas: 0, isrs: 0" <<<"$meta" ||
		fail "kcat -L: $assigned partition $p was assigned [0]; kcat shows:"$'\n'"$meta"
done
e2e_timeout 20 kcat -L -J -b "$BROKER" -t "$assigned" >"$E2E_TMP/assigned.json" 2>&1 || fail "kcat -L -J failed"
"$PY" - "$E2E_TMP/assigned.json" "$assigned" <<'EOF' || fail "kcat -L -J does not show the assignment"
import json, sys
md = json.load(open(sys.argv[1]))
t, = [t for t in md["topics"] if t["topic"] == sys.argv[2]]
ps = sorted(t["partitions"], key=lambda p: p["partition"])
assert [p["partition"] for p in ps] == [0, 1, 2], ps
for p in ps:
    assert p["leader"] == 0 and [r["id"] for r in p["replicas"]] == [0] and [r["id"] for r in p["isrs"]] == [0], p
EOF
log "kcat -L: $assigned partitions 0-2 replicas [0], leader 0, isr [0]"

# --- 3. KIP-74 with librdkafka's small fetch limits -----------------------------
topic=$prefix-fetch
e2e_topic_create "$topic" "$FETCH_PARTS"
pad=$(printf '%*s' "$VALUE_BYTES" '' | tr ' ' x)
for ((p = 0; p < FETCH_PARTS; p++)); do
	for ((i = 0; i < FETCH_PER_PART; i++)); do printf 'p%d-%03d-%s\n' "$p" "$i" "$pad"; done |
		e2e_timeout 20 kcat -P -b "$BROKER" -t "$topic" -p "$p" -X acks=all -X linger.ms=0 \
			-X batch.num.messages=1 || fail "kcat -P -p $p to $topic failed"
done
log "produced $FETCH_PER_PART one-record batches to each of $FETCH_PARTS partitions"

err=$E2E_TMP/kcat-fetch.log
e2e_timeout 30 kcat -C -b "$BROKER" -t "$topic" -o beginning -e -f '%p\t%o\t%s\n' \
	-X fetch.max.bytes=$FETCH_MAX -X message.max.bytes=$FETCH_MAX \
	-X max.partition.fetch.bytes=$PART_FETCH_MAX -d protocol >"$E2E_TMP/fetch.out" 2>"$err" ||
	fail "kcat -C with fetch.max.bytes=$FETCH_MAX failed or did not reach the end in 30s: $(grep -v 'RECV\|SEND' "$err" | tail -n 5)"
if grep -q "PROTOERR\|Protocol parse failure\|invalid MessageSetSize" "$err"; then
	fail "librdkafka cannot parse a Fetch response:"$'\n'"$(grep -m 3 "PROTOERR\|Protocol parse\|MessageSetSize" "$err")"
fi
"$PY" - "$E2E_TMP/fetch.out" "$err" "$FETCH_PARTS" "$FETCH_PER_PART" "$FETCH_MAX" "$PART_FETCH_MAX" <<'EOF' || fail "KIP-74 read with small fetch limits is wrong"
import re, sys
out, err, parts, per, fmax, pmax = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
seen = {}
for line in open(out):
    p, o, v = line.rstrip("\n").split("\t")
    seen.setdefault(int(p), []).append((int(o), v.split("-")[1] if v.startswith("p%s-" % p) else None))
for p in range(parts):
    got = seen.get(p, [])
    want = [(i, "%03d" % i) for i in range(per)]
    assert got == want, "partition %d: read %d records %s..., want offsets and values 0..%d" % (p, len(got), got[:3], per - 1)
sizes = [int(m.group(1)) for m in re.finditer(r"Received FetchResponse \(v\d+, (\d+) bytes", open(err, errors="replace").read())]
assert sizes, "no FetchResponse in librdkafka's protocol debug log"
# Fetch v11+ per partition: index 4, error 2, high watermark 8, last stable 8,
# log start 8, aborted txns 4, preferred replica 4, records length 4 = 42
# bytes; plus the topic's name and the response header.
bound = fmax + 48 * parts + 128
over = [s for s in sizes if s > bound]
assert not over, "FetchResponses of %s bytes with fetch.max.bytes=%d (allowed %d with headers); all sizes %s" % (over, fmax, bound, sizes)
print("%d records in %d partitions; %d FetchResponses, largest %d bytes (fetch.max.bytes %d, bound %d)"
      % (parts * per, parts, len(sizes), max(sizes), fmax, bound))
EOF
log "kcat -C with fetch.max.bytes=$FETCH_MAX max.partition.fetch.bytes=$PART_FETCH_MAX: every record, answers within KIP-74's limit"

e2e_broker_stop 30
log "PASS"
