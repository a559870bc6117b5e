# shellcheck shell=bash
# lib.sh: helpers shared by the bench/ scripts. Source it; do not run it.
#
#   source "$(dirname "$0")/lib.sh"
#
# What it gives:
#   log MSG...                 a timestamped line on stderr
#   die MSG...                 log, then exit 1
#   need_pkg CMD PKG           apt-get install PKG unless CMD is on PATH
#                              (apt-get update runs once per process tree)
#   port_free P                true when nothing listens on 127.0.0.1:P
#   free_port                  prints a free port on 127.0.0.1
#   free_base_port OFFSETS...  prints a port B such that B+each offset is free
#   wait_port P [SECONDS]      waits until 127.0.0.1:P accepts connections
#   start_bg LOG CMD...        runs CMD in the background (its own process
#                              group), output to LOG; its pid is in BG_PID and
#                              it is stopped by the exit trap
#   stop_bg PID                SIGTERM, up to BENCH_STOP_TIMEOUT s, then SIGKILL
#   results_dir                sets and creates RESULTS_DIR (exported)
#   json_line K=V...           prints one JSON object; values that parse as
#                              numbers are numbers (but for the keys in
#                              JSON_STRING_KEYS); BENCH_RUN and BENCH_REP
#                              are added as run and rep
#   size_list LIST             "100,1024" -> "100 1024"
#   duration_s D               "20s", "1m", "500ms", "20" -> seconds (may be fractional)
#   stele_bin [PATH]           prints PATH, or builds ./cmd/stele into
#                              RESULTS_DIR/bin and prints that (after results_dir)
#   cpu_ticks PID...           the user + system clock ticks the processes
#                              used so far (/proc/PID/stat; getconf CLK_TCK
#                              per second)
#
# Every server these scripts start listens on 127.0.0.1 only, and every
# benchmark client targets 127.0.0.1 only; netns.sh's brokers and client
# talk over addresses of network namespaces it makes and removes.

set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
# Tools installed with `go install` (natscli) live here, across runs.
BENCH_TOOLS="${BENCH_TOOLS:-$BENCH_DIR/.tools}"
BENCH_STOP_TIMEOUT="${BENCH_STOP_TIMEOUT:-20}"
export BENCH_DIR REPO_DIR BENCH_TOOLS

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# need_pkg CMD PKG: install the Debian package PKG when the command CMD is
# missing. apt-get update runs at most once per process tree (a marker file
# under /tmp keyed by the top-level shell's pid would leak; an env var is
# enough because the scripts call each other as children).
need_pkg() {
	local cmd=$1 pkg=$2
	command -v "$cmd" >/dev/null 2>&1 && return 0
	if [[ -z "${BENCH_APT_UPDATED:-}" ]]; then
		log "apt-get update (to install $pkg)"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		export BENCH_APT_UPDATED=1
	fi
	log "apt-get install -y $pkg"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >&2
	command -v "$cmd" >/dev/null 2>&1 || die "installed $pkg but $cmd is still not on PATH"
}

# port_free P: nothing accepts connections on 127.0.0.1:P and no socket
# is bound to it.
port_free() {
	local p=$1
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		return 1
	fi
	! ss -Htan "sport = :$p" 2>/dev/null | grep -q .
}

# Ports are picked in 10000-32299, below Linux's ephemeral range (32768 and
# up by default), so no outgoing connection on the machine takes one as its
# source port between the check and the server binding it.

# free_port: a random free port in 10000-31999.
free_port() {
	local p i
	for i in $(seq 1 200); do
		p=$((10000 + RANDOM % 22000))
		if port_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	die "no free port found"
}

# free_base_port OFFSET...: a base port B (10000-31999) with B+OFFSET free
# for every OFFSET (at most 400), for programs that lay their ports out from
# one base.
free_base_port() {
	local b o ok i
	for i in $(seq 1 200); do
		b=$((10000 + RANDOM % 22000))
		ok=1
		for o in "$@"; do
			if ! port_free $((b + o)); then
				ok=0
				break
			fi
		done
		if ((ok)); then
			echo "$b"
			return 0
		fi
	done
	die "no free base port found for offsets $*"
}

# wait_port P [SECONDS]: wait until 127.0.0.1:P accepts a connection.
wait_port() {
	local p=$1 secs=${2:-30} deadline
	deadline=$((SECONDS + secs))
	until (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# Background processes started by start_bg, stopped by the exit trap.
BENCH_PIDS=()

# start_bg LOG CMD...: start CMD in its own session (so stopping it reaches
# its children too), stdout and stderr to LOG. Sets BG_PID.
start_bg() {
	local logf=$1
	shift
	setsid "$@" >"$logf" 2>&1 </dev/null &
	BG_PID=$!
	BENCH_PIDS+=("$BG_PID")
}

# start_cluster BIN DIR LOG [SERVE-FLAG...]: `stele cluster up` on the
# cluster DIR (which `stele cluster init` wrote) in the background, output
# to LOG, until it names its bootstrap brokers (every broker serving), at
# most 120 s. Sets BG_PID to the `cluster up` process.
start_cluster() {
	local bin=$1 dir=$2 logf=$3 deadline
	shift 3
	start_bg "$logf" "$bin" cluster up --dir "$dir" --bin "$bin" -- "$@"
	deadline=$((SECONDS + 120))
	until grep -q 'bootstrap brokers:' "$logf" 2>/dev/null; do
		kill -0 "$BG_PID" 2>/dev/null && ((SECONDS < deadline)) || die "the cluster did not come up (log: $logf)"
		sleep 0.5
	done
}

# stop_bg PID: SIGTERM the process group PID leads, wait, then SIGKILL.
stop_bg() {
	local pid=$1 deadline
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	deadline=$((SECONDS + BENCH_STOP_TIMEOUT))
	while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "pid $pid still running after ${BENCH_STOP_TIMEOUT}s: SIGKILL"
		kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

bench_cleanup() {
	local pid
	for pid in "${BENCH_PIDS[@]}"; do
		stop_bg "$pid"
	done
	BENCH_PIDS=()
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# results_dir: RESULTS_DIR defaults to bench/results/<timestamp>/.
results_dir() {
	if [[ -z "${RESULTS_DIR:-}" ]]; then
		RESULTS_DIR="$BENCH_DIR/results/$(date +%Y%m%d-%H%M%S)"
	fi
	mkdir -p "$RESULTS_DIR"
	RESULTS_DIR="$(cd "$RESULTS_DIR" && pwd)"
	export RESULTS_DIR
	export BENCH_RUN="${BENCH_RUN:-$(basename "$RESULTS_DIR")}"
}

# json_line K=V...: one compact JSON object on stdout. Values that parse
# as numbers become numbers, except those of the keys in JSON_STRING_KEYS.
JSON_STRING_KEYS=" run peer scenario kind command server client cpu_model kernel results_fs commit only sizes duration storage appendfsync "
json_line() {
	local args=() filter='{}' i=0 kv k
	for kv in "run=${BENCH_RUN:-}" "rep=${BENCH_REP:-1}" "$@"; do
		k="${kv%%=*}"
		args+=(--arg "k$i" "$k" --arg "v$i" "${kv#*=}")
		if [[ "$JSON_STRING_KEYS" == *" $k "* ]]; then
			filter+=" | .[\$k$i] = \$v$i"
		else
			filter+=" | .[\$k$i] = (\$v$i | (tonumber? // .))"
		fi
		i=$((i + 1))
	done
	jq -nc "${args[@]}" "$filter"
}

# size_list "100,1024" -> "100 1024", checking each is a positive integer.
size_list() {
	local s sizes=()
	for s in ${1//,/ }; do
		[[ "$s" =~ ^[1-9][0-9]*$ ]] || die "record size '$s' is not a positive integer"
		sizes+=("$s")
	done
	echo "${sizes[*]}"
}

# duration_s D: seconds in a Go-style duration ("20s", "1m", "500ms") or a
# bare number of seconds.
duration_s() {
	local d=$1
	case "$d" in
	*ms) awk -v v="${d%ms}" 'BEGIN{print v/1000}' ;;
	*s) echo "${d%s}" ;;
	*m) awk -v v="${d%m}" 'BEGIN{print v*60}' ;;
	*) echo "$d" ;;
	esac
}

need_pkg jq jq

# stele_bin [PATH]: the stele binary a script measures: PATH (a --bin
# flag) if given, else one built from this checkout into RESULTS_DIR/bin.
stele_bin() {
	local bin=${1:-}
	if [[ -z "$bin" ]]; then
		bin="$RESULTS_DIR/bin/stele"
		log "go build -o $bin ./cmd/stele"
		(cd "$REPO_DIR" && go build -o "$bin" ./cmd/stele) || die "go build ./cmd/stele"
	fi
	printf '%s\n' "$bin"
}

# cpu_ticks PID...: the user + system clock ticks the processes used.
cpu_ticks() {
	local pid sum=0 f
	for pid in "$@"; do
		# Fields 14 and 15 after the command name, which may hold spaces.
		f="$(sed 's/^.*) //' "/proc/$pid/stat")"
		sum=$((sum + $(awk '{print $12 + $13}' <<<"$f")))
	done
	echo "$sum"
}
