#!/usr/bin/env bash
# commit.sh: synchronous offset commits (issue 20, docs/benchmarks.md "A
# consumer that commits after every record"). On a single node
# (`stele serve`) and on a four-broker cluster on 127.0.0.1 (`stele cluster
# init --nodes 4`, `stele cluster up`), each fresh: the topic is filled
# with 1 KiB records, then `stele bench commit` (one consumer that commits
# every record's offset synchronously before the next) runs alone, then
# beside `stele bench produce --rate RATE` (1 KiB records, acks=all, one
# producer) on another topic.
#
#   bench/commit.sh [--duration 20s] [--rate 100] [--reps N] [--bin PATH]
#                   [--systems single,cluster4]
#
# One JSON line per measurement on stdout: system (single, cluster4),
# load (idle, or the produce rate), commit p50/p99 and commits/s; under
# load also the produce p50/p99 of the same span.
source "$(dirname "$0")/lib.sh"

duration=20s
rate=100
reps=1
systems=single,cluster4
bin=""
while (($#)); do
	case $1 in
	--duration) duration=$2; shift 2 ;;
	--rate) rate=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--systems) systems=$2; shift 2 ;;
	-h | --help) sed -n '2,16p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
need_pkg jq jq
need_pkg curl curl
results_dir
bin="$(stele_bin "$bin")"
dur_s="$(duration_s "$duration")"

# measure SYSTEM BROKERS D: the fill, the idle run and the loaded run
# against BROKERS; JSON reports under D.*.json.
measure() {
	local system=$1 brokers=$2 d=$3 load
	# Enough records for both runs at 1 ms a commit.
	"$bin" --brokers "$brokers" bench produce --topic commit --create --partitions 8 --record-size 1024 --producers 4 \
		--records $((2 * (${dur_s%.*} + 5) * 1000)) --warmup 0s -q --output json >"$d.fill.json" || die "filling failed"
	"$bin" --brokers "$brokers" bench commit --topic commit --duration "$duration" --warmup 3s -q --output json \
		>"$d.idle.json" || die "bench commit failed: $(cat "$d.idle.json")"
	json_line system="$system" load=idle \
		commit_p50_ms="$(jq .commit_latency_ms.p50 "$d.idle.json")" commit_p99_ms="$(jq .commit_latency_ms.p99 "$d.idle.json")" \
		commits_per_s="$(jq .records_per_s "$d.idle.json")" errors="$(jq .errors "$d.idle.json")" \
		command="$(jq -r .command "$d.idle.json")"
	"$bin" --brokers "$brokers" bench produce --topic load --create --partitions 8 --record-size 1024 --producers 1 \
		--rate "$rate" --duration "$duration" --warmup 3s -q --output json >"$d.load.json" &
	load=$!
	"$bin" --brokers "$brokers" bench commit --topic commit --duration "$duration" --warmup 3s -q --output json \
		>"$d.busy.json" || die "bench commit failed: $(cat "$d.busy.json")"
	wait "$load" || die "bench produce failed: $(cat "$d.load.json")"
	json_line system="$system" load="$rate" \
		commit_p50_ms="$(jq .commit_latency_ms.p50 "$d.busy.json")" commit_p99_ms="$(jq .commit_latency_ms.p99 "$d.busy.json")" \
		commits_per_s="$(jq .records_per_s "$d.busy.json")" errors="$(jq .errors "$d.busy.json")" \
		produce_p50_ms="$(jq .latency_ms.p50 "$d.load.json")" produce_p99_ms="$(jq .latency_ms.p99 "$d.load.json")" \
		command="$(jq -r .command "$d.busy.json")"
}

# single REP: a fresh `stele serve`, measured, then its data removed.
single() {
	local d="$RESULTS_DIR/commit-single-rep$1" kafka http pid
	rm -rf "$d" "$d".*
	kafka="$(free_port)"
	http="$(free_port)"
	start_bg "$d.log" "$bin" serve --data "$d" --kafka "127.0.0.1:$kafka" --http "127.0.0.1:$http" --log-level warn
	pid=$BG_PID
	wait_port "$kafka" 60
	for _ in $(seq 100); do
		curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break
		sleep 0.2
	done
	log "single node, rep $1"
	measure single "127.0.0.1:$kafka" "$d"
	stop_bg "$pid"
	rm -rf "$d" # the records; the reports stay
}

# cluster4 REP: a fresh four-broker cluster, measured, then its data removed.
cluster4() {
	local d="$RESULTS_DIR/commit-cluster-rep$1" base
	rm -rf "$d" "$d".*
	base="$(free_base_port 0 1 2 3 100 101 102 103 200 201 202 203 300 301 302 303)"
	"$bin" cluster init --nodes 4 --dir "$d" --base-port "$base" >"$d.init.log" 2>&1 ||
		die "stele cluster init failed (log: $d.init.log)"
	start_cluster "$bin" "$d" "$d.up.log" --log-level warn
	log "four brokers, rep $1"
	measure cluster4 "127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))" "$d"
	stop_bg "$BG_PID"
	rm -rf "$d"
}

for ((rep = 1; rep <= reps; rep++)); do
	export BENCH_REP=$rep
	for system in ${systems//,/ }; do
		case $system in
		single | cluster4) "$system" "$rep" ;;
		*) die "unknown system $system: want single or cluster4" ;;
		esac
	done
done
