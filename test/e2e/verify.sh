#!/usr/bin/env bash
# verify.sh: verifiable reads (docs/trust.md) of records kcat (librdkafka)
# wrote, against `stele serve`.
#
#  1. kcat writes three batches. `stele verify` proves a record of each
#     against --genesis (the node's genesis.json): the value kcat wrote,
#     signed by the chain's validator.
#  2. Without --genesis, the first `stele verify` pins the genesis the
#     broker serves and warns; the second uses the pin silently.
#  3. A pin naming other validators (another cluster's genesis) makes
#     every verification fail: nothing is believed on a broker's word.
#  4. `stele consume --verify --from-beginning` prints every record kcat
#     wrote, each proven; an offset past the end is refused with the
#     broker's error.
#  5. `stele consume --quorum` (f+1 = 1 broker of a single node) prints them.
#  6. State proofs: `stele verify --end` proves the partition's offsets,
#     `--config` the topic's configs, `--group` a group's committed offset
#     (and that the other partitions have none); `--table` of a topic that
#     is no table is refused;
#     `stele audit` proves the topic's state through the broker.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_require_clients
e2e_broker_init
e2e_broker_start

topic=e2e-verify-$$x$RANDOM
e2e_topic_create "$topic" 1
genesis=$BROKER_DATA/cometbft/config/genesis.json
[[ -f $genesis ]] || fail "no genesis at $genesis"
export XDG_CONFIG_HOME=$E2E_TMP/config

# --- 1. kcat writes, stele verify proves ---------------------------------------
for b in 0 1 2; do
	printf 'k%s:v%s-a\nk%s:v%s-b\n' "$b" "$b" "$b" "$b" | e2e_timeout 20 kcat -P -b "$BROKER" -t "$topic" -p 0 -K: ||
		fail "kcat batch $b"
done
for off in 0 3 5; do
	out=$(e2e_stele verify "$topic" 0 "$off" --http "$BROKER_HTTP" --genesis "$genesis" --output json) ||
		fail "stele verify offset $off: $out"
	grep -q "\"offset\":$off," <<<"$out" || fail "stele verify offset $off: $out"
	grep -q '"validators":1' <<<"$out" || fail "stele verify offset $off: not signed by the 1 validator: $out"
done
grep -q '"value":"v2-b"' <<<"$out" || fail "stele verify offset 5 is not kcat's last value: $out"
log "stele verify proved kcat's records at offsets 0, 3, 5"

# --- 2. trust on first use ---------------------------------------------------
e2e_stele verify "$topic" 0 1 --http "$BROKER_HTTP" >"$E2E_TMP/v1.out" 2>"$E2E_TMP/v1.err" ||
	fail "stele verify with a pin: $(cat "$E2E_TMP/v1.err")"
grep -q "warning: trusting the validators" "$E2E_TMP/v1.err" || fail "the first use did not warn: $(cat "$E2E_TMP/v1.err")"
pin=$(ls "$XDG_CONFIG_HOME"/stele/trust/*.json) || fail "nothing pinned in $XDG_CONFIG_HOME/stele/trust"
e2e_stele verify "$topic" 0 1 --http "$BROKER_HTTP" >"$E2E_TMP/v2.out" 2>"$E2E_TMP/v2.err" ||
	fail "stele verify, pinned: $(cat "$E2E_TMP/v2.err")"
[[ ! -s $E2E_TMP/v2.err ]] || fail "the second use warned again: $(cat "$E2E_TMP/v2.err")"
grep -q 'verified .* offset 1: key "k0" value "v0-b"' "$E2E_TMP/v2.out" || fail "stele verify, pinned: $(cat "$E2E_TMP/v2.out")"
log "the first use pinned $(basename "$pin") with a warning; the second used it"

# --- 3. another cluster's validators pinned: nothing verifies ----------------
"$STELE_BIN" cluster init --nodes 1 --dir "$E2E_TMP/other" >/dev/null || fail "stele cluster init"
other=$(ls "$E2E_TMP"/other/node0/cometbft/config/genesis.json) || fail "no genesis in the other cluster"
python3 - "$pin" "$other" <<'PY' || fail "could not forge the pin"
import json, sys
pin, other = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
pin["validators"] = other["validators"]
json.dump(pin, open(sys.argv[1], "w"))
PY
if e2e_stele verify "$topic" 0 1 --http "$BROKER_HTTP" >"$E2E_TMP/v3.out" 2>&1; then
	fail "stele verify with another cluster's validators pinned succeeded: $(cat "$E2E_TMP/v3.out")"
fi
grep -q "differs from the one pinned" "$E2E_TMP/v3.out" || fail "stele verify, wrong pin: $(cat "$E2E_TMP/v3.out")"
if e2e_stele verify "$topic" 0 1 --http "$BROKER_HTTP" --genesis "$other" >"$E2E_TMP/v4.out" 2>&1; then
	fail "stele verify against another cluster's genesis succeeded: $(cat "$E2E_TMP/v4.out")"
fi
grep -q "unproven batch" "$E2E_TMP/v4.out" || fail "stele verify, other genesis: $(cat "$E2E_TMP/v4.out")"
log "another cluster's validators: refused ($(head -c 150 "$E2E_TMP/v4.out"))"

# --- 4. stele consume --verify ------------------------------------------------
got=$(e2e_stele consume "$topic" --from-beginning --verify --http "$BROKER_HTTP" --genesis "$genesis" \
	--timeout-idle 3s --format '%o:%k=%v\n' 2>"$E2E_TMP/c.err" | tr '\n' ' ') ||
	fail "stele consume --verify: $(cat "$E2E_TMP/c.err")"
[[ $got == '0:k0=v0-a 1:k0=v0-b 2:k1=v1-a 3:k1=v1-b 4:k2=v2-a 5:k2=v2-b ' ]] || fail "stele consume --verify printed: $got"
grep -q "Processed a total of 6 messages" "$E2E_TMP/c.err" || fail "stele consume --verify: $(cat "$E2E_TMP/c.err")"
if e2e_stele verify "$topic" 0 6 --http "$BROKER_HTTP" --genesis "$genesis" >"$E2E_TMP/v5.out" 2>&1; then
	fail "stele verify past the end succeeded: $(cat "$E2E_TMP/v5.out")"
fi
grep -q "out of range" "$E2E_TMP/v5.out" || fail "stele verify past the end: $(cat "$E2E_TMP/v5.out")"
log "stele consume --verify printed the 6 records, each proven; past the end: refused"

# --- 5. stele consume --quorum: one broker is f+1 of a single node -----------
got=$(e2e_stele consume "$topic" --from-beginning --quorum --timeout-idle 2s --format '%o:%v\n' 2>"$E2E_TMP/q.err" | tr '\n' ' ') ||
	fail "stele consume --quorum: $(cat "$E2E_TMP/q.err")"
[[ $got == '0:v0-a 1:v0-b 2:v1-a 3:v1-b 4:v2-a 5:v2-b ' ]] || fail "stele consume --quorum printed: $got"
log "stele consume --quorum (f+1 = 1 of a single node) printed the 6 records"
# --- 6. state proofs ---------------------------------------------------------
out=$(e2e_stele verify --end "$topic" 0 --http "$BROKER_HTTP" --genesis "$genesis" --output json) ||
	fail "stele verify --end: $out"
grep -q '"high_watermark":6' <<<"$out" && grep -q '"log_start_offset":0' <<<"$out" || fail "stele verify --end: $out"
e2e_stele topic alter "$topic" --config retention.ms=86400000 >/dev/null || fail "topic alter"
out=$(e2e_stele verify --config "$topic" --http "$BROKER_HTTP" --genesis "$genesis") || fail "stele verify --config: $out"
grep -q "retention.ms=86400000" <<<"$out" && grep -q "1 partitions" <<<"$out" || fail "stele verify --config: $out"
e2e_stele group reset-offsets e2e-verify-group --topic "$topic" --to-offset 4 --execute >/dev/null ||
	fail "committing an offset with stele group reset-offsets"
out=$(e2e_stele verify --group e2e-verify-group --topic "$topic" --http "$BROKER_HTTP" --genesis "$genesis") ||
	fail "stele verify --group: $out"
grep -q -- "-0: 4$" <<<"$out" || fail "stele verify --group: $out"
out=$(e2e_stele verify --group nobody-commits --topic "$topic" --http "$BROKER_HTTP" --genesis "$genesis") ||
	fail "stele verify --group of a group without offsets: $out"
grep -q -- "-0: none$" <<<"$out" || fail "stele verify --group without offsets: $out"
if e2e_stele verify --table "$topic" k0 --http "$BROKER_HTTP" --genesis "$genesis" >"$E2E_TMP/t.out" 2>&1; then
	fail "stele verify --table succeeded: $(cat "$E2E_TMP/t.out")"
fi
grep -q "not served as a table" "$E2E_TMP/t.out" || fail "stele verify --table: $(cat "$E2E_TMP/t.out")"
if e2e_stele verify --end "$topic" 0 --http "$BROKER_HTTP" --genesis "$other" >"$E2E_TMP/s.out" 2>&1; then
	fail "stele verify --end against another cluster's genesis succeeded: $(cat "$E2E_TMP/s.out")"
fi
log "state proven: the partition's offsets, the topic's configs, a committed offset and its absence; --table of a plain topic refused"
out=$(e2e_stele audit --http "$BROKER_HTTP" --genesis "$genesis" --topic "$topic" 2>&1) || fail "stele audit: $out"
grep -q "the state of 1 topics and 1 partitions proven" <<<"$out" || fail "stele audit did not prove the state: $out"
log "stele audit proved the topic's state and its partition's offsets"

e2e_broker_stop 30
log "PASS"
