#!/usr/bin/python3
"""Produce and consume a topic with confluent-kafka (librdkafka), unchanged.

    confluent_roundtrip.py --bootstrap HOST:PORT --topic T --count N --keys K
                           --partitions P [--deadline S]

Produces N keyed records with headers (acks=all), collecting every delivery
report, then reads every partition from the beginning with an assigned
consumer (Stele has no consumer groups yet, so no subscribe) and checks the
read with e2elib.check_log: all N records exactly once, keys, values and
headers as sent, each at the offset acknowledged, per-partition order.
"""

import logging
import os
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib  # noqa: E402


def produce(a, run, deadline):
    acked, failed = [], []

    def on_delivery(err, msg):
        seq = e2elib.seq_of(run, msg.value().decode())
        if err is not None:
            failed.append((seq, str(err)))
        else:
            acked.append((seq, msg.partition(), msg.offset()))

    p = Producer({
        "bootstrap.servers": a.bootstrap,
        "client.id": "stele-e2e-confluent",
        "acks": "all",
        "enable.idempotence": False,
        "linger.ms": 5,
        "message.timeout.ms": 30000,
        "error_cb": lambda err: print("confluent producer: client error: %s" % err, file=sys.stderr),
    })
    for seq in range(a.count):
        while True:
            try:
                p.produce(a.topic, key=e2elib.key_of(seq, a.keys), value=e2elib.value_of(run, seq),
                          headers=e2elib.headers_of(run, seq), on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
            if time.monotonic() > deadline:
                e2elib.die("confluent producer: deadline passed while producing")
        p.poll(0)
    left = p.flush(max(deadline - time.monotonic(), 0))
    if failed:
        e2elib.die("confluent producer: %d deliveries failed, first: record %d: %s"
                   % (len(failed), failed[0][0], failed[0][1]))
    if left:
        e2elib.die("confluent producer: %d records unacknowledged at the deadline" % left)
    return acked


class ProtocolErrors(logging.Handler):
    """Keeps librdkafka's protocol parse failures: librdkafka logs a response
    it cannot parse and retries it forever, which would otherwise look like a
    consumer that never reaches the end."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def emit(self, record):
        msg = record.getMessage()
        if "PROTOERR" in msg or "Protocol parse failure" in msg or "MessageSetSize" in msg:
            self.seen.append(msg)
        if record.levelno >= logging.WARNING:
            print("confluent consumer: librdkafka: %s" % msg, file=sys.stderr)


def consume(a, deadline):
    protoerr = ProtocolErrors()
    logger = logging.getLogger("librdkafka")
    logger.propagate = False
    logger.addHandler(protoerr)
    c = Consumer({
        "bootstrap.servers": a.bootstrap,
        "client.id": "stele-e2e-confluent",
        # librdkafka wants a group id for a consumer; it is never joined
        # (assign, no subscribe) and nothing is committed.
        "group.id": "stele-e2e-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "error_cb": lambda err: print("confluent consumer: client error: %s" % err, file=sys.stderr),
        "logger": logger,
    })
    try:
        md = c.list_topics(a.topic, timeout=10)
        t = md.topics[a.topic]
        if t.error is not None:
            e2elib.die("confluent consumer: metadata of %s: %s" % (a.topic, t.error))
        if len(t.partitions) != a.partitions:
            e2elib.die("confluent consumer: metadata says %s has %d partitions, want %d"
                       % (a.topic, len(t.partitions), a.partitions))
        high = {}
        for p in range(a.partitions):
            _, high[p] = c.get_watermark_offsets(TopicPartition(a.topic, p), timeout=10)
        if sum(high.values()) != a.count:
            e2elib.die("confluent consumer: high watermarks %s sum to %d, want %d" % (high, sum(high.values()), a.count))
        c.assign([TopicPartition(a.topic, p, OFFSET_BEGINNING) for p in range(a.partitions)])
        records, at_eof = [], set()
        while len(at_eof) < a.partitions:
            if time.monotonic() > deadline:
                e2elib.die("confluent consumer: deadline passed with %d records read, partitions at end: %s"
                           % (len(records), sorted(at_eof)))
            msg = c.poll(0.5)
            if protoerr.seen:
                e2elib.die("confluent consumer: librdkafka cannot parse the broker's response: %s"
                           % " / ".join(protoerr.seen[:2]))
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= high[msg.partition()]:
                        at_eof.add(msg.partition())
                    continue
                e2elib.die("confluent consumer: %s" % msg.error())
            records.append(e2elib.Record(msg.partition(), msg.offset(), msg.key().decode(),
                                         msg.value().decode(), list(msg.headers() or [])))
        return records
    finally:
        c.close()


def main():
    e2elib.roundtrip_main("confluent-kafka", "cf", produce, consume)


if __name__ == "__main__":
    main()
