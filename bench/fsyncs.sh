#!/usr/bin/env bash
# fsyncs.sh: what one broker of four fsyncs per CometBFT height, and how
# long each fsync takes (issue 20, docs/benchmarks.md "Where a height's
# time goes: the disk"). A fresh four-broker cluster on 127.0.0.1 (`stele
# cluster init --nodes 4`, `stele cluster up`) takes `stele bench produce
# --rate RATE` (1 KiB records, acks=all, one producer); meanwhile strace
# follows every fsync and fdatasync of node1 for --trace, and the heights
# the chain made meanwhile are read from node0's /healthz.
#
#   bench/fsyncs.sh [--rate 100] [--trace 10s] [--bin PATH]
#
# One JSON line per file kind on stdout: file (the path under node1's data
# directory, numbers as N, partitions as T-P), call, count, heights,
# per_height, p50_ms and p90_ms (the calls' durations as strace -T reports
# them; strace slows the broker a little). Needs strace (installed if
# missing) and the right to trace the broker (root, or ptrace_scope 0).
source "$(dirname "$0")/lib.sh"

rate=100
trace=10s
bin=""
while (($#)); do
	case $1 in
	--rate) rate=$2; shift 2 ;;
	--trace) trace=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	-h | --help) sed -n '2,17p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
need_pkg jq jq
need_pkg curl curl
need_pkg strace strace
need_pkg python3 python3
results_dir
bin="$(stele_bin "$bin")"
trace_s="$(duration_s "$trace")"

height() { curl -sf --max-time 2 "http://127.0.0.1:$1/healthz" | jq -r .height; }

d="$RESULTS_DIR/fsyncs"
rm -rf "$d" "$d".*
base="$(free_base_port 0 1 2 3 100 101 102 103 200 201 202 203 300 301 302 303)"
"$bin" cluster init --nodes 4 --dir "$d" --base-port "$base" >"$d.init.log" 2>&1 ||
	die "stele cluster init failed (log: $d.init.log)"
start_cluster "$bin" "$d" "$d.up.log" --log-level warn
up=$BG_PID
pid="$(pgrep -f -- "serve --data $d/node1")" || die "node1 is not running"
"$bin" --brokers "127.0.0.1:$base" bench produce --topic fsyncs --create --partitions 8 --record-size 1024 \
	--producers 1 --rate "$rate" --duration "$(awk -v t="$trace_s" 'BEGIN{print t + 10}')s" --warmup 3s -q --output json \
	>"$d.produce.json" &
load=$!
sleep 5
h0="$(height $((base + 100)))"
timeout "$trace_s" strace -f -qq -y -T -e trace=fsync,fdatasync -p "$pid" -o "$d.strace" || true
h1="$(height $((base + 100)))"
wait "$load" || die "bench produce failed: $(cat "$d.produce.json")"
stop_bg "$up"
python3 - "$d.strace" "$d/node1/" $((h1 - h0)) "$BENCH_RUN" <<'PY'
import collections, json, re, statistics, sys
path, prefix, heights, run = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def norm(f):
    f = f.replace(prefix, "")
    f = re.sub(r"\d{6,}", "N", f)
    return re.sub(r"^logs/[^/]*/", "logs/T-P/", f)
calls, pending = collections.defaultdict(list), {}
for line in open(path):
    m = re.match(r"^(\d+)\s+(fsync|fdatasync)\(\d+<([^>]*)>\)\s*=\s*\S+\s*<([\d.]+)>", line)
    if m:
        calls[(norm(m.group(3)), m.group(2))].append(float(m.group(4)) * 1000)
        continue
    m = re.match(r"^(\d+)\s+(fsync|fdatasync)\(\d+<([^>]*)> <unfinished", line)
    if m:
        pending[m.group(1)] = (norm(m.group(3)), m.group(2))
        continue
    m = re.match(r"^(\d+)\s+<\.\.\. (?:fsync|fdatasync) resumed>.*<([\d.]+)>", line)
    if m and m.group(1) in pending:
        calls[pending.pop(m.group(1))].append(float(m.group(2)) * 1000)
for (f, call), v in sorted(calls.items(), key=lambda kv: -len(kv[1])):
    v.sort()
    print(json.dumps({"run": run, "file": f, "call": call, "count": len(v), "heights": heights,
                      "per_height": round(len(v) / max(heights, 1), 2),
                      "p50_ms": round(statistics.median(v), 3), "p90_ms": round(v[int(len(v) * 0.9)], 3)}))
PY
rm -rf "$d"
