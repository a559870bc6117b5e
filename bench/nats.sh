#!/usr/bin/env bash
# nats.sh: NATS JetStream (file storage) measured with `nats bench`, as JSON
# lines on stdout.
#
#   bench/nats.sh [--mode single|r3|both] [--sizes 100,1024,16384] [--clients 4]
#
# Servers: Debian's nats-server (installed when missing), listening on
# 127.0.0.1 only, JetStream store dirs under the results dir. "single" is one
# server (peer "nats", stream replicas 1); "r3" is three servers routed to
# each other on 127.0.0.1 (peer "nats-r3", stream replicas 3). Client: natscli
# (`nats`), installed with `go install` into bench/.tools/bin.
#
# Scenarios, per record size, on a fresh stream "benchstream" (file storage):
#   js-pub-async  kind=write  `nats bench js pub async`, --clients publishers,
#                 each keeping a window of 500 unacknowledged publishes; the
#                 latency natscli reports is per window of 500, kept as
#                 batch_p50_ms / batch_p99_ms
#   js-consume    kind=read   `nats bench js consume`: --clients consumers
#                 sharing one durable consumer, explicit acks, reading back
#                 what js-pub-async wrote
#   js-ordered    kind=read   `nats bench js ordered`: one ephemeral ordered
#                 consumer (no acks) reading the whole stream
#   js-pub-sync   kind=write  `nats bench js pub sync` on a new stream: each
#                 publisher waits for each ack; p50_ms / p99_ms per publish
# mb_per_s is msgs_per_s x record size / 10^6 (payload only).
#
# Durability as configured: nats-server 2.9 acknowledges a JetStream publish
# once written to its file store (OS page cache) and, for R3, stored by a
# quorum; it fsyncs on its own timer (sync_interval, not configurable in 2.9),
# not per message.
#
# Environment: NATS_PUB_BYTES (bytes published by js-pub-async per size,
# default 1000000000), NATS_MAX_MSGS (cap on its message count, default
# 1000000), NATS_SYNC_MSGS (js-pub-sync messages, default 20000),
# NATSCLI_VERSION (default v0.5.0).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

MODE=single
SIZES="100,1024,16384"
CLIENTS=4
while (($#)); do
	case "$1" in
	--mode) MODE=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	--clients) CLIENTS=$2; shift 2 ;;
	-h | --help) sed -n '2,/^# shellcheck/p' "$0" | sed '$d;s/^# \{0,1\}//'; exit 0 ;;
	*) die "nats.sh: unknown argument $1" ;;
	esac
done
results_dir
case "$MODE" in single | r3 | both) ;; *) die "nats.sh: --mode must be single, r3 or both" ;; esac

PUB_BYTES="${NATS_PUB_BYTES:-1000000000}"
MAX_MSGS="${NATS_MAX_MSGS:-1000000}"
SYNC_MSGS="${NATS_SYNC_MSGS:-20000}"
NATSCLI_VERSION="${NATSCLI_VERSION:-v0.5.0}"
NATS="$BENCH_TOOLS/bin/nats"

need_pkg nats-server nats-server
if [[ ! -x "$NATS" ]] || [[ "$("$NATS" --version 2>&1)" != "$NATSCLI_VERSION" ]]; then
	log "installing natscli $NATSCLI_VERSION into $BENCH_TOOLS/bin"
	(cd / && GOBIN="$BENCH_TOOLS/bin" go install "github.com/nats-io/natscli/nats@$NATSCLI_VERSION") >&2
fi
SERVER_VERSION="$(nats-server --version | awk '{print $2}')"

# nats_cli ARGS...: natscli against the servers in URLS, no saved context.
nats_cli() { "$NATS" --no-context -s "$URLS" "$@"; }

# write_conf FILE NAME PORT STORE [CLUSTER_PORT ROUTE_PORTS...]
write_conf() {
	local f=$1 name=$2 port=$3 store=$4
	shift 4
	{
		echo "server_name: $name"
		echo "listen: 127.0.0.1:$port"
		echo "jetstream { store_dir: \"$store\" }"
		if (($#)); then
			local cport=$1 routes=() r
			shift
			for r in "$@"; do routes+=("\"nats-route://127.0.0.1:$r\""); done
			echo "cluster {"
			echo "  name: bench"
			echo "  listen: 127.0.0.1:$cport"
			echo "  routes: [ $(IFS=,; echo "${routes[*]}") ]"
			echo "}"
		fi
	} >"$f"
}

# start_servers N DIR: start N servers (1, or 3 in a cluster); sets URLS and
# SERVER_PIDS.
start_servers() {
	local n=$1 dir=$2 i ports=() cports=() others
	rm -rf "$dir"
	mkdir -p "$dir"
	for ((i = 0; i < n; i++)); do
		ports+=("$(free_port)")
		cports+=("$(free_port)")
	done
	SERVER_PIDS=()
	URLS=""
	for ((i = 0; i < n; i++)); do
		if ((n > 1)); then
			others=()
			for j in "${!cports[@]}"; do ((j == i)) || others+=("${cports[j]}"); done
			write_conf "$dir/n$i.conf" "n$i" "${ports[i]}" "$dir/js-n$i" "${cports[i]}" "${others[@]}"
		else
			write_conf "$dir/n$i.conf" "n$i" "${ports[i]}" "$dir/js-n$i"
		fi
		start_bg "$dir/n$i.log" nats-server -c "$dir/n$i.conf"
		SERVER_PIDS+=("$BG_PID")
		URLS+="${URLS:+,}nats://127.0.0.1:${ports[i]}"
	done
	for p in "${ports[@]}"; do
		wait_port "$p" 30 || die "nats-server on port $p did not start (logs in $dir)"
	done
	# JetStream answers once the (meta) leader is elected.
	local deadline=$((SECONDS + 60))
	until nats_cli stream ls >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "JetStream not ready after 60 s (logs in $dir)"
		sleep 0.5
	done
	log "nats: $n server(s) ready at $URLS"
}

stop_servers() {
	local pid
	for pid in "${SERVER_PIDS[@]}"; do stop_bg "$pid"; done
}

# parse OUT: "rate p50_us p99_us" from natscli's aggregated lines (p50/p99
# are "-" where natscli prints no latencies).
parse() {
	local rate p50 p99 lat
	rate="$(grep -E 'stats: [0-9,]+ msgs/sec' <<<"$1" | tail -n1 | sed -E 's/.*stats: ([0-9,]+) msgs\/sec.*/\1/' | tr -d ,)"
	lat="$(grep 'latencies per operation' <<<"$1" | tail -n1 || true)"
	p50="$(sed -nE 's/.*P50 ([0-9,.]+)us.*/\1/p' <<<"$lat" | tr -d ,)"
	p99="$(sed -nE 's/.*P99 ([0-9,.]+)us.*/\1/p' <<<"$lat" | tr -d ,)"
	echo "${rate:--} ${p50:--} ${p99:--}"
}

# run_bench PEER SCENARIO KIND SIZE MSGS CLIENTS LATKEY ARGS...: run
# `nats bench ARGS...` and print its JSON line. LATKEY is the prefix of the
# latency fields ("" for per-message, "batch_" for per-window, "-" for none).
run_bench() {
	local peer=$1 scenario=$2 kind=$3 size=$4 msgs=$5 clients=$6 latkey=$7
	shift 7
	local out rate p50 p99 lat=()
	log "nats: $peer $scenario size=$size msgs=$msgs clients=$clients"
	if ! out="$(nats_cli bench "$@" --size "$size" --msgs "$msgs" --clients "$clients" --no-progress 2>&1)"; then
		printf '%s\n' "$out" >&2
		log "nats: $peer $scenario size=$size failed"
		return 1
	fi
	printf '%s\n' "$out" >>"$RESULTS_DIR/nats-bench.log"
	read -r rate p50 p99 < <(parse "$out")
	[[ "$rate" != - ]] || { printf '%s\n' "$out" >&2; die "nats: no rate in the output above"; }
	if [[ "$latkey" != - && "$p99" != - ]]; then
		lat=("${latkey}p50_ms=$(awk -v u="$p50" 'BEGIN{printf "%.3f", u/1000}')"
			"${latkey}p99_ms=$(awk -v u="$p99" 'BEGIN{printf "%.3f", u/1000}')")
	fi
	json_line peer="$peer" scenario="$scenario" kind="$kind" record_size="$size" \
		msgs="$msgs" clients="$clients" msgs_per_s="$rate" \
		mb_per_s="$(awk -v r="$rate" -v s="$size" 'BEGIN{printf "%.2f", r*s/1e6}')" \
		"${lat[@]}" replicas="$REPLICAS" storage=file \
		server="nats-server $SERVER_VERSION" client="natscli $NATSCLI_VERSION" \
		command="nats bench $* --size $size --msgs $msgs --clients $clients"
}

# measure PEER REPLICAS: every scenario for every size.
measure() {
	local peer=$1 size msgs smsgs
	REPLICAS=$2
	for size in $(size_list "$SIZES"); do
		msgs=$((PUB_BYTES / size))
		((msgs <= MAX_MSGS)) || msgs=$MAX_MSGS
		msgs=$((msgs / CLIENTS * CLIENTS))
		((msgs >= CLIENTS)) || msgs=$CLIENTS
		smsgs=$((SYNC_MSGS < msgs ? SYNC_MSGS : msgs))
		smsgs=$((smsgs / CLIENTS * CLIENTS))
		local create=(--create --storage file --replicas "$REPLICAS" --maxbytes 8GB)

		nats_cli stream rm -f benchstream >/dev/null 2>&1 || true
		run_bench "$peer" js-pub-async write "$size" "$msgs" "$CLIENTS" batch_ \
			js pub async bench.x "${create[@]}" || continue
		run_bench "$peer" js-consume read "$size" "$msgs" "$CLIENTS" - js consume || true
		run_bench "$peer" js-ordered read "$size" "$msgs" 1 - js ordered || true

		nats_cli stream rm -f benchstream >/dev/null 2>&1 || true
		run_bench "$peer" js-pub-sync write "$size" "$smsgs" "$CLIENTS" "" \
			js pub sync bench.x "${create[@]}" || true
		nats_cli stream rm -f benchstream >/dev/null 2>&1 || true
	done
}

rep="${BENCH_REP:-1}"
if [[ "$MODE" == single || "$MODE" == both ]]; then
	start_servers 1 "$RESULTS_DIR/nats-single-rep$rep"
	measure nats 1
	stop_servers
	rm -rf "$RESULTS_DIR/nats-single-rep$rep"/js-*
fi
if [[ "$MODE" == r3 || "$MODE" == both ]]; then
	start_servers 3 "$RESULTS_DIR/nats-r3-rep$rep"
	measure nats-r3 3
	stop_servers
	rm -rf "$RESULTS_DIR/nats-r3-rep$rep"/js-*
fi
