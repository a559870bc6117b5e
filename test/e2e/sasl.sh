#!/usr/bin/env bash
# sasl.sh: SASL users (docs/security.md) against `stele serve`, with
# clients we did not write: kcat (librdkafka), confluent-kafka (librdkafka)
# and kafka-python.
#
#  1. The broker serves SASL_PLAINTEXT, SASL_SSL (a certificate from
#     `stele cert`) and PLAINTEXT listeners; --admin-password-file creates
#     the super user admin at start.
#  2. `stele user create alice` with Kafka's --command-config (the admin
#     over SCRAM-SHA-512) and `stele user list`; `stele acl add --producer
#     --consumer` gives her a topic prefix and a group.
#  3. alice produces and reads records with kcat over SASL_PLAINTEXT
#     (SCRAM-SHA-512, PLAIN) and SASL_SSL (SCRAM-SHA-256), with
#     confluent-kafka over SASL_SSL (SCRAM-SHA-512), and with kafka-python
#     (PLAIN and SCRAM-SHA-256).
#  4. A wrong password is refused (SASL_AUTHENTICATION_FAILED), counted
#     in /metrics, and appears in no log line; alice may not manage users
#     (only super users until ACLs are served); a request before
#     authentication on the SASL port is refused.
#  5. `stele user delete alice`: her logins are refused from then on; the
#     admin user survives a restart, and --admin-password-file does not
#     recreate or change it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_require_clients
e2e_broker_init

certs=$E2E_TMP/certs
"$STELE_BIN" cert ca --out "$certs" >/dev/null || fail "stele cert ca"
"$STELE_BIN" cert issue --ca "$certs" --name broker --dns localhost --ip 127.0.0.1 --out "$certs" >/dev/null ||
	fail "stele cert issue broker"
printf 'admin-Secret-%s\n' "$RANDOM$RANDOM" >"$E2E_TMP/admin.password"
printf 'alice-Wonder-%s\n' "$RANDOM$RANDOM" >"$E2E_TMP/alice.password"
ADMIN_PW=$(head -n1 "$E2E_TMP/admin.password")
ALICE_PW=$(head -n1 "$E2E_TMP/alice.password")

e2e_free_port SASL_PORT
e2e_free_port SSL_PORT
SASL="127.0.0.1:$SASL_PORT"
SSL="127.0.0.1:$SSL_PORT"
BROKER_LISTEN=(--listeners "PLAINTEXT://$BROKER,SASL_PLAINTEXT://$SASL,SASL_SSL://$SSL"
	--ssl-cert "$certs/broker.crt" --ssl-key "$certs/broker.key" --admin-password-file "$E2E_TMP/admin.password")
e2e_broker_start
deadline=$((SECONDS + 20))
until grep -q "created the admin user" "$BROKER_LOG"; do
	((SECONDS < deadline)) || fail "the admin user was not created within 20 s"
	sleep 0.2
done
log "the broker serves PLAINTEXT $BROKER, SASL_PLAINTEXT $SASL and SASL_SSL $SSL; admin created"

# --- 2. users ------------------------------------------------------------------
printf '%s\n' security.protocol=SASL_PLAINTEXT sasl.mechanism=SCRAM-SHA-512 sasl.username=admin "sasl.password=$ADMIN_PW" \
	>"$E2E_TMP/admin.properties"
as_admin=(--brokers "$SASL" --command-config "$E2E_TMP/admin.properties")
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" user create alice --password-file "$E2E_TMP/alice.password" >"$E2E_TMP/out" 2>&1 ||
	fail "stele user create alice: $(cat "$E2E_TMP/out")"
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" user list >"$E2E_TMP/users" 2>&1 || fail "stele user list: $(cat "$E2E_TMP/users")"
for want in "admin +SCRAM-SHA-256 +4096" "admin +SCRAM-SHA-512" "alice +SCRAM-SHA-256" "alice +SCRAM-SHA-512"; do
	grep -Eq "^$want" "$E2E_TMP/users" || fail "stele user list lacks '$want': $(cat "$E2E_TMP/users")"
done
log "stele user create alice, and user list shows admin and alice with both SCRAM mechanisms"

# The broker authenticates, so nothing is allowed without an ACL
# (allow.everyone.if.no.acl.found is false): alice may produce to and read
# the e2e-sasl- topics, with the group e2e-sasl.
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" acl add --allow-principal User:alice --producer --consumer \
	--topic e2e-sasl- --resource-pattern-type prefixed --group e2e-sasl >"$E2E_TMP/out" 2>&1 ||
	fail "stele acl add: $(cat "$E2E_TMP/out")"
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" acl list --principal User:alice >"$E2E_TMP/acls" 2>&1 || fail "stele acl list: $(cat "$E2E_TMP/acls")"
for want in "TOPIC +e2e-sasl- +PREFIXED +User:alice +\* +WRITE +ALLOW" "TOPIC +e2e-sasl- +PREFIXED +User:alice +\* +READ +ALLOW" "GROUP +e2e-sasl +PREFIXED +User:alice +\* +READ +ALLOW"; do
	grep -Eq "^$want" "$E2E_TMP/acls" || fail "stele acl list lacks '$want': $(cat "$E2E_TMP/acls")"
done
log "stele acl add --producer --consumer for alice on the prefixes e2e-sasl- (topics) and e2e-sasl (groups)"

# --- 3. records over SASL ---------------------------------------------------------
topic=e2e-sasl-$$x$RANDOM
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" topic create "$topic" --partitions 1 >"$E2E_TMP/out" 2>&1 ||
	fail "stele topic create as admin: $(cat "$E2E_TMP/out")"
scram512=(-X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=alice -X sasl.password="$ALICE_PW")
plain=(-X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=PLAIN -X sasl.username=alice -X sasl.password="$ALICE_PW")
ssl256=(-X security.protocol=SASL_SSL -X ssl.ca.location="$certs/ca.crt" -X sasl.mechanisms=SCRAM-SHA-256 -X sasl.username=alice -X sasl.password="$ALICE_PW")
seq 1 100 | sed 's/^/k:/' | e2e_timeout 30 kcat -P -b "$SASL" "${scram512[@]}" -t "$topic" -K: -X acks=all 2>"$E2E_TMP/kcat.err" ||
	fail "kcat -P over SASL SCRAM-SHA-512: $(cat "$E2E_TMP/kcat.err")"
seq 101 150 | sed 's/^/k:/' | e2e_timeout 30 kcat -P -b "$SSL" "${ssl256[@]}" -t "$topic" -K: -X acks=all 2>"$E2E_TMP/kcat.err" ||
	fail "kcat -P over SASL_SSL SCRAM-SHA-256: $(cat "$E2E_TMP/kcat.err")"
n=$(e2e_timeout 30 kcat -C -b "$SASL" "${plain[@]}" -t "$topic" -e -q -f '%s\n' 2>"$E2E_TMP/kcat.err" | wc -l)
[[ $n == 150 ]] || fail "kcat -C over SASL PLAIN read $n records, want 150: $(cat "$E2E_TMP/kcat.err")"
log "kcat (librdkafka): 150 records produced with SCRAM-SHA-512 and SASL_SSL SCRAM-SHA-256, read back with PLAIN"

"$PY" - "$SSL" "$SASL" "$topic" "$certs/ca.crt" "$ALICE_PW" <<-'PYEOF' || fail "confluent-kafka and kafka-python over SASL"
	import sys
	from confluent_kafka import Consumer, Producer
	from kafka import KafkaConsumer, KafkaProducer
	ssl_addr, sasl_addr, topic, ca, pw = sys.argv[1:6]
	conf = {"bootstrap.servers": ssl_addr, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
	        "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": pw}
	p = Producer(dict(conf, acks="all"))
	errs = []
	for i in range(10):
	    p.produce(topic, key=b"ck", value=b"confluent-%d" % i, on_delivery=lambda e, m: e and errs.append(e))
	assert p.flush(20) == 0 and not errs, errs
	for mech in ("PLAIN", "SCRAM-SHA-256"):
	    kp = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mech, sasl_plain_username="alice", sasl_plain_password=pw)
	    prod = KafkaProducer(bootstrap_servers=sasl_addr, acks="all", **kp)
	    for i in range(5):
	        prod.send(topic, key=b"py", value=("%s-%d" % (mech, i)).encode()).get(timeout=20)
	    prod.close()
	c = Consumer(dict(conf, **{"group.id": "e2e-sasl", "auto.offset.reset": "earliest"}))
	c.subscribe([topic])
	seen = []
	while len(seen) < 170:
	    m = c.poll(20)
	    assert m is not None, "confluent-kafka read %d records, want 170" % len(seen)
	    assert m.error() is None, m.error()
	    seen.append(m.value())
	c.close()
	assert seen[150:160] == [b"confluent-%d" % i for i in range(10)], seen[150:160]
	kc = KafkaConsumer(topic, bootstrap_servers=sasl_addr, auto_offset_reset="earliest", consumer_timeout_ms=10000,
	                   security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice", sasl_plain_password=pw)
	got = [m.value for m in kc if m.key == b"py"]
	kc.close()
	want = [("%s-%d" % (mech, i)).encode() for mech in ("PLAIN", "SCRAM-SHA-256") for i in range(5)]
	assert got == want, got
PYEOF
log "confluent-kafka (SASL_SSL SCRAM-SHA-512) and kafka-python (PLAIN, SCRAM-SHA-256): 20 records produced, 170 read"

# --- 4. refusals ---------------------------------------------------------------
if e2e_timeout 20 kcat -L -b "$SASL" -m 5 -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-512 \
	-X sasl.username=alice -X sasl.password=not-her-password >/dev/null 2>"$E2E_TMP/kcat.err"; then
	fail "kcat with a wrong password was served"
fi
grep -qi "authentication failed\|SASL_AUTHENTICATION_FAILED\|Authentication" "$E2E_TMP/kcat.err" ||
	fail "kcat with a wrong password does not report an authentication failure: $(cat "$E2E_TMP/kcat.err")"
# Read whole before grep -q looks: grep leaving early would fail curl's
# write (SIGPIPE), and pipefail the check, however the count read.
metrics="$(curl -sf "http://$BROKER_HTTP/metrics")" || fail "GET /metrics failed"
grep -Eq '^stele_kafka_sasl_authentication_failures_total [1-9]' <<<"$metrics" ||
	fail "no failed authentication counted in /metrics"
for secret in "$ADMIN_PW" "$ALICE_PW" not-her-password; do
	if grep -qF -- "$secret" "$BROKER_LOG"; then
		fail "the broker's log holds a password"
	fi
done
printf '%s\n' security.protocol=SASL_PLAINTEXT sasl.mechanism=PLAIN \
	"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=\"$ALICE_PW\";" \
	>"$E2E_TMP/alice.properties"
if e2e_timeout 30 "$STELE_BIN" --brokers "$SASL" --command-config "$E2E_TMP/alice.properties" user list >"$E2E_TMP/out" 2>&1; then
	fail "alice listed the users: $(cat "$E2E_TMP/out")"
fi
grep -q "CLUSTER_AUTHORIZATION_FAILED" "$E2E_TMP/out" || fail "alice's user list: $(cat "$E2E_TMP/out")"
if e2e_timeout 20 kcat -L -b "$SASL" -m 5 >/dev/null 2>&1; then
	fail "kcat without SASL was served on the SASL port"
fi
if printf 'x\n' | e2e_timeout 20 kcat -P -b "$SASL" "${scram512[@]}" -t not-hers -X topic.message.timeout.ms=5000 2>"$E2E_TMP/kcat.err"; then
	fail "alice produced to a topic no ACL gives her"
fi
grep -qi "authoriz" "$E2E_TMP/kcat.err" || fail "alice's produce to not-hers: $(cat "$E2E_TMP/kcat.err")"
log "refused: a wrong password (counted, in no log line), alice managing users or writing a topic no ACL gives her, a client without SASL on the SASL port"

# --- 5. deletion and restart -------------------------------------------------------
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" user delete alice >"$E2E_TMP/out" 2>&1 || fail "stele user delete alice: $(cat "$E2E_TMP/out")"
if e2e_timeout 20 kcat -L -b "$SASL" -m 5 "${scram512[@]}" >/dev/null 2>&1; then
	fail "alice logged in after her deletion"
fi
e2e_broker_stop 30
printf 'another-password\n' >"$E2E_TMP/admin.password"
e2e_broker_start
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" user list >"$E2E_TMP/users" 2>&1 ||
	fail "the admin's old password after a restart with another --admin-password-file: $(cat "$E2E_TMP/users")"
if grep -q alice "$E2E_TMP/users"; then
	fail "alice is listed after her deletion: $(cat "$E2E_TMP/users")"
fi
log "alice deleted and refused; after a restart the admin keeps its password (the file creates, never changes)"

e2e_broker_stop 30
log "PASS"
