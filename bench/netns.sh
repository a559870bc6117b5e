#!/usr/bin/env bash
# netns.sh: four brokers as four hosts (issue 20, docs/benchmarks.md
# "Brokers as hosts"). Each broker of a `stele cluster init --nodes 4
# --hosts ...` cluster runs in a network namespace of its own, the load
# generator in a fifth; each namespace has one interface (eth0, a veth
# pair's end, MTU 1500) whose other end is a port of a bridge in a sixth
# namespace. The addresses, 10.231.0.1-4 (brokers) and 10.231.0.10 (the
# client), exist only inside these namespaces: nothing is reachable from
# the host's own network, or reaches it. For each one-way delay of --delays
# every namespace's eth0 delays what it sends by that much (below), so
# a message between two hosts takes the delay one way; then, on the same
# cluster, with a topic of its own per delay (every delay's light run
# first, then every delay's open-loop run):
#   light   --rate records/s of 1 KiB, one producer, acks=all: latency;
#   max     four producers open loop, acks=all: throughput (and latency).
# Everything made (namespaces, the brokers, their data) is removed at exit.
#
#   sudo bench/netns.sh [--delays MS,MS,...] [--rate N] [--duration D]
#                       [--reps N] [--bin PATH]
#
# --delays defaults to 0,0.25,5 (loopback-like, a LAN, zones of a region),
# made by netem, or by bench/netdelay where the kernel lacks netem (below).
# Needs root (ip netns, tc, iptables) and iproute2. One JSON line per
# measurement on stdout: peer stele-4-netns, scenario light or max,
# delay_ms, delay_by (netem or nfqueue), p50_ms, p99_ms, max_ms,
# msgs_per_s, mb_per_s, cpu_busy_pct (how busy the machine's CPUs were,
# /proc/stat: all five namespaces share them).
source "$(dirname "$0")/lib.sh"
JSON_STRING_KEYS+="delay_by "

delays=0,0.25,5
rate=100
duration=20s
reps=1
bin=""
while (($#)); do
	case $1 in
	--delays) delays=$2; shift 2 ;;
	--rate) rate=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	-h | --help) sed -n '2,26p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
((EUID == 0)) || die "needs root: it makes network namespaces (ip netns) and delays (tc)"
need_pkg ip iproute2
need_pkg tc iproute2
need_pkg jq jq
need_pkg curl curl
results_dir
bin="$(stele_bin "$bin")"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

# Names unique to this run: namespaces s<pid>-hub, s<pid>-n0..3, s<pid>-cl.
p="s$$"
hub="$p-hub"
nss=("$p-n0" "$p-n1" "$p-n2" "$p-n3" "$p-cl")
addrs=(10.231.0.1 10.231.0.2 10.231.0.3 10.231.0.4 10.231.0.10)
cl="${nss[4]}"
made=()
data="$(mktemp -d "${TMPDIR:-/tmp}/stele-netns.XXXXXX")"
d="$RESULTS_DIR/netns"
mkdir -p "$d"

netns_cleanup() {
	local ns
	for ns in "${made[@]}"; do
		ip netns del "$ns" 2>/dev/null || true
	done
}
trap 'bench_cleanup; netns_cleanup; rm -rf "$data"' EXIT

# The bridge's namespace, then one namespace per host wired to it.
ip netns add "$hub"
made+=("$hub")
ip -n "$hub" link set lo up
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
for i in "${!nss[@]}"; do
	ns=${nss[$i]}
	ip netns add "$ns"
	made+=("$ns")
	ip -n "$ns" link set lo up
	ip link add name eth0 netns "$ns" type veth peer name "port$i" netns "$hub"
	ip -n "$ns" addr add "${addrs[$i]}/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$hub" link set "port$i" master br0
	ip -n "$hub" link set "port$i" up
done

# A delay is made by the kernel's netem queueing discipline (sch_netem) on
# every host's eth0 where the kernel has it; where it does not (some
# minimal kernels, the project's machine's included) by a netfilter queue
# (iptables' NFQUEUE on eth0's output) and bench/netdelay, which holds each
# queued packet for the delay: the kernel keeps the packet, one process per
# host sees its id only. Each JSON line says which (delay_by).
delay_by=netem
for delay in ${delays//,/ }; do
	[[ $delay =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--delays: $delay is not a number of milliseconds"
done
if ! tc -n "$hub" qdisc add dev lo root netem delay 1ms 2>/dev/null; then
	delay_by=nfqueue
	need_pkg iptables iptables
	log "no netem in this kernel: delays by NFQUEUE and bench/netdelay"
	(cd "$REPO_DIR" && go build -o "$RESULTS_DIR/bin/netdelay" ./bench/netdelay)
fi
tc -n "$hub" qdisc del dev lo root 2>/dev/null || true
delayers=()

# setdelay MS: every host's eth0 delays what it sends by MS.
setdelay() {
	local i ns pid
	for ns in "${nss[@]}"; do
		tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
		ip netns exec "$ns" iptables -D OUTPUT -o eth0 -j NFQUEUE --queue-num 0 2>/dev/null || true
	done
	for pid in "${delayers[@]}"; do
		stop_bg "$pid"
	done
	delayers=()
	# netem: no queueing discipline at 0. The netfilter queue stays at 0
	# too, so that every row pays the same user-space hop and differs
	# from the others by the delay alone.
	[[ $1 == 0 && $delay_by == netem ]] && return
	for i in "${!nss[@]}"; do
		ns=${nss[$i]}
		if [[ $delay_by == netem ]]; then
			# limit: room for every packet in flight at the largest rates.
			tc -n "$ns" qdisc add dev eth0 root netem delay "${1}ms" limit 100000
		else
			# The delayer first: a queue nobody reads drops its packets.
			start_bg "$d/netdelay$i.log" ip netns exec "$ns" "$RESULTS_DIR/bin/netdelay" --queue 0 --delay "${1}ms"
			delayers+=("$BG_PID")
			sleep 0.2
			kill -0 "$BG_PID" 2>/dev/null || die "netdelay did not start (log: $d/netdelay$i.log)"
			ip netns exec "$ns" iptables -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0
		fi
	done
}

log "cluster init --nodes 4 --hosts ${addrs[*]:0:4}"
"$bin" cluster init --nodes 4 --dir "$data/cluster" --hosts "$(
	IFS=,
	echo "${addrs[*]:0:4}"
)" >"$d/init.log" 2>&1 || die "cluster init (log: $d/init.log)"
brokers="$(cat "$data/cluster/brokers.txt")"
for i in 0 1 2 3; do
	start_bg "$d/node$i.log" ip netns exec "${nss[$i]}" "$bin" serve --data "$data/cluster/node$i" --log-level warn
done
deadline=$((SECONDS + 120))
for i in 0 1 2 3; do
	until ip netns exec "$cl" curl -sf "http://${addrs[$i]}:$((19192 + i))/healthz" >/dev/null; do
		((SECONDS < deadline)) || die "broker $i did not come up (log: $d/node$i.log)"
		sleep 0.5
	done
done
log "four brokers up: $brokers"

cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$6+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }

# measure SCENARIO DELAY TOPIC ARGS...: one bench produce run from the
# client's namespace, one JSON line.
measure() {
	local scenario=$1 delay=$2 topic=$3 out cmd b0 t0 b1 t1
	shift 3
	cmd=("$bin" --brokers "$brokers" bench produce --create --topic "$topic" --record-size 1024
		--warmup 3s --duration "$duration" -q --output json "$@")
	read -r b0 t0 < <(cpu_ticks)
	out="$(ip netns exec "$cl" "${cmd[@]}")" || die "bench produce failed: $out"
	read -r b1 t1 < <(cpu_ticks)
	json_line peer=stele-4-netns scenario="$scenario" kind=write record_size=1024 delay_ms="$delay" delay_by="$delay_by" \
		msgs_per_s="$(jq .records_per_s <<<"$out")" mb_per_s="$(jq .mb_per_s <<<"$out")" \
		p50_ms="$(jq .latency_ms.p50 <<<"$out")" p99_ms="$(jq .latency_ms.p99 <<<"$out")" \
		max_ms="$(jq .latency_ms.max <<<"$out")" errors="$(jq .errors <<<"$out")" \
		cpu_busy_pct="$(awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) 'BEGIN{printf "%.1f", t ? 100*b/t : 0}')" \
		command="${cmd[*]:1}"
}

# Every light run before any open-loop one, each after a pause: an
# open-loop run leaves the brokers busy with its backlog for a while.
for ((rep = 1; rep <= reps; rep++)); do
	export BENCH_REP=$rep
	for scenario in light max; do
		for delay in ${delays//,/ }; do
			setdelay "$delay"
			sleep 5
			tag="r$rep-${delay//./_}"
			if [[ $scenario == light ]]; then
				log "rep $rep: one-way delay $delay ms: $rate records/s"
				measure light "$delay" "light-$tag" --rate "$rate" --producers 1
			else
				log "rep $rep: one-way delay $delay ms: open loop"
				measure max "$delay" "max-$tag" --producers 4
			fi
		done
	done
done
