#!/usr/bin/env bash
# tenants.sh: two tenants (docs/tenants.md) against `stele serve`, with
# clients we did not write: kcat (librdkafka), confluent-kafka (librdkafka)
# and kafka-python.
#
#  1. The broker serves SASL_PLAINTEXT and PLAINTEXT; the admin creates
#     tenants acme and globex (`stele tenant create`, over the HTTP API)
#     and an administrator of each (`stele user create alice --tenant acme
#     --tenant-admin`: she logs in as alice@acme and may do anything in
#     acme's names).
#  2. At the same time, each tenant's user produces to a topic orders with
#     kcat, runs a transaction under transactional id tx-1 with
#     confluent-kafka and consumes orders in a group billing with
#     kafka-python: each reads exactly its own records, and sees its own
#     topic, group and transactional id unprefixed and nothing of the
#     other's (kcat -L, kafka-python's admin listings). The broker shares
#     its blocks among tenants at the extreme (--tenant-block-share 1: while
#     both produce, one transaction of each tenant per block and in
#     ordering at once), so all of this runs through the sharing.
#  3. A PLAINTEXT client of the default tenant sees neither tenant's topics.
#     alice, acme's administrator, creates a user carol, her ACLs and her
#     client quota with the stele CLI in acme's own names, lists exactly
#     acme's ACLs, users and quotas, and carol reads acme's orders with kcat.
#  4. `stele tenant describe` shows the usage; `stele tenant delete acme`
#     removes everything acme owned (no file left in the data directory,
#     alice can no longer log in), and globex reads its records as before.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

e2e_setup
e2e_require_clients
e2e_broker_init

printf 'admin-Secret-%s\n' "$RANDOM$RANDOM" >"$E2E_TMP/admin.password"
ADMIN_PW=$(head -n1 "$E2E_TMP/admin.password")
e2e_free_port SASL_PORT
SASL="127.0.0.1:$SASL_PORT"
BROKER_LISTEN=(--listeners "PLAINTEXT://$BROKER,SASL_PLAINTEXT://$SASL" --admin-password-file "$E2E_TMP/admin.password" --tenant-block-share 1)
e2e_broker_start
deadline=$((SECONDS + 20))
until grep -q "created the admin user" "$BROKER_LOG"; do
	((SECONDS < deadline)) || fail "the admin user was not created within 20 s"
	sleep 0.2
done

# --- 1. tenants, users, ACLs ------------------------------------------------------
printf '%s\n' security.protocol=SASL_PLAINTEXT sasl.mechanism=SCRAM-SHA-512 sasl.username=admin "sasl.password=$ADMIN_PW" \
	>"$E2E_TMP/admin.properties"
as_admin=(--brokers "$SASL" --command-config "$E2E_TMP/admin.properties")
declare -A USER PW
USER[acme]=alice
USER[globex]=bob
for t in acme globex; do
	PW[$t]="${USER[$t]}-Pw-$RANDOM$RANDOM"
	printf '%s\n' "${PW[$t]}" >"$E2E_TMP/$t.password"
	e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" tenant create "$t" --quota topics=5 --quota groups=5 --http "$BROKER_HTTP" >"$E2E_TMP/out" 2>&1 ||
		fail "stele tenant create $t: $(cat "$E2E_TMP/out")"
	e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" user create "${USER[$t]}" --tenant "$t" --password-file "$E2E_TMP/$t.password" \
		--tenant-admin --http "$BROKER_HTTP" >"$E2E_TMP/out" 2>&1 || fail "stele user create ${USER[$t]} --tenant $t --tenant-admin: $(cat "$E2E_TMP/out")"
	grep -q "\"${USER[$t]}@$t\"" "$E2E_TMP/out" && grep -q "administers tenant $t" "$E2E_TMP/out" ||
		fail "user create --tenant --tenant-admin printed: $(cat "$E2E_TMP/out")"
done
if e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" user create carol --tenant initech --password-file "$E2E_TMP/acme.password" \
	--http "$BROKER_HTTP" >"$E2E_TMP/out" 2>&1; then
	fail "a user of a tenant that does not exist was created"
fi
grep -q "does not exist" "$E2E_TMP/out" || fail "user create --tenant initech: $(cat "$E2E_TMP/out")"
log "tenants acme and globex, administrators alice@acme and bob@globex"

# --- 2. both tenants at once ------------------------------------------------------
sasl_for() { # kcat's SASL flags for tenant $1
	printf '%s\n' -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-256 \
		-X "sasl.username=${USER[$1]}@$1" -X "sasl.password=${PW[$1]}"
}
tenant_run() { # tenant, records to produce with kcat
	local t=$1 n=$2 flags
	mapfile -t flags < <(sasl_for "$t")
	seq 1 "$n" | sed "s/^/$t-/" | e2e_timeout 30 kcat -P -b "$SASL" "${flags[@]}" -t orders -X acks=all -X linger.ms=0 -X batch.num.messages=20 2>"$E2E_TMP/$t.kcat.err" ||
		{ echo "kcat -P as $t: $(cat "$E2E_TMP/$t.kcat.err")"; return 1; }
	"$PY" - "$SASL" "${USER[$t]}@$t" "${PW[$t]}" "$t" "$n" <<-'PYEOF'
		import sys
		from confluent_kafka import Producer
		from kafka import KafkaConsumer, KafkaAdminClient
		addr, user, pw, tenant, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
		conf = {"bootstrap.servers": addr, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512",
		        "sasl.username": user, "sasl.password": pw}
		p = Producer(dict(conf, **{"transactional.id": "tx-1"}))
		p.init_transactions(30)
		p.begin_transaction()
		for i in range(3):
		    p.produce("orders", value=("%s-txn-%d" % (tenant, i)).encode())
		p.commit_transaction(30)
		kp = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user, sasl_plain_password=pw)
		c = KafkaConsumer("orders", bootstrap_servers=addr, group_id="billing", auto_offset_reset="earliest",
		                  enable_auto_commit=False, consumer_timeout_ms=15000, **kp)
		seen = []
		for m in c:
		    seen.append(m.value.decode())
		    if len(seen) == n + 3:
		        break
		c.commit()
		c.close()
		assert len(seen) == n + 3, "%s read %d records, want %d: %s" % (user, len(seen), n + 3, seen)
		assert all(v.startswith(tenant + "-") for v in seen), "%s read another tenant's records: %s" % (user, seen)
		a = KafkaAdminClient(bootstrap_servers=addr, **kp)
		topics = sorted(a.list_topics())
		groups = sorted(g[0] for g in a.list_consumer_groups())
		a.close()
		assert topics == ["orders"], "%s sees topics %s" % (user, topics)
		assert groups == ["billing"], "%s sees groups %s" % (user, groups)
	PYEOF
}
ACME_N=3000 GLOBEX_N=2000
tenant_run acme "$ACME_N" >"$E2E_TMP/acme.run" 2>&1 &
acme_pid=$!
tenant_run globex "$GLOBEX_N" >"$E2E_TMP/globex.run" 2>&1 &
globex_pid=$!
wait "$acme_pid" || fail "tenant acme: $(cat "$E2E_TMP/acme.run")"
wait "$globex_pid" || fail "tenant globex: $(cat "$E2E_TMP/globex.run")"
for t in acme globex; do
	mapfile -t flags < <(sasl_for "$t")
	e2e_timeout 30 kcat -L -b "$SASL" "${flags[@]}" >"$E2E_TMP/$t.list" 2>&1 || fail "kcat -L as $t: $(cat "$E2E_TMP/$t.list")"
	grep -q 'topic "orders"' "$E2E_TMP/$t.list" || fail "kcat -L as $t does not list orders: $(cat "$E2E_TMP/$t.list")"
	! grep -q '~' "$E2E_TMP/$t.list" || fail "kcat -L as $t shows a tenant's full name: $(cat "$E2E_TMP/$t.list")"
done
shared="$(curl -sf "http://$BROKER_HTTP/metrics" | grep -E '^stele_(proposal_deferred_transactions|transactions_held)_total ' | tr '\n' ' ')"
# Both kcats ran at once, each with many requests in flight: the broker
# held some of a tenant's transactions while the other's went ahead.
[[ $shared =~ stele_transactions_held_total\ ([0-9.e+]+) ]] && [[ ${BASH_REMATCH[1]} != 0 ]] ||
	fail "no transaction held back while both tenants produced: $shared"
log "at once: alice@acme and bob@globex each produced to orders (kcat), ran a transaction tx-1 (confluent-kafka), consumed orders in group billing (kafka-python): each read only its own records and sees only orders and billing (blocks shared: $shared)"

# --- 3. the default tenant ------------------------------------------------------------
e2e_timeout 30 kcat -L -b "$BROKER" >"$E2E_TMP/default.list" 2>&1 || fail "kcat -L on PLAINTEXT: $(cat "$E2E_TMP/default.list")"
! grep -q 'orders' "$E2E_TMP/default.list" || fail "the default tenant sees a tenant's topic: $(cat "$E2E_TMP/default.list")"
log "a PLAINTEXT client of the default tenant sees neither tenant's topic"

# alice administers acme with the stele CLI, in acme's names.
printf '%s\n' security.protocol=SASL_PLAINTEXT sasl.mechanism=SCRAM-SHA-256 sasl.username=alice@acme "sasl.password=${PW[acme]}" \
	>"$E2E_TMP/alice.properties"
as_alice=(--brokers "$SASL" --command-config "$E2E_TMP/alice.properties")
printf 'carol-Pw-%s\n' "$RANDOM$RANDOM" >"$E2E_TMP/carol.password"
e2e_timeout 30 "$STELE_BIN" "${as_alice[@]}" user create carol --password-file "$E2E_TMP/carol.password" >"$E2E_TMP/out" 2>&1 ||
	fail "alice's stele user create carol: $(cat "$E2E_TMP/out")"
e2e_timeout 30 "$STELE_BIN" "${as_alice[@]}" acl add --allow-principal User:carol --consumer --topic orders --group '*' >"$E2E_TMP/out" 2>&1 ||
	fail "alice's stele acl add for carol: $(cat "$E2E_TMP/out")"
e2e_timeout 30 "$STELE_BIN" "${as_alice[@]}" acl list >"$E2E_TMP/acls" 2>&1 || fail "alice's stele acl list: $(cat "$E2E_TMP/acls")"
grep -q 'User:carol' "$E2E_TMP/acls" && grep -q 'orders' "$E2E_TMP/acls" || fail "alice's acl list lacks carol's: $(cat "$E2E_TMP/acls")"
! grep -Eq '~|@|bob|globex' "$E2E_TMP/acls" || fail "alice's acl list shows what is not acme's as acme names it: $(cat "$E2E_TMP/acls")"
e2e_timeout 30 "$STELE_BIN" "${as_alice[@]}" user list >"$E2E_TMP/users" 2>&1 || fail "alice's stele user list: $(cat "$E2E_TMP/users")"
grep -q carol "$E2E_TMP/users" && ! grep -Eq 'admin|bob|@' "$E2E_TMP/users" || fail "alice's user list: $(cat "$E2E_TMP/users")"
# Client quotas: alice sets carol's; the cluster's (a client id's) are not hers.
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" quota set --user bob@globex producer_byte_rate=2000000 >"$E2E_TMP/out" 2>&1 ||
	fail "the admin's stele quota set for bob@globex: $(cat "$E2E_TMP/out")"
e2e_timeout 30 "$STELE_BIN" "${as_alice[@]}" quota set --user carol producer_byte_rate=1048576 >"$E2E_TMP/out" 2>&1 ||
	fail "alice's stele quota set --user carol: $(cat "$E2E_TMP/out")"
if e2e_timeout 30 "$STELE_BIN" "${as_alice[@]}" quota set --client-id-default producer_byte_rate=1 >"$E2E_TMP/out" 2>&1; then
	fail "alice set the default client id's quota, which is every tenant's"
fi
e2e_timeout 30 "$STELE_BIN" "${as_alice[@]}" quota list >"$E2E_TMP/quotas" 2>&1 || fail "alice's stele quota list: $(cat "$E2E_TMP/quotas")"
grep -q carol "$E2E_TMP/quotas" && grep -q 1048576 "$E2E_TMP/quotas" && ! grep -Eq 'bob|globex|@|2000000' "$E2E_TMP/quotas" ||
	fail "alice's quota list: $(cat "$E2E_TMP/quotas")"
n=$(e2e_timeout 30 kcat -C -b "$SASL" -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-256 -X sasl.username=carol@acme \
	-X "sasl.password=$(head -n1 "$E2E_TMP/carol.password")" -t orders -e -q -X isolation.level=read_committed -f '%s\n' 2>"$E2E_TMP/kcat.err" | grep -c '^acme-' || true)
((n >= ACME_N + 3)) || fail "carol@acme read $n of acme's records: $(cat "$E2E_TMP/kcat.err")"
if e2e_timeout 30 "$STELE_BIN" --brokers "$SASL" --command-config <(sed 's/alice@acme/carol@acme/; s/^sasl.password=.*/sasl.password='"$(head -n1 "$E2E_TMP/carol.password")"'/' "$E2E_TMP/alice.properties") \
	acl list >"$E2E_TMP/out" 2>&1; then
	fail "carol, no administrator, listed ACLs: $(cat "$E2E_TMP/out")"
fi
log "alice@acme, acme's administrator, created carol, her ACLs and her client quota with the stele CLI in acme's names; carol read acme's orders with kcat"

# --- 4. describe and delete -----------------------------------------------------------
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" tenant describe acme --http "$BROKER_HTTP" >"$E2E_TMP/out" 2>&1 ||
	fail "stele tenant describe acme: $(cat "$E2E_TMP/out")"
grep -Eq '^topics +1 +5' "$E2E_TMP/out" && grep -Eq '^groups +1 +5' "$E2E_TMP/out" || fail "tenant describe acme: $(cat "$E2E_TMP/out")"
e2e_timeout 30 "$STELE_BIN" "${as_admin[@]}" tenant delete acme --http "$BROKER_HTTP" >"$E2E_TMP/out" 2>&1 ||
	fail "stele tenant delete acme: $(cat "$E2E_TMP/out")"
for want in "1 topics" "1 groups" "1 transactional ids" "2 users" "7 acls"; do
	grep -q "$want" "$E2E_TMP/out" || fail "tenant delete printed no '$want': $(cat "$E2E_TMP/out")"
done
deadline=$((SECONDS + 20))
while find "$BROKER_DATA" -name 'acme~*' -print -quit | grep -q .; do
	((SECONDS < deadline)) || fail "acme's files outlived it: $(find "$BROKER_DATA" -name 'acme~*')"
	sleep 0.2
done
mapfile -t flags < <(sasl_for acme)
if e2e_timeout 20 kcat -L -b "$SASL" "${flags[@]}" -m 5 >/dev/null 2>&1; then
	fail "alice@acme logged in after her tenant's deletion"
fi
mapfile -t flags < <(sasl_for globex)
n=$(e2e_timeout 30 kcat -C -b "$SASL" "${flags[@]}" -t orders -e -q -X isolation.level=read_committed -f '%s\n' 2>"$E2E_TMP/kcat.err" | grep -c '^globex-')
[[ $n == $((GLOBEX_N + 3)) ]] || fail "globex read $n of its records after acme's deletion, want $((GLOBEX_N + 3)): $(cat "$E2E_TMP/kcat.err")"
log "tenant delete acme: its topic, group, transactional id, user and ACLs removed, no file left; globex reads its $n records"

e2e_broker_stop 30
log "PASS"
