#!/usr/bin/env bash
# restart.sh BIN [OTHER_BIN]: the restart after a burst (docs/reliability.md
# "Restart time"). BIN serves a fresh data directory (Kafka on
# 127.0.0.1:29392) through a 90 s burst of keyed 100-byte records (stele
# bench produce, 4 producers) and is killed with SIGKILL; then copies of the
# killed directory are restarted, alternating BIN and OTHER_BIN (twice each
# with OTHER_BIN, else twice with BIN), each timed to /healthz with the
# broker's own steps (the batch store, the state). Needs twice the burst's
# disk (about 5 GB) per copy, under $TMPDIR.
set -u
bin=$1
other=${2:-$1}
dir=${TMPDIR:-/tmp}/stele-restart
rm -rf "$dir"
mkdir -p "$dir"
serve() { # BIN DATA LOG
	"$1" serve --data "$2" --kafka 127.0.0.1:29392 --http 127.0.0.1:29380 >>"$3" 2>&1 &
	pid=$!
	for _ in $(seq 1200); do
		curl -sf http://127.0.0.1:29380/healthz >/dev/null && return 0
		kill -0 $pid 2>/dev/null || { echo "stele serve exited; see $3"; return 1; }
		sleep 0.05
	done
	echo "no /healthz after 60 s; see $3"
	return 1
}
serve "$bin" "$dir/burst" "$dir/burst.log" || exit 1
"$bin" bench produce --brokers 127.0.0.1:29392 --create --record-size 100 --key-size 16 --keys 100000 \
	--duration 90s --warmup 1s --producers 4 2>&1 | grep -E "throughput|errors"
kill -9 $pid
wait $pid 2>/dev/null
du -sh "$dir/burst/batches" "$dir/burst"
for run in 1 2; do
	for b in "$bin" "$other"; do
		rm -rf "$dir/copy"
		cp -a "$dir/burst" "$dir/copy"
		: >"$dir/copy.log"
		t0=$(date +%s.%N)
		serve "$b" "$dir/copy" "$dir/copy.log" || exit 1
		t1=$(date +%s.%N)
		printf '%s run %d: /healthz after %.2f s; %s\n' "$b" "$run" "$(echo "$t1 - $t0" | bc)" \
			"$(grep -oE 'msg="opened the (batch store|state)" took=[0-9.a-z]+' "$dir/copy.log" | sed 's/msg=//' | tr '\n' ' ')"
		kill $pid
		wait $pid 2>/dev/null
	done
done
rm -rf "$dir"
