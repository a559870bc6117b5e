#!/usr/bin/python3
"""Two confluent-kafka members of one group; one dies by SIGKILL mid-stream.

    group_failover.py --bootstrap HOST:PORT --topic T --partitions P
                      --count N --keys K --rate R --kill-after A
                      [--session-timeout MS] [--deadline S] [--dir DIR]

Members a and b (group_member.py, at-least-once: a record's offset is
stored only once it is written out; auto-commit every 500 ms) subscribe to
T in a fresh group with session.timeout.ms MS. Once the group has formed
with both (their assignments disjoint, together every partition) N keyed
records are produced at R per second. When member a has read A records,
while records still flow, it gets SIGKILL: no LeaveGroup, no last commit.
The broker must expire it after the session timeout and rebalance, so that
member b is assigned every partition within the session timeout plus
TAKEOVER_SLACK seconds of the kill (b learns of the rebalance from its next
heartbeat, 1 s apart, then rejoins and syncs). Member b must then read, on
a's partitions, from a's last commit on: every record read by a or b
(none missing, each at its acknowledged offset); records a read after its
last commit are read again by b and are counted, not failed. Finally b is
stopped with SIGTERM (it commits and leaves) and Consumer.committed() of
the group says every partition's high watermark.
"""

import argparse
import os
import signal
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import group_lib as gl  # noqa: E402

# TAKEOVER_SLACK is what the takeover may take beyond the session timeout:
# up to one heartbeat interval (1 s) until the survivor hears of the
# rebalance, its rejoin and sync, and block time, which advances in steps.
TAKEOVER_SLACK = 4.0


class Member:
    """A group_member.py child process and its output files."""

    def __init__(self, a, name):
        self.name = name
        self.out = os.path.join(a.dir, "member-%s.records" % name)
        self.events_path = os.path.join(a.dir, "member-%s.events" % name)
        self.stderr = open(os.path.join(a.dir, "member-%s.log" % name), "w")
        for p in (self.out, self.events_path):
            open(p, "w").close()
        self.proc = gl.spawn([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "group_member.py"),
                              "--bootstrap", a.bootstrap, "--topic", a.topic, "--group", a.group, "--name", name,
                              "--out", self.out, "--events", self.events_path,
                              "--session-timeout", str(a.session_timeout)],
                             stdout=self.stderr, stderr=self.stderr)
        self.lines = 0
        self._seen = 0

    def records_read(self):
        """How many records the member has written out so far (cheap:
        counts only what was appended since the last call)."""
        with open(self.out, "rb") as f:
            f.seek(self._seen)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self._seen += end
        self.lines += chunk[:end].count(b"\n")
        return self.lines

    def events(self):
        out = []
        with open(self.events_path, encoding="utf-8") as f:
            for line in f:
                if line.endswith("\n"):
                    t, kind, detail = line[:-1].split("\t")
                    out.append((float(t), kind, detail))
        return out

    def assignment(self):
        """The partitions of the last assign event, or None after a revoke
        (or before any assignment)."""
        cur = None
        for _, kind, detail in self.events():
            if kind == "assign":
                cur = [int(p) for p in detail.split(",") if p]
            elif kind == "revoke":
                cur = None
        return cur

    def errors(self):
        return [d for _, k, d in self.events() if k == "error"]

    def check_alive(self):
        rc = self.proc.poll()
        if rc is not None:
            gl.die("member %s exited with status %s: %s" % (self.name, rc, self.tail()))

    def tail(self):
        self.stderr.flush()
        with open(self.stderr.name, encoding="utf-8", errors="replace") as f:
            return " / ".join(f.read().strip().splitlines()[-3:])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--rate", type=float, required=True, help="records per second")
    ap.add_argument("--kill-after", type=int, required=True, help="records member a reads before SIGKILL")
    ap.add_argument("--session-timeout", type=int, default=6000, help="ms")
    ap.add_argument("--deadline", type=float, default=60)
    ap.add_argument("--dir", default=".", help="where the members' files go")
    a = ap.parse_args()
    gl.exit_on_sigterm()
    run = "fo" + uuid.uuid4().hex[:8]
    a.group = "e2e-group-failover-" + run
    t0 = time.monotonic()
    deadline = t0 + a.deadline
    session = a.session_timeout / 1000
    everything = list(range(a.partitions))

    ma, mb = Member(a, "a"), Member(a, "b")
    members = [ma, mb]
    try:
        # --- the group forms with both members ---------------------------
        while True:
            for m in members:
                m.check_alive()
            pa, pb = ma.assignment(), mb.assignment()
            if pa and pb and not set(pa) & set(pb) and sorted(pa + pb) == everything:
                break
            if time.monotonic() > deadline:
                gl.die("no generation with both members after %.0fs: a assigned %s, b assigned %s"
                       % (a.deadline, pa, pb))
            time.sleep(0.05)
        formed = time.monotonic() - t0
        print("group formed in %.1fs: a assigned %s, b assigned %s" % (formed, pa, pb))

        # --- produce; SIGKILL member a once it has read --kill-after ------
        killed = {}

        def tick(sent):
            for m in members:
                if m is mb or not killed:
                    m.check_alive()
            if not killed and ma.records_read() >= a.kill_after:
                os.kill(ma.proc.pid, signal.SIGKILL)
                killed.update(at=time.time(), mono=time.monotonic(), sent=sent, read=ma.records_read(),
                              b_read=mb.records_read())
                ma.proc.wait()

        acked = gl.produce(a.bootstrap, a.topic, run, 0, a.count, a.keys, deadline, rate=a.rate, tick=tick)
        produced = time.monotonic()
        if not killed:
            gl.die("member a read only %d records while all %d were produced: never killed mid-stream"
                   % (ma.records_read(), a.count))
        if killed["sent"] >= a.count:
            gl.die("every record was produced before member a was killed: not mid-stream")
        print("member a killed with SIGKILL after reading %d records (b had read %d), %d of %d produced"
              % (killed["read"], killed["b_read"], killed["sent"], a.count))

        # --- member b takes over every partition ------------------------
        takeover = None
        while takeover is None:
            mb.check_alive()
            for t, kind, detail in mb.events():
                if t >= killed["at"] and kind == "assign" and [int(p) for p in detail.split(",") if p] == everything:
                    takeover = t
                    break
            if takeover is None and time.time() > killed["at"] + session + TAKEOVER_SLACK:
                gl.die("member b still not assigned every partition %.1fs after member a was killed "
                       "(session timeout %.0fs): b assigned %s, b's events since the kill: %s"
                       % (time.time() - killed["at"], session, mb.assignment(),
                          [(round(t - killed["at"], 2), k, d) for t, k, d in mb.events() if t >= killed["at"]]))
            time.sleep(0.05)
        if takeover - killed["at"] > session + TAKEOVER_SLACK:
            gl.die("member b was assigned every partition only %.1fs after member a was killed "
                   "(session timeout %.0fs + %.0fs)" % (takeover - killed["at"], session, TAKEOVER_SLACK))
        revoked = [t for t, k, _ in mb.events() if t >= killed["at"] and k == "revoke"]
        print("member b assigned all %d partitions %.1fs after the kill (told of the rebalance after %s; "
              "session timeout %.0fs)" % (a.partitions, takeover - killed["at"],
                                          "%.1fs" % (revoked[0] - killed["at"]) if revoked else "no revoke",
                                          session))

        # --- b reads to the end, then stops cleanly ----------------------
        wm = gl.admin_consumer(a.bootstrap, a.group)
        high = gl.high_watermarks(wm, a.topic, a.partitions)
        if sum(high.values()) != a.count:
            gl.die("high watermarks %s sum to %d, want %d" % (high, sum(high.values()), a.count))
        while True:
            mb.check_alive()
            pos = {}
            for r in gl.read_records(mb.out):
                pos[r.partition] = max(pos.get(r.partition, 0), r.offset + 1)
            if all(pos.get(p, 0) >= h for p, h in high.items()):
                break
            if time.monotonic() > deadline:
                gl.die("member b did not reach the high watermarks %s by the deadline: at %s"
                       % (high, dict(sorted(pos.items()))))
            time.sleep(0.1)
        caught_up = time.monotonic()
        mb.proc.send_signal(signal.SIGTERM)
        try:
            rc = mb.proc.wait(timeout=max(min(15, deadline - time.monotonic()), 1))
        except Exception:
            gl.die("member b still running 15s after SIGTERM: %s" % mb.tail())
        if rc != 0:
            gl.die("member b exited with status %d after SIGTERM: %s" % (rc, mb.tail()))
        if not any(k == "closed" for _, k, _ in mb.events()):
            gl.die("member b exited without closing its consumer")

        # --- every record read, by a or by b ----------------------------
        ra, rb = gl.read_records(ma.out), gl.read_records(mb.out)
        try:
            s, copies = gl.check_reads(ra + rb, run=run, keys=a.keys, expected=set(range(a.count)),
                                       acked=acked, copies_allowed=True)
        except gl.CheckError as e:
            gl.die("members a and b together: %s" % e)
        print(gl.summary_line("members a (%d) and b (%d) together" % (len(ra), len(rb)), s))
        a_parts = {r.partition for r in ra}
        odd = [q for q in copies if acked[q][0] not in a_parts]
        print("duplicates: %d records read twice, all on partitions member a had read from%s"
              % (len(copies), "" if not odd else " EXCEPT %d (first: record %d, partition %d)"
                 % (len(odd), odd[0], acked[odd[0]][0])))
        # Where b took up each of a's partitions (a's last commit) against
        # where a had got to: the difference is what was read twice.
        a_next = {}
        for r in ra:
            a_next[r.partition] = max(a_next.get(r.partition, 0), r.offset + 1)
        b_from = {}
        for r in rb:
            if r.partition in a_next:
                b_from[r.partition] = min(b_from.get(r.partition, r.offset), r.offset)
        print("member b took over a's partitions at offsets %s; a had read up to %s"
              % (dict(sorted(b_from.items())), dict(sorted(a_next.items()))))
        got = gl.committed(wm, a.topic, a.partitions)
        if got != high:
            gl.die("after b closed, Consumer.committed() says %s, want the high watermarks %s" % (got, high))
        wm.close()
        errs = mb.errors()
        if errs:
            print("member b's client errors (not failed on): %s" % " / ".join(errs[:3]))
        print("failover: group formed %.1fs, produced %.1fs, b caught up %.1fs after production ended; "
              "committed %s; %.1fs in all" % (formed, produced - t0 - formed, caught_up - produced, high,
                                               time.monotonic() - t0))
    finally:
        for m in members:
            m.kill()


if __name__ == "__main__":
    main()
