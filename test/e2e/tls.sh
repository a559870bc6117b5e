#!/usr/bin/env bash
# tls.sh: TLS listeners (docs/security.md) against `stele serve`, with
# certificates `stele cert` made, read by clients we did not write:
# kcat (librdkafka, OpenSSL) and kafka-python (Python's ssl).
#
#  1. `stele cert ca` and `stele cert issue` make a CA, the broker's
#     certificate (localhost, 127.0.0.1) and alice's client certificate;
#     another CA makes mallory's.
#  2. The broker serves PLAINTEXT and SSL listeners at once, the SSL one
#     with mutual TLS required and ssl.principal.mapping.rules. `kcat -L`
#     on each names that listener's address.
#  3. kcat with alice's certificate produces 100 records over TLS and
#     reads them back; kafka-python produces and consumes over TLS too,
#     and so do the stele commands with Kafka's --command-config.
#  4. kcat without a client certificate, and with mallory's (another CA),
#     is refused; so is a plaintext client on the SSL port.
#  5. The broker's certificate is replaced on disk: the next handshake is
#     served the new one, without a restart, and clients go on.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_require_clients
e2e_broker_init

certs=$E2E_TMP/certs
"$STELE_BIN" cert ca --out "$certs" >/dev/null || fail "stele cert ca"
"$STELE_BIN" cert issue --ca "$certs" --name broker --dns localhost --ip 127.0.0.1 --out "$certs" >/dev/null ||
	fail "stele cert issue broker"
"$STELE_BIN" cert issue --ca "$certs" --name alice --out "$certs" >/dev/null || fail "stele cert issue alice"
"$STELE_BIN" cert ca --out "$E2E_TMP/other" >/dev/null || fail "stele cert ca (another)"
"$STELE_BIN" cert issue --ca "$E2E_TMP/other" --name mallory --out "$E2E_TMP/other" >/dev/null || fail "stele cert issue mallory"
[[ $(stat -c %a "$certs/alice.key") == 600 ]] || fail "alice.key is not mode 0600"
log "a CA, the broker's and alice's certificates (and mallory's of another CA)"

e2e_free_port SSL_PORT
SSL="127.0.0.1:$SSL_PORT"
# Mutual TLS makes the listener authenticate, and then nothing is allowed
# without an ACL; this test is about TLS (sasl.sh is about ACLs), so it
# keeps Kafka's allow.everyone.if.no.acl.found=true.
BROKER_LISTEN=(--listeners "PLAINTEXT://$BROKER,SSL://$SSL" --allow-everyone-if-no-acl-found
	--ssl-cert "$certs/broker.crt" --ssl-key "$certs/broker.key" --ssl-ca "$certs/ca.crt" --ssl-client-auth required
	--ssl-principal-mapping-rules 'RULE:^CN=([a-z]+)$/$1/L')
e2e_broker_start

tls=(-X security.protocol=ssl -X ssl.ca.location="$certs/ca.crt")
alice=("${tls[@]}" -X ssl.certificate.location="$certs/alice.crt" -X ssl.key.location="$certs/alice.key")

# --- 2. Metadata on each listener -----------------------------------------------
e2e_timeout 20 kcat -L -b "$SSL" "${alice[@]}" -J >"$E2E_TMP/md-ssl.json" 2>"$E2E_TMP/kcat.err" ||
	fail "kcat -L over TLS: $(cat "$E2E_TMP/kcat.err")"
e2e_timeout 20 kcat -L -b "$BROKER" -J >"$E2E_TMP/md-plain.json" 2>/dev/null || fail "kcat -L in plaintext"
"$PY" - "$E2E_TMP/md-ssl.json" "$SSL" "$E2E_TMP/md-plain.json" "$BROKER" <<-'PYEOF' || fail "Metadata does not name each listener's own address"
	import json, sys
	for path, want in ((sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4])):
	    brokers = json.load(open(path))["brokers"]
	    got = [b["name"] for b in brokers]
	    assert got and all(g.endswith(want) for g in got), (path, got, want)
PYEOF
log "Metadata on the SSL listener names $SSL, on the PLAINTEXT one $BROKER"

# --- 3. records over TLS ----------------------------------------------------------
topic=e2e-tls-$$x$RANDOM
e2e_topic_create "$topic" 1
seq 1 100 | sed 's/^/k:/' | e2e_timeout 30 kcat -P -b "$SSL" "${alice[@]}" -t "$topic" -K: -X acks=all 2>"$E2E_TMP/kcat.err" ||
	fail "kcat -P over TLS: $(cat "$E2E_TMP/kcat.err")"
n=$(e2e_timeout 30 kcat -C -b "$SSL" "${alice[@]}" -t "$topic" -e -q -f '%s\n' 2>/dev/null | wc -l)
[[ $n == 100 ]] || fail "kcat -C over TLS read $n records, want 100"
log "kcat (librdkafka) with alice's certificate: 100 records produced and read over TLS"
"$PY" - "$SSL" "$topic" "$certs" <<-'PYEOF' || fail "kafka-python over TLS"
	import sys
	from kafka import KafkaProducer, KafkaConsumer
	addr, topic, d = sys.argv[1], sys.argv[2], sys.argv[3]
	ssl = dict(security_protocol="SSL", ssl_cafile=d + "/ca.crt", ssl_certfile=d + "/alice.crt", ssl_keyfile=d + "/alice.key")
	p = KafkaProducer(bootstrap_servers=addr, acks="all", **ssl)
	for i in range(10):
	    p.send(topic, key=b"py", value=b"python-%d" % i).get(timeout=20)
	p.close()
	c = KafkaConsumer(topic, bootstrap_servers=addr, auto_offset_reset="earliest", consumer_timeout_ms=10000, **ssl)
	got = [m.value for m in c if m.key == b"py"]
	c.close()
	assert got == [b"python-%d" % i for i in range(10)], got
PYEOF
log "kafka-python with alice's certificate: 10 records produced and read over TLS"
printf '%s\n' '# as for kafka-topics.sh --command-config' security.protocol=SSL "ssl.ca.location=$certs/ca.crt" \
	"ssl.certificate.location=$certs/alice.crt" "ssl.key.location=$certs/alice.key" >"$E2E_TMP/client.properties"
over_tls=(--brokers "$SSL" --command-config "$E2E_TMP/client.properties")
"$STELE_BIN" "${over_tls[@]}" topic list | grep -q "^$topic " || fail "stele topic list over TLS does not list $topic"
printf 'cli:1\ncli:2\n' | "$STELE_BIN" "${over_tls[@]}" produce "$topic" --key-separator : 2>"$E2E_TMP/p.err" ||
	fail "stele produce over TLS: $(cat "$E2E_TMP/p.err")"
n=$("$STELE_BIN" "${over_tls[@]}" consume "$topic" --from-beginning --timeout-idle 5s 2>/dev/null | wc -l)
[[ $n == 112 ]] || fail "stele consume over TLS read $n records, want 112"
if "$STELE_BIN" --brokers "$SSL" --timeout 5s topic list >/dev/null 2>&1; then
	fail "stele topic list without --command-config was served on the SSL listener"
fi
log "stele topic list, produce and consume with --command-config (security.protocol=SSL): 112 records"

# --- 4. refused -------------------------------------------------------------------
refused() { # WHAT KCAT-ARGS...
	local what=$1
	shift
	if e2e_timeout 20 kcat -L -b "$SSL" -m 5 "$@" >/dev/null 2>"$E2E_TMP/kcat.err"; then
		fail "kcat $what: served; want a refusal"
	fi
}
refused "without a client certificate" "${tls[@]}"
refused "with mallory's certificate" "${tls[@]}" -X ssl.certificate.location="$E2E_TMP/other/mallory.crt" -X ssl.key.location="$E2E_TMP/other/mallory.key"
refused "in plaintext on the SSL port"
grep -q "tls_handshake" <(curl -sf "http://$BROKER_HTTP/metrics") || fail "no refused TLS handshake counted in /metrics"
log "refused: no client certificate, another CA's, plaintext on the SSL port"

# --- 5. the certificate replaced on disk ---------------------------------------------
serial() {
	"$PY" - "$SSL" "$certs" <<-'PYEOF'
		import socket, ssl, sys
		host, port = sys.argv[1].rsplit(":", 1)
		ctx = ssl.create_default_context(cafile=sys.argv[2] + "/ca.crt")
		ctx.load_cert_chain(sys.argv[2] + "/alice.crt", sys.argv[2] + "/alice.key")
		with ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=10), server_hostname=host) as s:
		    print(s.getpeercert()["serialNumber"])
	PYEOF
}
before=$(serial) || fail "reading the served certificate"
"$STELE_BIN" cert issue --ca "$certs" --name broker --dns localhost --ip 127.0.0.1 --out "$E2E_TMP/renewed" >/dev/null ||
	fail "stele cert issue (renewal)"
cp "$E2E_TMP/renewed/broker.key" "$certs/broker.key.new" && cp "$E2E_TMP/renewed/broker.crt" "$certs/broker.crt.new"
mv "$certs/broker.key.new" "$certs/broker.key" && mv "$certs/broker.crt.new" "$certs/broker.crt"
deadline=$((SECONDS + 10))
until after=$(serial) && [[ $after != "$before" ]]; do
	((SECONDS < deadline)) || fail "the renewed certificate is not served after 10 s (serial still $before)"
	sleep 0.5
done
n=$(e2e_timeout 30 kcat -C -b "$SSL" "${alice[@]}" -t "$topic" -e -q -f '%s\n' 2>/dev/null | wc -l)
[[ $n == 112 ]] || fail "after the renewal kcat read $n records, want 112"
log "the renewed certificate (serial $after, was $before) is served without a restart"

e2e_broker_stop 30
log "PASS"
