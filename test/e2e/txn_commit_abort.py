#!/usr/bin/python3
"""Committed and aborted transactions of confluent-kafka (librdkafka)
producers, read back read_committed and read_uncommitted.

    txn_commit_abort.py --bootstrap HOST:PORT --topic T --partitions P
                        [--per-txn R] [--chunks C] [--client-log FILE]
                        [--deadline S]

Two transactional producers (transactional.id set, init_transactions) run
ROUNDS rounds of one transaction each, side by side: in each round both
begin a transaction and write R records spread over every partition, in C
chunks taking turns (each chunk flushed, so their records interleave in
every partition), then each commits or aborts it as OUTCOMES says (both
commit, one aborts, both abort). Every record's key names its transaction
(txnNN, NN = 2*round + producer) and its value is unique; the delivery
reports give every record's offset.

Checked while both transactions of round OPEN_ROUND are open:
  - ListOffsets latest for read_committed (the last stable offset) is, in
    every partition, the first offset of the older open transaction, and
    for read_uncommitted the high watermark (the last record + 1);
  - a read_committed consumer from the beginning stops there and reads
    exactly the committed records of the earlier rounds;
  - DescribeTransactions says Ongoing for both transactional ids, with their
    producer ids and epochs and every partition of the topic;
    ListTransactions (state Ongoing) lists both;
  - once the first producer commits, the last stable offset moves up to the
    first offset of the other, still open transaction; once that one
    aborts, to the high watermark; DescribeTransactions says CompleteCommit
    and CompleteAbort.
At the end:
  - read_committed, once with the default fetch size and once with 1 KiB
    per partition (many fetches, each with its own aborted transaction
    list): exactly the committed transactions' records, each once, at the
    offset acknowledged, in offset order; nothing of an aborted one;
  - read_uncommitted: exactly every record of every transaction, committed
    or aborted, each once; the commit and abort markers are not delivered
    as records but take one offset each: every partition's high watermark
    is its records plus one marker per transaction;
  - each producer acquired exactly one producer id.
"""

import argparse
import os
import sys
import time
import uuid

from confluent_kafka import KafkaException

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import txn_lib as tl  # noqa: E402

OUTCOMES = [("commit", "commit"), ("abort", "commit"), ("commit", "abort"), ("abort", "abort"), ("commit", "commit")]
OPEN_ROUND = 2  # the round whose open transactions are inspected
SMALL_FETCH = 1024


class Txn:
    """One producer's transaction: its records and where they landed."""

    def __init__(self, run, n, outcome):
        self.n, self.outcome = n, outcome
        self.key = "txn%02d" % n
        self.values = []
        self.run = run

    def value(self, j):
        return "%s-txn%02d-%04d" % (self.run, self.n, j)

    def first_offsets(self, acked, partitions):
        """{partition: the transaction's first offset there}."""
        out = {}
        for v in self.values:
            p, o = acked[v]
            out[p] = min(out.get(p, o), o)
        if sorted(out) != list(range(partitions)):
            tl.die("transaction %s has records in partitions %s only" % (self.key, sorted(out)))
        return out


def produce_chunk(p, d, txn, topic, first, last, partitions):
    for j in range(first, last):
        v = txn.value(j)
        txn.values.append(v)
        p.produce(topic, key=txn.key, value=v, partition=j % partitions,
                  headers=[("txn", txn.key.encode())], on_delivery=d)


def end(p, txn, deadline):
    t = max(deadline - time.monotonic(), 1)
    try:
        if txn.outcome == "commit":
            p.commit_transaction(t)
        else:
            p.abort_transaction(t)
    except KafkaException as e:
        tl.die("%s_transaction of %s: %s" % (txn.outcome, txn.key, e.args[0]))


def txn_key(value):
    """The key of a record: its transaction, named in its value."""
    return value.split("-")[1]


def check_ends(wm, want_lso, want_hw, when):
    lso, hw = wm.get()
    if hw != want_hw:
        tl.die("%s: ListOffsets read_uncommitted answers %s, want the high watermarks %s" % (when, hw, want_hw))
    if lso != want_lso:
        tl.die("%s: ListOffsets read_committed answers %s, want the last stable offsets %s" % (when, lso, want_lso))
    return lso


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--per-txn", type=int, default=60, help="records per transaction")
    ap.add_argument("--chunks", type=int, default=3, help="turns each producer takes per transaction")
    ap.add_argument("--client-log", help="append the producers' librdkafka logs here")
    ap.add_argument("--deadline", type=float, default=30)
    a = ap.parse_args()
    tl.exit_on_sigterm()
    run = "tx" + uuid.uuid4().hex[:8]
    t0 = time.monotonic()
    deadline = t0 + a.deadline
    names = ("producer-a", "producer-b")
    tids = ["e2e-txn-%s-%s" % (run, n[-1]) for n in names]
    clogs = [tl.ClientLog(n) for n in names]
    ds = [tl.Deliveries(n) for n in names]
    ps = [tl.transactional_producer(a.bootstrap, tid, n, clog) for tid, n, clog in zip(tids, names, clogs)]
    wm = tl.Watermarks(a.bootstrap, a.topic, a.partitions)
    txns = []
    timings = {"init": 0.0, "commit": [], "abort": []}
    try:
        t = time.monotonic()
        for p in ps:
            p.init_transactions(10)
        timings["init"] = time.monotonic() - t
        pids = [c.pid(p) for c, p in zip(clogs, ps)]
        for rnd, outcomes in enumerate(OUTCOMES):
            cur = [Txn(run, 2 * rnd + k, outcomes[k]) for k in range(2)]
            txns += cur
            for p in ps:
                p.begin_transaction()
            step = a.per_txn // a.chunks
            for c in range(a.chunks):
                for k in range(2):
                    produce_chunk(ps[k], ds[k], cur[k], a.topic, c * step,
                                  a.per_txn if c == a.chunks - 1 else (c + 1) * step, a.partitions)
                    ds[k].flush(ps[k], deadline)
            acked = {**ds[0].acked, **ds[1].acked}
            if rnd == OPEN_ROUND:
                inspect_open(a, wm, txns, cur, acked, tids, pids, deadline)
            for k in range(2):
                t = time.monotonic()
                end(ps[k], cur[k], deadline)
                timings[cur[k].outcome].append(time.monotonic() - t)
                if rnd == OPEN_ROUND:
                    inspect_ended(a, wm, txns, cur, k, acked, tids, pids)
        produced = time.monotonic()
        check_final(a, txns, {**ds[0].acked, **ds[1].acked}, deadline)
        check_pids(clogs)
    except tl.CheckError as e:
        tl.die(str(e))
    except KafkaException as e:
        tl.die("confluent-kafka: %s" % e.args[0])
    finally:
        wm.close()
        for c in clogs:
            c.save(a.client_log)
    n_commit = sum(t.outcome == "commit" for t in txns)
    print("%d transactions of %d records by 2 producers (ids %s): %d committed, %d aborted; "
          "init_transactions %.2fs, commit_transaction %.3fs on average, abort_transaction %.3fs; "
          "produced in %.1fs, read in %.1fs"
          % (len(txns), a.per_txn, ", ".join("%d epoch %d" % c.pid() for c in clogs), n_commit,
             len(txns) - n_commit, timings["init"], sum(timings["commit"]) / len(timings["commit"]),
             sum(timings["abort"]) / len(timings["abort"]), produced - t0, time.monotonic() - produced))


def inspect_open(a, wm, txns, cur, acked, tids, pids, deadline):
    """Both transactions of cur are open and flushed."""
    firsts = [t.first_offsets(acked, a.partitions) for t in cur]
    hw = {p: 1 + max(o for q, o in acked.values() if q == p) for p in range(a.partitions)}
    lso = {p: min(firsts[0][p], firsts[1][p]) for p in range(a.partitions)}
    check_ends(wm, lso, hw, "two transactions open")
    committed = {v: acked[v] for t in txns if t not in cur and t.outcome == "commit" for v in t.values}
    records, ends = tl.read_all(a.bootstrap, a.topic, a.partitions, "read_committed", deadline,
                                "read_committed consumer (transactions open)")
    if ends != lso:
        tl.die("read_committed consumer: end offsets %s, want the last stable offsets %s" % (ends, lso))
    got = tl.check_exact("read_committed while two transactions are open", records, committed, a.partitions,
                         txn_key)
    print("two transactions open: last stable offsets %s, high watermarks %s; read_committed read %d records "
          "(%s), the committed ones of the earlier rounds" % (lso, hw, len(records), tl.parts_line(got)))
    topics = {a.topic: list(range(a.partitions))}
    for k in range(2):
        tl.expect_txn(a.bootstrap, tids[k], "Ongoing", pids[k][0], pids[k][1], topics)
    listed = tl.list_transactions(a.bootstrap, ["Ongoing"])
    for k in range(2):
        if listed.get(tids[k]) != (pids[k][0], "Ongoing"):
            raise tl.CheckError("ListTransactions [Ongoing]: %s is %s, want (%d, 'Ongoing'); listed: %s"
                                % (tids[k], listed.get(tids[k]), pids[k][0], listed))
    print("DescribeTransactions: both Ongoing, producer ids %d and %d, partitions %s; ListTransactions "
          "[Ongoing] lists both" % (pids[0][0], pids[1][0], topics[a.topic]))


def inspect_ended(a, wm, txns, cur, k, acked, tids, pids):
    """Transaction cur[k] has just ended; cur[k+1:] are still open."""
    lso, hw = wm.get()
    if k + 1 < len(cur):
        want = cur[k + 1].first_offsets(acked, a.partitions)
        if any(want[p] <= cur[k].first_offsets(acked, a.partitions)[p] for p in want):
            tl.die("the transactions did not interleave as planned: %s starts at %s, %s at %s"
                   % (cur[k].key, cur[k].first_offsets(acked, a.partitions), cur[k + 1].key, want))
        what = "the first offsets of the transaction still open"
    else:
        want, what = hw, "the high watermarks"
    if lso != want:
        tl.die("after %s of %s: ListOffsets read_committed answers %s, want %s %s"
               % (cur[k].outcome, cur[k].key, lso, what, want))
    state = "CompleteCommit" if cur[k].outcome == "commit" else "CompleteAbort"
    tl.expect_txn(a.bootstrap, tids[k], state, pids[k][0], pids[k][1], None)
    print("after %s of %s: last stable offsets %s (%s), DescribeTransactions says %s"
          % (cur[k].outcome, cur[k].key, lso, what, state))


def check_final(a, txns, acked, deadline):
    committed = {v: acked[v] for t in txns if t.outcome == "commit" for v in t.values}
    everything = {v: acked[v] for t in txns for v in t.values}
    if len(everything) != len(txns) * a.per_txn:
        tl.die("%d records acknowledged, want %d" % (len(everything), len(txns) * a.per_txn))
    for name, fetch in (("read_committed", None), ("read_committed, 1 KiB fetches", SMALL_FETCH)):
        records, ends = tl.read_all(a.bootstrap, a.topic, a.partitions, "read_committed", deadline, name,
                                    fetch_bytes=fetch)
        got = tl.check_exact(name, records, committed, a.partitions, txn_key)
        print("%s: %d records (%s), exactly those of the %d committed transactions, up to %s"
              % (name, len(records), tl.parts_line(got), sum(t.outcome == "commit" for t in txns), ends))
    records, ends = tl.read_all(a.bootstrap, a.topic, a.partitions, "read_uncommitted", deadline, "read_uncommitted")
    got = tl.check_exact("read_uncommitted", records, everything, a.partitions, txn_key)
    want_hw = {p: got[p] + len(txns) for p in range(a.partitions)}
    if ends != want_hw:
        tl.die("high watermarks %s, want %s: the records of each partition and one marker per transaction"
               % (ends, want_hw))
    print("read_uncommitted: %d records (%s), all of every transaction; high watermarks %s = records + %d markers"
          % (len(records), tl.parts_line(got), ends, len(txns)))


def check_pids(clogs):
    for c in clogs:
        if len(c.pids) != 1:
            tl.die("%s: librdkafka acquired %d producer ids %s, want exactly one" % (c.name, len(c.pids), c.pids))


if __name__ == "__main__":
    main()
