#!/usr/bin/env bash
# kafka.sh: a Kafka-protocol broker measured with `stele bench`, as JSON
# lines on stdout, each tagged with --label as its peer.
#
#   bench/kafka.sh --brokers 127.0.0.1:9092 --label kfake \
#       [--sizes 100,1024,16384] [--duration 20s] [--partitions 8] \
#       [--producers 4] [--consumers 4] [--no-consume] [--stele BIN]
#
# Per record size, on a new topic (bench-<size>-<rep>-<random>):
#   produce  kind=write  stele bench produce --create --partitions P
#                        --record-size S --producers N --duration D
#                        (acks=all, no compression, open loop: stele bench's
#                        defaults), then
#   consume  kind=read   stele bench consume --consumers N --record-size S
#                        --duration D: reads what produce wrote, from the
#                        start of every partition to the end offsets at its
#                        start, or for D if that is shorter.
# Each line is `stele bench --output json`'s report (records_per_s, mb_per_s
# in 10^6 bytes/s, latency_ms.p50/p99/...) plus peer, kind, run, rep and the
# shared names msgs_per_s, p50_ms and p99_ms.
#
# The brokers must listen on 127.0.0.1. The stele binary is --stele, else
# $STELE_BIN, else built into the results dir.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

BROKERS=""
LABEL=""
SIZES="100,1024,16384"
DURATION=20s
PARTITIONS=8
PRODUCERS=4
CONSUMERS=4
CONSUME=1
E2E_RATE=""
STELE="${STELE_BIN:-}"
while (($#)); do
	case "$1" in
	--brokers) BROKERS=$2; shift 2 ;;
	--label) LABEL=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	--duration) DURATION=$2; shift 2 ;;
	--partitions) PARTITIONS=$2; shift 2 ;;
	--producers) PRODUCERS=$2; shift 2 ;;
	--consumers) CONSUMERS=$2; shift 2 ;;
	--no-consume) CONSUME=0; shift ;;
	--e2e-rate) E2E_RATE=$2; shift 2 ;;
	--stele) STELE=$2; shift 2 ;;
	-h | --help) sed -n '2,/^# shellcheck/p' "$0" | sed '$d;s/^# \{0,1\}//'; exit 0 ;;
	*) die "kafka.sh: unknown argument $1" ;;
	esac
done
results_dir
[[ -n "$BROKERS" && -n "$LABEL" ]] || die "kafka.sh: --brokers and --label are required"
for b in ${BROKERS//,/ }; do
	[[ "$b" == 127.0.0.1:* || "$b" == localhost:* ]] || die "kafka.sh: broker $b is not on 127.0.0.1"
done
if [[ -z "$STELE" ]]; then
	STELE="$RESULTS_DIR/bin/stele"
	if [[ ! -x "$STELE" ]]; then
		log "building $STELE"
		(cd "$REPO_DIR" && go build -o "$STELE" ./cmd/stele)
	fi
fi

# tag KIND: add the shared fields to the report(s) on stdin.
tag() {
	jq -c --arg peer "$LABEL" --arg kind "$1" --arg run "${BENCH_RUN:-}" \
		--argjson rep "${BENCH_REP:-1}" '
		{run: $run, rep: $rep, peer: $peer} + . + {
			kind: $kind,
			msgs_per_s: .records_per_s,
			p50_ms: (.latency_ms.p50 // null),
			p99_ms: (.latency_ms.p99 // null),
			e2e_p50_ms: (.e2e_latency_ms.p50 // null),
			e2e_p99_ms: (.e2e_latency_ms.p99 // null),
			e2e_p999_ms: (.e2e_latency_ms.p999 // null)
		} | with_entries(select(.value != null))'
}

# run_stele KIND ARGS...: run `stele bench ARGS...` and tag its report. A
# run that fails after measuring (a stalled or interrupted run) still prints
# its report, which is kept with its error.
run_stele() {
	local kind=$1 out rc=0
	shift
	out="$("$STELE" bench "$@" --brokers "$BROKERS" --quiet --output json)" || rc=$?
	if [[ "$out" == *"{"* ]]; then
		tag "$kind" <<<"$out"
	fi
	if ((rc != 0)); then
		log "kafka: $LABEL stele bench $1 failed (exit $rc)"
		return 1
	fi
}

rep="${BENCH_REP:-1}"
if [[ -n "$E2E_RATE" ]]; then
	# Latency at a set load: producers at E2E_RATE records/s in all, and
	# consumers reading as they go (stele bench e2e).
	for size in $(size_list "$SIZES"); do
		topic="bench-e2e-$size-$rep-$RANDOM"
		log "kafka: $LABEL e2e size=$size rate=$E2E_RATE topic=$topic duration=$DURATION"
		run_stele e2e e2e --topic "$topic" --create --partitions "$PARTITIONS" \
			--record-size "$size" --producers "$PRODUCERS" --consumers "$CONSUMERS" \
			--rate "$E2E_RATE" --duration "$DURATION" || true
	done
	exit 0
fi
for size in $(size_list "$SIZES"); do
	topic="bench-$size-$rep-$RANDOM"
	log "kafka: $LABEL produce size=$size topic=$topic duration=$DURATION"
	run_stele write produce --topic "$topic" --create --partitions "$PARTITIONS" \
		--record-size "$size" --producers "$PRODUCERS" --duration "$DURATION" || continue
	((CONSUME)) || continue
	log "kafka: $LABEL consume size=$size topic=$topic"
	run_stele read consume --topic "$topic" --record-size "$size" --consumers "$CONSUMERS" \
		--duration "$DURATION" || true
done
