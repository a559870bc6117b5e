#!/usr/bin/env bash
# idle.sh: what four idle brokers cost (issue 20: "idle cost unchanged or
# lower"). A fresh four-broker cluster on 127.0.0.1 (`stele cluster init
# --nodes 4`, `stele cluster up`) is left alone for --settle, then the CPU
# time its four broker processes use over --duration is read from
# /proc/PID/stat (user + system), and the heights the chain made.
#
#   bench/idle.sh [--duration 30s] [--settle 10s] [--reps N] [--bin PATH]
#
# One JSON line per run on stdout: cpu_pct (percent of one core, the four
# brokers together), heights (blocks made during the span).
source "$(dirname "$0")/lib.sh"

duration=30s
settle=10s
reps=1
bin=""
while (($#)); do
	case $1 in
	--duration) duration=$2; shift 2 ;;
	--settle) settle=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	-h | --help) sed -n '2,11p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
need_pkg jq jq
need_pkg curl curl
results_dir
bin="$(stele_bin "$bin")"
dur_s="$(duration_s "$duration")"
ticks="$(getconf CLK_TCK)"

height() { curl -sf --max-time 2 "http://127.0.0.1:$1/healthz" | jq -r .height; }

for ((rep = 1; rep <= reps; rep++)); do
	export BENCH_REP=$rep
	d="$RESULTS_DIR/idle-rep$rep"
	rm -rf "$d" "$d".*
	base="$(free_base_port 0 1 2 3 100 101 102 103 200 201 202 203 300 301 302 303)"
	"$bin" cluster init --nodes 4 --dir "$d" --base-port "$base" >"$d.init.log" 2>&1 ||
		die "stele cluster init failed (log: $d.init.log)"
	start_cluster "$bin" "$d" "$d.up.log" --log-level warn
	up=$BG_PID
	mapfile -t pids < <(pgrep -f -- "serve --data $d/node")
	((${#pids[@]} == 4)) || die "found ${#pids[@]} broker processes of $d, want 4"
	sleep "$(duration_s "$settle")"
	h0="$(height $((base + 100)))"
	t0="$(cpu_ticks "${pids[@]}")"
	sleep "$dur_s"
	t1="$(cpu_ticks "${pids[@]}")"
	h1="$(height $((base + 100)))"
	json_line scenario=idle brokers=4 duration_s="$dur_s" \
		cpu_pct="$(awk -v t=$((t1 - t0)) -v hz="$ticks" -v s="$dur_s" 'BEGIN{printf "%.2f", 100 * t / hz / s}')" \
		heights=$((h1 - h0))
	stop_bg "$up"
	rm -rf "$d"
done
