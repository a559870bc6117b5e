#!/usr/bin/python3
"""DescribeProducers v0 against Stele, checked against what the producers did.

    idem_describe.py --bootstrap HOST:PORT SUMMARY.json...

Neither client the tests use can send DescribeProducers (KIP-664):
confluent-kafka 1.7's AdminClient has no describe_producers, and
kafka-python 2.0.2 has neither the request nor the flexible-version
encoding (compact strings and arrays, tagged fields, request header v2)
that DescribeProducers needs from v0 on. So this script speaks the
protocol itself over a socket: ApiVersions v0 (is key 61 advertised?),
then one DescribeProducers v0 request for every partition of every topic
in the summaries, plus a partition that does not exist.

Each SUMMARY (written by idem_roundtrip.py or idem_kcat_check.py) names a
topic produced by one idempotent producer, its producer id and epoch, how
many records each partition got, and the wall-clock span of the
production. Every partition that got records must list exactly that
producer: its id and epoch, last sequence = records in the partition - 1
(each batch's sequence starts where the last one ended, from 0), a last
timestamp within the production's span (give or take the block time's
lag), and no transaction (coordinator epoch and transaction start offset
-1). A partition that got none lists no producer; the partition that does
not exist answers UNKNOWN_TOPIC_OR_PARTITION.
"""

import argparse
import json
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2elib  # noqa: E402

API_VERSIONS, INIT_PRODUCER_ID, DESCRIBE_PRODUCERS = 18, 22, 61
UNKNOWN_TOPIC_OR_PARTITION = 3
SLACK_MS = 15000  # block time against this machine's clock


class Reader:
    """A cursor over a response body."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise e2elib.CheckError("response truncated at byte %d (wanted %d more of %d)"
                                    % (self.pos, n, len(self.buf)))
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def fixed(self, fmt):
        return struct.unpack(">" + fmt, self.take(struct.calcsize(">" + fmt)))[0]

    def uvarint(self):
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise e2elib.CheckError("uvarint too long at byte %d" % self.pos)

    def compact_len(self):
        """A compact array or string length (-1 for null)."""
        return self.uvarint() - 1

    def compact_str(self):
        n = self.compact_len()
        return None if n < 0 else self.take(n).decode()

    def tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def done(self):
        if self.pos != len(self.buf):
            raise e2elib.CheckError("%d bytes left over after the response" % (len(self.buf) - self.pos))


def uvarint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def compact_str(s):
    b = s.encode()
    return uvarint(len(b) + 1) + b


class Conn:
    """One connection to the broker; one request at a time."""

    def __init__(self, bootstrap):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.corr = 0

    def call(self, key, version, body, flexible):
        """Send a request, return the response body after its header."""
        self.corr += 1
        client = b"stele-e2e-idem-describe"
        header = struct.pack(">hhih", key, version, self.corr, len(client)) + client
        if flexible:
            header += b"\x00"  # request header v2: no tagged fields
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self.recv(4))[0]
        r = Reader(self.recv(size))
        corr = r.fixed("i")
        if corr != self.corr:
            raise e2elib.CheckError("response to correlation id %d, want %d" % (corr, self.corr))
        if flexible:
            r.tags()  # response header v1
        return r

    def recv(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise e2elib.CheckError("the broker closed the connection")
            buf += chunk
        return bytes(buf)


def api_versions(conn):
    """{api key: (min, max)} from ApiVersions v0."""
    r = conn.call(API_VERSIONS, 0, b"", flexible=False)
    code = r.fixed("h")
    if code != 0:
        raise e2elib.CheckError("ApiVersions v0: error code %d" % code)
    out = {}
    for _ in range(r.fixed("i")):
        key, lo, hi = r.fixed("h"), r.fixed("h"), r.fixed("h")
        out[key] = (lo, hi)
    r.done()
    return out


def describe_producers(conn, topics):
    """DescribeProducers v0 for {topic: [partition, ...]}: returns
    {(topic, partition): (error code, [producer dict, ...])}."""
    body = uvarint(len(topics) + 1)
    for topic, parts in topics.items():
        body += compact_str(topic) + uvarint(len(parts) + 1)
        body += b"".join(struct.pack(">i", p) for p in parts)
        body += b"\x00"
    body += b"\x00"
    r = conn.call(DESCRIBE_PRODUCERS, 0, body, flexible=True)
    r.fixed("i")  # throttle
    out = {}
    for _ in range(r.compact_len()):
        topic = r.compact_str()
        for _ in range(r.compact_len()):
            part, code = r.fixed("i"), r.fixed("h")
            r.compact_str()  # error message
            producers = []
            for _ in range(r.compact_len()):
                producers.append({
                    "producer_id": r.fixed("q"), "epoch": r.fixed("i"), "last_sequence": r.fixed("i"),
                    "last_timestamp": r.fixed("q"), "coordinator_epoch": r.fixed("i"),
                    "txn_start_offset": r.fixed("q"),
                })
                r.tags()
            r.tags()
            out[(topic, part)] = (code, producers)
        r.tags()
    r.tags()
    r.done()
    return out


def check(summaries, described):
    """Every partition of every summary lists its producer as it should."""
    lines = []
    for s in summaries:
        topic = s["topic"]
        for p in range(s["partitions"]):
            got = described.get((topic, p))
            if got is None:
                raise e2elib.CheckError("%s [%d]: missing from the DescribeProducers response" % (topic, p))
            code, producers = got
            if code != 0:
                raise e2elib.CheckError("%s [%d]: error code %d" % (topic, p, code))
            n = int(s["per_partition"].get(str(p), 0))
            if n == 0:
                if producers:
                    raise e2elib.CheckError("%s [%d] got no records but lists producers %s" % (topic, p, producers))
                continue
            if len(producers) != 1:
                raise e2elib.CheckError("%s [%d]: %d active producers %s, want exactly producer %d"
                                        % (topic, p, len(producers), producers, s["producer_id"]))
            ap = producers[0]
            want = {"producer_id": s["producer_id"], "epoch": s["epoch"], "last_sequence": n - 1,
                    "coordinator_epoch": -1, "txn_start_offset": -1}
            for field, value in want.items():
                if ap[field] != value:
                    raise e2elib.CheckError("%s [%d] (%d records): %s is %d, want %d; the producer as described: %s"
                                            % (topic, p, n, field, ap[field], value, ap))
            lo, hi = s["first_ms"] - SLACK_MS, s["last_ms"] + SLACK_MS
            if not lo <= ap["last_timestamp"] <= hi:
                raise e2elib.CheckError("%s [%d]: last timestamp %d is not within the production's span %d..%d "
                                        "(+-%ds)" % (topic, p, ap["last_timestamp"], s["first_ms"], s["last_ms"],
                                                     SLACK_MS // 1000))
        lines.append("%s: producer %d epoch %d in %s, last sequences %s" % (
            topic, s["producer_id"], s["epoch"],
            ", ".join("p%d" % p for p in range(s["partitions"]) if int(s["per_partition"].get(str(p), 0))),
            ", ".join("%d" % described[(topic, p)][1][0]["last_sequence"]
                      for p in range(s["partitions"]) if described[(topic, p)][1])))
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("summaries", nargs="+")
    a = ap.parse_args()
    summaries = []
    for path in a.summaries:
        with open(path, encoding="utf-8") as f:
            summaries.append(json.load(f))
    try:
        conn = Conn(a.bootstrap)
        versions = api_versions(conn)
        for key, name in ((INIT_PRODUCER_ID, "InitProducerId"), (DESCRIBE_PRODUCERS, "DescribeProducers")):
            if key not in versions or versions[key][0] != 0:
                raise e2elib.CheckError("ApiVersions does not advertise %s from v0: %s"
                                        % (name, versions.get(key, "absent")))
        topics = {s["topic"]: list(range(s["partitions"])) for s in summaries}
        ghost = summaries[0]["topic"]
        topics[ghost] = topics[ghost] + [summaries[0]["partitions"]]
        described = describe_producers(conn, topics)
        lines = check(summaries, described)
        code, producers = described.get((ghost, summaries[0]["partitions"]), (None, None))
        if code != UNKNOWN_TOPIC_OR_PARTITION:
            raise e2elib.CheckError("%s [%d] (no such partition): error code %s, want %d (UNKNOWN_TOPIC_OR_PARTITION)"
                                    % (ghost, summaries[0]["partitions"], code, UNKNOWN_TOPIC_OR_PARTITION))
    except (OSError, e2elib.CheckError) as e:
        e2elib.die("DescribeProducers: %s" % e)
    print("ApiVersions: InitProducerId v%d-%d, DescribeProducers v%d-%d" % (versions[INIT_PRODUCER_ID] + versions[DESCRIBE_PRODUCERS]))
    for line in lines:
        print("DescribeProducers: " + line)
    print("DescribeProducers: %s [%d] answers UNKNOWN_TOPIC_OR_PARTITION" % (ghost, summaries[0]["partitions"]))


if __name__ == "__main__":
    main()
