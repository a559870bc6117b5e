#!/usr/bin/env bash
# redis.sh: Redis Streams measured with redis-benchmark, as JSON lines on
# stdout.
#
#   bench/redis.sh [--sizes 100,1024,16384] [--clients 4] [--pipeline 32]
#
# Server: Debian's redis-server (installed when missing), a new one for each
# record size, on a free 127.0.0.1 port, its files in the results dir, with
#   appendonly yes, appendfsync everysec   (the AOF is fsynced once a second)
#   save ""                                (no RDB snapshots during the run)
# and Redis's defaults otherwise (automatic AOF rewrites included).
#
# Scenarios, per record size S (peer "redis"):
#   xadd    kind=write  redis-benchmark -c CLIENTS -P PIPELINE -n N
#                       XADD bench '*' f <S bytes>
#                       one record = one stream entry with one field whose
#                       value is S random base64 characters; N = min(REDIS_MAX_N, REDIS_BYTES/S).
#                       p50_ms / p99_ms are redis-benchmark's per-request
#                       latencies, which include waiting behind up to
#                       PIPELINE-1 requests of the same pipeline.
#   xrange  kind=read   redis-benchmark -c CLIENTS -P REDIS_READ_PIPELINE
#                       -n N/10 XRANGE bench - + COUNT 100
#                       each request returns the stream's first 100 entries
#                       (the same 100 every time: redis-benchmark cannot walk
#                       the stream), so msgs_per_s = requests/s x 100 measures
#                       Redis's read and reply path over records in memory,
#                       not a consumer catching up through a long stream.
# mb_per_s is msgs_per_s x S / 10^6 (values only, no field names or IDs).
#
# Environment: REDIS_MAX_N (default 1000000), REDIS_BYTES (default 1000000000),
# REDIS_READ_PIPELINE (default 4), REDIS_READ_COUNT (default 100).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

SIZES="100,1024,16384"
CLIENTS=4
PIPELINE=32
while (($#)); do
	case "$1" in
	--sizes) SIZES=$2; shift 2 ;;
	--clients) CLIENTS=$2; shift 2 ;;
	--pipeline) PIPELINE=$2; shift 2 ;;
	-h | --help) sed -n '2,/^# shellcheck/p' "$0" | sed '$d;s/^# \{0,1\}//'; exit 0 ;;
	*) die "redis.sh: unknown argument $1" ;;
	esac
done
results_dir
MAX_N="${REDIS_MAX_N:-1000000}"
BYTES="${REDIS_BYTES:-1000000000}"
READ_PIPELINE="${REDIS_READ_PIPELINE:-4}"
READ_COUNT="${REDIS_READ_COUNT:-100}"

need_pkg redis-server redis-server
need_pkg redis-benchmark redis-tools
SERVER_VERSION="$(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/')"

# csv_fields OUT: "rps p50_ms p99_ms" from redis-benchmark --csv output,
# whose columns are "test","rps","avg_latency_ms","min_latency_ms",
# "p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms".
csv_fields() {
	local header line
	header="$(grep -m1 '^"test"' <<<"$1")"
	line="$(grep -v '^"test"' <<<"$1" | grep '^"' | tail -n1)"
	[[ -n "$header" && -n "$line" ]] || return 1
	awk -v h="$header" -v l="$line" 'BEGIN{
		n = split(h, hf, /","|^"|"$/); split(l, lf, /","|^"|"$/)
		for (i = 1; i <= n; i++) col[hf[i]] = lf[i]
		print col["rps"], col["p50_latency_ms"], col["p99_latency_ms"]
	}'
}

# bench_cmd PORT N PIPELINE CMD...: redis-benchmark in CSV mode.
bench_cmd() {
	local port=$1 n=$2 pipe=$3
	shift 3
	redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -P "$pipe" -n "$n" --csv "$@" 2>&1
}

rep="${BENCH_REP:-1}"
for size in $(size_list "$SIZES"); do
	dir="$RESULTS_DIR/redis-rep$rep-$size"
	rm -rf "$dir"
	mkdir -p "$dir"
	port="$(free_port)"
	start_bg "$dir/server.log" redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" \
		--appendonly yes --appendfsync everysec --save '' --daemonize no --protected-mode yes
	pid=$BG_PID
	wait_port "$port" 30 || die "redis-server did not start (log: $dir/server.log)"
	until redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; do sleep 0.1; done

	n=$((BYTES / size))
	((n <= MAX_N)) || n=$MAX_N
	# Base64 of random bytes: printable (it goes on the command line) and
	# not compressible to nothing by the LZF of an AOF rewrite's RDB part.
	value="$(head -c $((size * 3 / 4 + 3)) /dev/urandom | base64 -w0)"
	value="${value:0:size}"
	log "redis: xadd size=$size n=$n clients=$CLIENTS pipeline=$PIPELINE"
	out="$(bench_cmd "$port" "$n" "$PIPELINE" XADD bench '*' f "$value")"
	printf '%s\n' "${out:0:2000}" >>"$RESULTS_DIR/redis-bench.log"
	if read -r rps p50 p99 < <(csv_fields "$out"); then
		json_line peer=redis scenario=xadd kind=write record_size="$size" msgs="$n" \
			clients="$CLIENTS" pipeline="$PIPELINE" msgs_per_s="$rps" \
			mb_per_s="$(awk -v r="$rps" -v s="$size" 'BEGIN{printf "%.2f", r*s/1e6}')" \
			p50_ms="$p50" p99_ms="$p99" appendfsync=everysec server="redis $SERVER_VERSION" \
			command="redis-benchmark -c $CLIENTS -P $PIPELINE -n $n XADD bench '*' f <$size bytes>"
	else
		log "redis: no result from xadd (size $size): ${out:0:500}"
	fi
	entries="$(redis-cli -h 127.0.0.1 -p "$port" XLEN bench)"

	rn=$((n / 10))
	((rn >= 1000)) || rn=1000
	log "redis: xrange size=$size requests=$rn count=$READ_COUNT (stream holds $entries)"
	out="$(bench_cmd "$port" "$rn" "$READ_PIPELINE" XRANGE bench - + COUNT "$READ_COUNT")"
	printf '%s\n' "${out:0:2000}" >>"$RESULTS_DIR/redis-bench.log"
	if read -r rps p50 p99 < <(csv_fields "$out"); then
		per=$((entries < READ_COUNT ? entries : READ_COUNT))
		json_line peer=redis scenario=xrange kind=read record_size="$size" requests="$rn" \
			clients="$CLIENTS" pipeline="$READ_PIPELINE" entries_per_request="$per" \
			msgs_per_s="$(awk -v r="$rps" -v c="$per" 'BEGIN{printf "%.0f", r*c}')" \
			mb_per_s="$(awk -v r="$rps" -v c="$per" -v s="$size" 'BEGIN{printf "%.2f", r*c*s/1e6}')" \
			requests_per_s="$rps" p50_ms="$p50" p99_ms="$p99" server="redis $SERVER_VERSION" \
			command="redis-benchmark -c $CLIENTS -P $READ_PIPELINE -n $rn XRANGE bench - + COUNT $READ_COUNT"
	else
		log "redis: no result from xrange (size $size): ${out:0:500}"
	fi
	aof_bytes="$(du -sb "$dir" | awk '{print $1}')"
	log "redis: $entries entries, $aof_bytes bytes on disk"
	stop_bg "$pid"
	rm -rf "$dir"/appendonlydir
done
