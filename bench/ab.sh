#!/usr/bin/env bash
# ab.sh BIN: one 15 s single-node produce run of the stele binary BIN on a
# fresh data directory (Kafka on 127.0.0.1:29292), printing its throughput
# and the data plane's certified and in-memory counters. For A/B runs of two
# builds, alternate them: bench/ab.sh /tmp/stele-old; bench/ab.sh /tmp/stele-new
# Further arguments go to 'stele bench produce' after the defaults, and a
# flag given again wins (keyed records: bench/ab.sh BIN --record-size 100
# --key-size 16 --keys 100000 --producers 4 --duration 30s).
set -u
bin=$1
shift
rm -rf /tmp/abd
$bin serve --data /tmp/abd --kafka 127.0.0.1:29292 --http 127.0.0.1:29280 >/tmp/abd.log 2>&1 &
pid=$!
for _ in $(seq 100); do
	curl -sf http://127.0.0.1:29280/healthz >/dev/null && break
	sleep 0.2
done
$bin bench produce --brokers 127.0.0.1:29292 --create --duration 15s --warmup 3s "$@" 2>/tmp/abd.bench.err | grep throughput ||
	{ echo "no throughput; bench said:"; tail -3 /tmp/abd.bench.err; tail -3 /tmp/abd.log; }
curl -s http://127.0.0.1:29280/metrics | grep -E "^stele_dataplane_(recent_hits|certified)_total" | tr '\n' ' '; echo
kill $pid; wait $pid 2>/dev/null
rm -rf /tmp/abd
