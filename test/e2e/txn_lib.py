"""Shared code of the transaction end-to-end tests (transactions.sh).

    transactional_producer(...)  a confluent-kafka Producer with a transactional.id,
                                 its librdkafka log kept (producer ids acquired)
    Deliveries                   the delivery reports of a producer, by value
    read_all(...)                every partition of a topic from the beginning,
                                 read_committed or read_uncommitted, up to the end
                                 ListOffsets names for that isolation level
    Watermarks                   end offsets as ListOffsets gives them to a
                                 read_committed and a read_uncommitted consumer
    check_exact(...)             a read holds exactly the expected records, each
                                 once, at the offsets they were acknowledged at
    describe_transactions(...),  DescribeTransactions v0 and ListTransactions v0,
    list_transactions(...)       spoken over a socket (idem_describe.Conn):
                                 neither confluent-kafka 1.7 nor kafka-python
                                 2.0.2 can send them

Run with /usr/bin/python3 (the Debian clients are modules of the system
Python).
"""

import collections
import logging
import os
import re
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib  # noqa: E402
from confluent_roundtrip import ProtocolErrors  # noqa: E402
from e2elib import CheckError, Record, die  # noqa: E402,F401  (re-exported for the scripts)
from group_lib import exit_on_sigterm  # noqa: E402,F401  (re-exported for the scripts)
from idem_describe import Conn, compact_str, uvarint  # noqa: E402

DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
PID_RE = re.compile(r"Acquired PID\{Id:(-?\d+),Epoch:(-?\d+)\}")
FENCED_CODES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


class ClientLog(logging.Handler):
    """One librdkafka client's log: the producer ids it acquired, its
    warnings (echoed to stderr), every line kept for --client-log."""

    def __init__(self, name):
        super().__init__()
        self.name = name
        self.pids = []  # (id, epoch) in the order acquired
        self.lines = []
        self.logger = logging.getLogger("librdkafka-" + name)
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record):
        msg = record.getMessage()
        self.lines.append(msg)
        m = PID_RE.search(msg)
        if m:
            self.pids.append((int(m.group(1)), int(m.group(2))))
        if record.levelno >= logging.WARNING:
            print("%s: librdkafka: %s" % (self.name, msg), file=sys.stderr)

    def pid(self, client=None):
        """The last producer id and epoch acquired; fails if none was.
        librdkafka's log reaches Python only through poll(): with client,
        it is polled (for at most 5 s) until a producer id shows up."""
        deadline = time.monotonic() + 5
        while client is not None and not self.pids and time.monotonic() < deadline:
            client.poll(0.05)
        if not self.pids:
            die("%s: librdkafka logged no acquired producer id" % self.name)
        return self.pids[-1]

    def save(self, path):
        """Append the log to path (nothing when path is None)."""
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write("".join("%s: %s\n" % (self.name, line) for line in self.lines))


class Deliveries:
    """Delivery reports by record value: acked {value: (partition,
    offset)}, failed [(value, error)]."""

    def __init__(self, name):
        self.name = name
        self.acked = {}
        self.failed = []

    def __call__(self, err, msg):
        value = msg.value().decode()
        if err is not None:
            self.failed.append((value, err))
        elif value in self.acked:
            self.failed.append((value, "acknowledged twice"))
        else:
            self.acked[value] = (msg.partition(), msg.offset())

    def flush(self, p, deadline):
        """Flush producer p and fail on any failed delivery."""
        left = p.flush(max(deadline - time.monotonic(), 0.1))
        if left:
            die("%s: %d records unacknowledged at the deadline" % (self.name, left))
        if self.failed:
            die("%s: %d deliveries failed, first: %s: %s" % (self.name, len(self.failed), *self.failed[0]))


def transactional_producer(bootstrap, tid, name, clog, errors=None):
    """A Producer with transactional.id tid (init_transactions not yet
    called). Client errors are printed and, if errors is a list, kept."""

    def on_error(err):
        print("%s: client error%s: %s" % (name, " (FATAL)" if err.fatal() else "", err), file=sys.stderr)
        if errors is not None:
            errors.append(err)

    return Producer({
        "bootstrap.servers": bootstrap,
        "client.id": "stele-e2e-" + name,
        "transactional.id": tid,
        "transaction.timeout.ms": 60000,
        "linger.ms": 5,
        "debug": "eos",
        "logger": clog.logger,
        "error_cb": on_error,
    })


def record_of(msg):
    return Record(msg.partition(), msg.offset(), None if msg.key() is None else msg.key().decode(),
                  msg.value().decode(), list(msg.headers() or []))


def consumer(bootstrap, name, isolation, **extra):
    """A confluent-kafka consumer that never joins its group: assign only."""
    conf = {
        "bootstrap.servers": bootstrap,
        "client.id": "stele-e2e-" + name,
        "group.id": "stele-e2e-unused",
        "isolation.level": isolation,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "error_cb": lambda err: print("%s: client error: %s" % (name, err), file=sys.stderr),
    }
    conf.update(extra)
    return Consumer(conf)


def read_all(bootstrap, topic, partitions, isolation, deadline, name, fetch_bytes=None):
    """Every record of every partition from the beginning up to the end
    offset ListOffsets gives for isolation (the last stable offset for
    read_committed): returns (records in the order each partition gave
    them, {partition: end offset}). fetch_bytes caps each partition's
    share of a fetch (max.partition.fetch.bytes), so that the read takes
    many fetches, each with its own list of aborted transactions."""
    protoerr = ProtocolErrors()
    logger = logging.getLogger("librdkafka-" + name)
    logger.propagate = False
    logger.addHandler(protoerr)
    extra = {"logger": logger}
    if fetch_bytes:
        extra.update({"max.partition.fetch.bytes": fetch_bytes, "fetch.max.bytes": fetch_bytes * partitions,
                      "message.max.bytes": 1000})  # fetch.max.bytes must be at least that
    c = consumer(bootstrap, name, isolation, **extra)
    try:
        high = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        records, at_end = [], set()
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                die("%s: deadline passed with %d records read, partitions at their end %s of %s"
                    % (name, len(records), sorted(at_end), high))
            msg = c.poll(0.2)
            if protoerr.seen:
                die("%s: librdkafka cannot parse the broker's response: %s" % (name, " / ".join(protoerr.seen[:2])))
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= high[msg.partition()]:
                        at_end.add(msg.partition())
                    continue
                die("%s: %s" % (name, msg.error()))
            if msg.partition() in at_end:
                die("%s: partition %d offset %d read after the partition's end %d"
                    % (name, msg.partition(), msg.offset(), high[msg.partition()]))
            records.append(record_of(msg))
        return records, high
    finally:
        c.close()


class Watermarks:
    """End offsets of a topic's partitions as ListOffsets (latest) answers
    a read_committed consumer (the last stable offset) and a
    read_uncommitted one (the high watermark)."""

    def __init__(self, bootstrap, topic, partitions):
        self.topic, self.partitions = topic, partitions
        self.rc = consumer(bootstrap, "watermarks-rc", "read_committed")
        self.ru = consumer(bootstrap, "watermarks-ru", "read_uncommitted")

    def get(self):
        """({partition: last stable offset}, {partition: high watermark})."""
        def ends(c):
            return {p: c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
                    for p in range(self.partitions)}
        return ends(self.rc), ends(self.ru)

    def close(self):
        self.rc.close()
        self.ru.close()


def check_exact(name, records, expected, partitions, key_of=None):
    """records must hold exactly the values of expected ({value:
    (partition, offset)}), each once, at its acknowledged partition and
    offset, in increasing offset order in each partition, with the key
    key_of(value) if given: anything else (an aborted or open
    transaction's record, a control record delivered as one, a duplicate,
    a record out of order) fails. Returns {partition: records read}."""
    seen = set()
    last = {}
    per_part = collections.Counter()
    for r in records:
        if not 0 <= r.partition < partitions:
            raise CheckError("%s: a record of partition %d of a %d-partition topic" % (name, r.partition, partitions))
        where = expected.get(r.value)
        if where is None:
            raise CheckError("%s: partition %d offset %d: key %r value %r must not be read here"
                             % (name, r.partition, r.offset, r.key, r.value))
        if key_of is not None and r.key != key_of(r.value):
            raise CheckError("%s: partition %d offset %d: %r has key %r, want %r"
                             % (name, r.partition, r.offset, r.value, r.key, key_of(r.value)))
        if r.value in seen:
            raise CheckError("%s: partition %d offset %d: %r read twice" % (name, r.partition, r.offset, r.value))
        if (r.partition, r.offset) != where:
            raise CheckError("%s: %r read at partition %d offset %d, acknowledged at partition %d offset %d"
                             % (name, r.value, r.partition, r.offset, *where))
        if r.offset <= last.get(r.partition, -1):
            raise CheckError("%s: partition %d: offset %d read after offset %d"
                             % (name, r.partition, r.offset, last[r.partition]))
        last[r.partition] = r.offset
        seen.add(r.value)
        per_part[r.partition] += 1
    missing = sorted(set(expected) - seen, key=lambda v: expected[v])
    if missing:
        raise CheckError("%s: %d of %d records never read, first %r (partition %d offset %d)"
                         % (name, len(missing), len(expected), missing[0], *expected[missing[0]]))
    return {p: per_part[p] for p in range(partitions)}


def parts_line(counts):
    return ", ".join("p%d=%d" % (p, n) for p, n in sorted(counts.items()))


# --- DescribeTransactions v0 and ListTransactions v0 --------------------------


def describe_transactions(bootstrap, ids):
    """DescribeTransactions v0: {transactional id: dict(error, state,
    timeout_ms, start_ms, producer_id, epoch, topics={topic: [partitions]})}."""
    body = uvarint(len(ids) + 1) + b"".join(compact_str(i) for i in ids) + b"\x00"
    conn = Conn(bootstrap)
    try:
        r = conn.call(DESCRIBE_TRANSACTIONS, 0, body, flexible=True)
    finally:
        conn.sock.close()
    r.fixed("i")  # throttle
    out = {}
    for _ in range(r.compact_len()):
        t = {"error": r.fixed("h")}
        tid = r.compact_str()
        t["state"] = r.compact_str()
        t["timeout_ms"], t["start_ms"], t["producer_id"], t["epoch"] = r.fixed("i"), r.fixed("q"), r.fixed("q"), r.fixed("h")
        t["topics"] = {}
        for _ in range(r.compact_len()):
            topic = r.compact_str()
            t["topics"][topic] = sorted(r.fixed("i") for _ in range(r.compact_len()))
            r.tags()
        r.tags()
        out[tid] = t
    r.tags()
    r.done()
    return out


def list_transactions(bootstrap, states=()):
    """ListTransactions v0 with a state filter: {transactional id:
    (producer id, state)}; a non-zero error code fails."""
    body = uvarint(len(states) + 1) + b"".join(compact_str(s) for s in states)
    body += uvarint(1)  # no producer id filter
    body += b"\x00"
    conn = Conn(bootstrap)
    try:
        r = conn.call(LIST_TRANSACTIONS, 0, body, flexible=True)
    finally:
        conn.sock.close()
    r.fixed("i")  # throttle
    code = r.fixed("h")
    unknown = [r.compact_str() for _ in range(r.compact_len())]
    out = {}
    for _ in range(r.compact_len()):
        tid = r.compact_str()
        out[tid] = (r.fixed("q"), r.compact_str())
        r.tags()
    r.tags()
    r.done()
    if code != 0 or unknown:
        raise CheckError("ListTransactions v0 %s: error code %d, unknown states %s" % (list(states), code, unknown))
    return out


def expect_txn(bootstrap, tid, state, producer_id, epoch, topics):
    """DescribeTransactions must describe tid in state (one of a tuple of
    states) with that producer id and epoch and, if topics is not None,
    exactly those partitions ({topic: [partitions]}). Returns the
    description."""
    states = state if isinstance(state, tuple) else (state,)
    d = describe_transactions(bootstrap, [tid]).get(tid)
    if d is None:
        raise CheckError("DescribeTransactions %s: not in the response" % tid)
    want = {"error": 0, "producer_id": producer_id, "epoch": epoch}
    if topics is not None:
        want["topics"] = topics
    bad = {k: d[k] for k, v in want.items() if d[k] != v}
    if bad or d["state"] not in states:
        raise CheckError("DescribeTransactions %s: %s, want state %s and %s" % (tid, d, "/".join(states), want))
    return d

