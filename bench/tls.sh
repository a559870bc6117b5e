#!/usr/bin/env bash
# tls.sh BIN [DURATION]: Kafka over TLS against plaintext, on the same
# machine in one run (docs/benchmarks.md "TLS listeners"), with stele bench
# (1 KiB records, 4 producers) producing for DURATION (default 15s), then
# consuming what was produced, from the start to the end of the topic:
#   single  one stele serve with a PLAINTEXT and an SSL listener, the bench
#           alternating between them, twice;
#   cluster two 4-broker clusters on this machine, one made by `cluster init`
#           and one by `cluster init --tls` (mutual TLS), run one after the
#           other, twice each.
# Prints one line per run: setup, listener, scenario, MB/s.
set -u
bin=$1
dur=${2:-15s}
dir=${TMPDIR:-/tmp}/stele-bench-tls
rm -rf "$dir"
mkdir -p "$dir"
mbps() { sed -n 's/^throughput .*records\/s, \([0-9.]*\) MB\/s.*/\1/p'; }
wait_up() { # PID LOG URL...
	local pid=$1 log=$2
	shift 2
	for url in "$@"; do
		for _ in $(seq 1200); do
			curl -sf "$url" >/dev/null && break
			kill -0 "$pid" 2>/dev/null || { echo "exited; see $log" >&2; return 1; }
			sleep 0.05
		done
	done
}
run() { # SETUP LISTENER TOPIC BIN-ARGS...
	local setup=$1 l=$2 topic=$3
	shift 3
	echo "$setup $l produce $("$bin" "$@" bench produce --create --topic "$topic" --duration "$dur" --warmup 3s 2>/dev/null | mbps) MB/s"
	echo "$setup $l consume $("$bin" "$@" bench consume --topic "$topic" 2>/dev/null | mbps) MB/s"
}

# --- one node, both listeners ---
"$bin" cert ca --out "$dir/certs" >/dev/null
"$bin" cert issue --ca "$dir/certs" --name broker --ip 127.0.0.1 --out "$dir/certs" >/dev/null
printf 'security.protocol=SSL\nssl.ca.location=%s\n' "$dir/certs/ca.crt" >"$dir/ssl.properties"
"$bin" serve --data "$dir/single" --listeners PLAINTEXT://127.0.0.1:29492,SSL://127.0.0.1:29493 --http 127.0.0.1:29480 \
	--p2p 127.0.0.1:29456 --ssl-cert "$dir/certs/broker.crt" --ssl-key "$dir/certs/broker.key" >"$dir/single.log" 2>&1 &
pid=$!
wait_up $pid "$dir/single.log" http://127.0.0.1:29480/healthz || exit 1
for r in 1 2; do
	run single PLAINTEXT "plain-$r" --brokers 127.0.0.1:29492
	run single SSL "ssl-$r" --brokers 127.0.0.1:29493 --command-config "$dir/ssl.properties"
done
kill $pid
wait $pid 2>/dev/null

# --- four brokers, plaintext and --tls ---
"$bin" cluster init --nodes 4 --dir "$dir/plain" --base-port 29592 >/dev/null
"$bin" cluster init --nodes 4 --dir "$dir/tls" --base-port 29592 --tls >/dev/null
urls=(http://127.0.0.1:29692/healthz http://127.0.0.1:29693/healthz http://127.0.0.1:29694/healthz http://127.0.0.1:29695/healthz)
for r in 1 2; do
	for c in plain tls; do
		"$bin" cluster up --dir "$dir/$c" >"$dir/$c.log" 2>&1 &
		pid=$!
		wait_up $pid "$dir/$c.log" "${urls[@]}" || exit 1
		sleep 2 # the first blocks
		args=(--brokers "$(cat "$dir/$c/brokers.txt")")
		[[ $c == tls ]] && args+=(--command-config "$dir/$c/client.properties")
		run cluster "$c" "t-$r" "${args[@]}"
		kill $pid
		wait $pid 2>/dev/null
	done
done
rm -rf "$dir"
