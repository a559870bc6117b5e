#!/usr/bin/python3
"""Consume-transform-produce, exactly once, with confluent-kafka (librdkafka).

    txn_ctp.py --bootstrap HOST:PORT --input T --output U --partitions P
               --count N --keys K [--batch B] [--abort-batch I]
               [--client-log FILE] [--deadline S]

 1. N keyed records are produced to the input topic (acks=all, not
    transactional).
 2. A copier, as confluent-kafka's eos-transactions example is built: a
    consumer subscribed to the input in a fresh group (enable.auto.commit
    false, isolation.level read_committed) and a transactional producer.
    For each batch of up to B records from consume(): begin_transaction,
    produce each record to the output (same key and value, a header "src"
    naming its input partition and offset),
    send_offsets_to_transaction(consumer.position(assignment),
    consumer.consumer_group_metadata()), commit_transaction. Batch I is
    aborted on purpose after its records were flushed to the output and
    its offsets sent; the copier then rewinds, as the example does: it
    seeks every assigned partition back to the group's committed offset
    (the beginning where none is) and reads that input again. The copier
    stops once the offsets it committed are the input's high watermarks.
 3. Checked: the group's committed offsets (Consumer.committed(), from a
    fresh consumer of the group) are the input's high watermarks; the
    output read read_committed holds every input record exactly once, with
    its key and the input position it came from, in input order per key;
    read read_uncommitted it also holds the aborted batch's copies (so the
    abort did write them, and read_committed dropped them): N + the aborted
    batch's size records.
"""

import argparse
import collections
import os
import sys
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import group_lib as gl  # noqa: E402
import txn_lib as tl  # noqa: E402


class Copier:
    """The consumer and transactional producer of the copy loop."""

    def __init__(self, a, run, clog):
        self.a = a
        self.group = "e2e-txn-ctp-" + run
        self.errors = []
        self.c = Consumer({
            "bootstrap.servers": a.bootstrap,
            "client.id": "stele-e2e-txn-copier",
            "group.id": self.group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "error_cb": lambda err: print("copier consumer: client error: %s" % err, file=sys.stderr),
        })
        self.d = tl.Deliveries("copier producer")
        self.p = tl.transactional_producer(a.bootstrap, "e2e-txn-ctp-" + run, "copier-producer", clog, self.errors)
        self.committed = {}  # {partition: offset} as last committed by a transaction
        self.batches = []  # (outcome, [input seq...], seconds)
        self.rewound_to = None

    def run(self, high, run, deadline):
        self.p.init_transactions(10)
        self.c.subscribe([self.a.input])
        while any(self.committed.get(p, 0) < h for p, h in high.items()):
            if time.monotonic() > deadline:
                tl.die("copier: deadline passed after %d batches; committed %s, input high watermarks %s"
                       % (len(self.batches), self.committed, high))
            msgs = self.c.consume(num_messages=self.a.batch, timeout=0.5)
            for m in msgs:
                if m.error() is not None:
                    tl.die("copier consumer: %s" % m.error())
            if not msgs:
                continue
            self.transact(msgs, run, deadline)

    def transact(self, msgs, run, deadline):
        t = time.monotonic()
        abort = len(self.batches) == self.a.abort_batch
        self.p.begin_transaction()
        seqs = []
        for m in msgs:
            seqs.append(gl.seq_of(run, m.value().decode()))
            self.p.produce(self.a.output, key=m.key(), value=m.value(),
                           headers=[("src", ("%d:%d" % (m.partition(), m.offset())).encode())], on_delivery=self.d)
        positions = self.c.position(self.c.assignment())
        self.p.send_offsets_to_transaction(positions, self.c.consumer_group_metadata(),
                                           max(deadline - time.monotonic(), 1))
        if abort:
            # Flushed first: the aborted copies must reach the log, for the
            # read_committed reader to drop.
            self.d.flush(self.p, deadline)
            self.p.abort_transaction(max(deadline - time.monotonic(), 1))
            self.rewind()
        else:
            self.p.commit_transaction(max(deadline - time.monotonic(), 1))
            for tp in positions:
                if tp.offset >= 0:
                    self.committed[tp.partition] = tp.offset
        self.batches.append(("abort" if abort else "commit", seqs, time.monotonic() - t))

    def rewind(self):
        """Seek every assigned partition back to the group's committed
        offset, or the beginning where there is none."""
        self.rewound_to = {}
        for tp in self.c.committed(self.c.assignment(), timeout=10):
            if tp.error is not None:
                tl.die("copier: committed() after the abort: %s [%d]: %s" % (tp.topic, tp.partition, tp.error))
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            self.rewound_to[tp.partition] = tp.offset
            self.c.seek(tp)
        if self.rewound_to != {p: self.committed.get(p, OFFSET_BEGINNING) for p in self.rewound_to}:
            tl.die("copier: after the abort the group's committed offsets are %s, but the transactions "
                   "committed %s" % (self.rewound_to, self.committed))

    def close(self):
        self.c.close()
        self.p.flush(1)


def check_output(a, run, acked, aborted, deadline):
    """The output, read_committed and read_uncommitted."""
    records, _ = tl.read_all(a.bootstrap, a.output, a.partitions, "read_committed", deadline, "output read_committed")
    seen = collections.Counter()
    last = {}
    for r in records:
        seq = gl.seq_of(run, r.value)
        if seq is None or seq not in acked:
            tl.die("output read_committed: partition %d offset %d: value %r was never an input record"
                   % (r.partition, r.offset, r.value))
        src = dict(r.headers).get("src", b"").decode()
        if r.key != gl.key_of(seq, a.keys) or src != "%d:%d" % acked[seq]:
            tl.die("output read_committed: partition %d offset %d: record %d with key %r from %r, want key %r "
                   "from input %d:%d" % (r.partition, r.offset, seq, r.key, src, gl.key_of(seq, a.keys), *acked[seq]))
        if seq <= last.get(r.key, -1):
            tl.die("output read_committed: partition %d offset %d: record %d of key %s after record %d"
                   % (r.partition, r.offset, seq, r.key, last[r.key]))
        last[r.key] = seq
        seen[seq] += 1
    dup = sorted(s for s, n in seen.items() if n > 1)
    missing = sorted(set(acked) - set(seen))
    if dup or missing:
        tl.die("output read_committed: %d input records copied more than once (first %s), %d never (first %s); "
               "the aborted batch held records %s..%s"
               % (len(dup), dup[:5], len(missing), missing[:5], min(aborted, default=None), max(aborted, default=None)))
    print("output read_committed: %d records, each of the %d input records exactly once, keys and input "
          "positions as consumed, in input order per key" % (len(records), len(acked)))
    records, _ = tl.read_all(a.bootstrap, a.output, a.partitions, "read_uncommitted", deadline,
                             "output read_uncommitted")
    extra = collections.Counter(gl.seq_of(run, r.value) for r in records)
    extra.subtract(seen)
    extra = sorted(+extra)
    if extra != sorted(aborted):
        tl.die("output read_uncommitted: %d records; beyond the committed copies it holds %d records (first %s), "
               "want the %d copies of the aborted batch" % (len(records), len(extra), extra[:5], len(aborted)))
    print("output read_uncommitted: %d records: the committed copies and the %d of the aborted batch"
          % (len(records), len(aborted)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--abort-batch", type=int, default=3, help="the batch (from 0) to abort")
    ap.add_argument("--client-log", help="append the copier producer's librdkafka log here")
    ap.add_argument("--deadline", type=float, default=35)
    a = ap.parse_args()
    gl.exit_on_sigterm()
    run = "ct" + uuid.uuid4().hex[:8]
    t0 = time.monotonic()
    deadline = t0 + a.deadline

    acked = gl.produce(a.bootstrap, a.input, run, 0, a.count, a.keys, deadline)
    clog = tl.ClientLog("copier-producer")
    cp = Copier(a, run, clog)
    admin = gl.admin_consumer(a.bootstrap, cp.group)
    try:
        high = gl.high_watermarks(admin, a.input, a.partitions)
        if sum(high.values()) != a.count:
            tl.die("input high watermarks %s sum to %d, want %d" % (high, sum(high.values()), a.count))
        t1 = time.monotonic()
        try:
            cp.run(high, run, deadline)
        finally:
            cp.close()
            clog.save(a.client_log)
        copied = time.monotonic()
        if cp.errors:
            tl.die("copier producer: client errors: %s" % cp.errors)
        if len(cp.batches) <= a.abort_batch or cp.rewound_to is None:
            tl.die("copier: %d batches, batch %d never aborted" % (len(cp.batches), a.abort_batch))
        aborted = cp.batches[a.abort_batch][1]
        got = gl.committed(admin, a.input, a.partitions)
        if got != high:
            tl.die("group %s: Consumer.committed() says %s, want the input high watermarks %s" % (cp.group, got, high))
        print("copier: %d batches of up to %d records in %.1fs (commit %.3fs a batch on average); batch %d "
              "(%d records, %d..%d) aborted, then rewound to the committed offsets %s and read again; "
              "producer id %d epoch %d"
              % (len(cp.batches), a.batch, copied - t1,
                 sum(s for o, _, s in cp.batches if o == "commit") / max(1, len(cp.batches) - 1), a.abort_batch,
                 len(aborted), min(aborted), max(aborted), cp.rewound_to, *clog.pid()))
        print("group %s: Consumer.committed() says %s, the input high watermarks" % (cp.group, got))
        check_output(a, run, {s: po for s, po in acked.items()}, aborted, deadline)
    finally:
        admin.close()
    print("consume-transform-produce: %.1fs in all" % (time.monotonic() - t0))


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        tl.die("confluent-kafka: %s" % e.args[0])
