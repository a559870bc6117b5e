#!/usr/bin/env bash
# netns.sh: a 4-broker cluster laid out as on 4 machines, each broker in a
# network namespace of its own with its own address (docs/cluster.md, "On
# several machines").
#
#  1. Topology: a "switch" namespace holding a Linux bridge, four broker
#     namespaces and a client namespace, each joined to the bridge by a veth
#     pair, addressed in 10.231.X.0/24 (brokers .1-.4, client .100), lo up
#     in each. Every interface is created inside these namespaces, never in
#     the host's: traffic stays inside the namespaces the test created.
#  2. `stele cluster init --nodes 4 --hosts 10.231.X.1,...` (default base
#     port): every node file listens on 0.0.0.0 and advertises its host;
#     peers and brokers.txt name the hosts.
#  3. `ip netns exec nsI stele serve --data D/nodeI` for each broker, as a
#     user would run it on each machine; /healthz of each answers from the
#     client namespace.
#  4. From the client namespace: `stele topic create`, kcat -L lists the
#     four brokers at their hosts, kcat -P (acks=all, bootstrap brokers.txt)
#     produces 1000 keyed records, kcat -C -e reads every one back.
#  5. /v1/cluster: 4 validators that all signed a recent block, 3 peers, at
#     the other brokers' addresses.
#  6. One broker stopped (SIGTERM, exit 0): the other three still accept
#     produces (300 more records, acknowledged and read back with the first
#     1000); then the three stop on SIGTERM, each exiting 0.
#
# Needs root and iproute2's `ip` (installed with apt-get when missing). It
# prints SKIP and exits 0 when not root or when network namespaces, veth
# pairs or bridges cannot be created (a container without CAP_SYS_ADMIN or
# CAP_NET_ADMIN). The EXIT trap kills every process in the test's
# namespaces, deletes the namespaces (and with them the bridge and veths)
# and fails the test if any is left.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NODES=4
N=1000     # records produced with all four brokers up
N2=300     # records produced with one broker stopped
KEYS=50
PARTS=6
KCAT_FMT='%p\t%o\t%k\t%s\n'

PREFIX=stele-e2e-$$-      # every namespace of this run starts with it
NS_SW=${PREFIX}sw         # the switch: a bridge and one veth end per host
NS_CLIENT=${PREFIX}client # kcat, curl and the stele CLI run here
BRIDGE=sbr$$              # inside NS_SW (at most 15 characters)
NET=10.231.$(($$ % 254 + 1))
CLIENT_IP=$NET.100
NS=() IP=() NODE_PID=()
for ((i = 0; i < NODES; i++)); do
	NS+=("${PREFIX}n$i")
	IP+=("$NET.$((i + 1))")
	NODE_PID+=("")
done

skip() {
	log "SKIP: $*"
	exit 0
}

# our_namespaces lists the namespaces of this run.
our_namespaces() {
	ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX" || true
}

# netns_teardown kills every process inside this run's namespaces (all of
# them were started by this test), waits for them to go, and deletes the
# namespaces: deleting NS_SW removes the bridge and the veth ends in it,
# and with them their peers. Prints what is left, if anything.
netns_teardown() {
	local ns pid pids deadline=$((SECONDS + 10))
	for pid in "${E2E_PIDS[@]}"; do
		kill -9 "$pid" 2>/dev/null || true
	done
	for ns in $(our_namespaces); do
		for pid in $(ip netns pids "$ns" 2>/dev/null); do
			kill -9 "$pid" 2>/dev/null || true
		done
	done
	for pid in "${E2E_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	E2E_PIDS=()
	for ns in $(our_namespaces); do
		while pids=$(ip netns pids "$ns" 2>/dev/null) && [[ -n $pids ]] && ((SECONDS < deadline)); do
			sleep 0.1
		done
		ip netns del "$ns" 2>/dev/null || log "cleanup: ip netns del $ns failed"
	done
	local left
	left=$(our_namespaces)
	[[ -z $left ]] || log "cleanup: namespaces left behind: $left"
	# Nothing was ever created in the host's namespace; check it stayed so.
	if ip -o link show 2>/dev/null | grep -q "$BRIDGE\|$PREFIX"; then
		log "cleanup: interfaces left in the host namespace: $(ip -o link show | grep "$BRIDGE\|$PREFIX")"
		left+=" links"
	fi
	[[ -z $left ]]
}

# netns_exit is the EXIT trap: the namespaces go first (their processes
# with them), then lib.sh's cleanup prints the logs of a failed run and
# removes the temporary directory. A leftover namespace fails the test.
netns_exit() {
	local rc=$?
	trap - EXIT
	set +e # lib.sh's cleanup must run whatever fails here
	netns_restore_fds
	netns_teardown || { ((rc != 0)) || rc=1; }
	trap e2e_cleanup EXIT
	(exit "$rc")
	e2e_cleanup
}

# A trap runs with the redirections of the command it interrupted (say the
# 2>file of a kcat call), so the traps first put back the test's own stdout
# and stderr, saved here: otherwise their messages and the brokers' logs on
# failure would go into a file about to be deleted.
exec {NETNS_OUT}>&1 {NETNS_ERR}>&2
netns_restore_fds() { exec 1>&"$NETNS_OUT" 2>&"$NETNS_ERR"; }

# in_ns NS LIMIT CMD... runs CMD inside namespace NS with a deadline.
in_ns() {
	local ns=$1 limit=$2
	shift 2
	e2e_timeout "$limit" ip netns exec "$ns" "$@"
}

# client LIMIT CMD... runs CMD in the client namespace with a deadline.
client() {
	local limit=$1
	shift
	in_ns "$NS_CLIENT" "$limit" "$@"
}

# --- 0. can this machine run it? --------------------------------------------
[[ $(id -u) == 0 ]] || skip "needs root to create network namespaces (uid $(id -u)); run as root"
if ! command -v ip >/dev/null 2>&1; then
	log "installing iproute2"
	export DEBIAN_FRONTEND=noninteractive
	e2e_timeout 300 apt-get update >/dev/null || fail "apt-get update failed"
	e2e_timeout 300 apt-get install -y iproute2 >/dev/null || fail "apt-get install iproute2 failed"
	command -v ip >/dev/null 2>&1 || fail "ip still missing after apt-get install iproute2"
fi
# A probe namespace with a bridge and a veth pair, removed at once (or by
# the trap): what the topology needs, before anything is built.
trap 'netns_teardown' EXIT
probe=${PREFIX}probe
out=$(ip netns add "$probe" 2>&1) ||
	skip "cannot create a network namespace ($out): a container without CAP_SYS_ADMIN?"
out=$(ip netns exec "$probe" true 2>&1) ||
	skip "cannot enter a network namespace with ip netns exec ($out): a container without CAP_SYS_ADMIN?"
out=$(ip -n "$probe" link set lo up 2>&1) ||
	skip "cannot configure a network namespace ($out): a container without CAP_NET_ADMIN?"
out=$(ip -n "$probe" link add pa type veth peer name pb 2>&1) ||
	skip "cannot create a veth pair in a network namespace ($out): no veth support or no CAP_NET_ADMIN"
out=$(ip -n "$probe" link add pbr type bridge 2>&1) ||
	skip "cannot create a bridge in a network namespace ($out): no bridge support"
ip netns del "$probe" || fail "ip netns del $probe failed"

e2e_setup
trap netns_exit EXIT
trap 'netns_restore_fds; log "interrupted"; exit 130' INT TERM

# --- 1. topology --------------------------------------------------------------
t0=$SECONDS
# plug NS IFACE_IN_SWITCH ADDR creates NS with lo up and a veth pair whose
# eth0 end, addressed ADDR/24, is in NS and whose other end is a port of
# the bridge in NS_SW.
plug() {
	local ns=$1 port=$2 addr=$3
	ip netns add "$ns" || fail "ip netns add $ns failed"
	ip -n "$ns" link set lo up || fail "lo up in $ns failed"
	ip -n "$NS_SW" link add "$port" type veth peer name eth0 netns "$ns" ||
		fail "veth pair $port (in $NS_SW) / eth0 (in $ns) failed"
	ip -n "$NS_SW" link set "$port" master "$BRIDGE" up || fail "$port into $BRIDGE failed"
	ip -n "$ns" addr add "$addr/24" dev eth0 || fail "address $addr on eth0 in $ns failed"
	ip -n "$ns" link set eth0 up || fail "eth0 up in $ns failed"
}
ip netns add "$NS_SW" || fail "ip netns add $NS_SW failed"
ip -n "$NS_SW" link set lo up || fail "lo up in $NS_SW failed"
ip -n "$NS_SW" link add "$BRIDGE" type bridge || fail "bridge $BRIDGE in $NS_SW failed"
ip -n "$NS_SW" link set "$BRIDGE" up || fail "bridge $BRIDGE up failed"
for ((i = 0; i < NODES; i++)); do
	plug "${NS[i]}" "p$i" "${IP[i]}"
done
plug "$NS_CLIENT" pc "$CLIENT_IP"
# The bridge forwards once its ports leave the listening state (at once
# with STP off, the default); wait until every port is forwarding.
deadline=$((SECONDS + 20))
until (($(bridge -n "$NS_SW" link show 2>/dev/null | grep -c "master $BRIDGE state forwarding") == NODES + 1)); do
	((SECONDS < deadline)) || fail "bridge ports not all forwarding after 20s: $(bridge -n "$NS_SW" link show 2>&1)"
	sleep 0.1
done
log "topology: bridge $BRIDGE in $NS_SW; brokers ${IP[*]} in ${PREFIX}n0..n$((NODES - 1)), client $CLIENT_IP ($((SECONDS - t0))s)"

# --- 2. cluster init --hosts ----------------------------------------------------
D=$E2E_TMP/cluster
hosts=$(IFS=,; echo "${IP[*]}")
out=$(e2e_timeout 30 "$STELE_BIN" cluster init --nodes "$NODES" --dir "$D" --hosts "$hosts" 2>&1) ||
	fail "stele cluster init --hosts $hosts failed: $out"
printf '%s\n' "$out" >"$E2E_TMP/init.out"
BOOT=$(cat "$D/brokers.txt") || fail "no $D/brokers.txt"
"$PY" - "$D" "$hosts" <<'EOF' || fail "the node files of cluster init --hosts are wrong"
import json, os, sys
d, hosts = sys.argv[1], sys.argv[2].split(",")
P = 19092
want_boot = ",".join("%s:%d" % (h, P + i) for i, h in enumerate(hosts))
boot = open(os.path.join(d, "brokers.txt")).read().strip()
assert boot == want_boot, "brokers.txt %r, want %r" % (boot, want_boot)
files = [json.load(open(os.path.join(d, "node%d" % i, "stele.json"))) for i in range(len(hosts))]
for i, (h, f) in enumerate(zip(hosts, files)):
    want = {
        "node_id": i,
        "kafka": "0.0.0.0:%d" % (P + i),
        "http": "0.0.0.0:%d" % (P + 100 + i),
        "p2p": "0.0.0.0:%d" % (P + 200 + i),
        "rpc": "0.0.0.0:%d" % (P + 300 + i),
        "advertise_kafka": "%s:%d" % (h, P + i),
        "p2p_external": "%s:%d" % (h, P + 200 + i),
    }
    for k, v in want.items():
        assert f.get(k) == v, "node%d stele.json: %s = %r, want %r" % (i, k, f.get(k), v)
    peers = sorted(p.split("@", 1)[1] for p in f["peers"])
    want_peers = sorted("%s:%d" % (hosts[j], P + 200 + j) for j in range(len(hosts)) if j != i)
    assert peers == want_peers, "node%d peers %s, want %s" % (i, peers, want_peers)
    ss = sorted(f.get("state_sync_rpc", []))
    want_ss = sorted("%s:%d" % (hosts[j], P + 300 + j) for j in range(len(hosts)) if j != i)
    assert ss == want_ss, "node%d state_sync_rpc %s, want %s" % (i, ss, want_ss)
    g = json.load(open(os.path.join(d, "node%d" % i, "cometbft", "config", "genesis.json")))
    assert g == json.load(open(os.path.join(d, "node0", "cometbft", "config", "genesis.json"))), \
        "node%d has a different genesis" % i
EOF
log "cluster init --hosts: node files listen on 0.0.0.0 and advertise ${IP[*]}; bootstrap $BOOT"

# --- 3. one broker per namespace ----------------------------------------------
# http_of I prints broker I's HTTP address as the client reaches it.
http_of() { echo "${IP[$1]}:$((19192 + $1))"; }

# healthy I succeeds when broker I's /healthz, fetched from the client
# namespace, says ok.
healthy() {
	local body
	body=$(client 4 curl -sf --max-time 2 "http://$(http_of "$1")/healthz" 2>/dev/null) || return 1
	[[ $body == *'"status":"ok"'* ]]
}

t0=$SECONDS
for ((i = 0; i < NODES; i++)); do
	ip netns exec "${NS[i]}" "$STELE_BIN" serve --data "$D/node$i" --log-level "${STELE_LOG_LEVEL:-info}" \
		>>"$E2E_TMP/node$i.log" 2>&1 &
	NODE_PID[i]=$!
	E2E_PIDS+=("$!")
done
deadline=$((SECONDS + 60))
for ((i = 0; i < NODES; i++)); do
	until healthy "$i"; do
		if ! kill -0 "${NODE_PID[i]}" 2>/dev/null; then
			rc=0
			wait "${NODE_PID[i]}" || rc=$?
			e2e_forget "${NODE_PID[i]}"
			fail "node$i (in ${NS[i]}) exited with status $rc before /healthz answered"
		fi
		((SECONDS < deadline)) || fail "node$i: /healthz at $(http_of "$i") not ok from the client namespace after 60s"
		sleep 0.2
	done
done
log "4 brokers up, each in its own namespace, /healthz ok from $CLIENT_IP ($((SECONDS - t0))s)"
# Listening on 0.0.0.0 means every interface: node0 answers on its own
# namespace's loopback too, not only at its host address.
body=$(in_ns "${NS[0]}" 5 curl -sf --max-time 3 "http://127.0.0.1:19192/healthz" 2>&1) ||
	fail "node0 does not answer on 127.0.0.1:19192 inside its namespace: $body"

# --- 4. topic, metadata, produce and consume from the client namespace --------
run=ns$$x$RANDOM
topic=e2e-netns-$run
out=$(client 30 "$STELE_BIN" topic create "$topic" --partitions "$PARTS" --brokers "$BOOT" 2>&1) ||
	fail "stele topic create $topic --brokers $BOOT: $out"
log "created topic $topic ($PARTS partitions)"

# metadata_ok BOOTSTRAP checks kcat -L through BOOTSTRAP: the four brokers at
# their hosts, every partition of the topic led by one of them.
metadata_ok() {
	client 20 kcat -L -J -b "$1" -t "$topic" >"$E2E_TMP/metadata.json" 2>"$E2E_TMP/metadata.err" ||
		fail "kcat -L -b $1 failed: $(tail -n 3 "$E2E_TMP/metadata.err")"
	"$PY" - "$E2E_TMP/metadata.json" "$BOOT" "$topic" "$PARTS" <<-'EOF' || fail "kcat -L -b $1: metadata is wrong"
		import json, sys
		path, boot, topic, parts = sys.argv[1], sys.argv[2].split(","), sys.argv[3], int(sys.argv[4])
		md = json.load(open(path))
		brokers = {b["id"]: b["name"] for b in md["brokers"]}
		want = {i: a for i, a in enumerate(boot)}
		assert brokers == want, "brokers %s, want %s" % (brokers, want)
		ts = [t for t in md["topics"] if t["topic"] == topic]
		assert len(ts) == 1 and "error" not in ts[0], "topic entry %s" % ts
		ps = ts[0]["partitions"]
		assert sorted(p["partition"] for p in ps) == list(range(parts)), "partitions %s" % ps
		for p in ps:
		    assert "error" not in p and p["leader"] in brokers, "partition %s" % p
		print(" ".join("p%d->%d" % (p["partition"], p["leader"]) for p in sorted(ps, key=lambda p: p["partition"])))
	EOF
}
leaders=$(metadata_ok "$BOOT")
log "kcat -L from the client: brokers at $BOOT; leaders $leaders"

# records FROM TO writes records FROM..TO-1 as key:value lines.
records() {
	"$PY" - "$run" "$1" "$2" "$KEYS" <<-EOF
		import sys
		sys.path.insert(0, "$E2E_DIR")
		import e2elib
		run, lo, hi, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
		sys.stdout.write("".join("%s:%s\n" % (e2elib.key_of(s, keys), e2elib.value_of(run, s)) for s in range(lo, hi)))
	EOF
}

# produce NAME FILE BOOTSTRAP LIMIT [DOWN]: kcat -P from the client,
# acks=all, one request in flight (so retries cannot reorder). librdkafka's
# complaints about connecting to DOWN (a stopped broker's Kafka address) are
# expected; any other error fails the test.
produce() {
	local err=$E2E_TMP/kcat-produce-$1.err down=${5:-}
	client "$4" kcat -P -b "$3" -t "$topic" -K : -X acks=all -X max.in.flight=1 <"$2" 2>"$err" ||
		fail "kcat -P ($1) failed or took over $4s: $(tail -n 5 "$err")"
	local errors
	errors=$(grep -i "fail\|error" "$err" | { if [[ -n $down ]]; then grep -v "Connect to ipv4#$down failed: Connection refused"; else cat; fi; } || true)
	[[ -z $errors ]] || fail "kcat -P ($1) reported errors: $(head -n 5 <<<"$errors")"
}

# consume_check NAME COUNT BOOTSTRAP reads the whole topic from the client
# with kcat -C -e and checks records 0..COUNT-1 are there exactly once.
consume_check() {
	local out=$E2E_TMP/kcat-read-$1.txt err=$E2E_TMP/kcat-consume-$1.err pid rc=0
	e2e_bg pid ip netns exec "$NS_CLIENT" kcat -C -b "$3" -t "$topic" -o beginning -e -f "$KCAT_FMT" >"$out" 2>"$err"
	e2e_wait_pid "$pid" 30 || rc=$?
	((rc == 0)) || fail "kcat -C ($1) exited with status $rc: $(tail -n 5 "$err")"
	"$PY" "$E2E_DIR/check_log.py" --name "$1" --records "$out" --run "$run" --count "$2" \
		--keys "$KEYS" --partitions "$PARTS" 2>&1 || return 1
}

t0=$SECONDS
records 0 "$N" >"$E2E_TMP/records-1.txt"
produce all-up "$E2E_TMP/records-1.txt" "$BOOT" 30
log "kcat -P: $N records acknowledged (acks=all) in $((SECONDS - t0))s"
t0=$SECONDS
out=$(consume_check four-up "$N" "$BOOT") || fail "$out"
log "$out ($((SECONDS - t0))s)"

# --- 5. /v1/cluster --------------------------------------------------------------
# cluster_ok I NLIVE checks broker I's /v1/cluster: 4 validators, each of the
# live ones signed one of the last 10 blocks, NLIVE-1 peers, every peer at
# another broker's P2P address. LIVE lists the live brokers.
cluster_ok() {
	client 5 curl -sf --max-time 3 "http://$(http_of "$1")/v1/cluster" >"$E2E_TMP/cluster-$1.json" 2>/dev/null ||
		return 1
	"$PY" - "$E2E_TMP/cluster-$1.json" "$1" "$BOOT" "${LIVE[*]}" <<-'EOF'
		import json, sys
		st = json.load(open(sys.argv[1]))
		me, boot, live = int(sys.argv[2]), sys.argv[3].split(","), [int(x) for x in sys.argv[4].split()]
		hosts = [b.rsplit(":", 1)[0] for b in boot]
		vs, h = st["validators"], st["height"]
		if len(vs) != len(boot):
		    sys.exit("%d validators, want %d" % (len(vs), len(boot)))
		by_node = {v.get("node_id"): v for v in vs}
		if sorted(by_node) != list(range(len(boot))):
		    sys.exit("validators of nodes %s" % sorted(by_node))
		for i, v in by_node.items():
		    if v.get("kafka") != boot[i]:
		        sys.exit("validator of node %d at kafka %r, want %r" % (i, v.get("kafka"), boot[i]))
		    if i in live and h - v["last_signed_height"] > 10:
		        sys.exit("node %d last signed height %d at height %d" % (i, v["last_signed_height"], h))
		want = sorted("%s:%d" % (hosts[j], 19292 + j) for j in live if j != me)
		peers = sorted(p["addr"] for p in st["peers"])
		# An inbound peer's addr is its source address with its own port.
		peer_hosts = sorted(a.rsplit(":", 1)[0] for a in peers)
		want_hosts = sorted(hosts[j] for j in live if j != me)
		if peer_hosts != want_hosts:
		    sys.exit("peers %s, want hosts %s (outbound at %s)" % (peers, want_hosts, want))
		print("height %d, validators last signed %s, peers %s" % (h, {i: v["last_signed_height"] for i, v in sorted(by_node.items())}, peers))
	EOF
}
LIVE=(0 1 2 3)
deadline=$((SECONDS + 20))
until out=$(cluster_ok 1 2>&1); do
	((SECONDS < deadline)) || fail "node1 /v1/cluster after 20s: $out"
	sleep 0.5
done
log "node1 /v1/cluster: $out"

# --- 6. one broker stopped: the other three still accept produces -------------
stop_node() {
	local i=$1 rc=0
	e2e_wait_pid "${NODE_PID[i]}" 30 || rc=$?
	NODE_PID[i]=""
	((rc == 0)) || fail "node$i exited with status $rc after SIGTERM (want 0)"
}
t0=$SECONDS
kill -TERM "${NODE_PID[3]}"
stop_node 3
log "node3 stopped cleanly by SIGTERM ($((SECONDS - t0))s)"
LIVE=(0 1 2)
BOOT3=$(cut -d, -f1-3 <<<"$BOOT") # without node3
t0=$SECONDS
records "$N" $((N + N2)) >"$E2E_TMP/records-2.txt"
produce three-up "$E2E_TMP/records-2.txt" "$BOOT" 40 "$(cut -d, -f4 <<<"$BOOT")"
log "kcat -P with node3 down: $N2 records acknowledged in $((SECONDS - t0))s"
leaders=$(metadata_ok "$BOOT3")
log "kcat -L with node3 down: leaders $leaders"
grep -q -- "->3" <<<"$leaders" && fail "metadata still names the stopped node3 as a leader: $leaders"
t0=$SECONDS
out=$(consume_check three-up $((N + N2)) "$BOOT3") || fail "$out"
log "$out ($((SECONDS - t0))s)"
for i in 0 1 2; do
	deadline=$((SECONDS + 15))
	until out=$(cluster_ok "$i" 2>&1); do
		((SECONDS < deadline)) || fail "node$i /v1/cluster with node3 down after 15s: $out"
		sleep 0.5
	done
	log "node$i /v1/cluster: $out"
done

# --- 7. stop the three on SIGTERM ------------------------------------------------
t0=$SECONDS
for i in 0 1 2; do
	kill -TERM "${NODE_PID[i]}"
done
for i in 0 1 2; do
	stop_node "$i"
done
log "node0..node2 stopped cleanly by SIGTERM ($((SECONDS - t0))s)"
log "PASS"
