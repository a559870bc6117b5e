#!/usr/bin/env bash
# join.sh: a broker joining a running cluster (issue 19, docs/benchmarks.md
# "A broker joining"). For each --sizes entry (MB of records) a four-broker
# cluster on 127.0.0.1 (`stele cluster init --nodes 4`, `stele cluster up`;
# snapshots every 100 heights, 300 blocks kept, so that a new broker
# state-syncs) is filled with that many MB of 16 KiB records over 6
# partitions; then, while a producer keeps writing 100 records/s of 1 KiB,
# `stele cluster add` adds a fifth broker, it is started, and the script
# measures how long until it has caught up (its height within 2 of the
# others') and, after `stele cluster promote`, until the chain shows it
# signing. Then the same run measures consume throughput of the whole
# topic (`stele bench consume`): 4 consumers on the four validators alone
# (the fifth broker demoted, in no consumer's rack), 8 of them (two runs
# of 4 at the same time: the peer of the next), then, with the fifth
# removed and two replicas added in rack "replicas" (`cluster add --rack`),
# those 4 and 4 more in that rack (`--rack replicas`, KIP-392: sent to read
# from the replicas) at the same time.
#
#   bench/join.sh [--sizes 50,200] [--reps N] [--bin PATH]
#
# One JSON line per measurement on stdout: scenario join (state_mb, the
# size of node0's newest snapshot, what a joining broker fetches;
# fill_mb, the MB of records written before it; join_s, add to caught up; promote_s,
# promote to signing; state_synced, whether it restored a snapshot) or
# consume (consumers, mb_per_s, msgs_per_s summed over the consumers).
source "$(dirname "$0")/lib.sh"

sizes=50,200
reps=1
bin=""
while (($#)); do
	case $1 in
	--sizes) sizes=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	-h | --help) sed -n '2,23p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
need_pkg jq jq
need_pkg curl curl
results_dir
bin="$(stele_bin "$bin")"

height() { curl -sf --max-time 2 "http://127.0.0.1:$1/healthz" | jq -r .height 2>/dev/null || echo 0; }

# wait_caught_up HTTPPORT: until the broker's height is within 2 of node0's.
wait_caught_up() {
	local port=$1 deadline=$((SECONDS + 900)) h0 h
	while ((SECONDS < deadline)); do
		h0=$(height "$base_http")
		h=$(height "$port")
		if ((h > 0 && h + 2 >= h0)); then return 0; fi
		sleep 0.2
	done
	die "the broker on HTTP port $port did not catch up in 900 s"
}

# wait_signing NODEID: until node0's status shows the broker signing.
wait_signing() {
	local id=$1 deadline=$((SECONDS + 300))
	while ((SECONDS < deadline)); do
		if "$bin" cluster status --http "127.0.0.1:$base_http" --output json 2>/dev/null |
			jq -e --argjson id "$id" '.validators[] | select(.node_id == $id and .role == "validator" and .signing)' >/dev/null; then
			return 0
		fi
		sleep 0.2
	done
	die "broker $id is not signing 300 s after its promotion"
}

# add_broker D [ARGS]: adds (with ARGS for stele cluster add) and starts
# the next broker of cluster D; sets ADDED to its node id. Its log is
# D.nodeN.log.
add_broker() {
	local d=$1 out
	shift
	out="$("$bin" cluster add --dir "$d" --http "127.0.0.1:$base_http" --output json "$@")" || die "stele cluster add failed: $out"
	ADDED="$(jq -r .node.node_id <<<"$out")"
	start_bg "$d.node$ADDED.log" "$bin" serve --data "$d/node$ADDED" "${serve[@]}" --log-level info
}

# consume OUT [ARGS]: stele bench consume of the whole topic by 4
# consumers, bootstrapped on the validators, with ARGS; its JSON to OUT.
consume() {
	local out=$1
	shift
	"$bin" --brokers "$validators" bench consume --topic join --consumers 4 --record-size 0 -q --output json "$@" >"$out" ||
		die "bench consume failed: $(cat "$out")"
}

serve=(--log-level warn --snapshot-interval 100 --snapshot-keep 10 --retain-blocks 300)
for ((rep = 1; rep <= reps; rep++)); do
	export BENCH_REP=$rep
	for size in $(size_list "$sizes"); do
		d="$RESULTS_DIR/join-$size-rep$rep"
		rm -rf "$d" "$d".*.log
		base="$(free_base_port 0 1 2 3 4 5 6 100 101 102 103 104 105 106 200 201 202 203 204 205 206 300 301 302 303 304 305 306)"
		base_http=$((base + 100))
		"$bin" cluster init --nodes 4 --dir "$d" --base-port "$base" >"$d.init.log" 2>&1 ||
			die "stele cluster init failed (log: $d.init.log)"
		start_cluster "$bin" "$d" "$d.up.log" "${serve[@]}"
		up=$BG_PID
		validators="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))"
		log "$size MB, rep $rep: filling"
		"$bin" --brokers "$validators" bench produce --topic join --create --partitions 6 --record-size 16384 --producers 4 \
			--records $((size * 1000000 / 16384)) --warmup 0s -q --output json >"$d.fill.json" || die "filling failed"
		# Past a snapshot and the blocks kept, so the new broker state-syncs.
		h=$(height "$base_http")
		while (($(height "$base_http") < h + 450)); do
			"$bin" --brokers "$validators" bench produce --topic join --record-size 1024 --rate 100 --duration 5s --warmup 0s -q >/dev/null
		done
		# The state a joining broker fetches: node0's newest snapshot.
		snap="$(ls -d "$d"/node0/snapshots/0* | tail -1)"
		state_mb="$(du -sb --apparent-size "$snap" | awk '{printf "%.1f", $1 / 1e6}')"
		"$bin" --brokers "$validators" bench produce --topic join --record-size 1024 --rate 100 --duration 1h --warmup 0s -q >/dev/null 2>&1 &
		load=$!
		t0=$SECONDS
		t0n=$(date +%s.%N)
		add_broker "$d"
		id=$ADDED
		wait_caught_up $((base_http + id))
		t1n=$(date +%s.%N)
		"$bin" cluster promote "$id" --dir "$d" --http "127.0.0.1:$base_http" >/dev/null || die "promote failed"
		wait_signing "$id"
		t2n=$(date +%s.%N)
		synced=false
		grep -q 'syncing from a snapshot' "$d.node$id.log" && synced=true
		json_line peer=stele-4 scenario=join state_mb="$state_mb" fill_mb="$size" \
			join_s="$(echo "$t1n - $t0n" | bc)" promote_s="$(echo "$t2n - $t1n" | bc)" state_synced="$synced"
		log "$size MB, rep $rep: broker $id joined in $((SECONDS - t0)) s"
		kill "$load" 2>/dev/null || true
		wait "$load" 2>/dev/null || true
		# Back to four validators and one replica, and the consume runs:
		# the four validators alone (the replica is in no consumer's
		# rack), then with it and a second replica in rack "replicas",
		# read by 4 more consumers in that rack at the same time.
		"$bin" cluster demote "$id" --dir "$d" --http "127.0.0.1:$base_http" >/dev/null || die "demote failed"
		consume "$d.c1.json"
		json_line peer=stele-4 scenario=consume-4-validators kind=read state_mb="$state_mb" consumers=4 \
			msgs_per_s="$(jq .records_per_s "$d.c1.json")" mb_per_s="$(jq .mb_per_s "$d.c1.json")"
		# The peer of the run with replicas: as many consumers, on the
		# validators alone.
		consume "$d.c4.json" &
		c4=$!
		consume "$d.c5.json"
		wait "$c4"
		json_line peer=stele-4 scenario=consume-4-validators-8-consumers kind=read state_mb="$state_mb" consumers=8 \
			msgs_per_s="$(jq -s '.[0].records_per_s + .[1].records_per_s' "$d.c4.json" "$d.c5.json")" \
			mb_per_s="$(jq -s '.[0].mb_per_s + .[1].mb_per_s' "$d.c4.json" "$d.c5.json")"
		"$bin" cluster remove "$id" --dir "$d" --http "127.0.0.1:$base_http" >/dev/null || die "remove failed"
		add_broker "$d" --rack replicas
		r1=$ADDED
		add_broker "$d" --rack replicas
		r2=$ADDED
		wait_caught_up $((base_http + r1))
		wait_caught_up $((base_http + r2))
		consume "$d.c2.json" &
		c2=$!
		consume "$d.c3.json" --rack replicas
		wait "$c2"
		json_line peer=stele-4 scenario=consume-4-validators-2-replicas kind=read state_mb="$state_mb" consumers=8 \
			msgs_per_s="$(jq -s '.[0].records_per_s + .[1].records_per_s' "$d.c2.json" "$d.c3.json")" \
			mb_per_s="$(jq -s '.[0].mb_per_s + .[1].mb_per_s' "$d.c2.json" "$d.c3.json")" \
			validators_mb_per_s="$(jq .mb_per_s "$d.c2.json")" replicas_mb_per_s="$(jq .mb_per_s "$d.c3.json")"
		stop_bg "$up"
		pkill -f "serve --data $d/node" || true
		rm -rf "$d"
	done
done
