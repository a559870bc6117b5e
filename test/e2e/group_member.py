#!/usr/bin/python3
"""One at-least-once member of a confluent-kafka consumer group, for
group_failover.py.

    group_member.py --bootstrap HOST:PORT --topic T --group G --name NAME
                    --out FILE --events FILE [--session-timeout MS]

Subscribes to T in group G and writes every record it reads to --out as
'partition\\toffset\\tkey\\tvalue' (flushed to the kernel before the offset
is stored, so a SIGKILL never loses a record it was credited with); stored
offsets are committed by librdkafka's auto-commit every 500 ms and on
every revocation. --events gets 'unix-time\\tkind\\tdetail' lines: assign
and revoke (with the partitions), error, closed. SIGTERM or SIGINT stops it
cleanly: Consumer.close() commits the stored offsets and leaves the group.
"""

import argparse
import signal
import sys
import time

from confluent_kafka import Consumer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--session-timeout", type=int, default=6000)
    a = ap.parse_args()

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    out = open(a.out, "w", encoding="utf-8")
    events = open(a.events, "w", encoding="utf-8")

    def event(kind, detail=""):
        events.write("%.3f\t%s\t%s\n" % (time.time(), kind, detail))
        events.flush()

    def on_error(err):
        event("error", str(err))
        print("%s: client error: %s" % (a.name, err), file=sys.stderr)

    c = Consumer({
        "bootstrap.servers": a.bootstrap,
        "client.id": "stele-e2e-" + a.name,
        "group.id": a.group,
        "session.timeout.ms": a.session_timeout,
        "heartbeat.interval.ms": 1000,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 500,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "error_cb": on_error,
    })

    def parts(ps):
        return ",".join(str(tp.partition) for tp in sorted(ps, key=lambda tp: tp.partition))

    c.subscribe([a.topic], on_assign=lambda _, ps: event("assign", parts(ps)),
                on_revoke=lambda _, ps: event("revoke", parts(ps)))
    event("subscribed")
    while not stop:
        msg = c.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            event("error", str(msg.error()))
            print("%s: %s" % (a.name, msg.error()), file=sys.stderr)
            continue
        out.write("%d\t%d\t%s\t%s\n" % (msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode()))
        out.flush()
        c.store_offsets(msg)
    c.close()
    event("closed")


if __name__ == "__main__":
    main()
