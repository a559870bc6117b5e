#!/usr/bin/env bash
# record_errors.sh: librdkafka (confluent-kafka) produces one batch of keyed
# and keyless records to a compacted topic against `stele serve`; the batch
# is refused whole and exactly the keyless records fail with INVALID_RECORD
# (the keyed ones with _INVALID_DIFFERENT_RECORD when librdkafka reads
# Produce v8's record_errors; all six with INVALID_RECORD below v8), and a
# keyed batch after it is written at offset 0 (record_errors.py; issue 27,
# KIP-467).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_broker_init
e2e_broker_start

topic=e2e-recerr-$$x$RANDOM
t0=$SECONDS
if out=$(e2e_timeout 50 "$PY" "$E2E_DIR/record_errors.py" --bootstrap "$BROKER" --topic "$topic" --deadline 40 2>&1); then
	log "record errors: ok ($((SECONDS - t0))s)"
	printf '%s\n' "$out" | sed "s/^/    /" >&2
else
	printf '%s\n' "$out" | tail -n 30 | sed "s/^/    /" >&2
	fail "record errors: librdkafka's deliveries are not those Kafka's answer gives"
fi
e2e_broker_stop 30
log "PASS"
