#!/usr/bin/env bash
# secure_cluster.sh: four brokers made by `stele cluster init --tls
# --http-tls --admin-password-file` (docs/cluster.md, docs/security.md),
# with clients we did not write: kcat (librdkafka), confluent-kafka
# (librdkafka) and kafka-python; then four made by `cluster init --tls`
# alone, mutual TLS, with confluent-kafka and kcat presenting the client
# certificate init wrote.
#
#  1. The SASL_SSL cluster starts; `stele --command-config
#     DIR/client.properties` (the admin, SCRAM-SHA-512 over TLS) creates
#     alice and gives her a topic prefix and a group.
#  2. alice produces through every broker with kcat (SCRAM-SHA-512) and
#     kafka-python (SCRAM-SHA-256), and confluent-kafka reads it all back
#     (SCRAM-SHA-512) in a group; a wrong password is refused.
#  3. The HTTP APIs serve TLS: alice's password over HTTP Basic reads her
#     topic's keys; anonymous is refused; plain http gets nothing.
#  4. The mutual-TLS cluster: confluent-kafka and kcat with the client
#     certificate produce and read back; a client without one is refused.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup

# cluster_base picks a base port whose four Kafka, HTTP, P2P and RPC ports
# (base+i, +100, +200, +300) are free.
cluster_base() {
	"$PY" - <<-'EOF'
		import random, socket, sys
		with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
		    low = int(f.read().split()[0])
		hi = min(low, 32768) - 400
		for _ in range(200):
		    b = random.randint(20000, hi)
		    ok = True
		    for off in (0, 100, 200, 300):
		        for i in range(4):
		            s = socket.socket()
		            try:
		                s.bind(("127.0.0.1", b + off + i))
		            except OSError:
		                ok = False
		            finally:
		                s.close()
		    if ok:
		        print(b)
		        sys.exit(0)
		sys.exit("no free port range on 127.0.0.1")
	EOF
}

# start_cluster DIR starts its four brokers and waits until each answers
# /healthz over https (CURL_TLS: curl's TLS flags) at height 2 or more:
# the genesis users exist from block 1.
start_cluster() {
	local d=$1 i pid deadline
	for i in 0 1 2 3; do
		e2e_bg pid "$STELE_BIN" serve --data "$d/node$i" >"$E2E_TMP/$(basename "$d")-node$i.log" 2>&1
	done
	deadline=$((SECONDS + 60))
	for i in 0 1 2 3; do
		until curl -sf "${CURL_TLS[@]}" "https://127.0.0.1:$((BASE + 100 + i))/healthz" 2>/dev/null |
			grep -Eq '"height":([2-9]|[1-9][0-9]+)[,}]'; do
			((SECONDS < deadline)) || fail "$(basename "$d") node$i does not answer /healthz over https at height 2 within 60 s"
			sleep 0.3
		done
	done
}

# --- 1. the SASL_SSL cluster ------------------------------------------------------
D=$E2E_TMP/sasl
printf 'admin-Secret-%s\n' "$RANDOM$RANDOM" >"$E2E_TMP/admin.password"
printf 'alice-Wonder-%s\n' "$RANDOM$RANDOM" >"$E2E_TMP/alice.password"
ALICE_PW=$(head -n1 "$E2E_TMP/alice.password")
BASE=$(cluster_base) || fail "no free port range"
"$STELE_BIN" cluster init --nodes 4 --dir "$D" --base-port "$BASE" --tls --http-tls \
	--admin-password-file "$E2E_TMP/admin.password" >"$E2E_TMP/out" 2>&1 || fail "stele cluster init: $(cat "$E2E_TMP/out")"
CA=$D/ca/ca.crt
CURL_TLS=(--cacert "$CA")
start_cluster "$D"
BROKERS=$(cat "$D/brokers.txt")
log "four brokers serve SASL_SSL and HTTPS: $BROKERS"

as_admin=(--brokers "$BROKERS" --command-config "$D/client.properties")
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" user create alice --password-file "$E2E_TMP/alice.password" >"$E2E_TMP/out" 2>&1 ||
	fail "stele user create alice: $(cat "$E2E_TMP/out")"
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" acl add --allow-principal User:alice --producer --consumer \
	--topic e2e-sc- --resource-pattern-type prefixed --group e2e-sc >"$E2E_TMP/out" 2>&1 ||
	fail "stele acl add: $(cat "$E2E_TMP/out")"
topic=e2e-sc-$$x$RANDOM
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" topic create "$topic" --partitions 4 >"$E2E_TMP/out" 2>&1 ||
	fail "stele topic create: $(cat "$E2E_TMP/out")"
log "the admin (client.properties) created alice, her ACLs and $topic"

# --- 2. records -----------------------------------------------------------------
scram512=(-X security.protocol=SASL_SSL -X ssl.ca.location="$CA" -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=alice -X sasl.password="$ALICE_PW")
IFS=, read -r -a each <<<"$BROKERS"
for i in 0 1 2 3; do
	seq $((i * 25 + 1)) $((i * 25 + 25)) | sed 's/^/k:/' |
		e2e_timeout 30 kcat -P -b "${each[$i]}" "${scram512[@]}" -t "$topic" -K: -X acks=all 2>"$E2E_TMP/kcat.err" ||
		fail "kcat -P through ${each[$i]}: $(cat "$E2E_TMP/kcat.err")"
done
log "kcat (librdkafka, SASL_SSL SCRAM-SHA-512): 100 records produced, 25 through each broker"

"$PY" - "$BROKERS" "$topic" "$CA" "$ALICE_PW" <<-'PYEOF' || fail "confluent-kafka and kafka-python over SASL_SSL"
	import sys
	from confluent_kafka import Consumer, KafkaError
	from kafka import KafkaProducer
	brokers, topic, ca, pw = sys.argv[1:5]
	prod = KafkaProducer(bootstrap_servers=brokers.split(","), acks="all", security_protocol="SASL_SSL", ssl_cafile=ca,
	                     sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice", sasl_plain_password=pw)
	for i in range(20):
	    prod.send(topic, key=b"py", value=b"python-%d" % i).get(timeout=30)
	prod.close()
	c = Consumer({"bootstrap.servers": brokers, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
	              "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": pw,
	              "group.id": "e2e-sc", "auto.offset.reset": "earliest"})
	c.subscribe([topic])
	seen = set()
	while len(seen) < 120:
	    m = c.poll(30)
	    assert m is not None, "confluent-kafka read %d records, want 120" % len(seen)
	    if m.error() is not None:
	        # A broker a block behind may not know the topic yet: librdkafka
	        # reports that as a consumer event and goes on, as with Kafka.
	        assert m.error().code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC), m.error()
	        continue
	    seen.add(m.value())
	c.close()
	assert {b"python-%d" % i for i in range(20)} <= seen
	assert {str(i).encode() for i in range(1, 101)} <= seen
PYEOF
log "kafka-python (SASL_SSL SCRAM-SHA-256) produced 20; confluent-kafka (SCRAM-SHA-512) read all 120 in group e2e-sc"

if e2e_timeout 20 kcat -L -b "${each[0]}" -m 5 -X security.protocol=SASL_SSL -X ssl.ca.location="$CA" \
	-X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=alice -X sasl.password=not-hers >/dev/null 2>"$E2E_TMP/kcat.err"; then
	fail "kcat with a wrong password was served"
fi

# --- 3. the HTTP APIs over TLS ---------------------------------------------------------
H="https://127.0.0.1:$((BASE + 102))"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$CA" -u "alice:$ALICE_PW" "$H/v1/topics/$topic/keys")
[[ $code == 200 ]] || fail "alice's Basic credentials over https: HTTP $code, want 200"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$CA" "$H/v1/topics/$topic/keys")
[[ $code == 403 ]] || fail "anonymous over https: HTTP $code, want 403"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((BASE + 102))/healthz")
[[ $code != 200 ]] || fail "plain http to a TLS port was served"
log "HTTPS: alice's password reads her topic's keys (200), anonymous is refused (403), plain http is not served"
for pid in "${E2E_PIDS[@]}"; do
	kill "$pid" 2>/dev/null || true
done
for pid in "${E2E_PIDS[@]}"; do
	wait "$pid" 2>/dev/null || true
	e2e_forget "$pid"
done

# --- 4. the mutual-TLS cluster ---------------------------------------------------------
D=$E2E_TMP/mtls
BASE=$(cluster_base) || fail "no free port range"
"$STELE_BIN" cluster init --nodes 4 --dir "$D" --base-port "$BASE" --tls --http-tls >"$E2E_TMP/out" 2>&1 ||
	fail "stele cluster init --tls: $(cat "$E2E_TMP/out")"
CA=$D/ca/ca.crt
CURL_TLS=(--cacert "$CA" --cert "$D/client/client.crt" --key "$D/client/client.key")
start_cluster "$D"
BROKERS=$(cat "$D/brokers.txt")
topic=e2e-mtls-$$x$RANDOM
e2e_timeout 30 "$STELE_BIN" --brokers "$BROKERS" --command-config "$D/client.properties" topic create "$topic" --partitions 2 >"$E2E_TMP/out" 2>&1 ||
	fail "stele topic create over mutual TLS: $(cat "$E2E_TMP/out")"
"$PY" - "$BROKERS" "$topic" "$D" <<-'PYEOF' || fail "confluent-kafka over mutual TLS"
	import sys
	from confluent_kafka import Consumer, KafkaError, Producer
	brokers, topic, d = sys.argv[1:4]
	conf = {"bootstrap.servers": brokers, "security.protocol": "SSL", "ssl.ca.location": d + "/ca/ca.crt",
	        "ssl.certificate.location": d + "/client/client.crt", "ssl.key.location": d + "/client/client.key"}
	p = Producer(dict(conf, acks="all"))
	errs = []
	for i in range(30):
	    p.produce(topic, value=b"mtls-%d" % i, on_delivery=lambda e, m: e and errs.append(e))
	assert p.flush(30) == 0 and not errs, errs
	c = Consumer(dict(conf, **{"group.id": "e2e-mtls", "auto.offset.reset": "earliest"}))
	c.subscribe([topic])
	seen = set()
	while len(seen) < 30:
	    m = c.poll(30)
	    assert m is not None, "read %d records, want 30" % len(seen)
	    if m.error() is not None:
	        # A broker a block behind may not know the topic yet: librdkafka
	        # reports that as a consumer event and goes on, as with Kafka.
	        assert m.error().code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC), m.error()
	        continue
	    seen.add(m.value())
	c.close()
PYEOF
n=$(e2e_timeout 30 kcat -C -F "$D/client.properties" -b "$BROKERS" -t "$topic" -e -q -f '%s\n' 2>"$E2E_TMP/kcat.err" | wc -l)
[[ $n == 30 ]] || fail "kcat -F client.properties read $n records, want 30: $(cat "$E2E_TMP/kcat.err")"
if e2e_timeout 20 kcat -L -b "$BROKERS" -m 5 -X security.protocol=SSL -X ssl.ca.location="$CA" >/dev/null 2>"$E2E_TMP/kcat.err"; then
	fail "a client without a certificate was served by a mutual-TLS cluster"
fi
log "mutual TLS: confluent-kafka with the client certificate produced and read 30 records, kcat -F read them; no certificate, no service"
