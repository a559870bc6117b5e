#!/usr/bin/env bash
# plugins.sh: produce throughput through a WebAssembly plugin (issue 24,
# docs/benchmarks.md "Produce through a plugin"). On one `stele serve`
# (--brokers 1) or a four-broker cluster (`stele cluster init --nodes 4`,
# `cluster up`; --brokers 4), three topics of --partitions partitions each
# take `stele bench produce --json` (1 KiB JSON objects with a "card"
# field, open loop, acks=all), in one run:
#   none     no plugin (the peer);
#   noop     the project `stele plugin new` writes (a produce hook that
#            stores each batch as it came): the cost of a call;
#   redact   examples/plugins/redact with fields=card: a call that parses
#            and rewrites every value.
#
#   bench/plugins.sh [--brokers 1|4] [--duration D] [--partitions N]
#                    [--producers N] [--buffer-memory BYTES] [--reps N]
#                    [--bin PATH]
#
# --buffer-memory (default 1 MiB) bounds what each producer holds
# unacknowledged: open loop, a producer otherwise queues more than a slow
# plugin applies before its records' delivery timeout.
#
# One JSON line per measurement on stdout (peer stele-1 or stele-4,
# scenario, msgs_per_s, mb_per_s, p50_ms, p99_ms, max_ms, errors). The
# broker's data is in TMPDIR.
source "$(dirname "$0")/lib.sh"

nbrokers=1
duration=20s
partitions=8
producers=4
buffer=$((1 << 20))
reps=1
bin=""
while (($#)); do
	case $1 in
	--brokers) nbrokers=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--partitions) partitions=$2; shift 2 ;;
	--producers) producers=$2; shift 2 ;;
	--buffer-memory) buffer=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	-h | --help) sed -n '2,26p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
[[ $nbrokers == 1 || $nbrokers == 4 ]] || die "--brokers is 1 or 4"
need_pkg jq jq
need_pkg curl curl
results_dir
bin="$(stele_bin "$bin")"
root="$(cd "$BENCH_DIR/.." && pwd)"

d="$RESULTS_DIR/plugins-$nbrokers"
rm -rf "$d"
mkdir -p "$d"
data="$(mktemp -d "${TMPDIR:-/tmp}/stele-plugins.XXXXXX")"
trap 'bench_cleanup; rm -rf "$data"' EXIT

# The plugins: the template `stele plugin new` writes, and redact.
"$bin" plugin new noop --dir "$d" --sdk "$root" >/dev/null || die "stele plugin new"
(cd "$d/noop" && go mod tidy && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o noop.wasm .) >"$d/build.log" 2>&1 ||
	die "building the noop plugin (log: $d/build.log)"
(cd "$root" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$d/redact.wasm" ./examples/plugins/redact) >>"$d/build.log" 2>&1 ||
	die "building redact (log: $d/build.log)"

if ((nbrokers == 1)); then
	base="$(free_base_port 0 1 2)"
	kafka="127.0.0.1:$base"
	http="127.0.0.1:$((base + 1))"
	start_bg "$d/serve.log" "$bin" serve --data "$data" --listeners "PLAINTEXT://$kafka" --http "$http" \
		--p2p "127.0.0.1:$((base + 2))" --log-level warn
	serve=$BG_PID
	deadline=$((SECONDS + 120))
	until curl -sf "http://$http/healthz" >/dev/null; do
		kill -0 "$serve" 2>/dev/null && ((SECONDS < deadline)) || die "stele did not come up (log: $d/serve.log)"
		sleep 0.2
	done
else
	base="$(free_base_port 0 1 2 3 100 101 102 103 200 201 202 203 300 301 302 303)"
	"$bin" cluster init --nodes 4 --dir "$data/cluster" --base-port "$base" >"$d/init.log" 2>&1 ||
		die "stele cluster init failed (log: $d/init.log)"
	http="127.0.0.1:$((base + 100))"
	start_cluster "$bin" "$data/cluster" "$d/serve.log" --log-level warn
	serve=$BG_PID
	kafka="$(tr -d ' \n' <"$data/cluster/brokers.txt")"
fi
st=("$bin" --brokers "$kafka")

for s in none noop redact; do
	"${st[@]}" topic create "p-$s" --partitions "$partitions" >/dev/null || die "topic create p-$s"
done
"${st[@]}" plugin deploy noop --wasm "$d/noop/noop.wasm" --topic p-noop --http "$http" >&2 || die "deploying noop"
"${st[@]}" plugin deploy redact --wasm "$d/redact.wasm" --topic p-redact --config fields=card --http "$http" >&2 || die "deploying redact"

for ((rep = 1; rep <= reps; rep++)); do
	export BENCH_REP=$rep
	for s in none noop redact; do
		log "rep $rep: $s"
		out="$("${st[@]}" bench produce --topic "p-$s" --json --record-size 1024 --producers "$producers" \
			--buffer-memory "$buffer" --warmup 5s --duration "$duration" -q --output json)" || die "bench produce p-$s: $out"
		json_line peer="stele-$nbrokers" scenario="$s" kind=write record_size=1024 partitions="$partitions" buffer_memory="$buffer" \
			msgs_per_s="$(jq .records_per_s <<<"$out")" mb_per_s="$(jq .mb_per_s <<<"$out")" \
			p50_ms="$(jq .latency_ms.p50 <<<"$out")" p99_ms="$(jq .latency_ms.p99 <<<"$out")" \
			max_ms="$(jq .latency_ms.max <<<"$out")" errors="$(jq .errors <<<"$out")"
	done
done
# The stored values of the redact topic have no card: the plugin ran.
"${st[@]}" consume p-redact --partition 0 --offset earliest --max-messages 1 --timeout-idle 10s >"$d/redact-sample.txt" 2>&1 || die "reading p-redact"
grep -q "\"id\"" "$d/redact-sample.txt" || die "p-redact: no record read: $(head -c 200 "$d/redact-sample.txt")"
grep -q '"card"' "$d/redact-sample.txt" && die "p-redact holds a card: $(head -c 200 "$d/redact-sample.txt")"
BENCH_STOP_TIMEOUT=60 stop_bg "$serve"
