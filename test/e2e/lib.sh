# shellcheck shell=bash
# Helpers sourced by the end-to-end tests in test/e2e (see run.sh).
#
# A test sources this file, calls e2e_setup, then drives one broker:
#
#   e2e_broker_init            pick loopback ports and a data dir
#   e2e_broker_start           start `stele serve`, wait for /healthz
#   e2e_broker_kill9           SIGKILL it (a crash)
#   e2e_broker_stop            SIGTERM it and require a clean exit
#   e2e_broker_start           again: same data dir, same ports
#
# Everything a test starts is recorded and killed by the EXIT trap, even on
# failure; the broker's log is printed when the test fails. All traffic stays
# on 127.0.0.1. Every wait has a deadline.
#
# Environment:
#   STELE_BIN        use this stele binary instead of building one
#   E2E_KEEP=1       keep the temporary directory (data dirs, logs, outputs)
#   STELE_LOG_LEVEL  the broker's log level (default info)

set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
E2E_ROOT=$(cd "$E2E_DIR/../.." && pwd)
E2E_NAME=$(basename "${BASH_SOURCE[1]:-e2e}" .sh)
# The Debian clients are modules of the system Python, not of a pyenv one.
PY=/usr/bin/python3
E2E_PIDS=()  # background processes still running that this test started
E2E_PORTS=() # ports handed out by e2e_free_port
E2E_TMP=""

# log prints a timestamped line on stderr.
log() { printf '[%s +%3ds] %s\n' "$E2E_NAME" "$SECONDS" "$*" >&2; }

# fail stops the test with a message; the EXIT trap shows the broker's log.
fail() {
	log "FAIL: $*"
	exit 1
}

# e2e_timeout SECONDS CMD... runs CMD with a deadline. --foreground keeps CMD
# in the test's process group, so that a signal to the group (run.sh's own
# deadline) reaches it too.
e2e_timeout() {
	local limit=$1
	shift
	timeout --foreground -k 5 "$limit" "$@"
}

# e2e_setup creates the temporary directory, installs the cleanup trap,
# checks the clients and makes sure there is a stele binary.
e2e_setup() {
	E2E_TMP=$(mktemp -d "${TMPDIR:-/tmp}/stele-e2e-$E2E_NAME.XXXXXX")
	# A trap runs with the redirections of the command it interrupts (the
	# 2>file of a client call, say): the traps put the test's own stdout
	# and stderr back first, or their messages would land in that file.
	exec {E2E_OUT}>&1 {E2E_ERR}>&2
	trap e2e_cleanup EXIT
	trap 'exec 1>&"$E2E_OUT" 2>&"$E2E_ERR"; log "interrupted"; exit 130' INT TERM
	e2e_require_clients
	e2e_build
}

# e2e_cleanup kills every process the test started, shows the broker's log
# if the test failed and removes the temporary directory.
e2e_cleanup() {
	local rc=$? pid f
	trap - EXIT
	[[ -n ${E2E_OUT:-} ]] && exec 1>&"$E2E_OUT" 2>&"$E2E_ERR"
	for pid in "${E2E_PIDS[@]}"; do
		kill -9 "$pid" 2>/dev/null || true
	done
	for pid in "${E2E_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	E2E_PIDS=()
	if ((rc != 0)) && [[ -n $E2E_TMP ]]; then
		for f in "$E2E_TMP"/*.log; do
			[[ -f $f ]] || continue
			printf '\n----- last 60 lines of %s -----\n' "$(basename "$f")" >&2
			tail -n 60 "$f" >&2
			printf -- '----- end of %s -----\n' "$(basename "$f")" >&2
		done
	fi
	if [[ -n $E2E_TMP ]]; then
		if [[ ${E2E_KEEP:-} == 1 ]]; then
			log "kept $E2E_TMP"
		else
			rm -rf "$E2E_TMP"
		fi
	fi
	exit "$rc"
}

# e2e_forget removes a reaped pid from E2E_PIDS, so that the cleanup never
# signals a pid the kernel may since have given to another process.
e2e_forget() {
	local keep=() pid
	for pid in "${E2E_PIDS[@]}"; do
		[[ $pid == "$1" ]] || keep+=("$pid")
	done
	E2E_PIDS=("${keep[@]}")
}

# e2e_require_clients checks kcat, curl and the Python clients, installing
# the Debian packages when they are missing and we are root.
e2e_require_clients() {
	local missing=()
	command -v kcat >/dev/null 2>&1 || missing+=(kcat)
	command -v curl >/dev/null 2>&1 || missing+=(curl)
	if [[ ! -x $PY ]]; then
		missing+=(python3)
	else
		"$PY" -c 'import confluent_kafka' 2>/dev/null || missing+=(python3-confluent-kafka)
		"$PY" -c 'import kafka' 2>/dev/null || missing+=(python3-kafka)
	fi
	((${#missing[@]} == 0)) && return 0
	if [[ $(id -u) != 0 ]]; then
		fail "missing ${missing[*]}: run as root, or: apt-get install -y kcat curl python3-confluent-kafka python3-kafka"
	fi
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	e2e_timeout 300 apt-get update >/dev/null || fail "apt-get update failed"
	e2e_timeout 300 apt-get install -y kcat curl python3-confluent-kafka python3-kafka >/dev/null ||
		fail "apt-get install kcat curl python3-confluent-kafka python3-kafka failed"
	command -v kcat >/dev/null 2>&1 || fail "kcat still missing after apt-get install"
	command -v curl >/dev/null 2>&1 || fail "curl still missing after apt-get install"
	"$PY" -c 'import confluent_kafka, kafka' || fail "the Python clients are still missing after apt-get install"
}

# e2e_require_debian_python MODULE=PACKAGE... checks that $PY imports each
# MODULE, installing the Debian PACKAGE of those missing when we are root.
e2e_require_debian_python() {
	local missing=() pair
	for pair in "$@"; do
		"$PY" -c "import ${pair%%=*}" 2>/dev/null || missing+=("${pair#*=}")
	done
	((${#missing[@]} == 0)) && return 0
	[[ $(id -u) == 0 ]] || fail "missing ${missing[*]}: run as root, or: apt-get install -y ${missing[*]}"
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	e2e_timeout 300 apt-get update >/dev/null || fail "apt-get update failed"
	e2e_timeout 300 apt-get install -y "${missing[@]}" >/dev/null || fail "apt-get install ${missing[*]} failed"
	for pair in "$@"; do
		"$PY" -c "import ${pair%%=*}" || fail "${pair%%=*} still missing after apt-get install ${pair#*=}"
	done
}

# e2e_build sets STELE_BIN, building ./cmd/stele once into the temporary
# directory unless STELE_BIN is already set.
e2e_build() {
	if [[ -n ${STELE_BIN:-} ]]; then
		[[ -x $STELE_BIN ]] || fail "STELE_BIN=$STELE_BIN is not an executable"
		return 0
	fi
	STELE_BIN=$E2E_TMP/stele
	log "building ./cmd/stele"
	(cd "$E2E_ROOT" && e2e_timeout 600 go build -o "$STELE_BIN" ./cmd/stele) || fail "go build ./cmd/stele failed"
	export STELE_BIN
}

# e2e_free_port VAR stores in VAR a TCP port free on 127.0.0.1, below the
# kernel's ephemeral range (so no client connection takes it while a broker
# is down between a crash and its restart) and not handed out before.
e2e_free_port() {
	local port
	port=$("$PY" - "${E2E_PORTS[@]}" <<-'EOF'
		import random, socket, sys
		taken = set(int(p) for p in sys.argv[1:])
		with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
		    low = int(f.read().split()[0])
		hi = min(low, 32768) - 1
		for _ in range(200):
		    p = random.randint(20000, hi)
		    if p in taken:
		        continue
		    s = socket.socket()
		    try:
		        s.bind(("127.0.0.1", p))
		    except OSError:
		        continue
		    finally:
		        s.close()
		    print(p)
		    sys.exit(0)
		sys.exit("no free port on 127.0.0.1")
	EOF
	) || fail "could not find a free port on 127.0.0.1"
	E2E_PORTS+=("$port")
	printf -v "$1" '%s' "$port"
}

# e2e_broker_init picks the broker's data directory and loopback ports:
# BROKER (the Kafka bootstrap address), BROKER_HTTP, BROKER_P2P.
e2e_broker_init() {
	local kafka http p2p
	e2e_free_port kafka
	e2e_free_port http
	e2e_free_port p2p
	BROKER=127.0.0.1:$kafka
	BROKER_HTTP=127.0.0.1:$http
	BROKER_P2P=127.0.0.1:$p2p
	BROKER_DATA=$E2E_TMP/data
	BROKER_LOG=$E2E_TMP/broker.log
	BROKER_PID=""
	BROKER_STARTS=0
}

# e2e_broker_start starts `stele serve` on BROKER_DATA and waits (at most
# $1 seconds, default 60) until /healthz says it serves.
e2e_broker_start() {
	local limit=${1:-60} t0=$SECONDS
	[[ -z $BROKER_PID ]] || fail "e2e_broker_start: broker $BROKER_PID is still running"
	BROKER_STARTS=$((BROKER_STARTS + 1))
	printf '===== start %d at %s =====\n' "$BROKER_STARTS" "$(date +%T.%N)" >>"$BROKER_LOG"
	# BROKER_LISTEN, when a scenario sets it (an array), replaces
	# --kafka "$BROKER": --listeners and the --ssl-* flags, say.
	local listen=(--kafka "$BROKER")
	[[ -n ${BROKER_LISTEN+x} ]] && listen=("${BROKER_LISTEN[@]}")
	"$STELE_BIN" serve --data "$BROKER_DATA" "${listen[@]}" --http "$BROKER_HTTP" \
		--p2p "$BROKER_P2P" --log-level "${STELE_LOG_LEVEL:-info}" >>"$BROKER_LOG" 2>&1 &
	BROKER_PID=$!
	E2E_PIDS+=("$BROKER_PID")
	local deadline=$((SECONDS + limit))
	until e2e_healthy; do
		if ! kill -0 "$BROKER_PID" 2>/dev/null; then
			local rc=0
			wait "$BROKER_PID" || rc=$?
			e2e_forget "$BROKER_PID"
			BROKER_PID=""
			fail "stele serve exited with status $rc before /healthz answered"
		fi
		((SECONDS < deadline)) || fail "stele serve: /healthz not ok after ${limit}s"
		sleep 0.1
	done
	log "broker up (pid $BROKER_PID, kafka $BROKER, http $BROKER_HTTP, start $BROKER_STARTS, height $(e2e_height), $((SECONDS - t0))s)"
}

# e2e_healthy succeeds when /healthz answers 200 with status ok.
e2e_healthy() {
	local body
	body=$(curl -sf --max-time 2 "http://$BROKER_HTTP/healthz" 2>/dev/null) || return 1
	[[ $body == *'"status":"ok"'* ]]
}

# e2e_height prints the applied height /healthz reports (-1 if it does not answer).
e2e_height() {
	curl -sf --max-time 2 "http://$BROKER_HTTP/healthz" 2>/dev/null |
		"$PY" -c 'import json, sys; print(json.load(sys.stdin)["height"])' 2>/dev/null || echo -1
}

# e2e_broker_kill9 crashes the broker with SIGKILL.
e2e_broker_kill9() {
	[[ -n $BROKER_PID ]] || fail "e2e_broker_kill9: no broker running"
	kill -9 "$BROKER_PID" 2>/dev/null || true
	wait "$BROKER_PID" 2>/dev/null || true
	e2e_forget "$BROKER_PID"
	printf '===== kill -9 at %s =====\n' "$(date +%T.%N)" >>"$BROKER_LOG"
	log "broker killed with SIGKILL (pid $BROKER_PID)"
	BROKER_PID=""
}

# e2e_broker_stop sends SIGTERM and requires exit status 0 within $1
# seconds (default 30).
e2e_broker_stop() {
	local limit=${1:-30} rc=0 t0=$SECONDS
	[[ -n $BROKER_PID ]] || fail "e2e_broker_stop: no broker running"
	kill -TERM "$BROKER_PID" 2>/dev/null || true
	local deadline=$((SECONDS + limit))
	while kill -0 "$BROKER_PID" 2>/dev/null; do
		((SECONDS < deadline)) || fail "stele serve still running ${limit}s after SIGTERM"
		sleep 0.1
	done
	wait "$BROKER_PID" || rc=$?
	e2e_forget "$BROKER_PID"
	BROKER_PID=""
	((rc == 0)) || fail "stele serve exited with status $rc after SIGTERM (want 0)"
	log "broker stopped cleanly by SIGTERM ($((SECONDS - t0))s)"
}

# e2e_stele runs a stele CLI command against the broker, with a deadline.
e2e_stele() {
	e2e_timeout 30 "$STELE_BIN" "$@" --brokers "$BROKER"
}

# e2e_topic_create NAME PARTITIONS creates a topic with the stele CLI.
e2e_topic_create() {
	local out
	out=$(e2e_stele topic create "$1" --partitions "$2" 2>&1) ||
		fail "stele topic create $1 --partitions $2: $out"
	log "created topic $1 ($2 partitions)"
}

# e2e_bg VAR CMD... starts CMD in the background, records it for the
# cleanup and stores its pid in VAR.
e2e_bg() {
	local var=$1
	shift
	"$@" &
	E2E_PIDS+=("$!")
	printf -v "$var" '%s' "$!"
}

# e2e_wait_pid PID SECONDS waits for a process started by e2e_bg and returns
# its exit status; it fails the test if it is still running after SECONDS.
e2e_wait_pid() {
	local pid=$1 deadline=$((SECONDS + $2)) rc=0
	while kill -0 "$pid" 2>/dev/null; do
		((SECONDS < deadline)) || fail "process $pid still running after $2s"
		sleep 0.1
	done
	wait "$pid" || rc=$?
	e2e_forget "$pid"
	return "$rc"
}

# scenario NAME LIMIT FUNCTION runs FUNCTION in a subshell of its own, its
# output in scenario-NAME.out: a `fail` there ends only the scenario, and
# the processes it started with e2e_bg are killed when it ends. After LIMIT
# seconds it is stopped and counts as failed. A failed scenario's NAME is
# added to the caller's array `failed` (groups.sh, idempotence.sh).
scenario() {
	local name=$1 limit=$2 fn=$3 t0=$SECONDS out=$E2E_TMP/scenario-$1.out pid rc=0
	log "$name ..."
	e2e_bg pid scenario_main "$fn" "$out"
	local deadline=$((SECONDS + limit))
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS >= deadline)); then
			echo "scenario still running after ${limit}s: stopped" >>"$out"
			kill -TERM "$pid" 2>/dev/null || true
			local grace=$((SECONDS + 10))
			while kill -0 "$pid" 2>/dev/null && ((SECONDS < grace)); do sleep 0.1; done
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
	wait "$pid" || rc=$?
	e2e_forget "$pid"
	if ((rc == 0)); then
		log "$name: ok ($((SECONDS - t0))s)"
		sed "s/^/    /" "$out" >&2
	else
		log "$name: FAILED ($((SECONDS - t0))s, exit $rc)"
		tail -n 40 "$out" | sed "s/^/    /" >&2
		failed+=("$name")
	fi
}

# scenario_main FUNCTION OUT is the scenario's subshell.
scenario_main() {
	exec >"$2" 2>&1
	E2E_PIDS=() # the broker stays the main shell's
	trap scenario_cleanup EXIT
	trap 'exit 143' INT TERM
	"$1"
}

# scenario_cleanup kills what the scenario left running.
scenario_cleanup() {
	local rc=$? pid
	trap - EXIT
	for pid in "${E2E_PIDS[@]}"; do
		kill -9 "$pid" 2>/dev/null || true
	done
	for pid in "${E2E_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	exit "$rc"
}
