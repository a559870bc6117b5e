#!/usr/bin/python3
"""Static members (KIP-345) of confluent-kafka expire on time.

    group_static.py --bootstrap HOST:PORT --topic T --partitions P
                    [--session-timeout MS] [--deadline S]

Two confluent-kafka consumers with group.instance.id subscribe to T in a
fresh group and share its partitions (disjoint, together all of them).
They close: librdkafka sends no LeaveGroup for a static member, so the
group keeps both members until their session timeout passes, as Kafka
does. kafka-python's describe_consumer_groups() right after the close says
Stable with both members; then delete_consumer_groups() is polled every
0.1 s: it must answer NON_EMPTY_GROUP until the members expire and succeed
no earlier than the session timeout less one heartbeat interval after the
close (the broker counts from the last heartbeat) and no later than the
session timeout plus EXPIRY_SLACK (issue 27: the expiry lagged seconds
behind on an idle chain). No record is produced: nothing else makes
blocks while the group waits.
"""

import argparse
import os
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException
from kafka.admin import KafkaAdminClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import group_lib as gl  # noqa: E402

HEARTBEAT_MS = 500
# EXPIRY_SLACK is what the expiry may take beyond the session timeout:
# block time advances in steps, and the timer's block must commit.
EXPIRY_SLACK = 3.0
NON_EMPTY_GROUP = 68


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--session-timeout", type=int, default=6000)
    ap.add_argument("--deadline", type=float, default=30)
    a = ap.parse_args()
    gl.exit_on_sigterm()
    deadline = time.monotonic() + a.deadline
    group = "e2e-static-%s" % uuid.uuid4().hex[:8]
    assigned = {}
    members = []
    for name in ("a", "b"):
        def on_assign(c, parts, name=name):
            assigned[name] = sorted(p.partition for p in parts)
        c = Consumer({
            "bootstrap.servers": a.bootstrap,
            "group.id": group,
            "group.instance.id": "static-" + name,
            "session.timeout.ms": a.session_timeout,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "auto.offset.reset": "earliest",
            "error_cb": lambda err: print("consumer: client error: %s" % err, file=sys.stderr),
        })
        c.subscribe([a.topic], on_assign=on_assign)
        members.append(c)
    # Both assigned, disjoint, together every partition.
    while True:
        for c in members:
            c.poll(0.1)
        parts = assigned.get("a", []) + assigned.get("b", [])
        if len(assigned) == 2 and assigned["a"] and assigned["b"] and sorted(parts) == list(range(a.partitions)):
            break
        if time.monotonic() > deadline:
            gl.die("the static members were not both assigned: %s" % assigned)
    print("static members assigned: a %s, b %s" % (assigned["a"], assigned["b"]))
    for c in members:
        c.close()
    closed = time.monotonic()

    admin = KafkaAdminClient(bootstrap_servers=a.bootstrap, client_id="stele-e2e-static-admin")
    d = admin.describe_consumer_groups([group])[0]
    if d.state != "Stable" or len(d.members) != 2:
        gl.die("right after the static members closed the group is %s with %d members, want Stable with 2"
               % (d.state, len(d.members)))
    refusals = 0
    while True:
        res = admin.delete_consumer_groups([group])
        err = res[0][1]
        at = time.monotonic() - closed
        if err.errno == 0:
            break
        if err.errno != NON_EMPTY_GROUP:
            gl.die("delete_consumer_groups %.2fs after the close: %s, want NON_EMPTY_GROUP or success" % (at, err))
        refusals += 1
        if at > a.session_timeout / 1000 + EXPIRY_SLACK:
            gl.die("the group still has members %.2fs after they closed (session.timeout.ms %d)"
                   % (at, a.session_timeout))
        if time.monotonic() > deadline:
            gl.die("deadline: the group still has members %.2fs after they closed" % at)
        time.sleep(0.1)
    earliest = (a.session_timeout - HEARTBEAT_MS) / 1000
    if at < earliest:
        gl.die("the group was deleted %.2fs after its static members closed, before their session "
               "timeout (%d ms) could pass: static members must not leave on close" % (at, a.session_timeout))
    admin.close()
    print("static members: the group was deleted %.2fs after they closed (session.timeout.ms %d, "
          "%d NON_EMPTY_GROUP answers before)" % (at, a.session_timeout, refusals))


if __name__ == "__main__":
    try:
        main()
    except (KafkaException, KafkaError) as e:
        gl.die("confluent-kafka: %s" % e)
