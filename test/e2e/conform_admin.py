#!/usr/bin/python3
"""Issue 27's admin items with clients Stele did not write.

    conform_admin.py --bootstrap HOST:PORT --prefix P --broker-log FILE

Against a single `stele serve` node (broker id 0), each check prints one
"ok:" line or raises, and every failure names the request, what Kafka
answers and what Stele answered:

  replicas   confluent-kafka AdminClient.create_topics with
             NewTopic(replica_assignment=[[0], [0]]) creates the topic; one
             naming broker 7 gets INVALID_REPLICA_ASSIGNMENT;
             create_partitions with NewPartitions(replica_assignment=[[0]])
             adds a partition; assignments naming broker 7 or too few lists
             get INVALID_REPLICA_ASSIGNMENT. (kcat -L then shows them: the
             shell script checks that.)
  deprecated confluent-kafka create_topics with message.format.version=3.0-IV1
             (and message.downconversion.enable=false) succeeds and
             describe_configs shows both as set on the topic; an unknown
             version gets INVALID_CONFIG; alter_configs sets it again.
  authops    kafka-python: Metadata v8 asking for authorized operations
             answers the topic's (3576) and the cluster's (8096), not asked
             for INT32_MIN; DescribeGroups v3 asking answers the group's
             (328), not asking INT32_MIN.
  loggers    kafka-python: IncrementalAlterConfigs v0 on BROKER_LOGGER "0"
             sets cometbft=DEBUG: DescribeConfigs shows DEBUG and a DEBUG line
             of component=cometbft appears in the broker's log; validate_only
             changes nothing; an unknown logger or level INVALID_CONFIG,
             another broker's id INVALID_REQUEST; DELETE goes back to the
             root level; the legacy AlterConfigs INVALID_REQUEST, as in
             Kafka. confluent-kafka alter_configs on the BROKER resource
             with log.dirs gets INVALID_REQUEST.
  logdefaults kafka-python: IncrementalAlterConfigs v0 on the BROKER resource
             "" (kafka-configs.sh --entity-default) sets log.retention.ms
             cluster-wide: DescribeConfigs of "" shows it as
             DYNAMIC_DEFAULT_BROKER_CONFIG; confluent-kafka describe_configs
             shows a topic created after it inheriting it with that source,
             one setting retention.ms keeping its own; alter_configs on
             broker "0" gets INVALID_REQUEST (Stele has no per-broker log
             configs); the legacy AlterConfigs of "" with nothing set
             removes it again, as it replaces the whole set.
  brokerconns kafka-python's KafkaAdminClient.alter_configs (the legacy
             AlterConfigs) on ConfigResource(BROKER, "0") sets
             max.connections.per.ip.overrides=127.0.0.5:1 at run time: a
             second raw connection from 127.0.0.5 is closed unanswered
             while the first is still served; describe_configs (with
             synonyms) shows it as DYNAMIC_BROKER_CONFIG and
             max.connections.per.ip=0 with no overrides gets
             INVALID_REQUEST; alter_configs with no configs removes it and
             the second connection is served again.
  connrate   kafka-python's alter_configs on BROKER "0" sets
             max.connection.creation.rate=5 at run time: described as
             DYNAMIC_BROKER_CONFIG; 60 raw connections opened one after
             another are all served (throttled, never refused) but take
             at least a second, as Kafka's 11 s rate window lets about 50
             through at once and holds the rest; -1 gets INVALID_REQUEST
             "value must be at least 0"; alter_configs with no configs
             removes it.

confluent-kafka 1.7 (Debian's) has no describe_topics, describe_cluster
nor incremental_alter_configs, and kafka-python 2.0 no Metadata v8 nor
IncrementalAlterConfigs, and its DescribeGroups v3 response schema leaves
out authorized_operations (describe_consumer_groups reads None): those
three are declared here in kafka-python's own protocol schema language, as
Kafka's message definitions give them, and sent by its client.
DescribeCluster is flexible-only (v0 uses tagged fields, which kafka-python
2.0 cannot encode), so it is left to the franz-go tests.
"""

import argparse
import os
import re
import socket
import struct
import sys
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource, ConfigResourceType
from kafka.protocol.admin import AlterConfigsRequest_v0, DescribeConfigsRequest_v1
from kafka.protocol.api import Request, Response
from kafka.protocol.types import Array, Boolean, Bytes, Int8, Int16, Int32, Schema, String

INT32_MIN = -2147483648
TOPIC_OPS = 3576    # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
CLUSTER_OPS = 8096  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS IDEMPOTENT_WRITE
GROUP_OPS = 328     # READ DELETE DESCRIBE
INVALID_REQUEST, INVALID_CONFIG = 42, 40
BROKER_LOGGER = 8
BROKER = 4


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


# --- requests kafka-python 2.0 does not have, in its schema language --------

class MetadataResponse_v8(Response):
    API_KEY = 3
    API_VERSION = 8
    SCHEMA = Schema(
        ('throttle_time_ms', Int32),
        ('brokers', Array(('node_id', Int32), ('host', String('utf-8')), ('port', Int32),
                          ('rack', String('utf-8')))),
        ('cluster_id', String('utf-8')),
        ('controller_id', Int32),
        ('topics', Array(
            ('error_code', Int16), ('topic', String('utf-8')), ('is_internal', Boolean),
            ('partitions', Array(('error_code', Int16), ('partition', Int32), ('leader', Int32),
                                 ('leader_epoch', Int32), ('replicas', Array(Int32)),
                                 ('isr', Array(Int32)), ('offline_replicas', Array(Int32)))),
            ('topic_authorized_operations', Int32))),
        ('cluster_authorized_operations', Int32))


class MetadataRequest_v8(Request):
    API_KEY = 3
    API_VERSION = 8
    RESPONSE_TYPE = MetadataResponse_v8
    SCHEMA = Schema(
        ('topics', Array(String('utf-8'))),
        ('allow_auto_topic_creation', Boolean),
        ('include_cluster_authorized_operations', Boolean),
        ('include_topic_authorized_operations', Boolean))


class IncrementalAlterConfigsResponse_v0(Response):
    API_KEY = 44
    API_VERSION = 0
    SCHEMA = Schema(
        ('throttle_time_ms', Int32),
        ('responses', Array(('error_code', Int16), ('error_message', String('utf-8')),
                            ('resource_type', Int8), ('resource_name', String('utf-8')))))


class IncrementalAlterConfigsRequest_v0(Request):
    API_KEY = 44
    API_VERSION = 0
    RESPONSE_TYPE = IncrementalAlterConfigsResponse_v0
    SCHEMA = Schema(
        ('resources', Array(('resource_type', Int8), ('resource_name', String('utf-8')),
                            ('configs', Array(('name', String('utf-8')), ('config_operation', Int8),
                                              ('value', String('utf-8')))))),
        ('validate_only', Boolean))


class DescribeGroupsResponse_v3(Response):
    """kafka-python 2.0's own v3 response leaves out authorized_operations
    (it reads None): this is the schema Kafka's DescribeGroupsResponse.json
    gives for v3."""
    API_KEY = 15
    API_VERSION = 3
    SCHEMA = Schema(
        ('throttle_time_ms', Int32),
        ('groups', Array(
            ('error_code', Int16), ('group', String('utf-8')), ('state', String('utf-8')),
            ('protocol_type', String('utf-8')), ('protocol', String('utf-8')),
            ('members', Array(('member_id', String('utf-8')), ('client_id', String('utf-8')),
                              ('client_host', String('utf-8')), ('member_metadata', Bytes),
                              ('member_assignment', Bytes))),
            ('authorized_operations', Int32))))


class DescribeGroupsRequest_v3(Request):
    API_KEY = 15
    API_VERSION = 3
    RESPONSE_TYPE = DescribeGroupsResponse_v3
    SCHEMA = Schema(('groups', Array(String('utf-8'))), ('include_authorized_operations', Boolean))


SET, DELETE = 0, 1


def kp_send(kp, request):
    """Send request with kafka-python's client to the one broker; the response."""
    node = kp._client.least_loaded_node()
    fut = kp._send_request_to_node(node, request)
    kp._wait_for_futures([fut])
    return fut.value


# --- confluent-kafka ----------------------------------------------------------

def wait_one(futures, key, timeout=30):
    """The result of futures[key], or the KafkaError it failed with."""
    try:
        futures[key].result(timeout=timeout)
        return None
    except KafkaException as e:
        return e.args[0]


def err_name(err):
    return "no error" if err is None else "%s (%s)" % (err.name(), err.str())


def check_replicas(admin, prefix):
    good = prefix + "-assigned"
    fs = admin.create_topics([NewTopic(good, 2, replica_assignment=[[0], [0]])], operation_timeout=30)
    err = wait_one(fs, good)
    check(err is None, "CreateTopics %s with replica_assignment [[0],[0]] on broker 0: want success, got %s"
          % (good, err_name(err)))
    md = admin.list_topics(good, timeout=10).topics[good]
    check(md.error is None and sorted(md.partitions) == [0, 1],
          "Metadata for %s after CreateTopics with 2 assigned partitions: %s" % (good, md.partitions))
    for p in md.partitions.values():
        check(p.replicas == [0] and p.leader == 0 and p.isrs == [0],
              "%s[%d]: assigned [0], Metadata says replicas %s leader %d isr %s"
              % (good, p.id, p.replicas, p.leader, p.isrs))
    print("ok: create_topics replica_assignment [[0],[0]]: 2 partitions, replicas [0], leader 0")

    bad = prefix + "-bad"
    for assignment, what in (([[7]], "broker 7"), ([[0, 0]], "broker 0 twice")):
        fs = admin.create_topics([NewTopic(bad, len(assignment), replica_assignment=assignment)], operation_timeout=30)
        err = wait_one(fs, bad)
        check(err is not None and err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT,
              "CreateTopics %s with replica_assignment %s (%s) on a single node: want "
              "INVALID_REPLICA_ASSIGNMENT, got %s" % (bad, assignment, what, err_name(err)))
        print("ok: create_topics replica_assignment %s: %s" % (assignment, err_name(err)))
    check(bad not in admin.list_topics(timeout=10).topics, "%s exists after refused CreateTopics" % bad)

    # validate_only with a good assignment creates nothing.
    fs = admin.create_topics([NewTopic(bad, 1, replica_assignment=[[0]])], validate_only=True)
    err = wait_one(fs, bad)
    check(err is None, "CreateTopics validate_only %s [[0]]: want success, got %s" % (bad, err_name(err)))
    check(bad not in admin.list_topics(timeout=10).topics, "validate_only CreateTopics created %s" % bad)

    for total, assignment, what in ((3, [[7]], "broker 7"), (4, [[0]], "1 list for 2 new partitions")):
        fs = admin.create_partitions([NewPartitions(good, total, replica_assignment=assignment)],
                                     operation_timeout=30)
        err = wait_one(fs, good)
        check(err is not None and err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT,
              "CreatePartitions %s to %d with %s (%s): want INVALID_REPLICA_ASSIGNMENT, got %s"
              % (good, total, assignment, what, err_name(err)))
        print("ok: create_partitions to %d with %s: %s" % (total, assignment, err_name(err)))
    fs = admin.create_partitions([NewPartitions(good, 3, replica_assignment=[[0]])], operation_timeout=30)
    err = wait_one(fs, good)
    check(err is None, "CreatePartitions %s to 3 with [[0]]: want success, got %s" % (good, err_name(err)))
    deadline = time.monotonic() + 10
    while True:
        md = admin.list_topics(good, timeout=10).topics[good]
        if sorted(md.partitions) == [0, 1, 2]:
            break
        check(time.monotonic() < deadline, "%s has partitions %s 10s after CreatePartitions to 3"
              % (good, sorted(md.partitions)))
        time.sleep(0.1)
    p = md.partitions[2]
    check(p.replicas == [0] and p.leader == 0, "%s[2] assigned [0]: replicas %s leader %d"
          % (good, p.replicas, p.leader))
    print("ok: create_partitions to 3 with [[0]]: partition 2 replicas [0], leader 0")


def source_of(entry):
    """A ConfigEntry's source as a number (an enum or an int, by version)."""
    return getattr(entry.source, "value", entry.source)


def describe_topic(admin, topic):
    res = ConfigResource("TOPIC", topic)
    return admin.describe_configs([res])[res].result(timeout=30)


def check_deprecated(admin, prefix):
    topic = prefix + "-deprecated"
    cfg = {"message.format.version": "3.0-IV1", "message.downconversion.enable": "false"}
    fs = admin.create_topics([NewTopic(topic, num_partitions=1, config=cfg)], operation_timeout=30)
    err = wait_one(fs, topic)
    check(err is None, "CreateTopics %s with %s: want success (Kafka 3.x accepts them), got %s"
          % (topic, cfg, err_name(err)))
    got = describe_topic(admin, topic)
    for name, value in cfg.items():
        e = got.get(name)
        check(e is not None, "DescribeConfigs %s: %s missing" % (topic, name))
        check(e.value == value and source_of(e) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
              "DescribeConfigs %s: %s=%r source %s, want %r as DYNAMIC_TOPIC_CONFIG"
              % (topic, name, e.value, e.source, value))
    print("ok: create_topics with %s; describe_configs shows them as DYNAMIC_TOPIC_CONFIG" % cfg)

    bad = prefix + "-badversion"
    fs = admin.create_topics([NewTopic(bad, num_partitions=1, config={"message.format.version": "9.9-IV9"})],
                             operation_timeout=30)
    err = wait_one(fs, bad)
    check(err is not None and err.code() == KafkaError.INVALID_CONFIG,
          "CreateTopics with message.format.version=9.9-IV9: want INVALID_CONFIG, got %s" % err_name(err))
    print("ok: message.format.version=9.9-IV9: %s" % err_name(err))

    # AlterConfigs (non-incremental) replaces the topic's configs.
    res = ConfigResource("TOPIC", topic, set_config={"message.format.version": "2.8"})
    admin.alter_configs([res])[res].result(timeout=30)
    got = describe_topic(admin, topic)
    check(got["message.format.version"].value == "2.8",
          "after AlterConfigs message.format.version=2.8, DescribeConfigs says %r"
          % got["message.format.version"].value)
    check(source_of(got["message.downconversion.enable"]) != ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
          "AlterConfigs replaces a topic's configs, yet message.downconversion.enable is still set")
    print("ok: alter_configs message.format.version=2.8 replaced the topic's configs")


def check_broker_resource(admin):
    res = ConfigResource("BROKER", "0", set_config={"log.dirs": "/elsewhere"})
    try:
        admin.alter_configs([res])[res].result(timeout=30)
        err = None
    except KafkaException as e:
        err = e.args[0]
    check(err is not None and err.code() == KafkaError.INVALID_REQUEST,
          "AlterConfigs BROKER 0 log.dirs: want INVALID_REQUEST (not dynamic in Kafka), got %s" % err_name(err))
    check("log.dirs" in err.str(), "AlterConfigs BROKER 0 log.dirs: message %r does not name log.dirs" % err.str())
    print("ok: alter_configs BROKER 0 log.dirs: %s" % err_name(err))


# --- kafka-python ---------------------------------------------------------------

def check_authops(admin, kp, topic):
    fs = admin.create_topics([NewTopic(topic, num_partitions=1)], operation_timeout=30)
    err = wait_one(fs, topic)
    check(err is None, "CreateTopics %s: %s" % (topic, err_name(err)))
    r = kp_send(kp, MetadataRequest_v8(topics=[topic], allow_auto_topic_creation=False,
                                       include_cluster_authorized_operations=True,
                                       include_topic_authorized_operations=True))
    check(len(r.topics) == 1 and r.topics[0][0] == 0, "Metadata v8 %s: topics %s" % (topic, r.topics))
    ops = r.topics[0][4]
    check(ops == TOPIC_OPS, "Metadata v8 include_topic_authorized_operations: topic %s ops %d, want %d "
          "(all topic operations, no authorizer)" % (topic, ops, TOPIC_OPS))
    check(r.cluster_authorized_operations == CLUSTER_OPS,
          "Metadata v8 include_cluster_authorized_operations: %d, want %d"
          % (r.cluster_authorized_operations, CLUSTER_OPS))
    print("ok: Metadata v8 authorized operations: topic %d, cluster %d" % (ops, r.cluster_authorized_operations))

    r = kp_send(kp, MetadataRequest_v8(topics=None, allow_auto_topic_creation=False,
                                       include_cluster_authorized_operations=False,
                                       include_topic_authorized_operations=False))
    check(r.cluster_authorized_operations == INT32_MIN,
          "Metadata v8 not asking: cluster ops %d, want %d" % (r.cluster_authorized_operations, INT32_MIN))
    listed = [t for t in r.topics if t[1] == topic]
    check(listed and listed[0][4] == INT32_MIN, "Metadata v8 all topics, not asking: %s" % listed)
    print("ok: Metadata v8 not asking: INT32_MIN for topics and cluster")

    group = "e2e-authops-group"
    for ask, want in ((True, GROUP_OPS), (False, INT32_MIN)):
        r = kp_send(kp, DescribeGroupsRequest_v3(groups=[group], include_authorized_operations=ask))
        check(len(r.groups) == 1 and r.groups[0][0] == 0, "DescribeGroups v3 %s: %s" % (group, r.groups))
        ops = r.groups[0][6]
        check(ops == want, "DescribeGroups v3 include_authorized_operations=%s: %d, want %d" % (ask, ops, want))
        print("ok: DescribeGroups v3 include_authorized_operations=%s: %d (state %s)" % (ask, ops, r.groups[0][2]))


def logger_levels(kp, node="0"):
    r = kp_send(kp, DescribeConfigsRequest_v1(resources=[(BROKER_LOGGER, node, None)], include_synonyms=False))
    (code, msg, _typ, _name, entries), = r.resources
    check(code == 0, "DescribeConfigs BROKER_LOGGER %s: error %d %s" % (node, code, msg))
    return {e[0]: e[1] for e in entries}


def alter_logger(kp, configs, node="0", validate_only=False):
    r = kp_send(kp, IncrementalAlterConfigsRequest_v0(
        resources=[(BROKER_LOGGER, node, configs)], validate_only=validate_only))
    (code, msg, _typ, _name), = r.responses
    return code, msg


def log_has_debug(path, start, component):
    with open(path, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    return re.search(r"level=DEBUG .*component=%s\b" % component, text) is not None


def check_loggers(kp, broker_log):
    levels = logger_levels(kp)
    check(levels.get("root") == "INFO" and levels.get("cometbft") == "INFO",
          "DescribeConfigs BROKER_LOGGER 0 on a broker started at info: %s" % levels)

    code, msg = alter_logger(kp, [("cometbft", SET, "DEBUG")], validate_only=True)
    check(code == 0, "IncrementalAlterConfigs validate_only cometbft=DEBUG: error %d %s" % (code, msg))
    check(logger_levels(kp)["cometbft"] == "INFO", "validate_only changed cometbft's level")

    start = os.path.getsize(broker_log)
    code, msg = alter_logger(kp, [("cometbft", SET, "DEBUG")])
    check(code == 0, "IncrementalAlterConfigs BROKER_LOGGER 0 SET cometbft=DEBUG: error %d %s" % (code, msg))
    levels = logger_levels(kp)
    check(levels["cometbft"] == "DEBUG" and levels["root"] == "INFO",
          "after SET cometbft=DEBUG, DescribeConfigs BROKER_LOGGER 0: %s" % levels)
    deadline = time.monotonic() + 10
    while not log_has_debug(broker_log, start, "cometbft"):
        check(time.monotonic() < deadline, "no DEBUG line of component=cometbft in the broker's log "
              "10s after SET cometbft=DEBUG")
        time.sleep(0.2)
    print("ok: IncrementalAlterConfigs BROKER_LOGGER cometbft=DEBUG: described DEBUG, debug lines logged")

    for configs, node, want, what in (
            ([("nosuchlogger", SET, "DEBUG")], "0", INVALID_CONFIG, "unknown logger"),
            ([("cometbft", SET, "LOUD")], "0", INVALID_CONFIG, "unknown level"),
            ([("root", DELETE, None)], "0", INVALID_REQUEST, "DELETE root"),
            ([("cometbft", SET, "INFO")], "7", INVALID_REQUEST, "another broker's id"),
            ([("cometbft", SET, "INFO")], "zero", INVALID_REQUEST, "not a number")):
        code, msg = alter_logger(kp, configs, node=node)
        check(code == want, "IncrementalAlterConfigs BROKER_LOGGER %r %s (%s): want error %d, got %d %r"
              % (node, configs, what, want, code, msg))
        print("ok: BROKER_LOGGER %s: error %d %r" % (what, code, msg))

    # The legacy AlterConfigs does not take BROKER_LOGGER, in Kafka either.
    r = kp_send(kp, AlterConfigsRequest_v0(resources=[(BROKER_LOGGER, "0", [("cometbft", "INFO")])],
                                           validate_only=False))
    (code, msg, _typ, _name), = r.resources
    check(code == INVALID_REQUEST, "AlterConfigs v0 BROKER_LOGGER 0 cometbft=INFO: want INVALID_REQUEST "
          "(Unknown resource type 8), got %d %r" % (code, msg))
    check(logger_levels(kp)["cometbft"] == "DEBUG", "a refused AlterConfigs changed cometbft's level")
    print("ok: legacy AlterConfigs BROKER_LOGGER: error %d %r" % (code, msg))

    code, msg = alter_logger(kp, [("cometbft", DELETE, None)])
    check(code == 0, "IncrementalAlterConfigs DELETE cometbft: error %d %s" % (code, msg))
    check(logger_levels(kp)["cometbft"] == "INFO", "after DELETE cometbft it does not follow root (INFO)")
    print("ok: DELETE cometbft: back to root's INFO")


DYNAMIC_DEFAULT_BROKER_CONFIG = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value  # 3
DYNAMIC_TOPIC_CONFIG = ConfigSource.DYNAMIC_TOPIC_CONFIG.value  # 1


def default_configs(kp):
    """DescribeConfigs v1 of the BROKER resource "": name -> (value, source).

    kafka-python 2.0's v1 response schema reads config_source as a boolean
    (is_default), so the source is taken from the first synonym, which
    Kafka (and Stele) give the entry's own source."""
    r = kp_send(kp, DescribeConfigsRequest_v1(resources=[(BROKER, "", None)], include_synonyms=True))
    (code, msg, _typ, _name, entries), = r.resources
    check(code == 0, "DescribeConfigs BROKER \"\": error %d %s" % (code, msg))
    return {e[0]: (e[1], e[5][0][2] if e[5] else None) for e in entries}


def check_log_defaults(admin, kp, prefix):
    # confluent-kafka 1.7 refuses a ConfigResource with an empty name, so
    # the default resource goes through kafka-python's client.
    r = kp_send(kp, IncrementalAlterConfigsRequest_v0(
        resources=[(BROKER, "", [("log.retention.ms", SET, "3600000")])], validate_only=False))
    (code, msg, _typ, _name), = r.responses
    check(code == 0, "IncrementalAlterConfigs BROKER \"\" log.retention.ms=3600000: error %d %s" % (code, msg))
    got = default_configs(kp)
    check(got.get("log.retention.ms") == ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG),
          "DescribeConfigs BROKER \"\" after setting log.retention.ms=3600000: want it as "
          "DYNAMIC_DEFAULT_BROKER_CONFIG, got %r" % (got,))
    inherit, own = prefix + "-ld-inherit", prefix + "-ld-own"
    fs = admin.create_topics([NewTopic(inherit, 1, 1),
                              NewTopic(own, 1, 1, config={"retention.ms": "1000"})])
    for f in fs.values():
        f.result(timeout=30)
    e = describe_topic(admin, inherit)["retention.ms"]
    check(e.value == "3600000" and source_of(e) == DYNAMIC_DEFAULT_BROKER_CONFIG,
          "topic %s retention.ms: want 3600000 from DYNAMIC_DEFAULT_BROKER_CONFIG, got %s %s" % (inherit, e.value, source_of(e)))
    e = describe_topic(admin, own)["retention.ms"]
    check(e.value == "1000" and source_of(e) == DYNAMIC_TOPIC_CONFIG,
          "topic %s retention.ms: want its own 1000, got %s %s" % (own, e.value, source_of(e)))
    per = ConfigResource("BROKER", "0", set_config={"log.retention.ms": "5"})
    err = None
    try:
        admin.alter_configs([per])[per].result(timeout=30)
    except KafkaException as ex:
        err = ex.args[0]
    check(err is not None and err.code() == KafkaError.INVALID_REQUEST and "cluster-wide" in err.str(),
          "AlterConfigs BROKER 0 log.retention.ms: want INVALID_REQUEST pointing to the cluster-wide "
          "default, got %s" % (err and err.str()))
    r = kp_send(kp, AlterConfigsRequest_v0(resources=[(BROKER, "", [])], validate_only=False))
    (code, msg, _typ, _name), = r.resources
    check(code == 0, "AlterConfigs BROKER \"\" with no configs: error %d %s" % (code, msg))
    got = default_configs(kp)
    check("log.retention.ms" not in got, "after AlterConfigs BROKER \"\" with no configs: still %r" % (got,))
    print("ok: cluster-wide log.retention.ms set, described, inherited and removed; per broker %s" % err_name(err))


DYNAMIC_BROKER_CONFIG = ConfigSource.DYNAMIC_BROKER_CONFIG.value  # 2


def api_versions_from(src, bootstrap, timeout=3.0):
    """Opens a connection from the loopback address src and sends
    ApiVersions v0; True if answered, False if the broker closed it."""
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout, source_address=(src, 0))
    try:
        try:
            s.sendall(struct.pack(">ihhih", 10, 18, 0, 7, -1))
            head = s.recv(4)
        except OSError:  # reset, broken pipe, timeout
            return False
        return len(head) == 4
    finally:
        s.close()


def broker_configs(kp):
    """kafka-python describe_configs of BROKER "0" with synonyms: name ->
    (value, source of the first synonym: the entry's own)."""
    r, = kp.describe_configs([KpConfigResource(ConfigResourceType.BROKER, "0")], include_synonyms=True)
    (code, msg, _typ, _name, entries), = r.resources
    check(code == 0, "DescribeConfigs BROKER 0: error %d %s" % (code, msg))
    return {e[0]: (e[1], e[5][0][2] if e[5] else None) for e in entries}


def kp_alter_broker0(kp, configs):
    r = kp.alter_configs([KpConfigResource(ConfigResourceType.BROKER, "0", configs=configs)])
    (code, msg, _typ, _name), = r.resources
    return code, msg


def eventually(what, fn, timeout=10.0):
    deadline = time.time() + timeout
    while True:
        if fn():
            return
        if time.time() > deadline:
            raise Fail("after %gs: %s" % (timeout, what))
        time.sleep(0.1)


def check_broker_conns(kp, bootstrap):
    src = "127.0.0.5"
    code, msg = kp_alter_broker0(kp, {"max.connections.per.ip.overrides": src + ":1"})
    check(code == 0, "AlterConfigs BROKER 0 max.connections.per.ip.overrides=%s:1: error %d %s" % (src, code, msg))
    got = broker_configs(kp).get("max.connections.per.ip.overrides")
    check(got == (src + ":1", DYNAMIC_BROKER_CONFIG),
          "DescribeConfigs BROKER 0 max.connections.per.ip.overrides: want %s:1 as DYNAMIC_BROKER_CONFIG (%d), got %r"
          % (src, DYNAMIC_BROKER_CONFIG, got))
    host, port = bootstrap.rsplit(":", 1)
    first = socket.create_connection((host, int(port)), timeout=3, source_address=(src, 0))
    try:
        def second_refused():
            return not api_versions_from(src, bootstrap)
        eventually("a second connection from %s with its override 1 is still served" % src, second_refused)
        first.sendall(struct.pack(">ihhih", 10, 18, 0, 8, -1))
        check(len(first.recv(4)) == 4, "the first connection from %s is not served once the limit applies" % src)
    finally:
        first.close()
    code, msg = kp_alter_broker0(kp, {"max.connections.per.ip": "0"})
    check(code == INVALID_REQUEST and "can be set to zero only if" in (msg or ""),
          "AlterConfigs BROKER 0 max.connections.per.ip=0 without overrides: want INVALID_REQUEST, got %d %s" % (code, msg))
    clear_broker0(kp, "max.connections.per.ip.overrides", "the override")
    eventually("two connections from %s once the override is removed" % src,
               lambda: api_versions_from(src, bootstrap) and api_versions_from(src, bootstrap))
    print("ok: BROKER 0 max.connections.per.ip.overrides set at run time (a second connection from %s refused), "
          "described as DYNAMIC_BROKER_CONFIG, per-ip 0 refused, removed" % src)


def clear_broker0(kp, name, what):
    """AlterConfigs BROKER 0 with no configs (it replaces the set): name is
    no longer DYNAMIC_BROKER_CONFIG."""
    code, msg = kp_alter_broker0(kp, {})
    check(code == 0, "AlterConfigs BROKER 0 with no configs: error %d %s" % (code, msg))
    got = broker_configs(kp).get(name)
    check(got is not None and got[1] != DYNAMIC_BROKER_CONFIG,
          "after AlterConfigs BROKER 0 with no configs %s is still dynamic: %r" % (what, got))


def check_conn_rate(kp, bootstrap):
    code, msg = kp_alter_broker0(kp, {"max.connection.creation.rate": "5"})
    check(code == 0, "AlterConfigs BROKER 0 max.connection.creation.rate=5: error %d %s" % (code, msg))
    got = broker_configs(kp).get("max.connection.creation.rate")
    check(got == ("5", DYNAMIC_BROKER_CONFIG),
          "DescribeConfigs BROKER 0 max.connection.creation.rate: want 5 as DYNAMIC_BROKER_CONFIG (%d), got %r"
          % (DYNAMIC_BROKER_CONFIG, got))
    time.sleep(0.5)  # the limit applies after the commit, on the broker's own time
    start = time.time()
    for i in range(60):
        check(api_versions_from("127.0.0.1", bootstrap, timeout=10.0),
              "connection %d of 60 at max.connection.creation.rate=5 was not served (throttled ones must wait, not be refused)" % (i + 1))
    took = time.time() - start
    check(took >= 1.0, "60 connections at max.connection.creation.rate=5 took %.2fs: none was held" % took)
    code, msg = kp_alter_broker0(kp, {"max.connection.creation.rate": "-1"})
    check(code == INVALID_REQUEST and "at least 0" in (msg or ""),
          "AlterConfigs BROKER 0 max.connection.creation.rate=-1: want INVALID_REQUEST, got %d %s" % (code, msg))
    clear_broker0(kp, "max.connection.creation.rate", "the rate")
    print("ok: BROKER 0 max.connection.creation.rate=5 set at run time, described as DYNAMIC_BROKER_CONFIG, "
          "60 connections all served in %.2fs (held, not refused), -1 refused, removed" % took)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--broker-log", required=True)
    a = ap.parse_args()

    admin = AdminClient({"bootstrap.servers": a.bootstrap, "client.id": "stele-e2e-conform"})
    kp = KafkaAdminClient(bootstrap_servers=a.bootstrap, client_id="stele-e2e-conform-kp",
                          request_timeout_ms=20000)
    failed = []
    for name, fn in (("replicas", lambda: check_replicas(admin, a.prefix)),
                     ("deprecated", lambda: check_deprecated(admin, a.prefix)),
                     ("broker", lambda: check_broker_resource(admin)),
                     ("logdefaults", lambda: check_log_defaults(admin, kp, a.prefix)),
                     ("brokerconns", lambda: check_broker_conns(kp, a.bootstrap)),
                     ("connrate", lambda: check_conn_rate(kp, a.bootstrap)),
                     ("authops", lambda: check_authops(admin, kp, a.prefix + "-authops")),
                     ("loggers", lambda: check_loggers(kp, a.broker_log))):
        try:
            fn()
        except Exception as e:  # report every item, not just the first failure
            print("FAIL %s: %s: %s" % (name, type(e).__name__, e), file=sys.stderr)
            failed.append(name)
    kp.close()
    if failed:
        print("FAIL: %s" % ", ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
