#!/usr/bin/python3
"""Keyless records in a compacted topic, produced with confluent-kafka
(librdkafka) in one batch with keyed ones (issue 27, KIP-467).

    record_errors.py --bootstrap HOST:PORT --topic T [--deadline S]

Creates T (1 partition, cleanup.policy=compact) and produces, in one batch
(linger.ms=1000, one partition, acks=all), records keyed a, -, b, -, c, d
(- is no key). Kafka refuses the batch whole: the answer is INVALID_RECORD
and, from Produce v8, lists records 1 and 3 in record_errors. A librdkafka
that sends Produce v8+ fails exactly those two deliveries with
INVALID_RECORD and the other four with _INVALID_DIFFERENT_RECORD ("an
invalid record in the same batch caused the failure of this message too");
one that sends an older Produce cannot tell them apart and fails all six
with INVALID_RECORD. The Produce version librdkafka chose is read from its
protocol debug log, and the deliveries are checked against what that
version must give. Then a batch of keyed records only is produced and must
be written at offsets 0-3: nothing of the refused batch was.

Debian's confluent-kafka 1.7 / librdkafka 2.0.2 sends Produce v7; the v8+
expectation was checked by hand with librdkafka 2.11.1 (confluent-kafka-go
v2.11.1, Produce v10): records 1 and 3 failed with INVALID_RECORD (87), the
others with _INVALID_DIFFERENT_RECORD (-138).
"""

import argparse
import logging
import re
import sys
import time

from confluent_kafka import KafkaError, Producer, libversion
from confluent_kafka.admin import AdminClient, NewTopic

# RD_KAFKA_RESP_ERR__INVALID_DIFFERENT_RECORD in rdkafka.h (older
# confluent-kafka releases do not name it).
INVALID_DIFFERENT_RECORD = getattr(KafkaError, "_INVALID_DIFFERENT_RECORD", -138)
KEYS = ["a", None, "b", None, "c", "d"]


class ProduceVersions(logging.Handler):
    """Notes the ProduceRequest versions librdkafka's protocol debug log
    says it sent."""

    def __init__(self):
        super().__init__()
        self.versions = set()

    def emit(self, record):
        m = re.search(r"ProduceRequest \(v(\d+)", record.getMessage())
        if m:
            self.versions.add(int(m.group(1)))


def die(msg):
    print("record_errors: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def produce(a, keys, deadline, debug=None):
    """Produces one batch of records keyed keys to partition 0; returns the
    delivery report of each: (error code or 0, offset)."""
    reports = [None] * len(keys)

    def on_delivery(err, msg):
        i = int(msg.value().decode())
        reports[i] = (err.code() if err is not None else 0, msg.offset(), str(err) if err else "")

    conf = {
        "bootstrap.servers": a.bootstrap,
        "client.id": "stele-e2e-record-errors",
        "acks": "all",
        "enable.idempotence": False,
        "linger.ms": 1000,
        "retries": 0,
        "message.timeout.ms": 20000,
    }
    if debug is not None:
        logger = logging.getLogger("librdkafka")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(debug)
        conf.update({"debug": "protocol", "logger": logger})
    p = Producer(conf)
    # Connected and with the partition's leader known before the first
    # record: librdkafka sends a record that waits for its leader as soon
    # as the leader is known, alone in its batch (found by CI).
    p.list_topics(a.topic, timeout=max(deadline - time.monotonic(), 1))
    for i, k in enumerate(keys):
        p.produce(a.topic, key=k, value=str(i).encode(), partition=0, on_delivery=on_delivery)
    left = p.flush(max(deadline - time.monotonic(), 0))
    if left:
        die("%d records unacknowledged at the deadline" % left)
    return reports


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--deadline", type=float, default=40)
    a = ap.parse_args()
    deadline = time.monotonic() + a.deadline

    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    fs = admin.create_topics([NewTopic(a.topic, num_partitions=1, replication_factor=1,
                                       config={"cleanup.policy": "compact"})])
    fs[a.topic].result(timeout=20)

    versions = ProduceVersions()
    reports = produce(a, KEYS, deadline, versions)
    if len(versions.versions) != 1:
        die("librdkafka's log shows Produce versions %s; want one batch in one request" % sorted(versions.versions))
    v = versions.versions.pop()
    if v >= 8:
        want = [KafkaError.INVALID_RECORD if k is None else INVALID_DIFFERENT_RECORD for k in KEYS]
    else:
        want = [KafkaError.INVALID_RECORD] * len(KEYS)
    got = [r[0] for r in reports]
    for i, (k, r) in enumerate(zip(KEYS, reports)):
        print("    record %d key %s: %s" % (i, k, r[2] or "delivered at %d" % r[1]))
    if got != want:
        die("librdkafka %s, Produce v%d: delivery errors %s, want %s" % (libversion()[0], v, got, want))
    print("librdkafka %s sent Produce v%d: deliveries failed as Kafka's answer makes them fail" % (libversion()[0], v))
    if v < 8:
        print("(this librdkafka sends no Produce v8+: record_errors are not on its wire; "
              "internal/kafka TestProduceRecordErrors checks them raw)")

    reports = produce(a, ["a", "b", "c", "d"], deadline)
    if [r[:2] for r in reports] != [(0, 0), (0, 1), (0, 2), (0, 3)]:
        die("keyed batch after the refused one: %s; want offsets 0-3 (nothing of the refused batch written)" % reports)
    print("keyed batch written at offsets 0-3: nothing of the refused batch was")


if __name__ == "__main__":
    main()
