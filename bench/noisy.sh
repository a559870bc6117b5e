#!/usr/bin/env bash
# noisy.sh: the noisy neighbour (issue 18, docs/benchmarks.md "Noisy
# neighbour"). One `stele serve` on 127.0.0.1 with a SASL listener and two
# tenants: "quiet" produces at a steady low rate (--rate records/s of 1 KiB,
# one producer, acks=all) while "noisy" produces open loop (4 producers of
# 16 KiB records, as fast as they are let, starting --lead before quiet so
# that its first burst is over: Kafka's rate counts a new sensor as if its
# 11 s had passed, so a tenant may send about 11 s of its quota at once),
# and the quiet tenant's produce latency is measured three ways in one run,
# each with a topic of its own (alone and at the quota in each of --reps,
# then the peer once, last):
#   quiet-alone            noisy idle;
#   quiet-noisy-at-quota   noisy with producer_byte_rate=--quota, pushing
#                          beyond it (the broker throttles it);
#   quiet-noisy-unlimited  noisy without the quota (the peer: what the
#                          quota protects quiet from).
#
#   bench/noisy.sh [--quota BYTES_PER_S] [--rate N] [--duration D]
#                  [--lead SECONDS] [--reps N] [--share BYTES]
#                  [--noisy-batch-bytes BYTES] [--brokers 1|4] [--bin PATH]
#                  [--broker-env 'NAME=VALUE ...'] [--trace]
#
# --share is the broker's --tenant-block-share (default: stele serve's,
# 1 MiB; 0 turns the sharing of blocks among tenants off, as before it
# was built); --noisy-batch-bytes the noisy producers' largest batch
# (batch.max.bytes; default the client's, 1 MB). --brokers 4 measures a
# four-broker cluster (`stele cluster init --nodes 4 --admin-password-file`,
# `stele cluster up`) instead of one `stele serve`; --quota is then the
# noisy tenant's rate over the cluster, set as quota/4 on each broker
# (Kafka's producer_byte_rate is per broker). --broker-env sets environment
# variables for the broker processes only (GOGC=400, GOMAXPROCS=4: the Go
# runtime's settings). --trace (one broker) serves Go's profiler on the
# broker (--pprof) and, in each run beside the noisy tenant, writes an 8 s
# execution trace of it (trace-SCENARIO-REP.out, `go tool trace`) and the
# broker's /metrics before and after quiet's run (metrics-SCENARIO-REP-
# before.txt, -after.txt) to RESULTS_DIR/noisy. The broker's data is in
# TMPDIR (TMPDIR=/dev/shm puts it on tmpfs: no fsync waits for a disk).
#
# One JSON line per measurement on stdout (peer stele-1 or stele-4, scenario, p50_ms,
# p99_ms, max_ms, msgs_per_s of the quiet tenant; noisy_mb_per_s, the noisy
# tenant's acknowledged MB/s over its run; cpu_busy_pct, how busy the
# machine's CPUs were while quiet's run measured, from /proc/stat;
# broker_env, --broker-env as given).
source "$(dirname "$0")/lib.sh"

quota=$((8 << 20))
rate=200
duration=30s
lead=15
reps=1
share=""
noisy_batch=0
nbrokers=1
bin=""
broker_env=""
trace=0
while (($#)); do
	case $1 in
	--quota) quota=$2; shift 2 ;;
	--rate) rate=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--lead) lead=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--share) share=$2; shift 2 ;;
	--noisy-batch-bytes) noisy_batch=$2; shift 2 ;;
	--brokers) nbrokers=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--broker-env) broker_env=$2; shift 2 ;;
	--trace) trace=1; shift ;;
	-h | --help) sed -n '2,43p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
[[ $nbrokers == 1 || $nbrokers == 4 ]] || die "--brokers is 1 or 4"
((trace == 0 || nbrokers == 1)) || die "--trace measures one broker"
need_pkg jq jq
need_pkg curl curl
results_dir
bin="$(stele_bin "$bin")"
secs=$(duration_s "$duration")

d="$RESULTS_DIR/noisy"
rm -rf "$d"
mkdir -p "$d"
# The broker's data (the noisy tenant writes GBs): in TMPDIR, each run's
# topics deleted after it, all of it removed on exit.
data="$(mktemp -d "${TMPDIR:-/tmp}/stele-noisy.XXXXXX")"
trap 'bench_cleanup; rm -rf "$data"' EXIT
printf 'admin-%s\n' "$RANDOM$RANDOM" >"$d/admin.password"
share_args=()
[[ -n $share ]] && share_args=(--tenant-block-share "$share")
# The broker's environment: --broker-env's words, each NAME=VALUE.
env_args=()
for kv in $broker_env; do
	[[ $kv == [A-Za-z_]*=* ]] || die "--broker-env: $kv is not NAME=VALUE"
	env_args+=("$kv")
done
pprof_args=()
((trace)) && pprof_args=(--pprof)
if ((nbrokers == 1)); then
	base="$(free_base_port 0 1 2)"
	kafka="127.0.0.1:$base"
	http="127.0.0.1:$((base + 1))"
	start_bg "$d/serve.log" env "${env_args[@]}" "$bin" serve "${share_args[@]}" "${pprof_args[@]}" --data "$data" --listeners "SASL_PLAINTEXT://$kafka" --http "$http" \
		--p2p "127.0.0.1:$((base + 2))" --admin-password-file "$d/admin.password" --log-level warn
	serve=$BG_PID
	up() { curl -sf "http://$http/healthz" >/dev/null; }
else
	base="$(free_base_port 0 1 2 3 100 101 102 103 200 201 202 203 300 301 302 303)"
	"$bin" cluster init --nodes 4 --dir "$data/cluster" --base-port "$base" --admin-password-file "$d/admin.password" >"$d/init.log" 2>&1 ||
		die "stele cluster init failed (log: $d/init.log)"
	http="127.0.0.1:$((base + 100))"
	start_bg "$d/serve.log" env "${env_args[@]}" "$bin" cluster up --dir "$data/cluster" --bin "$bin" -- --log-level warn "${share_args[@]}"
	serve=$BG_PID
	up() { grep -q 'bootstrap brokers:' "$d/serve.log" 2>/dev/null; }
fi
deadline=$((SECONDS + 120))
until up; do
	kill -0 "$serve" 2>/dev/null && ((SECONDS < deadline)) || die "stele did not come up (log: $d/serve.log)"
	sleep 0.2
done
((nbrokers == 1)) || kafka="$(tr -d ' \n' <"$data/cluster/brokers.txt")"
props() { # USER PASSWORD FILE
	printf '%s\n' security.protocol=SASL_PLAINTEXT sasl.mechanism=SCRAM-SHA-256 "sasl.username=$1" "sasl.password=$2" >"$3"
}
printf '%s\n' security.protocol=SASL_PLAINTEXT sasl.mechanism=SCRAM-SHA-512 sasl.username=admin \
	"sasl.password=$(cat "$d/admin.password")" >"$d/admin.properties"
admin=("$bin" --brokers "$kafka" --command-config "$d/admin.properties")
# Up to 2 minutes: a run right after another may wait for the gigabytes
# the last one wrote to reach the disk before its first blocks do.
deadline=$((SECONDS + 120))
until "${admin[@]}" tenant list --http "$http" >/dev/null 2>&1; do
	((SECONDS < deadline)) || die "the admin user was not usable within 120 s (log: $d/serve.log)"
	sleep 0.5
done
for t in quiet noisy; do
	"${admin[@]}" tenant create "$t" --http "$http" >/dev/null || die "tenant create $t"
	printf '%s-pw\n' "$t" >"$d/$t.password"
	"${admin[@]}" user create p --tenant "$t" --password-file "$d/$t.password" --http "$http" >/dev/null || die "user create p@$t"
	"${admin[@]}" acl add --allow-principal "User:p@$t" --operation All --topic "$t~" --resource-pattern-type prefixed >/dev/null ||
		die "acl add for p@$t"
	props "p@$t" "$t-pw" "$d/$t.properties"
done

# quiet_run SCENARIO TOPIC: the quiet tenant's measured run; its JSON on stdout.
quiet_run() {
	"$bin" --brokers "$kafka" --command-config "$d/quiet.properties" bench produce --create --topic "$2" --partitions 4 \
		--rate "$rate" --producers 1 --record-size 1024 --warmup 3s --duration "$duration" -q --output json
}
# noisy_bg TOPIC SECONDS: the noisy tenant, open loop; sets NOISY_PID.
noisy_bg() {
	"$bin" --brokers "$kafka" --command-config "$d/noisy.properties" bench produce --create --topic "$1" --partitions 4 \
		--producers 4 --record-size 16384 --batch-max-bytes "$noisy_batch" --duration "${2}s" -q --output json >"$d/$1.json" 2>"$d/$1.err" &
	NOISY_PID=$!
}
# cpu_ticks: the machine's busy and total CPU ticks so far (/proc/stat:
# busy is all but idle and iowait).
cpu_ticks() {
	awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}
measure() { # SCENARIO NOISY_TOPIC|-
	local scenario=$1 topic=$2 out noisy_mb=0 cmd b0 t0 b1 t1
	if [[ $topic != - ]]; then
		noisy_bg "$topic" $((secs + lead + 8))
		sleep "$lead" # the noisy tenant past its first burst before quiet starts
	fi
	local tracer=""
	if ((trace)) && [[ $topic != - ]]; then
		curl -sf -o "$d/trace-$scenario-$BENCH_REP.out" "http://$http/debug/pprof/trace?seconds=8" &
		tracer=$!
		curl -sf -o "$d/metrics-$scenario-$BENCH_REP-before.txt" "http://$http/metrics" || die "reading /metrics"
	fi
	read -r b0 t0 < <(cpu_ticks)
	out="$(quiet_run "$scenario" "q-$scenario-$BENCH_REP")" || die "quiet bench produce failed: $out"
	read -r b1 t1 < <(cpu_ticks)
	if [[ -n $tracer ]]; then
		curl -sf -o "$d/metrics-$scenario-$BENCH_REP-after.txt" "http://$http/metrics" || die "reading /metrics"
		wait "$tracer" || die "the execution trace failed"
	fi
	if [[ $topic != - ]]; then
		wait "$NOISY_PID" || die "noisy bench produce failed: $(cat "$d/$topic.err")"
		noisy_mb="$(jq .mb_per_s "$d/$topic.json")"
	fi
	"$bin" --brokers "$kafka" --command-config "$d/quiet.properties" topic delete "q-$scenario-$BENCH_REP" >/dev/null || die "topic delete"
	if [[ $topic != - ]]; then
		"$bin" --brokers "$kafka" --command-config "$d/noisy.properties" topic delete "$topic" >/dev/null || die "topic delete"
	fi
	json_line peer="stele-$nbrokers" scenario="$scenario" kind=write record_size=1024 quota_bytes_per_s="$quota" lead_s="$lead" tenant_block_share="${share:-default}" noisy_batch_max_bytes="$noisy_batch" broker_env="$broker_env" \
		msgs_per_s="$(jq .records_per_s <<<"$out")" p50_ms="$(jq .latency_ms.p50 <<<"$out")" \
		p99_ms="$(jq .latency_ms.p99 <<<"$out")" max_ms="$(jq .latency_ms.max <<<"$out")" \
		errors="$(jq .errors <<<"$out")" noisy_mb_per_s="$noisy_mb" \
		cpu_busy_pct="$(awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.1f", (t > 0 ? 100 * b / t : 0) }')"
}

# settle: what the last run wrote reaches the disk before the next starts
# (the unlimited run leaves gigabytes to write back, which would stall the
# next run's fsyncs).
settle() { sync; sleep 5; }
"${admin[@]}" tenant quota set noisy --quota "producer_byte_rate=$((quota / nbrokers))" --http "$http" >/dev/null || die "quota set"
for ((rep = 1; rep <= reps; rep++)); do
	export BENCH_REP=$rep
	log "rep $rep: quiet alone"
	measure quiet-alone -
	settle
	log "rep $rep: noisy at its quota of $quota B/s and beyond"
	measure quiet-noisy-at-quota "n-quota-$rep"
	settle
done
# The peer, once, last: the noisy tenant without its quota.
"${admin[@]}" tenant quota set noisy --remove producer_byte_rate --http "$http" >/dev/null || die "quota remove"
log "noisy without a quota"
measure quiet-noisy-unlimited "n-free"
BENCH_STOP_TIMEOUT=60 stop_bg "$serve"
