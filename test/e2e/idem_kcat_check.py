#!/usr/bin/python3
"""Check what an idempotent `kcat -P` stored, and summarise it.

    idem_kcat_check.py --run RUN --count N --keys K --partitions P --topic T
                       --records FILE --kcat-log FILE --first-ms MS --last-ms MS
                       [--summary FILE]

FILE (--records) is `kcat -C -e -f '%p\\t%o\\t%k\\t%s\\n'` of the whole
topic after `kcat -P -K : -X enable.idempotence=true -d eos` sent records
0..N-1 (e2elib's key_of/value_of). kcat cannot report per-record
acknowledgements, so the check is e2elib.check_log without them and with
duplicates not allowed: exactly N records, each sent record once, keys as
sent, offsets dense, each key in one partition, per-partition send order.

--kcat-log is kcat -P's stderr: librdkafka's "eos" debug lines, and
nothing else (an error or a warning fails the check). It must show exactly
one producer id acquired; that id, the per-partition counts and the span
go to --summary as JSON for idem_describe.py.
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib  # noqa: E402

PID_RE = re.compile(r"Acquired PID\{Id:(-?\d+),Epoch:(-?\d+)\}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--records", required=True)
    ap.add_argument("--kcat-log", required=True)
    ap.add_argument("--first-ms", type=int, required=True)
    ap.add_argument("--last-ms", type=int, required=True)
    ap.add_argument("--summary")
    a = ap.parse_args()

    pids, other = [], []
    with open(a.kcat_log, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = PID_RE.search(line)
            if m:
                pids.append((int(m.group(1)), int(m.group(2))))
            # librdkafka's log lines are %LEVEL|...; 6 info, 7 debug.
            if line and not (line.startswith("%7|") or line.startswith("%6|")):
                other.append(line)
    if other:
        e2elib.die("kcat -P: %d lines of errors or warnings, first: %s" % (len(other), " / ".join(other[:3])))
    if len(pids) != 1:
        e2elib.die("kcat -P: librdkafka acquired %d producer ids, want exactly one: %s" % (len(pids), pids))

    try:
        s = e2elib.check_log(e2elib.read_kcat(a.records), run=a.run, count=a.count, keys=a.keys,
                             acked=None, partitions=a.partitions)
    except e2elib.CheckError as e:
        e2elib.die("kcat -P with enable.idempotence=true: %s" % e)
    print(e2elib.summary_line("kcat -P idempotent", s))
    print("kcat -P idempotent: producer id %d (epoch %d)" % pids[0])
    if a.summary:
        with open(a.summary, "w", encoding="utf-8") as f:
            json.dump({"topic": a.topic, "partitions": a.partitions, "producer_id": pids[0][0],
                       "epoch": pids[0][1], "per_partition": s["per_partition"],
                       "first_ms": a.first_ms, "last_ms": a.last_ms}, f)


if __name__ == "__main__":
    main()
