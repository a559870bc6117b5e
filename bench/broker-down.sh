#!/usr/bin/env bash
# broker-down.sh: what one crashed broker costs a 4-broker cluster. Starts
# `stele cluster init --nodes 4` + `stele cluster up` on 127.0.0.1, measures
# produce latency at a fixed rate with all four brokers up, then across a
# SIGKILL of node3 8 s into the run (max_ms is about how long the partitions
# it led were unavailable), then again once the chain has counted it out of
# the live brokers. CometBFT gives
# every validator its turn to propose, a dead one included, so one height
# in four waits --timeout-propose for a proposal that never comes; the
# last run shows what that does to produce latency.
#
#   bench/broker-down.sh [--timeout-propose D]... [--rate N] [--duration D]
#                        [--reps N] [--bin PATH]
#
# --timeout-propose may be given several times (each value is one cluster
# per rep); the default is the broker's own default. One JSON line per
# measurement on stdout (peer stele-4, scenario produce-all-up,
# produce-node3-killed or produce-node3-down, timeout_propose, p50_ms,
# p99_ms, max_ms, msgs_per_s).
source "$(dirname "$0")/lib.sh"

proposes=()
rate=100
duration=30s
reps=1
bin=""
while (($#)); do
	case $1 in
	--timeout-propose) proposes+=("$2"); shift 2 ;;
	--rate) rate=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	-h | --help) sed -n '2,19p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
((${#proposes[@]})) || proposes=(default)
need_pkg jq jq
results_dir
bin="$(stele_bin "$bin")"

# measure SCENARIO PROPOSE BROKERS: one bench produce run, one JSON line.
measure() {
	local scenario=$1 propose=$2 brokers=$3 out cmd
	cmd=("$bin" --brokers "$brokers" bench produce --topic down --rate "$rate" --producers 1
		--record-size 1024 --warmup 3s --duration "$duration" -q --output json)
	out="$("${cmd[@]}")" || die "bench produce failed: $out"
	json_line peer=stele-4 scenario="$scenario" kind=write record_size=1024 timeout_propose="$propose" \
		msgs_per_s="$(jq .records_per_s <<<"$out")" mb_per_s="$(jq .mb_per_s <<<"$out")" \
		p50_ms="$(jq .latency_ms.p50 <<<"$out")" p99_ms="$(jq .latency_ms.p99 <<<"$out")" \
		max_ms="$(jq .latency_ms.max <<<"$out")" errors="$(jq .errors <<<"$out")" \
		command="${cmd[*]:1}"
}

JSON_STRING_KEYS+="timeout_propose "
for ((rep = 1; rep <= reps; rep++)); do
	export BENCH_REP=$rep
	for propose in "${proposes[@]}"; do
		d="$RESULTS_DIR/down-$propose-rep$rep"
		rm -rf "$d"
		base="$(free_base_port 0 1 2 3 100 101 102 103 200 201 202 203 300 301 302 303)"
		"$bin" cluster init --nodes 4 --dir "$d" --base-port "$base" >"$d.init.log" 2>&1 ||
			die "stele cluster init failed (log: $d.init.log)"
		serve=(--log-level warn)
		[[ $propose == default ]] || serve+=(--timeout-propose "$propose")
		start_cluster "$bin" "$d" "$d.log" "${serve[@]}"
		up=$BG_PID
		# node3 is the one killed: the client knows only the others.
		brokers="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
		"$bin" --brokers "$brokers" topic create down --partitions 8 >/dev/null
		log "timeout-propose $propose, rep $rep: all four brokers up"
		measure produce-all-up "$propose" "$brokers"
		pid="$(sed -n 's/.*started node3 (pid \([0-9]*\)).*/\1/p' "$d.log" | head -1)"
		[[ -n $pid ]] || die "no pid for node3 in $d.log"
		# Killed 8 s into a run (5 s into the measured part): the records
		# of the partitions node3 leads wait until the chain counts it out
		# (10 s without its signature) and the producer's next metadata
		# refresh names another leader, so max_ms is roughly how long
		# those partitions were unavailable.
		log "timeout-propose $propose, rep $rep: node3 killed 8 s into the run"
		(sleep 8 && kill -KILL "$pid") &
		killer=$!
		measure produce-node3-killed "$propose" "$brokers"
		wait "$killer"
		# Well after the chain counted it out: the steady cost of a dead
		# broker alone.
		sleep 5
		log "timeout-propose $propose, rep $rep: node3 down"
		measure produce-node3-down "$propose" "$brokers"
		stop_bg "$up"
		rm -rf "$d"
	done
done
