#!/usr/bin/python3
"""Check a kcat read of a topic against what a test produced (see e2elib.check_log).

    check_log.py --records OUT --run RUN --count N --keys K --partitions P
                 [--acked FILE [--acked-before-crash M]]

OUT is the output of kcat -C -e -f '%p\\t%o\\t%k\\t%s\\n'. Without --acked
(kcat -P cannot report per-record acknowledgements) every record must
appear exactly once. With --acked, FILE holds 'seq\\tpartition\\toffset'
lines from acked_producer.py: all N records must be acknowledged, each at
an offset that holds it; the first M acknowledgements (received before the
broker was killed) must appear exactly once, and other records may have
copies from the client's retries, which are counted.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--acked")
    ap.add_argument("--acked-before-crash", type=int)
    ap.add_argument("--name", default="check")
    a = ap.parse_args()

    try:
        records = e2elib.read_kcat(a.records)
        acked, once, copies_allowed = None, None, False
        if a.acked:
            acked = e2elib.read_acked(a.acked)
            if a.acked_before_crash is not None:
                once = {seq for seq, _, _ in acked[:a.acked_before_crash]}
                copies_allowed = True
        s = e2elib.check_log(records, run=a.run, count=a.count, keys=a.keys, acked=acked,
                             once=once, copies_allowed=copies_allowed, partitions=a.partitions)
    except e2elib.CheckError as e:
        e2elib.die("%s: %s" % (a.name, e))
    print(e2elib.summary_line(a.name, s))


if __name__ == "__main__":
    main()
