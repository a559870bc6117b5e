#!/usr/bin/env bash
# run.sh: measure Stele and its peers on this machine in one run, every
# figure appended as a JSON line to RESULTS/results.jsonl, then summarised
# (RESULTS/summary.md, RESULTS/summary.png).
#
#   bench/run.sh [--only LIST] [--sizes 100,1024,16384] [--reps 3]
#                [--duration 20s] [--results DIR] [--no-summary]
#                [--e2e-rates stele-1=R1,stele-4=R4,kfake=R]
#
# --only picks a subset, comma-separated, of:
#   machine      bench/machine.sh (disk and CPU limits)
#   nats         nats-1 and nats-r3:
#   nats-1         NATS JetStream, one server        (bench/nats.sh --mode single)
#   nats-r3        NATS JetStream, 3 servers, R3     (bench/nats.sh --mode r3)
#   redis        Redis Streams, AOF everysec         (bench/redis.sh)
#   kfake        franz-go's in-memory fake Kafka     (bench/kfake + bench/kafka.sh)
#   cometbft     cometbft-1 and cometbft-4:
#   cometbft-1     bare CometBFT, 1 validator        (bench/cometbft)
#   cometbft-4     bare CometBFT, 4 validators
#   stele        stele-1 and stele-4:
#   stele-1        `stele serve`, one broker         (bench/kafka.sh)
#   stele-4        `stele cluster init --nodes 4` + `stele cluster up`
# Default: all of them. Each repetition (--reps) runs the selection in the
# order above. --duration is the measured time of the Kafka-protocol runs
# (stele bench) and of the CometBFT runs; NATS and Redis run for a message
# count (see nats.sh and redis.sh). Figures are only comparable within one
# run: publish them with this run's machine.sh lines.
#
# --e2e-rates runs, for each Kafka-protocol system named, `stele bench e2e`
# at that many records/s in all instead of produce and consume: end-to-end
# and produce latency at a set load (publish them at 50% of the maximum
# measured without it).
#
# Binaries (stele, kfake, cometbft, summarize) are built once into
# RESULTS/bin. Every server listens on 127.0.0.1 only.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

ONLY="machine,nats,redis,kfake,cometbft,stele"
SIZES="100,1024,16384"
REPS=3
DURATION=20s
SUMMARY=1
E2E_RATES=""
while (($#)); do
	case "$1" in
	--only) ONLY=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--duration) DURATION=$2; shift 2 ;;
	--results) RESULTS_DIR=$2; shift 2 ;;
	--no-summary) SUMMARY=0; shift ;;
	--e2e-rates) E2E_RATES=$2; shift 2 ;;
	-h | --help) sed -n '2,/^# shellcheck/p' "$0" | sed '$d;s/^# \{0,1\}//'; exit 0 ;;
	*) die "run.sh: unknown argument $1 (try --help)" ;;
	esac
done
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
size_list "$SIZES" >/dev/null

# Expand --only into the items to run.
declare -A WANT=()
for item in ${ONLY//,/ }; do
	case "$item" in
	nats) WANT[nats-1]=1 WANT[nats-r3]=1 ;;
	cometbft) WANT[cometbft-1]=1 WANT[cometbft-4]=1 ;;
	stele) WANT[stele-1]=1 WANT[stele-4]=1 ;;
	machine | nats-1 | nats-r3 | redis | kfake | cometbft-1 | cometbft-4 | stele-1 | stele-4) WANT[$item]=1 ;;
	*) die "--only: unknown item '$item' (try --help)" ;;
	esac
done
wants() { [[ -n "${WANT[$1]:-}" ]]; }

results_dir
JSONL="$RESULTS_DIR/results.jsonl"
BIN="$RESULTS_DIR/bin"
mkdir -p "$BIN" "$RESULTS_DIR/tmp"
export TMPDIR="$RESULTS_DIR/tmp"
log "results: $RESULTS_DIR"

build() {
	log "go build -o $BIN/$1 $2"
	(cd "$REPO_DIR" && go build -o "$BIN/$1" "$2")
}
if wants kfake || wants stele-1 || wants stele-4; then build stele ./cmd/stele; fi
if wants kfake; then build kfake ./bench/kfake; fi
if wants cometbft-1 || wants cometbft-4; then build cometbft ./bench/cometbft; fi
if ((SUMMARY)); then build summarize ./bench/summarize; fi
export STELE_BIN="$BIN/stele"

json_line peer=meta scenario=run commit="$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
	dirty_files="$(git -C "$REPO_DIR" status --porcelain 2>/dev/null | wc -l)" \
	only="$ONLY" sizes="$SIZES" reps="$REPS" duration="$DURATION" >>"$JSONL"

# record NAME CMD...: run CMD, append its JSON lines to results.jsonl (and
# show them); a failure is logged and the run goes on.
record() {
	local name=$1
	shift
	log "== $name (rep $BENCH_REP)"
	# The subshell stops the servers its functions started, even on die.
	if ! (trap bench_cleanup EXIT; "$@") | tee -a "$JSONL"; then
		log "== $name (rep $BENCH_REP) failed; continuing"
		echo "$name rep $BENCH_REP" >>"$RESULTS_DIR/failed.txt"
	fi
}

# tag_json: add run and rep to JSON objects on stdin.
tag_json() {
	jq -c --arg run "${BENCH_RUN:-}" --argjson rep "$BENCH_REP" '{run: $run, rep: $rep} + .'
}

# kafka --label L ...: bench/kafka.sh for the run's sizes and duration; with
# --e2e-rates naming L, end-to-end latency at that rate instead.
kafka() {
	local label="" rate="" a
	for a in "$@"; do
		[[ "$label" == next ]] && label=$a
		[[ "$a" == --label ]] && label=next
	done
	if [[ -n "${E2E_RATES:-}" ]]; then
		rate="$(tr ',' '\n' <<<"$E2E_RATES" | sed -n "s/^$label=//p")"
		[[ -n "$rate" ]] || { log "no --e2e-rates entry for $label; skipped"; return 0; }
		bash "$BENCH_DIR/kafka.sh" --sizes "${KAFKA_SIZES:-$SIZES}" --duration "$DURATION" --e2e-rate "$rate" "$@"
		return
	fi
	bash "$BENCH_DIR/kafka.sh" --sizes "${KAFKA_SIZES:-$SIZES}" --duration "$DURATION" "$@"
}

# run_kfake starts a fresh kfake for each record size: it keeps every
# record in memory, and one instance for all sizes ran out of it.
run_kfake() {
	local port addr pid size rc=0
	for size in $(size_list "$SIZES"); do
		port="$(free_port)"
		start_bg "$RESULTS_DIR/kfake-rep$BENCH_REP-$size.log" "$BIN/kfake" -port "$port"
		pid=$BG_PID
		wait_port "$port" 30 || { stop_bg "$pid"; die "kfake did not start"; }
		addr="127.0.0.1:$port"
		KAFKA_SIZES=$size kafka --brokers "$addr" --label kfake || rc=$?
		stop_bg "$pid"
	done
	return "$rc"
}

run_cometbft() {
	local v=$1 size
	for size in $(size_list "$SIZES"); do
		log "cometbft: $v validator(s), record size $size"
		"$BIN/cometbft" -validators "$v" -record-size "$size" -duration "$DURATION" | tag_json
	done
}

# wait_healthz PORT SECONDS PID: until GET /healthz answers 200, while PID lives.
wait_healthz() {
	local port=$1 deadline=$((SECONDS + $2)) pid=$3
	until curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null; do
		kill -0 "$pid" 2>/dev/null || return 1
		((SECONDS < deadline)) || return 1
		sleep 0.25
	done
}

run_stele_1() {
	local d="$RESULTS_DIR/stele-1-rep$BENCH_REP" kp hp pp pid rc=0
	rm -rf "$d"
	kp="$(free_port)" hp="$(free_port)" pp="$(free_port)"
	start_bg "$d.log" "$BIN/stele" serve --data "$d" --kafka "127.0.0.1:$kp" \
		--http "127.0.0.1:$hp" --p2p "127.0.0.1:$pp" --log-level warn
	pid=$BG_PID
	if wait_healthz "$hp" 60 "$pid"; then
		kafka --brokers "127.0.0.1:$kp" --label stele-1 || rc=$?
	else
		log "stele serve did not become healthy (log: $d.log)"
		rc=1
	fi
	stop_bg "$pid"
	rm -rf "$d"
	return "$rc"
}

run_stele_4() {
	local d="$RESULTS_DIR/stele-4-rep$BENCH_REP" base pid deadline rc=0
	rm -rf "$d"
	base="$(free_base_port 0 1 2 3 100 101 102 103 200 201 202 203 300 301 302 303)"
	"$BIN/stele" cluster init --nodes 4 --dir "$d" --base-port "$base" >"$d.init.log" 2>&1 ||
		{ log "stele cluster init failed (log: $d.init.log)"; return 1; }
	start_bg "$d.log" "$BIN/stele" cluster up --dir "$d" --bin "$BIN/stele" -- --log-level warn
	pid=$BG_PID
	deadline=$((SECONDS + 120))
	until grep -q 'bootstrap brokers:' "$d.log" 2>/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
			log "stele cluster did not come up (log: $d.log)"
			rc=1
			break
		fi
		sleep 0.5
	done
	if ((rc == 0)); then
		kafka --brokers "$(tr -d ' \n' <"$d/brokers.txt")" --label stele-4 || rc=$?
	fi
	BENCH_STOP_TIMEOUT=60 stop_bg "$pid"
	rm -rf "$d"
	return "$rc"
}

for ((rep = 1; rep <= REPS; rep++)); do
	export BENCH_REP=$rep
	for item in machine nats-1 nats-r3 redis kfake cometbft-1 cometbft-4 stele-1 stele-4; do
		wants "$item" || continue
		case "$item" in
		machine) record machine bash "$BENCH_DIR/machine.sh" ;;
		nats-1) record nats-1 bash "$BENCH_DIR/nats.sh" --mode single --sizes "$SIZES" ;;
		nats-r3) record nats-r3 bash "$BENCH_DIR/nats.sh" --mode r3 --sizes "$SIZES" ;;
		redis) record redis bash "$BENCH_DIR/redis.sh" --sizes "$SIZES" ;;
		kfake) record kfake run_kfake ;;
		cometbft-1) record cometbft-1 run_cometbft 1 ;;
		cometbft-4) record cometbft-4 run_cometbft 4 ;;
		stele-1) record stele-1 run_stele_1 ;;
		stele-4) record stele-4 run_stele_4 ;;
		esac
	done
done

if ((SUMMARY)); then
	"$BIN/summarize" -in "$JSONL" -md "$RESULTS_DIR/summary.md" -png "$RESULTS_DIR/summary.png"
fi
log "results: $JSONL"
[[ ! -s "$RESULTS_DIR/failed.txt" ]] || log "some runs failed: $(tr '\n' ';' <"$RESULTS_DIR/failed.txt")"
