#!/usr/bin/python3
"""An idempotent confluent-kafka (librdkafka) producer, checked exactly once.

    idem_roundtrip.py --bootstrap HOST:PORT --topic T --count N --keys K
                      --partitions P [--rate R] [--request-timeout-ms MS]
                      [--socket-timeout-ms MS]
                      [--stop-pid PID --stop-after M --stop-seconds S]
                      [--summary FILE] [--client-log FILE] [--deadline S]

Produces N keyed records with headers (e2elib's scheme) with
enable.idempotence=true (which implies acks=all, retries and at most five
requests in flight per partition), collecting every delivery report, then
reads every partition from the beginning (confluent_roundtrip.consume) and
checks the read with e2elib.check_log, duplicates not allowed: every record
acknowledged exactly once, at a distinct offset that holds it, each record
stored exactly once, in per-partition (so per-key) send order, offsets
dense.

With --stop-pid the producer stops that process (the broker) with SIGSTOP
once M records are produced and resumes it with SIGCONT S seconds later,
producing all the while: requests in flight time out (in the broker after
--request-timeout-ms, Produce's own timeout; in librdkafka after the lesser
of --socket-timeout-ms and the message's remaining message.timeout.ms),
librdkafka drops the connection and sends them again on a new one, and the
broker, which still reads and applies the first copies when it resumes,
must answer the retries with their original offsets instead of storing them
twice. The run must then show at least one timed-out request in librdkafka's
log (or the pause tested nothing), and no fatal error.

librdkafka's debug log ("eos,broker") is kept: the producer id it was given
(and the epoch) go to --summary as JSON together with how many records each
partition got and when, for idem_describe.py.
"""

import argparse
import json
import logging
import os
import re
import signal
import sys
import time
import uuid

from confluent_kafka import KafkaException, Producer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib  # noqa: E402
from confluent_roundtrip import consume  # noqa: E402

PID_RE = re.compile(r"Acquired PID\{Id:(-?\d+),Epoch:(-?\d+)\}")


class ClientLog(logging.Handler):
    """librdkafka's log: the producer ids acquired, request timeouts, and
    every line kept for a failure's report."""

    def __init__(self):
        super().__init__()
        self.pids = []      # (id, epoch) in the order acquired
        self.timeouts = []  # lines reporting a timed-out request
        self.lines = []

    def emit(self, record):
        msg = record.getMessage()
        self.lines.append(msg)
        m = PID_RE.search(msg)
        if m:
            self.pids.append((int(m.group(1)), int(m.group(2))))
        if "timed out" in msg.lower() and "Produce" in msg:
            self.timeouts.append(msg)
        if record.levelno >= logging.WARNING:
            print("producer: librdkafka: %s" % msg, file=sys.stderr)


def produce(a, run, deadline, clog):
    """Send the records, pausing the broker if asked; returns the
    acknowledgements as (seq, partition, offset) in arrival order."""
    acked, failed, fatal, errors = [], [], [], []

    def on_delivery(err, msg):
        seq = e2elib.seq_of(run, msg.value().decode())
        if err is not None:
            failed.append((seq, str(err)))
        else:
            acked.append((seq, msg.partition(), msg.offset()))

    def on_error(err):
        errors.append(str(err))
        if err.fatal():
            fatal.append(str(err))
        print("producer: client error%s: %s" % (" (FATAL)" if err.fatal() else "", err), file=sys.stderr)

    p = Producer({
        "bootstrap.servers": a.bootstrap,
        "client.id": "stele-e2e-idempotent",
        "enable.idempotence": True,  # acks=all, retries, max.in.flight <= 5
        "linger.ms": 5,
        "request.timeout.ms": a.request_timeout_ms,
        "socket.timeout.ms": a.socket_timeout_ms,
        "message.timeout.ms": 60000,
        "retry.backoff.ms": 100,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "debug": "eos,broker",
        "logger": clog_logger(clog),
        "error_cb": on_error,
    })

    start = time.monotonic()
    stopped_at = resumed_at = None
    try:
        seq = 0
        while seq < a.count or len(p) > 0:
            now = time.monotonic()
            if now > deadline:
                e2elib.die("producer: deadline passed: %d of %d produced, %d acknowledged, %d in the queue"
                           % (seq, a.count, len(acked), len(p)))
            if a.stop_pid and stopped_at is None and seq >= a.stop_after:
                os.kill(a.stop_pid, signal.SIGSTOP)
                stopped_at = now
                print("producer: broker stopped (SIGSTOP) after %d records produced, %d acknowledged"
                      % (seq, len(acked)), file=sys.stderr)
            if stopped_at is not None and resumed_at is None and now - stopped_at >= a.stop_seconds:
                os.kill(a.stop_pid, signal.SIGCONT)
                resumed_at = now
                print("producer: broker resumed (SIGCONT) after %.1fs, %d records produced, %d acknowledged, "
                      "%d request timeouts logged" % (now - stopped_at, seq, len(acked), len(clog.timeouts)),
                      file=sys.stderr)
            if seq >= a.count or (a.rate and now < start + seq / a.rate):
                p.poll(0.02)
                continue
            try:
                p.produce(a.topic, key=e2elib.key_of(seq, a.keys), value=e2elib.value_of(run, seq),
                          headers=e2elib.headers_of(run, seq), on_delivery=on_delivery)
                seq += 1
            except BufferError:
                p.poll(0.05)
            except KafkaException as e:
                e2elib.die("producer: produce %d: %s" % (seq, e))
            p.poll(0)
    finally:
        if stopped_at is not None and resumed_at is None:
            os.kill(a.stop_pid, signal.SIGCONT)
    took = time.monotonic() - start
    print("producer: %d produced, %d acknowledged, %d failed, %d client errors (%d fatal), "
          "%d request timeouts logged, %.1fs" % (a.count, len(acked), len(failed), len(errors), len(fatal),
                                                 len(clog.timeouts), took), file=sys.stderr)
    if fatal:
        e2elib.die("producer: fatal error: %s" % fatal[0])
    if failed:
        e2elib.die("producer: %d deliveries failed, first: record %d: %s" % (len(failed), failed[0][0], failed[0][1]))
    if a.stop_pid and stopped_at is None:
        e2elib.die("producer: the broker was never stopped")
    if a.stop_pid and not clog.timeouts:
        e2elib.die("producer: no request timed out while the broker was stopped: the pause tested no retry")
    return acked


def clog_logger(clog):
    logger = logging.getLogger("librdkafka-producer")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(clog)
    return logger


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--rate", type=float, default=0, help="records per second (0: as fast as it goes)")
    ap.add_argument("--request-timeout-ms", type=int, default=30000)
    ap.add_argument("--socket-timeout-ms", type=int, default=60000)
    ap.add_argument("--stop-pid", type=int, default=0, help="SIGSTOP this process mid-stream")
    ap.add_argument("--stop-after", type=int, default=0, help="records produced before the SIGSTOP")
    ap.add_argument("--stop-seconds", type=float, default=5)
    ap.add_argument("--summary", help="write the producer id and per-partition counts here as JSON")
    ap.add_argument("--client-log", help="write librdkafka's whole log here")
    ap.add_argument("--deadline", type=float, default=60, help="seconds")
    a = ap.parse_args()
    # A deadline's SIGTERM must still run the finally that resumes the broker.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit("killed by signal %d" % signum))

    run = "ip" + uuid.uuid4().hex[:8]
    start = time.monotonic()
    deadline = start + a.deadline
    clog = ClientLog()
    first_ms = int(time.time() * 1000)
    try:
        acked = produce(a, run, deadline, clog)
    finally:
        if a.client_log:
            with open(a.client_log, "w", encoding="utf-8") as f:
                f.write("\n".join(clog.lines) + "\n")
    last_ms = int(time.time() * 1000)
    produced = time.monotonic()
    records = consume(a, deadline)
    try:
        s = e2elib.check_log(records, run=run, count=a.count, keys=a.keys, acked=acked,
                             headers=True, partitions=a.partitions)
    except e2elib.CheckError as e:
        e2elib.die("idempotent producer: %s" % e)
    print(e2elib.summary_line("idempotent producer", s))
    print("idempotent producer: produced in %.1fs, consumed in %.1fs, producer ids acquired: %s"
          % (produced - start, time.monotonic() - produced,
             ", ".join("%d (epoch %d)" % pe for pe in clog.pids) or "none"))
    if len(clog.pids) != 1:
        e2elib.die("idempotent producer: librdkafka acquired %d producer ids, want exactly one: %s"
                   % (len(clog.pids), clog.pids))
    if a.summary:
        with open(a.summary, "w", encoding="utf-8") as f:
            json.dump({"topic": a.topic, "partitions": a.partitions, "producer_id": clog.pids[0][0], "epoch": clog.pids[0][1],
                       "per_partition": s["per_partition"], "first_ms": first_ms, "last_ms": last_ms}, f)


if __name__ == "__main__":
    main()
