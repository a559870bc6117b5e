#!/usr/bin/python3
"""Check that a group has committed the end of every partition of a topic.

    group_committed.py --bootstrap HOST:PORT --group G --topic T --partitions P
                       [--empty]

Reads the group's committed offsets with confluent-kafka's
Consumer.committed() (OffsetFetch; the consumer never subscribes) and the
high watermarks; exits 1 unless they are equal for every partition. With
--empty the group must also have no members left (every member left it):
kafka-python's KafkaAdminClient.describe_consumer_groups() must say Empty
within 5 s.
"""

import argparse
import os
import sys
import time

from confluent_kafka import KafkaException
from kafka import KafkaAdminClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import group_lib as gl  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--empty", action="store_true")
    a = ap.parse_args()
    c = gl.admin_consumer(a.bootstrap, a.group)
    try:
        high = gl.high_watermarks(c, a.topic, a.partitions)
        got = gl.committed(c, a.topic, a.partitions)
    except KafkaException as e:
        gl.die("confluent-kafka: %s" % e)
    finally:
        c.close()
    if got != high:
        gl.die("group %s: Consumer.committed() says %s, want the high watermarks %s" % (a.group, got, high))
    print("Consumer.committed(): group %s has committed the high watermarks %s" % (a.group, high))
    if a.empty:
        check_empty(a)


def check_empty(a):
    admin = KafkaAdminClient(bootstrap_servers=a.bootstrap, client_id="stele-e2e-group-admin")
    try:
        deadline = time.monotonic() + 5
        while True:
            d = admin.describe_consumer_groups([a.group])[0]
            if (d.state, d.members) == ("Empty", []):
                break
            if time.monotonic() > deadline:
                gl.die("group %s is %s with members %s 5s after its members left, want Empty with none"
                       % (a.group, d.state, [m.member_id for m in d.members]))
            time.sleep(0.1)
    finally:
        admin.close()
    print("describe_consumer_groups(): group %s is Empty: its members left" % a.group)


if __name__ == "__main__":
    main()
