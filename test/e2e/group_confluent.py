#!/usr/bin/python3
"""A confluent-kafka (librdkafka) group consumer against Stele, unchanged.

    group_confluent.py --bootstrap HOST:PORT --topic T --partitions P
                       --count N --more M --keys K [--deadline S]

 1. Produces N keyed records (acks=all).
 2. Consumer 1 subscribes with a fresh group.id, reads until every
    partition is at its high watermark (each of the N records exactly
    once, at the offset it was acknowledged at), commits synchronously
    (Consumer.commit(asynchronous=False)); the commit's answer and
    Consumer.committed() both say every partition's high watermark; it
    closes (LeaveGroup).
 3. Consumer 2, same group: Consumer.committed() before subscribing says
    the same; once subscribed and assigned every partition it reads
    nothing for a quiet period (nothing old); then M more records are
    produced and it reads exactly those, each once, none before the
    committed offsets; it commits and committed() says the new high
    watermarks.
"""

import argparse
import os
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import group_lib as gl  # noqa: E402

QUIET = 2.0  # seconds consumer 2 must read nothing after its assignment


class Member:
    """One subscribed confluent-kafka consumer and what it was assigned."""

    def __init__(self, a, name):
        self.name = name
        self.assigned = None
        self.c = Consumer({
            "bootstrap.servers": a.bootstrap,
            "client.id": "stele-e2e-%s" % name,
            "group.id": a.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "error_cb": lambda err: print("%s: client error: %s" % (name, err), file=sys.stderr),
        })

    def subscribe(self, topic):
        def on_assign(c, parts):
            self.assigned = sorted(tp.partition for tp in parts)

        def on_revoke(c, parts):
            self.assigned = None

        self.c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)

    def poll(self, timeout):
        """A record, or None; any consumer error fails the test."""
        msg = self.c.poll(timeout)
        if msg is None:
            return None
        if msg.error() is not None:
            gl.die("%s: %s" % (self.name, msg.error()))
        return gl.Record(msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode(), None)

    def wait_assigned(self, partitions, deadline):
        """Poll until every partition is assigned; records read meanwhile
        are returned."""
        got = []
        while self.assigned != list(range(partitions)):
            if time.monotonic() > deadline:
                gl.die("%s: assigned %s after the deadline, want all %d partitions"
                       % (self.name, self.assigned, partitions))
            r = self.poll(0.2)
            if r is not None:
                got.append(r)
        return got

    def read_to(self, high, records, deadline):
        """Poll until every partition's position reaches high."""
        pos = {}
        for r in records:
            pos[r.partition] = max(pos.get(r.partition, 0), r.offset + 1)
        while any(pos.get(p, 0) < h for p, h in high.items()):
            if time.monotonic() > deadline:
                gl.die("%s: deadline passed with %d records read; positions %s, high watermarks %s"
                       % (self.name, len(records), dict(sorted(pos.items())), high))
            r = self.poll(0.5)
            if r is None:
                continue
            records.append(r)
            pos[r.partition] = max(pos.get(r.partition, 0), r.offset + 1)
        return records

    def commit_sync(self, high, since):
        """Commit what was consumed: the answer must be high for every
        partition read past since (librdkafka leaves out the others)."""
        try:
            res = self.c.commit(asynchronous=False)
        except KafkaException as e:
            gl.die("%s: commit(asynchronous=False): %s" % (self.name, e))
        got = {}
        for tp in res:
            if tp.error is not None:
                gl.die("%s: commit: %s [%d]: %s" % (self.name, tp.topic, tp.partition, tp.error))
            got[tp.partition] = tp.offset
        want = {p: h for p, h in high.items() if h > since.get(p, 0)}
        if got != want:
            gl.die("%s: commit answered offsets %s, want %s" % (self.name, dict(sorted(got.items())), want))


def check_committed(name, c, a, want):
    got = gl.committed(c, a.topic, a.partitions)
    if got != want:
        gl.die("%s: Consumer.committed() says %s, want the high watermarks %s" % (name, got, want))


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
    run = "cg" + uuid.uuid4().hex[:8]
    a.group = "e2e-group-confluent-" + run
    t0 = time.monotonic()
    deadline = t0 + a.deadline

    acked = gl.produce(a.bootstrap, a.topic, run, 0, a.count, a.keys, deadline)
    admin = gl.admin_consumer(a.bootstrap, a.group)
    high1 = gl.high_watermarks(admin, a.topic, a.partitions)
    if sum(high1.values()) != a.count:
        gl.die("high watermarks %s sum to %d, want %d" % (high1, sum(high1.values()), a.count))

    # --- consumer 1: read everything, commit, close ----------------------
    m1 = Member(a, "consumer-1")
    t1 = time.monotonic()
    m1.subscribe(a.topic)
    early = m1.wait_assigned(a.partitions, deadline)
    joined1 = time.monotonic() - t1
    records = m1.read_to(high1, early, deadline)
    try:
        s, _ = gl.check_reads(records, run=run, keys=a.keys, expected=set(range(a.count)), acked=acked)
    except gl.CheckError as e:
        gl.die("consumer 1: %s" % e)
    print(gl.summary_line("consumer 1 (alone in the group)", s))
    m1.commit_sync(high1, {})
    check_committed("consumer 1", m1.c, a, high1)
    m1.c.close()
    print("consumer 1: joined in %.1fs, read and committed %s in %.2fs, closed"
          % (joined1, high1, time.monotonic() - t1 - joined1))

    # --- consumer 2: same group, resumes at the committed offsets --------
    check_committed("a new consumer of the group, before subscribing", admin, a, high1)
    m2 = Member(a, "consumer-2")
    t2 = time.monotonic()
    m2.subscribe(a.topic)
    old = m2.wait_assigned(a.partitions, deadline)
    joined2 = time.monotonic() - t2
    quiet_end = time.monotonic() + QUIET
    while time.monotonic() < quiet_end:
        r = m2.poll(0.2)
        if r is not None:
            old.append(r)
    if old:
        r = old[0]
        gl.die("consumer 2 read %d old records after consumer 1 committed %s, first: partition %d offset %d"
               % (len(old), high1, r.partition, r.offset))
    acked.update(gl.produce(a.bootstrap, a.topic, run, a.count, a.count + a.more, a.keys, deadline))
    high2 = gl.high_watermarks(admin, a.topic, a.partitions)
    if sum(high2.values()) != a.count + a.more:
        gl.die("high watermarks %s sum to %d, want %d" % (high2, sum(high2.values()), a.count + a.more))
    records = m2.read_to(high2, [], deadline)
    try:
        s, _ = gl.check_reads(records, run=run, keys=a.keys, expected=set(range(a.count, a.count + a.more)),
                              acked=acked, start=high1)
    except gl.CheckError as e:
        gl.die("consumer 2: %s" % e)
    print(gl.summary_line("consumer 2 (after consumer 1 closed)", s))
    m2.commit_sync(high2, high1)
    check_committed("consumer 2", m2.c, a, high2)
    m2.c.close()
    admin.close()
    print("consumer 2: joined in %.1fs, nothing old for %.0fs, then exactly the %d new records; committed %s"
          % (joined2, QUIET, a.more, high2))
    print("confluent-kafka group: %.1fs in all" % (time.monotonic() - t0))


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        gl.die("confluent-kafka: %s" % e)
    except KafkaError as e:
        gl.die("confluent-kafka: %s" % e)
