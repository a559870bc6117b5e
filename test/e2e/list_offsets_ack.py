"""ListOffsets by time right after each acknowledged produce, with librdkafka.

Issue 27: "ListOffsets by timestamp right after an acknowledged produce
sometimes finds nothing (about 1 run in 10)". This is the client that
noticed it, used the way an application does: a confluent-kafka Producer
produces one record, and from inside its delivery report a Consumer (its
own connection to the broker, as librdkafka keeps one per client) asks
offsets_for_times at once for

  * T, the timestamp the delivery report gives (the producer's create time
    on a CreateTime topic, the broker's log_append_time on a LogAppendTime
    one),
  * T - 1,
  * and, on a LogAppendTime topic, B, the producer's clock read just
    before produce().

Every answer for T and T - 1 must be Kafka's: the first offset of the
partition whose timestamp is at least that time. The record just
acknowledged qualifies, so the answer is never "nothing" (-1) and is at
most its offset; the exact offset is computed afterwards from the whole
partition read back with a Consumer (an earlier record may qualify too,
when concurrent producers' clocks interleave). Any other answer fails the
run.

On a LogAppendTime topic the append time must be at or after B, and the
lookup by B must find the record (at most its offset, as for T), as
Kafka's, which stamps at append: from app version 2, which a new chain
starts at, Stele stamps with the clock of the broker that proposed the
block, read as it built the block, after the produce arrived
(docs/kafka-api.md, "Read after an acknowledged write"); the broker and
this client share the machine's clock.

Usage: list_offsets_ack.py BOOTSTRAP TOPIC ROUNDS PRODUCERS PARTITIONS
ACKS IDEMPOTENT(0|1) LAT(0|1). The topic must exist with PARTITIONS
partitions (and message.timestamp.type=LogAppendTime when LAT is 1). Each
of PRODUCERS threads makes ROUNDS rounds, partition (round + thread) mod
PARTITIONS. Prints one summary line; exits 1 with every wrong answer
listed.
"""

import sys
import threading
import time

from confluent_kafka import (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer,
                             TopicPartition)


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    rounds, producers, partitions = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    acks, idempotent, lat = sys.argv[6], sys.argv[7] == "1", sys.argv[8] == "1"
    want_kind = TIMESTAMP_LOG_APPEND_TIME if lat else TIMESTAMP_CREATE_TIME
    lock = threading.Lock()
    queries = []  # (partition, asked, answer, acked offset, what)
    problems = []

    def worker(wid):
        p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                      "enable.idempotence": idempotent})
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lot-ack-%s-%d" % (topic, wid),
                      "enable.auto.commit": False})
        try:
            for i in range(rounds):
                part = (i + wid) % partitions
                box = {}

                def report(err, msg, box=box, part=part):
                    box["err"], box["msg"] = err, msg
                    if err is not None:
                        return
                    kind, ts = msg.timestamp()
                    box["kind"], box["ts"] = kind, ts
                    # At once, from the delivery report: nothing happens
                    # between the ack and these requests.
                    asks = [ts, ts - 1] + ([box["before"]] if lat else [])
                    box["answers"] = [c.offsets_for_times([TopicPartition(topic, part, t)], timeout=10)[0] for t in asks]

                box["before"] = int(time.time() * 1000)
                p.produce(topic, value=b"v%d" % i, partition=part, on_delivery=report)
                left = p.flush(30)
                with lock:
                    if left or box.get("err") is not None or "answers" not in box:
                        problems.append("producer %d round %d: no delivery (%s, %d left)" % (wid, i, box.get("err"), left))
                        continue
                    off, ts = box["msg"].offset(), box["ts"]
                    if box["kind"] != want_kind:
                        problems.append("producer %d round %d: delivery report timestamp type %d, want %d" %
                                        (wid, i, box["kind"], want_kind))
                    for a in box["answers"]:
                        if a.error is not None:
                            problems.append("producer %d round %d: offsets_for_times error %s" % (wid, i, a.error))
                    own, minus = box["answers"][0], box["answers"][1]
                    queries.append((part, ts, own.offset, off, "T"))
                    queries.append((part, ts - 1, minus.offset, off, "T-1"))
                    if lat:
                        if ts < box["before"]:
                            problems.append("producer %d round %d: offset %d appended at %d, %d ms before the "
                                            "producer's clock read before producing" %
                                            (wid, i, off, ts, box["before"] - ts))
                        queries.append((part, box["before"], box["answers"][2].offset, off, "B"))
        finally:
            p.flush(10)
            c.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(producers)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0

    # Kafka's answers, from the partitions as written.
    stamps = read_all(bootstrap, topic, partitions)
    wrong = nothing = 0
    for part, asked, got, acked, what in queries:
        want = next((o for o, t in stamps[part] if t >= asked), None)
        if want is None or want > acked:
            problems.append("partition %d: the acknowledged record at offset %d is not in the log read back as it "
                            "was acknowledged" % (part, acked))
            continue
        if got != want:
            wrong += 1
            nothing += got < 0
            problems.append("partition %d: offsets_for_times(%d) [%s] right after the ack of offset %d answered %d, "
                            "Kafka answers %d" % (part, asked, what, acked, got, want))
    lookups = producers * rounds
    print("%s: %d rounds (%d producers x %d, %d partitions, acks=%s, idempotent=%s, %s) in %.1fs: "
          "%d lookups by %s, %d wrong (%d nothing)" %
          (topic, lookups, producers, rounds, partitions, acks, idempotent,
           "LogAppendTime" if lat else "CreateTime", elapsed, len(queries),
           "T, T-1 and the time read before producing" if lat else "T and T-1", wrong, nothing))
    for m in problems[:50]:
        print("  " + m)
    if problems:
        sys.exit(1)


def read_all(bootstrap, topic, partitions):
    """Every partition's (offset, timestamp) pairs, in offset order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lot-ack-read-%s" % topic,
                  "enable.auto.commit": False, "enable.partition.eof": True})
    out = {p: [] for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    eof, deadline = set(), time.time() + 60
    while len(eof) < partitions and time.time() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        if m.error() is not None:
            if m.error().code() == -191:  # _PARTITION_EOF
                eof.add(m.partition())
                continue
            raise SystemExit("reading %s back: %s" % (topic, m.error()))
        out[m.partition()].append((m.offset(), m.timestamp()[1]))
    c.close()
    if len(eof) < partitions:
        raise SystemExit("reading %s back: not every partition reached its end in 60 s" % topic)
    return out


if __name__ == "__main__":
    main()
