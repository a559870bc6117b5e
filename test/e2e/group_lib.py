"""Shared code of the consumer-group end-to-end tests (groups.sh).

The records follow e2elib's scheme (key_of, value_of) with a sequence number
per record, so a group's reads can be checked against what was produced:

    produce(...)            send records seq in [first, last) with confluent-kafka
                            (acks=all) and return where each one landed
    check_reads(...)        every expected record read, nothing else, offsets
                            of a partition dense from where the group resumed
    high_watermarks(...)    the end offset of every partition
    committed(...)          the group's committed offsets, with Consumer.committed()
    spawn(...)              a child process that dies with this one

Run with /usr/bin/python3 (the Debian clients are modules of the system
Python).
"""

import collections
import ctypes
import os
import signal
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib  # noqa: E402,F401  (re-exported for the scripts)
from e2elib import CheckError, Record, die, key_of, seq_of, value_of  # noqa: E402,F401


def produce(bootstrap, topic, run, first, last, keys, deadline, rate=None, tick=None):
    """Send records first..last-1 (acks=all) and wait for every delivery
    report. rate (records per second) spreads them out; tick() is called
    about every 50 ms while producing. Returns {seq: (partition, offset)}."""
    acked, failed = {}, []

    def on_delivery(err, msg):
        seq = seq_of(run, msg.value().decode())
        if err is not None:
            failed.append((seq, str(err)))
        else:
            acked[seq] = (msg.partition(), msg.offset())

    p = Producer({
        "bootstrap.servers": bootstrap,
        "client.id": "stele-e2e-group-producer",
        "acks": "all",
        "enable.idempotence": False,
        "linger.ms": 5,
        "message.timeout.ms": 30000,
        "error_cb": lambda err: print("producer: client error: %s" % err, file=sys.stderr),
    })
    start = last_tick = time.monotonic()
    for seq in range(first, last):
        if rate:
            # Keep to the rate: sleep until this record is due.
            due = start + (seq - first) / rate
            while time.monotonic() < due:
                p.poll(min(0.05, max(due - time.monotonic(), 0)))
        while True:
            try:
                p.produce(topic, key=key_of(seq, keys), value=value_of(run, seq), on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
            if time.monotonic() > deadline:
                die("producer: deadline passed while producing")
        p.poll(0)
        if tick is not None and time.monotonic() - last_tick >= 0.05:
            last_tick = time.monotonic()
            tick(seq - first + 1)
    while len(p) > 0:
        if time.monotonic() > deadline:
            die("producer: %d records unacknowledged at the deadline" % len(p))
        p.poll(0.05)
        if tick is not None:
            tick(last - first)
    if failed:
        die("producer: %d deliveries failed, first: record %d: %s" % (len(failed), failed[0][0], failed[0][1]))
    if len(acked) != last - first:
        die("producer: %d of %d records acknowledged" % (len(acked), last - first))
    return acked


def admin_consumer(bootstrap, group):
    """A confluent-kafka consumer of group that never subscribes: for
    watermarks and Consumer.committed() only."""
    return Consumer({
        "bootstrap.servers": bootstrap,
        "client.id": "stele-e2e-group-admin",
        "group.id": group,
        "enable.auto.commit": False,
        "error_cb": lambda err: print("admin consumer: client error: %s" % err, file=sys.stderr),
    })


def high_watermarks(c, topic, partitions):
    """{partition: high watermark} read with c (a confluent Consumer)."""
    return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}


def committed(c, topic, partitions):
    """{partition: committed offset} of c's group (-1001 when none),
    read with Consumer.committed(); a per-partition error fails the test."""
    out = {}
    for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10):
        if tp.error is not None:
            die("Consumer.committed(): %s [%d]: %s" % (tp.topic, tp.partition, tp.error))
        out[tp.partition] = tp.offset
    return out


def check_reads(records, *, run, keys, expected, acked, start=None, copies_allowed=False):
    """Check what a group read.

    records:  Records read (partition, offset, key, value), in any order,
              possibly by several members.
    expected: the sequence numbers that had to be read; any other record
              of the topic read is an error (an old record re-read after
              the group committed past it, or one never sent).
    acked:    {seq: (partition, offset)} from produce(): a record must be
              read at the offset it was acknowledged at.
    start:    {partition: offset} where the group had to resume (its
              committed offsets); a record before it is an error.
    copies_allowed: at-least-once; a record read more than once is
              counted, not an error.

    Returns (summary dict, list of seq read more than once).
    """
    where = {po: seq for seq, po in acked.items()}
    seen = collections.Counter()
    per_part = collections.Counter()
    for r in records:
        seq = seq_of(run, r.value)
        if seq is None:
            raise CheckError("partition %d offset %d: value %r was never sent" % (r.partition, r.offset, r.value))
        if where.get((r.partition, r.offset)) != seq:
            raise CheckError("partition %d offset %d: read record %d, but that offset holds %s"
                             % (r.partition, r.offset, seq, where.get((r.partition, r.offset), "nothing acknowledged")))
        if r.key != key_of(seq, keys):
            raise CheckError("partition %d offset %d: key %r, want %r" % (r.partition, r.offset, r.key, key_of(seq, keys)))
        if start is not None and r.offset < start.get(r.partition, 0):
            raise CheckError("partition %d offset %d (record %d): read again although the group had committed "
                             "offset %d for the partition" % (r.partition, r.offset, seq, start[r.partition]))
        if seq not in expected:
            raise CheckError("partition %d offset %d: record %d was read but is not among the records "
                             "this group still had to read" % (r.partition, r.offset, seq))
        seen[seq] += 1
        per_part[r.partition] += 1
    missing = sorted(s for s in expected if s not in seen)
    if missing:
        first = missing[0]
        raise CheckError("%d of %d records never read, first: record %d (partition %d offset %d)"
                         % (len(missing), len(expected), first, acked[first][0], acked[first][1]))
    copies = sorted(s for s, n in seen.items() if n > 1)
    if copies and not copies_allowed:
        raise CheckError("%d records read more than once without any failure, first: record %d (%d times)"
                         % (len(copies), copies[0], seen[copies[0]]))
    return {
        "records": len(records),
        "distinct": len(seen),
        "copies": sum(n - 1 for n in seen.values()),
        "copied_records": len(copies),
        "per_partition": dict(sorted(per_part.items())),
    }, copies


def summary_line(name, s):
    parts = ", ".join("p%d=%d" % (p, n) for p, n in s["per_partition"].items())
    return "%s: %d records read (%s), %d distinct, %d duplicates of %d records" % (
        name, s["records"], parts, s["distinct"], s["copies"], s["copied_records"])


def read_records(path):
    """Records of a 'partition\\toffset\\tkey\\tvalue' file (kcat -f
    '%p\\t%o\\t%k\\t%s\\n', group_member.py); a last line still being
    written is left out."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.endswith("\n"):
                break
            parts = line[:-1].split("\t")
            if len(parts) != 4:
                raise CheckError("%s:%d: not partition\\toffset\\tkey\\tvalue: %r" % (path, n, line))
            out.append(Record(int(parts[0]), int(parts[1]), parts[2], parts[3], None))
    return out


_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # Runs in the child between fork and exec: SIGKILL when the parent
    # (this test script) dies, whatever kills it.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def spawn(args, stdout=None, stderr=None):
    """Start args as a child process that is killed when this process dies."""
    return subprocess.Popen(args, stdout=stdout, stderr=stderr, preexec_fn=_die_with_parent)


def exit_on_sigterm():
    """Turn SIGTERM (e2e_timeout's deadline) into SystemExit so that finally
    blocks run and children are stopped."""
    def handler(signum, frame):
        raise SystemExit("killed by signal %d" % signum)
    signal.signal(signal.SIGTERM, handler)
