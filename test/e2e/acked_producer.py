#!/usr/bin/python3
"""A paced confluent-kafka (librdkafka) producer that records every acknowledgement.

    acked_producer.py --bootstrap HOST:PORT --topic T --run RUN --count N
                      --keys K --rate R --acked FILE [--deadline S]

Produces records 0..N-1 (key and value from e2elib) at about R records a
second, with acks=all, retries on, max.in.flight 1 (so retries cannot
reorder a partition) and a message timeout long enough to ride out a broker
restart. Each acknowledgement is appended to FILE as 'seq\\tpartition\\toffset'
in the order the delivery reports arrive, flushed after every poll, so that
a test can watch progress and kill the broker mid-produce.

kcat -P cannot report per-record acknowledgements, hence this program; it
uses librdkafka, the library kcat is built on.

Exits 0 when every record was acknowledged, 1 otherwise (a delivery failed,
or the deadline passed with records still unacknowledged).
"""

import argparse
import os
import sys
import time

from confluent_kafka import KafkaException, Producer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--rate", type=int, required=True, help="records per second")
    ap.add_argument("--acked", required=True)
    ap.add_argument("--deadline", type=float, default=120, help="seconds")
    a = ap.parse_args()

    client_errors = []

    def on_error(err):
        client_errors.append(str(err))
        if len(client_errors) <= 5:
            print("producer: client error: %s" % err, file=sys.stderr)

    p = Producer({
        "bootstrap.servers": a.bootstrap,
        "client.id": "stele-e2e-acked-producer",
        "acks": "all",
        "enable.idempotence": False,  # plain retries: idempotence has its own test (idempotence.sh)
        "max.in.flight.requests.per.connection": 1,
        "retries": 1000000,
        "retry.backoff.ms": 100,
        "message.timeout.ms": 90000,
        "request.timeout.ms": 30000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "linger.ms": 5,
        "error_cb": on_error,
    })

    acked = open(a.acked, "w", encoding="utf-8")
    pending = []  # ack lines not yet written
    failed = []
    n_acked = 0

    def on_delivery(err, msg):
        nonlocal n_acked
        seq = e2elib.seq_of(a.run, msg.value().decode())
        if err is not None:
            failed.append((seq, str(err)))
            return
        n_acked += 1
        pending.append("%d\t%d\t%d\n" % (seq, msg.partition(), msg.offset()))

    def serve(timeout):
        p.poll(timeout)
        if pending:
            acked.write("".join(pending))
            acked.flush()
            pending.clear()

    start = time.monotonic()
    deadline = start + a.deadline
    seq = 0
    while seq < a.count and time.monotonic() < deadline:
        # Pace: record seq is due at start + seq/rate.
        due = start + seq / a.rate
        now = time.monotonic()
        if now < due:
            serve(min(due - now, 0.05))
            continue
        try:
            p.produce(a.topic, key=e2elib.key_of(seq, a.keys), value=e2elib.value_of(a.run, seq),
                      on_delivery=on_delivery)
            seq += 1
        except BufferError:
            serve(0.05)
        except KafkaException as e:
            e2elib.die("producer: produce %d: %s" % (seq, e))
        if seq % 100 == 0:
            serve(0)
    produced = seq

    while len(p) > 0 and time.monotonic() < deadline:
        serve(0.1)
    serve(0)
    acked.close()

    took = time.monotonic() - start
    print("producer: %d produced, %d acknowledged, %d failed, %d unacknowledged, %d client errors, %.1fs"
          % (produced, n_acked, len(failed), len(p), len(client_errors), took), file=sys.stderr)
    if failed:
        e2elib.die("producer: %d deliveries failed, first: record %d: %s" % (len(failed), failed[0][0], failed[0][1]))
    if produced < a.count or n_acked < a.count:
        e2elib.die("producer: deadline of %.0fs passed with %d of %d records acknowledged"
                   % (a.deadline, n_acked, a.count))


if __name__ == "__main__":
    main()
