#!/usr/bin/env bash
# cpubyte.sh: the brokers' CPU time per gigabyte produced, one node against
# four (issue 20, docs/benchmarks.md "Throughput: the CPU of four brokers").
# On a fresh `stele serve`, then on a fresh four-broker cluster on
# 127.0.0.1 (`stele cluster init --nodes 4`, `stele cluster up`): a 3 s
# open-loop `stele bench produce` to warm up, then --duration more (1 KiB
# records, 4 producers, acks=all), with the user + system CPU time of the
# broker processes read from /proc/PID/stat before and after (the load
# generator's own CPU is not counted).
#
#   bench/cpubyte.sh [--duration 15s] [--reps N] [--bin PATH]
#
# One JSON line per system and repetition on stdout: system (single,
# cluster4), mb_per_s, cpu_s (the brokers together), wall_s, cores (cpu_s
# / wall_s) and cpu_s_per_gb.
source "$(dirname "$0")/lib.sh"

duration=15s
reps=1
bin=""
while (($#)); do
	case $1 in
	--duration) duration=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	-h | --help) sed -n '2,15p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
need_pkg jq jq
need_pkg curl curl
results_dir
bin="$(stele_bin "$bin")"
ticks="$(getconf CLK_TCK)"

# measure SYSTEM BROKERS D PID...: the warm-up and the measured run.
measure() {
	local system=$1 brokers=$2 d=$3 t0 t1 c0 c1
	shift 3
	"$bin" --brokers "$brokers" bench produce --topic cpubyte --create --partitions 8 --record-size 1024 \
		--producers 4 --duration 3s --warmup 0s -q --output json >"$d.warm.json" || die "warm-up failed: $(cat "$d.warm.json")"
	c0="$(cpu_ticks "$@")"
	t0="$(date +%s.%N)"
	"$bin" --brokers "$brokers" bench produce --topic cpubyte --record-size 1024 --producers 4 \
		--duration "$duration" --warmup 0s -q --output json >"$d.json" || die "bench produce failed: $(cat "$d.json")"
	c1="$(cpu_ticks "$@")"
	t1="$(date +%s.%N)"
	json_line system="$system" mb_per_s="$(jq .mb_per_s "$d.json")" \
		cpu_s="$(awk -v t=$((c1 - c0)) -v hz="$ticks" 'BEGIN{printf "%.2f", t / hz}')" \
		wall_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')" \
		cores="$(awk -v t=$((c1 - c0)) -v hz="$ticks" -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", t / hz / (b - a)}')" \
		cpu_s_per_gb="$(awk -v t=$((c1 - c0)) -v hz="$ticks" -v n="$(jq .bytes "$d.json")" 'BEGIN{printf "%.2f", t / hz / (n / 1e9)}')"
}

for ((rep = 1; rep <= reps; rep++)); do
	export BENCH_REP=$rep
	d="$RESULTS_DIR/cpubyte-single-rep$rep"
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
	measure single "127.0.0.1:$kafka" "$d" "$pid"
	stop_bg "$pid"
	rm -rf "$d"

	d="$RESULTS_DIR/cpubyte-cluster-rep$rep"
	rm -rf "$d" "$d".*
	base="$(free_base_port 0 1 2 3 100 101 102 103 200 201 202 203 300 301 302 303)"
	"$bin" cluster init --nodes 4 --dir "$d" --base-port "$base" >"$d.init.log" 2>&1 ||
		die "stele cluster init failed (log: $d.init.log)"
	start_cluster "$bin" "$d" "$d.up.log" --log-level warn
	up=$BG_PID
	mapfile -t pids < <(pgrep -f -- "serve --data $d/node")
	((${#pids[@]} == 4)) || die "found ${#pids[@]} broker processes of $d, want 4"
	measure cluster4 "127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))" "$d" "${pids[@]}"
	stop_bg "$up"
	rm -rf "$d"
done
