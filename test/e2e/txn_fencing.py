#!/usr/bin/python3
"""Zombie fencing of confluent-kafka (librdkafka) transactional producers.

    txn_fencing.py --bootstrap HOST:PORT --topic T --partitions P
                   [--count R] [--client-log FILE] [--deadline S]

Two cases, each with a transactional id of its own. In both, a first
producer (the zombie) runs init_transactions, begins a transaction and
writes R records over every partition, flushed (acknowledged, so in the
log); DescribeTransactions says Ongoing. Then a second producer with the
same transactional.id runs init_transactions while that transaction is
open. It must succeed with the same producer id at a higher epoch, and the
zombie's transaction must be aborted by it: the last stable offsets reach
the high watermarks and DescribeTransactions no longer says Ongoing.

  commit:  the zombie's next call, commit_transaction(), fails with a fatal
           error (KafkaException whose error is fatal(), or _FENCED).
  produce: the zombie first writes R more records to the partitions of its
           transaction (no AddPartitionsToTxn needed, so straight to
           Produce with its old epoch): every delivery fails and none of
           them reaches the log; then commit_transaction() fails fatally.

The second producer then commits a transaction of R records of its own
(DescribeTransactions: CompleteCommit at its epoch). At the end:
read_committed holds exactly the second producers' records, nothing of the
zombies'; read_uncommitted holds those and the zombies' first R records
each, but not the produce case's later R; every partition's high
watermark is its records plus one marker per transaction (the abort the
fencing wrote, the commit).
"""

import argparse
import os
import sys
import time
import uuid

from confluent_kafka import KafkaError, KafkaException

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import txn_lib as tl  # noqa: E402


class Client:
    """A transactional producer with its log and delivery reports."""

    def __init__(self, a, tid, name):
        self.name = name
        self.errors = []
        self.log = tl.ClientLog(name)
        self.d = tl.Deliveries(name)
        self.p = tl.transactional_producer(a.bootstrap, tid, name, self.log, self.errors)

    def produce(self, a, values):
        for j, v in enumerate(values):
            self.p.produce(a.topic, key=self.name, value=v, partition=j % a.partitions, on_delivery=self.d)


def writer(value):
    """The key of a record: the client that wrote it (case-role), named
    in its value."""
    return "-".join(value.split("-")[1:3])


def fenced_error(e):
    """Whether a KafkaError is the fatal error of a fenced producer."""
    return e.fatal() or e.code() == KafkaError._FENCED


def zombie_writes(a, zombie, values, deadline):
    """Produce values with the fenced zombie and wait for their delivery
    reports. librdkafka queues them until the first Produce answer sets its
    fatal error; from then on produce(), poll() and flush() raise it.
    Returns (records queued, records left in the queue at the deadline,
    the fatal error raised)."""
    fatal = []

    def call(f, *args, **kwargs):
        try:
            f(*args, **kwargs)
            return True
        except KafkaException as e:
            # produce() answers _FATAL: "see the fatal error", which error_cb has.
            if not fenced_error(e.args[0]) and e.args[0].code() != KafkaError._FATAL:
                tl.die("produce: the zombie's %s() failed with %s, which is neither fatal nor _FENCED"
                       % (f.__name__, e.args[0]))
            fatal.append(e.args[0])
            return False

    queued = 0
    for j, v in enumerate(values):
        if not call(zombie.p.produce, a.topic, key=zombie.name, value=v, partition=j % a.partitions,
                    on_delivery=zombie.d):
            break
        queued += 1
        call(zombie.p.poll, 0.01)  # the answer to the first Produce may set the fatal error meanwhile
    while len(zombie.p) > 0 and time.monotonic() < deadline:
        call(zombie.p.poll, 0.05)
    call(zombie.p.poll, 0)
    # The fatal error itself: raised by poll() or handed to error_cb.
    fenced = [e for e in fatal + zombie.errors if e.fatal() and e.code() == KafkaError._FENCED]
    if fatal and not fenced:
        tl.die("produce: the zombie's calls raised %s, but no fatal _FENCED error was raised or reported to "
               "error_cb (%s)" % (fatal, zombie.errors))
    return queued, len(zombie.p), fenced[0] if fenced else None


def fence(a, case, run, deadline, wm):
    """One case: returns (committed values, aborted values, values never
    stored, transactions written)."""
    tid = "e2e-txn-fence-%s-%s" % (run, case)
    zombie, successor = Client(a, tid, case + "-zombie"), Client(a, tid, case + "-successor")
    topics = {a.topic: list(range(a.partitions))}
    try:
        zombie.p.init_transactions(10)
        zpid = zombie.log.pid(zombie.p)
        zombie.p.begin_transaction()
        first = ["%s-%s-zombie-%04d" % (run, case, j) for j in range(a.count)]
        zombie.produce(a, first)
        zombie.d.flush(zombie.p, deadline)
        tl.expect_txn(a.bootstrap, tid, "Ongoing", zpid[0], zpid[1], topics)
        lso, hw = wm.get()
        if not all(lso[p] < hw[p] for p in hw):
            tl.die("%s: the zombie's transaction is open, yet the last stable offsets %s are not below the high "
                   "watermarks %s" % (case, lso, hw))

        t = time.monotonic()
        successor.p.init_transactions(10)
        took = time.monotonic() - t
        spid = successor.log.pid(successor.p)
        if spid[0] != zpid[0] or spid[1] <= zpid[1]:
            tl.die("%s: the successor got producer id %d epoch %d; the zombie had %d epoch %d: want the same id "
                   "at a higher epoch" % (case, spid[0], spid[1], zpid[0], zpid[1]))
        d = tl.expect_txn(a.bootstrap, tid, ("Empty", "CompleteAbort"), spid[0], spid[1], None)
        lso, hw = wm.get()
        if lso != hw:
            tl.die("%s: after the successor's init_transactions the last stable offsets are %s, the high "
                   "watermarks %s: the zombie's transaction was not aborted" % (case, lso, hw))
        print("%s: zombie producer id %d epoch %d, %d records in an open transaction; the successor's "
              "init_transactions took %.2fs: producer id %d epoch %d, the zombie's transaction aborted "
              "(DescribeTransactions: %s, last stable offsets = high watermarks %s)"
              % (case, zpid[0], zpid[1], a.count, took, spid[0], spid[1], d["state"], hw))

        lost = []
        if case == "produce":
            lost = ["%s-%s-zombie-%04d" % (run, case, j) for j in range(a.count, 2 * a.count)]
            queued, left, fatal = zombie_writes(a, zombie, lost, deadline)
            acked = len(zombie.d.acked.keys() & set(lost))
            if left or acked or len(zombie.d.failed) != queued or not zombie.d.failed or fatal is None:
                tl.die("produce: the zombie's %d writes after the fencing: %d queued, %d acknowledged, %d failed, "
                       "%d still queued, fatal error %s; want every queued one failed and a fatal error"
                       % (len(lost), queued, acked, len(zombie.d.failed), left, fatal))
            print("produce: of the zombie's %d writes after the fencing %d were queued and all failed (%s), "
                  "produce() refused the other %d; fatal error: %s"
                  % (len(lost), queued, zombie.d.failed[0][1], len(lost) - queued, fatal))
        try:
            zombie.p.commit_transaction(max(deadline - time.monotonic(), 1))
        except KafkaException as e:
            err = e.args[0]
            if not fenced_error(err):
                tl.die("%s: the zombie's commit_transaction failed with %s, which is neither fatal nor _FENCED"
                       % (case, err))
            print("%s: the zombie's commit_transaction failed: %s (fatal=%s)" % (case, err, err.fatal()))
        else:
            tl.die("%s: the zombie's commit_transaction succeeded after another producer took its "
                   "transactional id" % case)

        successor.p.begin_transaction()
        second = ["%s-%s-successor-%04d" % (run, case, j) for j in range(a.count)]
        successor.produce(a, second)
        successor.d.flush(successor.p, deadline)
        successor.p.commit_transaction(max(deadline - time.monotonic(), 1))
        tl.expect_txn(a.bootstrap, tid, "CompleteCommit", spid[0], spid[1], None)
        if successor.errors:
            tl.die("%s: the successor had client errors: %s" % (case, successor.errors))
        print("%s: the successor committed %d records (DescribeTransactions: CompleteCommit, epoch %d)"
              % (case, a.count, spid[1]))
        return ({v: successor.d.acked[v] for v in second}, {v: zombie.d.acked[v] for v in first}, lost)
    finally:
        zombie.log.save(a.client_log)
        successor.log.save(a.client_log)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--count", type=int, default=30, help="records per transaction")
    ap.add_argument("--client-log", help="append the producers' librdkafka logs here")
    ap.add_argument("--deadline", type=float, default=25)
    a = ap.parse_args()
    tl.exit_on_sigterm()
    run = "tf" + uuid.uuid4().hex[:8]
    t0 = time.monotonic()
    deadline = t0 + a.deadline
    wm = tl.Watermarks(a.bootstrap, a.topic, a.partitions)
    committed, everything, lost = {}, {}, []
    try:
        for case in ("commit", "produce"):
            c, z, n = fence(a, case, run, deadline, wm)
            committed.update(c)
            everything.update(c)
            everything.update(z)
            lost += n
        rc, _ = tl.read_all(a.bootstrap, a.topic, a.partitions, "read_committed", deadline, "read_committed")
        got = tl.check_exact("read_committed", rc, committed, a.partitions, writer)
        print("read_committed: %d records (%s), exactly the successors' committed ones, nothing of the zombies'"
              % (len(rc), tl.parts_line(got)))
        ru, hw = tl.read_all(a.bootstrap, a.topic, a.partitions, "read_uncommitted", deadline, "read_uncommitted")
        got = tl.check_exact("read_uncommitted", ru, everything, a.partitions, writer)
        want = {p: got[p] + 4 for p in range(a.partitions)}
        if hw != want:
            tl.die("high watermarks %s, want %s: the records of each partition and 4 markers (2 aborts, 2 commits)"
                   % (hw, want))
        print("read_uncommitted: %d records (%s): the zombies' aborted ones too but none of the %d written after "
              "the fencing; high watermarks %s = records + 4 markers" % (len(ru), tl.parts_line(got), len(lost), hw))
    except tl.CheckError as e:
        tl.die(str(e))
    except KafkaException as e:
        tl.die("confluent-kafka: %s" % e.args[0])
    finally:
        wm.close()
    print("fencing: %.1fs in all" % (time.monotonic() - t0))


if __name__ == "__main__":
    main()
