"""schemas_confluent.py: confluent-kafka's SchemaRegistryClient against a
broker's schema registry, and librdkafka producing Avro records in
Confluent's wire format to a topic that validates them (docs/schemas.md).

Debian packages confluent-kafka 1.7 without fastavro, so its AvroSerializer
cannot run here; the payloads are written with Apache Avro's own Python
library (python3-avro) and framed as AvroSerializer frames them: a magic
byte 0, the 4-byte schema id the registry gave, the binary datum.

  1. register_schema answers ids; the same schema again keeps its id;
     get_latest_version, get_schema, get_subjects, get_versions,
     lookup_schema and test_compatibility answer as Confluent's registry.
  2. An incompatible schema is refused (SchemaRegistryError 409); under
     NONE it registers.
  3. Produce to a topic with stele.value.schema.validation=full: records
     with the registered id are delivered; one with an unregistered id, one
     not in the wire format and one whose payload does not decode are each
     refused (INVALID_RECORD) and none of them is stored.
  4. A consumer reads exactly the valid records back and decodes them with
     the schema fetched by the id each carries.
"""
import os
import io
import struct
import sys
import time

import avro.io
import avro.schema
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2elib import check, registry_args  # noqa: E402

V1 = '{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"}]}'
V2 = '{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"qty","type":"int","default":1}]}'
BAD = '{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"string"}]}'


def encode(schema_id, text, value):
    buf = io.BytesIO()
    avro.io.DatumWriter(avro.schema.parse(text)).write(value, avro.io.BinaryEncoder(buf))
    return struct.pack(">bI", 0, schema_id) + buf.getvalue()


def decode(sr, data):
    magic, schema_id = struct.unpack(">bI", data[:5])
    check(magic == 0, "magic byte %d" % magic)
    text = sr.get_schema(schema_id).schema_str
    return avro.io.DatumReader(avro.schema.parse(text)).read(avro.io.BinaryDecoder(io.BytesIO(data[5:])))


def main():
    a = registry_args()
    sr = SchemaRegistryClient({"url": a.registry})
    subject = a.topic + "-value"

    # 1. the registry's answers.
    id1 = sr.register_schema(subject, Schema(V1, "AVRO"))
    check(sr.register_schema(subject, Schema(V1.replace(",", ", "), "AVRO")) == id1, "the same schema again got another id")
    check(sr.test_compatibility(subject, Schema(V2, "AVRO")), "v2 is compatible")
    check(not sr.test_compatibility(subject, Schema(BAD, "AVRO")), "BAD is not compatible")
    id2 = sr.register_schema(subject, Schema(V2, "AVRO"))
    latest = sr.get_latest_version(subject)
    check(latest.schema_id == id2 and latest.version == 2, "latest: %s %s" % (latest.schema_id, latest.version))
    check(subject in sr.get_subjects(), "get_subjects")
    check(sr.get_versions(subject) == [1, 2], "get_versions: %s" % sr.get_versions(subject))
    found = sr.lookup_schema(subject, Schema(V1, "AVRO"))
    check(found.schema_id == id1 and found.version == 1, "lookup_schema")
    check('"qty"' in sr.get_schema(id2).schema_str, "get_schema")
    # 2. an incompatible schema, then NONE.
    try:
        sr.register_schema(subject, Schema(BAD, "AVRO"))
        check(False, "BAD registered under BACKWARD")
    except SchemaRegistryError as e:
        check(e.http_status_code == 409 and e.error_code == 409, "BAD: %s" % e)
    sr.set_compatibility(subject, "NONE")
    check(sr.get_compatibility(subject) == "NONE", "get_compatibility")
    id3 = sr.register_schema(subject, Schema(BAD, "AVRO"))
    check(id3 not in (id1, id2), "BAD's id")
    print("registry: ids %d %d %d" % (id1, id2, id3))

    # 3. produce: the valid records are delivered, each invalid one refused.
    p = Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 0, "message.send.max.retries": 0,
                  "enable.idempotence": False, "batch.num.messages": 1})
    results = {}

    def on_delivery(name):
        def cb(err, msg):
            results[name] = err
        return cb

    records = [
        ("v1", encode(id1, V1, {"id": 1, "item": "tea"})),
        ("v2", encode(id2, V2, {"id": 2, "item": "milk", "qty": 3})),
        ("unregistered", struct.pack(">bI", 0, 999) + b"\x02"),
        ("no-wire", b'{"id": 3}'),
        ("undecodable", struct.pack(">bI", 0, id1) + b"\x02"),
        ("tombstone", None),
    ]
    for name, value in records:
        p.produce(a.topic, key=name.encode(), value=value, on_delivery=on_delivery(name))
        p.flush(20)
    want_ok = {"v1", "v2", "tombstone"}
    for name, _ in records:
        err = results.get(name, "no delivery report")
        if name in want_ok:
            check(err is None, "%s: %s" % (name, err))
        else:
            check(err is not None and err.name() == "INVALID_RECORD", "%s: %s, want INVALID_RECORD" % (name, err))
    print("produce: %s delivered, the others refused with INVALID_RECORD" % sorted(want_ok))

    # 4. read back: exactly the valid records, decoded by their ids.
    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "e2e-schemas-%d" % time.time_ns(),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([a.topic])
    got, deadline = [], time.time() + 30
    while len(got) < 3 and time.time() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        got.append((m.key().decode(), None if m.value() is None else decode(sr, m.value())))
    c.close()
    check(got == [("v1", {"id": 1, "item": "tea"}), ("v2", {"id": 2, "item": "milk", "qty": 3}), ("tombstone", None)],
          "read back: %s" % got)
    print("consume: %s" % got)


if __name__ == "__main__":
    main()
