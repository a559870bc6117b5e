#!/usr/bin/python3
"""Produce and consume a topic with kafka-python (pure Python), unchanged.

    kafkapython_roundtrip.py --bootstrap HOST:PORT --topic T --count N --keys K
                             --partitions P [--deadline S]

KafkaProducer(acks='all') sends N keyed records with headers and collects the
RecordMetadata of each; a KafkaConsumer without a group (group_id=None,
Stele has no consumer groups yet) is assigned every partition, starts at
the earliest offset and iterates with consumer_timeout_ms until it has read
up to the end offsets. e2elib.check_log checks the read: all N records
exactly once, keys, values and headers as sent, each at the offset
acknowledged, per-partition order.
"""

import logging
import os
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib  # noqa: E402


def produce(a, run, deadline):
    p = KafkaProducer(bootstrap_servers=a.bootstrap, client_id="stele-e2e-kafka-python",
                      acks="all", linger_ms=5, retries=0)
    try:
        futures = []
        for seq in range(a.count):
            futures.append((seq, p.send(a.topic, key=e2elib.key_of(seq, a.keys).encode(),
                                        value=e2elib.value_of(run, seq).encode(),
                                        headers=e2elib.headers_of(run, seq))))
        p.flush(timeout=max(deadline - time.monotonic(), 1))
        acked = []
        for seq, f in futures:
            try:
                md = f.get(timeout=max(deadline - time.monotonic(), 0.1))
            except KafkaError as e:
                e2elib.die("kafka-python producer: record %d: %r" % (seq, e))
            if md.topic != a.topic:
                e2elib.die("kafka-python producer: record %d acknowledged for topic %r" % (seq, md.topic))
            acked.append((seq, md.partition, md.offset))
        return acked
    finally:
        p.close(timeout=5)


def consume(a, deadline):
    c = KafkaConsumer(bootstrap_servers=a.bootstrap, client_id="stele-e2e-kafka-python",
                      group_id=None, enable_auto_commit=False, auto_offset_reset="earliest",
                      consumer_timeout_ms=2000)
    try:
        parts = c.partitions_for_topic(a.topic)
        if parts != set(range(a.partitions)):
            e2elib.die("kafka-python consumer: metadata says %s has partitions %s, want 0..%d"
                       % (a.topic, sorted(parts or []), a.partitions - 1))
        tps = [TopicPartition(a.topic, p) for p in range(a.partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        end = c.end_offsets(tps)
        if sum(end.values()) != a.count:
            e2elib.die("kafka-python consumer: end offsets %s sum to %d, want %d"
                       % ({tp.partition: o for tp, o in end.items()}, sum(end.values()), a.count))
        records = []
        while any(c.position(tp) < end[tp] for tp in tps):
            if time.monotonic() > deadline:
                e2elib.die("kafka-python consumer: deadline passed with %d records read" % len(records))
            # Iteration ends after consumer_timeout_ms without a record.
            for msg in c:
                headers = [(k, v) for k, v in msg.headers]
                records.append(e2elib.Record(msg.partition, msg.offset, msg.key.decode(),
                                             msg.value.decode(), headers))
                if len(records) >= a.count or time.monotonic() > deadline:
                    break
        return records
    finally:
        # Closing cancels the fetch in flight, which kafka-python logs as an error.
        logging.getLogger("kafka.consumer.fetcher").setLevel(logging.CRITICAL)
        c.close()


def setup():
    logging.basicConfig(level=logging.ERROR, format="kafka-python: %(levelname)s %(name)s: %(message)s")


def main():
    e2elib.roundtrip_main("kafka-python", "kp", produce, consume, setup)


if __name__ == "__main__":
    main()
