"""schemas_json_confluent.py: confluent-kafka's JSONSerializer and
JSONDeserializer against a broker's registry and a topic with
stele.value.schema.validation=full (docs/schemas.md).

  1. The serializer registers the schema itself (auto.register.schemas)
     under <topic>-value, as JSON; SerializingProducer writes two records.
  2. A record with the registered id whose JSON the schema refuses, and one
     that is not JSON, are each refused with INVALID_RECORD.
  3. DeserializingConsumer reads back exactly the two valid records.
  4. test_compatibility: a required property added is not BACKWARD; an
     optional one added to this closed model is.
"""
import os
import json
import struct
import sys
import time

from confluent_kafka import DeserializingConsumer, Producer, SerializingProducer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import StringDeserializer, StringSerializer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2elib import check, registry_args  # noqa: E402

SCHEMA = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order", "type": "object",
    "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
    "required": ["id", "item"], "additionalProperties": False,
})


def main():
    a = registry_args()
    sr = SchemaRegistryClient({"url": a.registry})
    subject = a.topic + "-value"

    # 1. the serializer registers and writes.
    p = SerializingProducer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 0,
                             "key.serializer": StringSerializer("utf_8"),
                             "value.serializer": JSONSerializer(SCHEMA, sr, lambda o, ctx: o)})
    errors = []
    for i, item in enumerate(["tea", "milk"]):
        p.produce(a.topic, key="k%d" % i, value={"id": i, "item": item},
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.flush(20)
    check(not errors, "serialized records: %s" % errors)
    latest = sr.get_latest_version(subject)
    check(latest.schema.schema_type == "JSON", "the registered type: %s" % latest.schema.schema_type)
    print("registered %s as id %d, version %d" % (subject, latest.schema_id, latest.version))

    # 2. what the schema refuses.
    raw = Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 0, "message.send.max.retries": 0,
                    "enable.idempotence": False})
    results = {}
    for name, value in [("wrong-type", json.dumps({"id": "x", "item": "tea"}).encode()),
                        ("extra", json.dumps({"id": 3, "item": "tea", "qty": 1}).encode()),
                        ("not-json", b"{id: 3")]:
        raw.produce(a.topic, key=name, value=struct.pack(">bI", 0, latest.schema_id) + value,
                    on_delivery=lambda err, msg, name=name: results.__setitem__(name, err))
        raw.flush(20)
    for name, err in sorted(results.items()):
        check(err is not None and err.name() == "INVALID_RECORD", "%s: %s, want INVALID_RECORD" % (name, err))
    check(len(results) == 3, "delivery reports: %s" % results)
    print("refused with INVALID_RECORD: %s" % sorted(results))

    # 3. read back.
    c = DeserializingConsumer({"bootstrap.servers": a.bootstrap, "group.id": "e2e-json-%d" % time.time_ns(),
                               "auto.offset.reset": "earliest", "enable.auto.commit": False,
                               "key.deserializer": StringDeserializer("utf_8"),
                               "value.deserializer": JSONDeserializer(SCHEMA, from_dict=lambda d, ctx: d)})
    c.subscribe([a.topic])
    got, deadline = [], time.time() + 30
    while len(got) < 2 and time.time() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        check(m.error() is None, "consume: %s" % m.error())
        got.append((m.key(), m.value()))
    c.close()
    check(got == [("k0", {"id": 0, "item": "tea"}), ("k1", {"id": 1, "item": "milk"})], "read back: %s" % got)
    print("consumed: %s" % got)

    # 4. compatibility of JSON schemas.
    required = json.loads(SCHEMA)
    required["properties"]["qty"] = {"type": "integer"}
    optional = json.loads(json.dumps(required))
    required["required"] = ["id", "item", "qty"]
    check(not sr.test_compatibility(subject, Schema(json.dumps(required), "JSON")), "a required property added is compatible")
    check(sr.test_compatibility(subject, Schema(json.dumps(optional), "JSON")), "an optional property added to a closed model is not")
    print("compatibility: ok")


if __name__ == "__main__":
    main()
