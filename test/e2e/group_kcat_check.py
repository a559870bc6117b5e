#!/usr/bin/python3
"""Check what the kcat -G members of one group read (groups.sh).

    group_kcat_check.py --run R --keys K --partitions P --first F --last L
                        [--resume-from FILE]... FILE...

Each FILE is one member's output (kcat -f '%p\\t%o\\t%k\\t%s\\n'); the records
were produced in order by one kcat -P, key_of(seq) and value_of(run, seq)
for seq in [F, L). Together the members must have read each of those
records exactly once and nothing else; in every partition the offsets read
are dense, starting where the group had to resume, and hold the records
in the order they were sent. Without --resume-from the group starts at
offset 0; with it, at the end of what the earlier members (the files
given) read in each partition: their committed offsets.
"""

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import group_lib as gl  # noqa: E402


def check(a):
    start = collections.Counter()
    for path in a.resume_from:
        for r in gl.read_records(path):
            start[r.partition] = max(start[r.partition], r.offset + 1)
    by_part = collections.defaultdict(list)
    seqs = collections.Counter()
    lines = []
    for path in a.files:
        rs = gl.read_records(path)
        parts = sorted({r.partition for r in rs})
        lines.append("%s: %d records from partitions %s" % (os.path.basename(path), len(rs), parts))
        if not rs:
            raise gl.CheckError("%s read nothing: the members did not share the work" % os.path.basename(path))
        for r in rs:
            seq = gl.seq_of(a.run, r.value)
            if seq is None:
                raise gl.CheckError("partition %d offset %d: value %r was never sent" % (r.partition, r.offset, r.value))
            if not 0 <= r.partition < a.partitions:
                raise gl.CheckError("record from partition %d of a %d-partition topic" % (r.partition, a.partitions))
            if r.key != gl.key_of(seq, a.keys):
                raise gl.CheckError("partition %d offset %d: key %r, want %r"
                                    % (r.partition, r.offset, r.key, gl.key_of(seq, a.keys)))
            if seq < a.first:
                raise gl.CheckError("partition %d offset %d: record %d read again although the group had "
                                    "committed offset %d there" % (r.partition, r.offset, seq, start[r.partition]))
            if seq >= a.last:
                raise gl.CheckError("partition %d offset %d: record %d was never sent" % (r.partition, r.offset, seq))
            seqs[seq] += 1
            by_part[r.partition].append((r.offset, seq))
    dup = sorted(s for s, n in seqs.items() if n > 1)
    if dup:
        raise gl.CheckError("%d records read more than once without any failure, first: record %d (%d times)"
                            % (len(dup), dup[0], seqs[dup[0]]))
    missing = [s for s in range(a.first, a.last) if s not in seqs]
    if missing:
        raise gl.CheckError("%d of %d records never read, first: record %d" % (len(missing), a.last - a.first, missing[0]))
    for p, rs in sorted(by_part.items()):
        rs.sort()
        offsets = [o for o, _ in rs]
        if offsets != list(range(start[p], start[p] + len(rs))):
            first_bad = next(i for i, o in enumerate(offsets) if o != start[p] + i)
            raise gl.CheckError("partition %d: read offsets %d.. with offset %d where %d was due (the group "
                                "had to resume at %d)" % (p, offsets[0], offsets[first_bad], start[p] + first_bad, start[p]))
        order = [s for _, s in rs]
        if order != sorted(order):
            raise gl.CheckError("partition %d: records out of the order they were sent" % p)
    lines.append("together: records %d..%d each exactly once; per partition dense offsets from %s"
                 % (a.first, a.last - 1, dict(sorted((p, start[p]) for p in range(a.partitions)))))
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--first", type=int, required=True)
    ap.add_argument("--last", type=int, required=True)
    ap.add_argument("--resume-from", action="append", default=[])
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    try:
        print("\n".join(check(a)))
    except gl.CheckError as e:
        gl.die(str(e))


if __name__ == "__main__":
    main()
