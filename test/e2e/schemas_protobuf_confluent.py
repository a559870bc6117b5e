#!/usr/bin/env python3
"""Protobuf schemas with clients we did not write (schemas.sh, part 3).

confluent-kafka's SchemaRegistryClient registers a .proto file that imports
another, by a reference named by its import path, and checks Protobuf
compatibility (a field added passes, int32 to sint32 does not). librdkafka
produces Protobuf values in Confluent's wire format (the schema id, the
message indexes, then the message, written here byte by byte as Protobuf's
encoding says) to a topic with stele.value.schema.validation=full: a valid
Order and a valid nested Order.Line are delivered; indexes naming no message
and a string that is not UTF-8 are refused with INVALID_RECORD. The
broker's typed read (GET /v1/topics/T/records?format=json) gives the two
delivered values in Protobuf's JSON mapping.
"""

import json
import os
import struct
import sys
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2elib import check, registry_args  # noqa: E402

MONEY = 'syntax = "proto3";\npackage common;\nmessage Money { int64 cents = 1; string currency = 2; }\n'
ORDER = """syntax = "proto3";
package shop;
import "common/money.proto";
message Order {
  string id = 1;
  common.Money total = 2;
  message Line { string sku = 1; int32 qty = 2; }
}
"""
ORDER_V2 = ORDER.replace("  common.Money total = 2;\n", "  common.Money total = 2;\n  string note = 3;\n")
ORDER_SIGNED = ORDER.replace("int32 qty", "sint32 qty")


def ld(field, data):
    """A length-delimited field (wire type 2): its tag, its length, data."""
    return bytes([field << 3 | 2, len(data)]) + data


def main():
    a = registry_args()
    sr = SchemaRegistryClient({"url": a.registry})

    sr.register_schema("common/money.proto", Schema(MONEY, "PROTOBUF"))
    refs = [SchemaReference("common/money.proto", "common/money.proto", 1)]
    subject = a.topic + "-value"
    try:
        sr.register_schema(subject, Schema(ORDER, "PROTOBUF"))
        check(False, "an import without its reference registered")
    except SchemaRegistryError as e:
        check(e.error_code == 42201, "an import without its reference: %s" % e)
    order_id = sr.register_schema(subject, Schema(ORDER, "PROTOBUF", refs))
    check(sr.test_compatibility(subject, Schema(ORDER_V2, "PROTOBUF", refs)), "a field added is compatible")
    check(not sr.test_compatibility(subject, Schema(ORDER_SIGNED, "PROTOBUF", refs)), "int32 to sint32 is not compatible")
    got = sr.get_schema(order_id)
    check(got.schema_type == "PROTOBUF" and [r.name for r in got.references] == ["common/money.proto"],
          "get_schema: %s %s" % (got.schema_type, got.references))
    print("registry: Order is id %d, with its reference" % order_id)

    header = struct.pack(">bI", 0, order_id)
    order = ld(1, b"o-1") + ld(2, bytes([0x08, 0xfa, 0x01]))  # id "o-1", total {cents: 250}
    line = ld(1, b"tea") + bytes([0x10, 2])  # sku "tea", qty 2
    records = [
        ("order", header + b"\x00" + order),  # indexes [0]: the shortcut 0
        ("line", header + b"\x04\x00\x00" + line),  # indexes [0, 0]: Order.Line
        ("no-such-message", header + b"\x02\x04" + order),  # indexes [2]
        ("not-utf8", header + b"\x00" + ld(1, b"\xff\xfe")),
    ]
    p = Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 0, "message.send.max.retries": 0,
                  "enable.idempotence": False, "batch.num.messages": 1})
    results = {}
    for name, value in records:
        p.produce(a.topic, key=name.encode(), value=value,
                  on_delivery=lambda err, msg, name=name: results.__setitem__(name, err))
        p.flush(20)
    for name, _ in records:
        err = results.get(name, "no delivery report")
        if name in ("order", "line"):
            check(err is None, "%s: %s" % (name, err))
        else:
            check(err is not None and err.name() == "INVALID_RECORD", "%s: %s, want INVALID_RECORD" % (name, err))
    print("produce: order and line delivered, the others refused with INVALID_RECORD")

    http = a.registry  # the registry is the broker's HTTP API
    with urllib.request.urlopen("%s/v1/topics/%s/records?format=json" % (http, a.topic), timeout=20) as resp:
        page = json.load(resp)
    typed = [r.get("value_typed", {}).get("json") for r in page["records"]]
    check(typed == [{"id": "o-1", "total": {"cents": "250"}}, {"sku": "tea", "qty": 2}], "typed read: %s" % typed)
    print("typed read: %s" % typed)


if __name__ == "__main__":
    main()
