#!/usr/bin/python3
"""A kafka-python (pure Python) group consumer against Stele, unchanged.

    group_kafkapython.py --bootstrap HOST:PORT --topic T --partitions P
                         --count N --more M --keys K [--deadline S]

 1. Produces N keyed records (confluent-kafka, acks=all).
 2. KafkaConsumer 1 (group_id, enable_auto_commit=False) subscribes, reads
    until every partition is at its high watermark (each record exactly
    once, at its acknowledged offset). While it is a member,
    KafkaAdminClient.list_consumer_groups() lists (group, "consumer") and
    describe_consumer_groups() says Stable, protocol type "consumer",
    protocol "range", one member: its member id and client id, subscribed
    to the topic, assigned every partition. It commits (commit(), which is
    synchronous); committed(tp) is the high watermark of every partition;
    it closes (LeaveGroup): the group is still listed, now Empty with no
    members.
 3. KafkaConsumer 2, same group: committed(tp) says the same before it
    subscribes; once assigned every partition it reads nothing for a quiet
    period; M more records are produced and it reads exactly those, each
    once; it commits and committed(tp) says the new high watermarks.
"""

import argparse
import logging
import os
import sys
import time
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import group_lib as gl  # noqa: E402

QUIET = 2.0  # seconds consumer 2 must read nothing after its assignment


class Member:
    """One subscribed KafkaConsumer."""

    def __init__(self, a, name):
        self.name = name
        self.client_id = "stele-e2e-kp-" + name
        self.a = a
        self.tps = [TopicPartition(a.topic, p) for p in range(a.partitions)]
        self.c = KafkaConsumer(bootstrap_servers=a.bootstrap, client_id=self.client_id, group_id=a.group,
                               enable_auto_commit=False, auto_offset_reset="earliest",
                               session_timeout_ms=10000, heartbeat_interval_ms=1000)

    def member_id(self):
        # kafka-python keeps the member id of the current generation here.
        return self.c._coordinator._generation.member_id

    def committed(self):
        return {tp.partition: self.c.committed(tp) for tp in self.tps}

    def poll(self, out, timeout_ms):
        for tp, msgs in self.c.poll(timeout_ms=timeout_ms).items():
            for m in msgs:
                out.append(gl.Record(m.partition, m.offset, m.key.decode(), m.value.decode(), None))

    def wait_assigned(self, deadline):
        got = []
        while self.c.assignment() != set(self.tps):
            if time.monotonic() > deadline:
                gl.die("%s: assigned %s after the deadline, want all %d partitions"
                       % (self.name, sorted(tp.partition for tp in self.c.assignment()), self.a.partitions))
            self.poll(got, 200)
        return got

    def read_to(self, high, records, deadline):
        while any(self.c.position(tp) < high[tp.partition] for tp in self.tps):
            if time.monotonic() > deadline:
                gl.die("%s: deadline passed with %d records read; positions %s, high watermarks %s"
                       % (self.name, len(records), {tp.partition: self.c.position(tp) for tp in self.tps}, high))
            self.poll(records, 500)
        return records

    def close(self):
        # Closing cancels the fetch in flight, which kafka-python logs as an error.
        logging.getLogger("kafka.consumer.fetcher").setLevel(logging.CRITICAL)
        self.c.close()


def describe(admin, group):
    ds = admin.describe_consumer_groups([group])
    if len(ds) != 1 or ds[0].group != group:
        gl.die("describe_consumer_groups([%r]) answered %r" % (group, ds))
    return ds[0]


def check_listed(admin, group):
    groups = admin.list_consumer_groups()
    if (group, "consumer") not in groups:
        gl.die("list_consumer_groups() does not list (%r, 'consumer'): %r" % (group, sorted(groups)))


def check_stable(admin, a, m):
    """describe_consumer_groups() shows m as the group's only member, with
    every partition of the topic assigned."""
    d = describe(admin, a.group)
    want = ("Stable", "consumer", "range", 0)
    if (d.state, d.protocol_type, d.protocol, d.error_code) != want:
        gl.die("describe_consumer_groups: (state, protocol type, protocol, error) = %r, want %r"
               % ((d.state, d.protocol_type, d.protocol, d.error_code), want))
    if len(d.members) != 1:
        gl.die("describe_consumer_groups: %d members, want 1: %r" % (len(d.members), d.members))
    mi = d.members[0]
    if mi.member_id != m.member_id() or mi.client_id != m.client_id:
        gl.die("describe_consumer_groups: member (%r, %r), want (%r, %r)"
               % (mi.member_id, mi.client_id, m.member_id(), m.client_id))
    if mi.member_metadata is None or list(mi.member_metadata.subscription) != [a.topic]:
        gl.die("describe_consumer_groups: member metadata %r, want a subscription to %s" % (mi.member_metadata, a.topic))
    got = mi.member_assignment.assignment if mi.member_assignment is not None else None
    if got is None or [(t, sorted(ps)) for t, ps in got] != [(a.topic, list(range(a.partitions)))]:
        gl.die("describe_consumer_groups: member assignment %r, want %s 0..%d" % (got, a.topic, a.partitions - 1))
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--more", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--deadline", type=float, default=60)
    a = ap.parse_args()
    gl.exit_on_sigterm()
    logging.basicConfig(level=logging.ERROR, format="kafka-python: %(levelname)s %(name)s: %(message)s")
    run = "kg" + uuid.uuid4().hex[:8]
    a.group = "e2e-group-kafkapython-" + run
    t0 = time.monotonic()
    deadline = t0 + a.deadline

    acked = gl.produce(a.bootstrap, a.topic, run, 0, a.count, a.keys, deadline)
    wm = gl.admin_consumer(a.bootstrap, a.group)
    high1 = gl.high_watermarks(wm, a.topic, a.partitions)
    if sum(high1.values()) != a.count:
        gl.die("high watermarks %s sum to %d, want %d" % (high1, sum(high1.values()), a.count))
    admin = KafkaAdminClient(bootstrap_servers=a.bootstrap, client_id="stele-e2e-kp-admin")

    # --- consumer 1: read everything, show up in the admin APIs, commit --
    m1 = Member(a, "1")
    t1 = time.monotonic()
    m1.c.subscribe([a.topic])
    early = m1.wait_assigned(deadline)
    joined1 = time.monotonic() - t1
    records = m1.read_to(high1, early, deadline)
    try:
        s, _ = gl.check_reads(records, run=run, keys=a.keys, expected=set(range(a.count)), acked=acked)
    except gl.CheckError as e:
        gl.die("consumer 1: %s" % e)
    print(gl.summary_line("consumer 1 (alone in the group)", s))
    check_listed(admin, a.group)
    d = check_stable(admin, a, m1)
    print("admin: list_consumer_groups() lists it; describe_consumer_groups(): %s, %s/%s, member %s (%s) assigned %s 0..%d"
          % (d.state, d.protocol_type, d.protocol, d.members[0].member_id, d.members[0].client_id,
             a.topic, a.partitions - 1))
    try:
        m1.c.commit()
    except KafkaError as e:
        gl.die("consumer 1: commit(): %r" % e)
    if m1.committed() != high1:
        gl.die("consumer 1: committed(tp) says %s, want the high watermarks %s" % (m1.committed(), high1))
    m1.close()
    print("consumer 1: joined in %.1fs, read and committed %s, closed" % (joined1, high1))
    check_listed(admin, a.group)
    d = describe(admin, a.group)
    if (d.state, d.protocol_type, d.members) != ("Empty", "consumer", []):
        gl.die("describe_consumer_groups after the only member closed: (state, protocol type, members) = %r, "
               "want ('Empty', 'consumer', [])" % ((d.state, d.protocol_type, d.members),))
    print("admin: after close the group is listed and described as Empty with no members")

    # --- consumer 2: same group, resumes at the committed offsets --------
    m2 = Member(a, "2")
    if m2.committed() != high1:
        gl.die("consumer 2, before subscribing: committed(tp) says %s, want %s" % (m2.committed(), high1))
    t2 = time.monotonic()
    m2.c.subscribe([a.topic])
    old = m2.wait_assigned(deadline)
    joined2 = time.monotonic() - t2
    quiet_end = time.monotonic() + QUIET
    while time.monotonic() < quiet_end:
        m2.poll(old, 200)
    if old:
        r = old[0]
        gl.die("consumer 2 read %d old records after consumer 1 committed %s, first: partition %d offset %d"
               % (len(old), high1, r.partition, r.offset))
    acked.update(gl.produce(a.bootstrap, a.topic, run, a.count, a.count + a.more, a.keys, deadline))
    high2 = gl.high_watermarks(wm, a.topic, a.partitions)
    records = m2.read_to(high2, [], deadline)
    try:
        s, _ = gl.check_reads(records, run=run, keys=a.keys, expected=set(range(a.count, a.count + a.more)),
                              acked=acked, start=high1)
    except gl.CheckError as e:
        gl.die("consumer 2: %s" % e)
    print(gl.summary_line("consumer 2 (after consumer 1 closed)", s))
    check_stable(admin, a, m2)
    try:
        m2.c.commit()
    except KafkaError as e:
        gl.die("consumer 2: commit(): %r" % e)
    if m2.committed() != high2:
        gl.die("consumer 2: committed(tp) says %s, want the high watermarks %s" % (m2.committed(), high2))
    m2.close()
    admin.close()
    wm.close()
    print("consumer 2: joined in %.1fs, nothing old for %.0fs, then exactly the %d new records; committed %s"
          % (joined2, QUIET, a.more, high2))
    print("kafka-python group: %.1fs in all" % (time.monotonic() - t0))


if __name__ == "__main__":
    try:
        main()
    except KafkaError as e:
        gl.die("kafka-python: %r" % e)
