"""Shared code of Stele's end-to-end tests with real Kafka clients.

The tests produce records whose key and value are derived from a sequence
number, so that whatever is read back can be checked against what was sent:

    key   = "k%03d" % (seq % keys)
    value = "<run>-%07d" % seq

`check_log` then checks a partition-by-partition read of the topic against
the acknowledgements the producer received. Run with /usr/bin/python3 (the
Debian clients are modules of the system Python).
"""

import argparse
import collections
import sys
import time
import uuid

Record = collections.namedtuple("Record", "partition offset key value headers")


class CheckError(Exception):
    """A property of the log that does not hold."""


def check(cond, what):
    """Ends the script with FAIL: what unless cond holds."""
    if not cond:
        sys.exit("FAIL: " + what)


def registry_args():
    """The arguments of the schema registry scripts: --bootstrap, --registry
    (the broker's HTTP API) and --topic."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--registry", required=True)
    ap.add_argument("--topic", required=True)
    return ap.parse_args()


def key_of(seq, keys):
    return "k%03d" % (seq % keys)


def value_of(run, seq):
    return "%s-%07d" % (run, seq)


def headers_of(run, seq):
    """The headers the Python round trips attach to record seq."""
    return [("seq", str(seq).encode()), ("run", run.encode())]


def seq_of(run, value):
    """The sequence number in a value, or None if this run did not send it."""
    prefix = run + "-"
    if not value.startswith(prefix) or not value[len(prefix):].isdigit():
        return None
    return int(value[len(prefix):])


def read_kcat(path):
    """Records of a kcat -C -f '%p\\t%o\\t%k\\t%s\\n' output file."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4:
                raise CheckError("%s:%d: not partition\\toffset\\tkey\\tvalue: %r" % (path, n, line))
            out.append(Record(int(parts[0]), int(parts[1]), parts[2], parts[3], None))
    return out


def read_acked(path):
    """Acknowledgements written as 'seq\\tpartition\\toffset' lines, in order."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # a line still being written when the file was read
            seq, p, o = line.split("\t")
            out.append((int(seq), int(p), int(o)))
    return out


def check_log(records, *, run, count, keys, acked, once=None, copies_allowed=False,
              headers=False, partitions=None):
    """Check a read of a whole topic against what the producer sent.

    records:  every record read, in the order each partition returned them.
    count:    records sent, numbered 0..count-1; all of them were acknowledged.
    acked:    (seq, partition, offset) for every acknowledgement received, or
              None when the producer could not report them (kcat -P).
    once:     sequence numbers that must appear exactly once (acknowledged
              before a crash, so the client never retried them); with
              copies_allowed=False every record must appear exactly once.
    headers:  records must carry headers_of(run, seq).
    partitions: the topic's partition count; every partition must be read.

    Returns a summary dict; raises CheckError on the first violation.
    """
    by_part = collections.defaultdict(list)
    for r in records:
        by_part[r.partition].append(r)
    if partitions is not None:
        extra = sorted(p for p in by_part if not 0 <= p < partitions)
        if extra:
            raise CheckError("records from partitions %s of a %d-partition topic" % (extra, partitions))

    where = {}  # (partition, offset) -> seq
    copies = collections.Counter()  # seq -> occurrences beyond the first
    seq_part = {}
    key_part = {}
    for p in sorted(by_part):
        rs = by_part[p]
        # Offsets of a partition are dense: 0, 1, 2, ... (no transactions,
        # no compaction), so a gap is a lost record and a repeat a broken read.
        for i, r in enumerate(rs):
            if r.offset != i:
                raise CheckError("partition %d: record #%d has offset %d, want %d (gap or repeat)"
                                 % (p, i, r.offset, i))
        last = last_copy = -1
        for r in rs:
            seq = seq_of(run, r.value)
            if seq is None or not 0 <= seq < count:
                raise CheckError("partition %d offset %d: value %r was never sent" % (p, r.offset, r.value))
            if r.key != key_of(seq, keys):
                raise CheckError("partition %d offset %d: key %r, but %r was sent with value %r"
                                 % (p, r.offset, r.key, key_of(seq, keys), r.value))
            if headers and r.headers != headers_of(run, seq):
                raise CheckError("partition %d offset %d: headers %r, want %r"
                                 % (p, r.offset, r.headers, headers_of(run, seq)))
            where[(p, r.offset)] = seq
            if seq in seq_part:
                if seq_part[seq] != p:
                    raise CheckError("record %d is in partitions %d and %d" % (seq, seq_part[seq], p))
                copies[seq] += 1
                # A retry resends a batch's records in order, so the copies
                # in a partition are in send order too.
                if seq <= last_copy:
                    raise CheckError("partition %d offset %d: copy of record %d after a copy of record %d"
                                     % (p, r.offset, seq, last_copy))
                last_copy = seq
                continue
            seq_part[seq] = p
            # Per-partition order: the first copies of the producer's records
            # appear in the order it sent them (max.in.flight 1, or the
            # broker's in-order pipelining).
            if seq < last:
                raise CheckError("partition %d offset %d: record %d after record %d (reordered)"
                                 % (p, r.offset, seq, last))
            last = seq
            kp = key_part.setdefault(r.key, p)
            if kp != p:
                raise CheckError("key %s is in partitions %d and %d" % (r.key, kp, p))

    if acked is not None:
        check_acks(acked, where, count)

    missing = [s for s in range(count) if s not in seq_part]
    if missing:
        raise CheckError("%d of %d records missing, first %s" % (len(missing), count, missing[:10]))
    if copies and not copies_allowed:
        seq, n = copies.most_common(1)[0]
        raise CheckError("%d duplicate records without any crash, e.g. record %d %d extra times"
                         % (sum(copies.values()), seq, n))
    if once is not None:
        dup = sorted(s for s in once if copies[s])
        if dup:
            raise CheckError("%d records acknowledged before the crash appear more than once, first %s"
                             % (len(dup), dup[:10]))

    return {
        "records": len(records),
        "distinct": len(seq_part),
        "copies": sum(copies.values()),
        "copied_records": len(copies),
        "per_partition": {p: len(by_part[p]) for p in sorted(by_part)},
    }


def check_acks(acked, where, count):
    """Every record was acknowledged once, at an offset that holds it."""
    seen = set()
    for seq, p, o in acked:
        if seq in seen:
            raise CheckError("record %d acknowledged twice" % seq)
        seen.add(seq)
        got = where.get((p, o))
        if got != seq:
            raise CheckError("record %d was acknowledged at partition %d offset %d, which holds %s"
                             % (seq, p, o, "nothing" if got is None else "record %d" % got))
    if len(seen) != count:
        raise CheckError("%d of %d records acknowledged" % (len(seen), count))


def summary_line(name, s):
    parts = ", ".join("p%d=%d" % (p, n) for p, n in s["per_partition"].items())
    return "%s: %d records read (%s), %d distinct, %d retry copies of %d records" % (
        name, s["records"], parts, s["distinct"], s["copies"], s["copied_records"])


def die(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def roundtrip_main(name, run_prefix, produce, consume, setup=None):
    """The command line of a client round-trip script: produce --count
    records with --keys keys to --topic, read the topic back from the
    start, and check the log against the acknowledgements."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--deadline", type=float, default=60, help="seconds")
    a = ap.parse_args()
    if setup is not None:
        setup()
    run = run_prefix + uuid.uuid4().hex[:8]
    start = time.monotonic()
    deadline = start + a.deadline

    acked = produce(a, run, deadline)
    produced = time.monotonic()
    records = consume(a, deadline)
    try:
        s = check_log(records, run=run, count=a.count, keys=a.keys, acked=acked,
                      headers=True, partitions=a.partitions)
    except CheckError as e:
        die("%s: %s" % (name, e))
    print(summary_line(name, s))
    print("%s: produced in %.1fs, consumed in %.1fs"
          % (name, produced - start, time.monotonic() - produced))
