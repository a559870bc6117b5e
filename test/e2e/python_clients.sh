#!/usr/bin/env bash
# python_clients.sh: confluent-kafka and kafka-python against `stele serve`,
# unchanged. Each produces keyed records with headers (acks=all) to a fresh
# 3-partition topic and reads them back from the earliest offset; the read is
# checked for counts, keys, values, headers, acknowledged offsets and
# per-partition order (confluent_roundtrip.py, kafkapython_roundtrip.py).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=5000
KEYS=50
PARTS=3

e2e_setup
e2e_broker_init
e2e_broker_start

failed=()
# roundtrip NAME SCRIPT runs one client's round trip against a fresh topic.
roundtrip() {
	local name=$1 script=$2 topic=e2e-$1-$$x$RANDOM t0=$SECONDS out
	e2e_topic_create "$topic" "$PARTS"
	if out=$(e2e_timeout 50 "$PY" "$E2E_DIR/$script" --bootstrap "$BROKER" --topic "$topic" \
		--count "$N" --keys "$KEYS" --partitions "$PARTS" --deadline 40 2>&1); then
		log "$name: ok ($((SECONDS - t0))s)"
		printf '%s\n' "$out" | sed "s/^/    /" >&2
	else
		log "$name: FAILED ($((SECONDS - t0))s)"
		printf '%s\n' "$out" | tail -n 20 | sed "s/^/    /" >&2
		failed+=("$name")
	fi
}

roundtrip confluent-kafka confluent_roundtrip.py
roundtrip kafka-python kafkapython_roundtrip.py
((${#failed[@]} == 0)) || fail "round trip failed with: ${failed[*]}"
e2e_broker_stop 30
log "PASS"
