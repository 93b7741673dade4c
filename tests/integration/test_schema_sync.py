"""The mirrored records' schemas follow them to the target's registry (issue 62): real Kafka A
and B, a real registry on each side (Apicurio Registry, Confluent's REST API), and the
applications' own serializers (confluent-kafka's AvroSerializer on A, AvroDeserializer on B).

The target's registry holds other schemas under the ids the source's records carry, as a
registry in use would: a consumer on B reads every record with the right schema only because
the worker rewrote each record's id to the target's id for the same schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from kubernetes import client
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.audit.main import audit
from kafka_mirror.audit.records import with_target_ids
from kafka_mirror.kafka.schemas import Equivalents
from kafka_mirror.kafka.wire_format import schema_id, translated
from kafka_mirror.kube import apply
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.schema_registry import LocalSchemaRegistry
from tests.helpers.audit import committed_everything
from tests.helpers.kafka import Record, create_topics, end_offsets, produce, unique
from tests.helpers.objects import get_custom, mirror, selection
from tests.helpers.worker import StartWorker, read_partition, wait_for, worker_config

pytestmark = pytest.mark.kafka

StartRegistry = Callable[[str], LocalSchemaRegistry]


def payment(version: int) -> str:
    fields = [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": "string"},
    ]
    if version == 2:
        fields.append({"name": "currency", "type": "string", "default": "EUR"})
    return json.dumps({"type": "record", "name": "Payment", "namespace": "shop", "fields": fields})


def produce_avro(
    cluster: LocalKafka,
    registry: LocalSchemaRegistry,
    topic: str,
    schema: str | Schema,
    values: list[dict[str, Any]],
    conf: dict[str, Any] | None = None,
) -> None:
    """As an application does: its serializer registers the schema and frames each value."""
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), schema, conf=conf)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    context = SerializationContext(topic, MessageField.VALUE)
    for value in values:
        producer.produce(topic, value=serializer(value, context), partition=0)
    assert producer.flush(30) == 0


def read_avro(cluster: LocalKafka, registry: LocalSchemaRegistry, topic: str) -> list[Any]:
    """Every record of partition 0, as an application on that cluster deserializes it."""
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
    context = SerializationContext(topic, MessageField.VALUE)
    return [deserializer(r.value, context) for r in read_partition(cluster, topic, 0, 0)]


def registry_config(a: LocalSchemaRegistry, b_url: str, **settings: Any) -> dict[str, Any]:
    return {"source": {"url": a.url}, "target": {"url": b_url}, **settings}


def occupy(registry: LocalSchemaRegistry, count: int) -> None:
    """Schemas of some other application under the ids the source's will carry."""
    for n in range(count):
        other = {"type": "record", "name": f"Other{n}", "fields": [{"name": "x", "type": "int"}]}
        registry.register(f"other-{n}-value", json.dumps(other))


def records_on(cluster: LocalKafka, topic: str) -> int:
    """How many records a reader gets from partition 0 of `topic`, 0 before the mirror made it.
    Exactly once, commit markers take offsets too: the end offset is no count."""
    if not end_offsets(cluster.bootstrap_servers, topic):
        return 0
    return len(read_partition(cluster, topic, 0, 0))


def payments(start: int, count: int, version: int) -> list[dict[str, Any]]:
    values = []
    for n in range(start, start + count):
        value: dict[str, Any] = {"id": n, "amount": n * 1.25, "note": f"payment {n} " + "x" * n}
        if version == 2:
            value["currency"] = ["EUR", "USD", "CHF"][n % 3]
        values.append(value)
    return values


@pytest.mark.parametrize("delivery", ["atLeastOnce", "exactlyOnce"])
def test_ids_are_translated_where_the_target_holds_other_schemas_under_them(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    start_worker: StartWorker,
    start_registry: StartRegistry,
    delivery: str,
) -> None:
    registry_a, registry_b = start_registry("A"), start_registry("B")
    occupy(registry_b, 3)
    topic, raw = unique("payments-"), unique("raw-")
    create_topics(kafka_a.bootstrap_servers, [topic, raw], partitions=1)
    produce_avro(kafka_a, registry_a, topic, payment(1), payments(0, 120, 1))
    produce_avro(kafka_a, registry_a, topic, payment(2), payments(120, 80, 2))
    # A topic left out of spec.schemaRegistry.topics: bytes that look like the wire format
    # are copied as they are.
    lookalikes = [bytes((0, 0, 0, 0, n % 7)) + b"raw" for n in range(20)]
    produce(kafka_a.bootstrap_servers, raw, [Record(None, v, partition=0) for v in lookalikes])
    config = worker_config(
        kafka_a,
        kafka_b,
        [topic, raw],
        schemaRegistry=registry_config(registry_a, registry_b.url, topics=[topic]),
        delivery=delivery,
    )
    worker = start_worker(config)
    remote = f"{topic}.A"
    wait_for(lambda: records_on(kafka_b, remote) == 200, 90, "copies")
    wait_for(lambda: records_on(kafka_b, f"{raw}.A") == 20, 60, "raw")

    # The applications' view on B: every record, in order, field by field.
    assert read_avro(kafka_b, registry_b, remote) == read_avro(kafka_a, registry_a, topic)
    assert read_avro(kafka_b, registry_b, remote) == payments(0, 120, 1) + payments(120, 80, 2)
    # Judged by the registries: each copy's id names on B the schema its original's names on A,
    # and ids did change (B's 1-3 are the other application's).
    originals = read_partition(kafka_a, topic, 0, 0)
    copies = read_partition(kafka_b, remote, 0, 0)
    client_a = SchemaRegistryClient({"url": registry_a.url})
    client_b = SchemaRegistryClient({"url": registry_b.url})
    assert len(originals) == len(copies) == 200
    pairs = {
        (schema_id(o.value or b""), schema_id(c.value or b""))
        for o, c in zip(originals, copies, strict=True)
    }
    assert len(pairs) == 2 and all(a != b for a, b in pairs), pairs
    for a, b in pairs:
        assert a is not None and b is not None
        on_a, on_b = client_a.get_schema(a).schema_str, client_b.get_schema(b).schema_str
        assert json.loads(on_a or "") == json.loads(on_b or "")
    # The subject follows the topic's name, with both versions in order.
    assert client_b.get_versions(f"{remote}-value") == [1, 2]
    assert json.loads(client_b.get_version(f"{remote}-value", 2).schema.schema_str or "") == (
        json.loads(payment(2))
    )
    assert [r.value for r in read_partition(kafka_b, f"{raw}.A", 0, 0)] == lookalikes
    assert worker.metric("kafka_mirror_schemas_copied") == 2


@pytest.mark.kube
@pytest.mark.usefixtures("operator")
def test_a_record_waits_for_its_schema_and_none_goes_ahead_of_it(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    start_worker: StartWorker,
    start_registry: StartRegistry,
    tmp_path: Any,
    kube_api: client.ApiClient,
    namespace: str,
) -> None:
    """The target's registry is down when the records come: none is copied, the partition
    and the mirror's status say what it waits for, and everything follows once the registry
    answers."""
    registry_a = start_registry("A")
    absent_b = LocalSchemaRegistry("B", tmp_path / "registry-B-late")
    topic = unique("payments-")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=1)
    produce_avro(kafka_a, registry_a, topic, payment(1), payments(0, 50, 1))
    registries = registry_config(registry_a, absent_b.url)
    config = worker_config(
        kafka_a, kafka_b, [topic], mirror=f"{namespace}/pay", schemaRegistry=registries
    )
    # The mirror as the operator knows it, its worker run here as its pod would.
    source, target = ({"bootstrapServers": kafka.bootstrap_servers} for kafka in (kafka_a, kafka_b))
    apply(kube_api, selection("payments", namespace, "pay", [topic]))
    apply(kube_api, mirror("pay", namespace, source, target, schemaRegistry=registries))
    worker = start_worker(config)
    wait_for(
        lambda: worker.metric("kafka_mirror_schemas_waiting", state="pending") == 1,
        60,
        "the worker waiting for the schema",
    )
    wait_for(
        lambda: worker.metric("kafka_mirror_schema_registry_reachable") == 0,
        30,
        "the registry reported unreachable",
    )
    remote = f"{topic}.A"
    assert end_offsets(kafka_b.bootstrap_servers, remote).get(0, 0) == 0
    _committed_metadata(kafka_a, config, topic, "waits for schema id 1 (unreachable)")
    unreachable = schemas_condition(kube_api, namespace, "RegistryUnreachable")
    assert unreachable["message"].startswith("1 partitions wait for schema ids 1: "), unreachable

    try:
        absent_b.start()
        occupy(absent_b, 2)  # it comes back holding other schemas under the same ids
        wait_for(lambda: end_offsets(kafka_b.bootstrap_servers, remote).get(0) == 50, 90, "copies")
        assert read_avro(kafka_b, absent_b, remote) == payments(0, 50, 1)
        schemas_condition(kube_api, namespace, "NoneWaiting")
    finally:
        absent_b.remove()


def schemas_condition(api: client.ApiClient, namespace: str, reason: str) -> dict[str, Any]:
    """The mirror `pay`'s SchemasSynced condition, once it has `reason`."""
    found: list[dict[str, Any]] = [{}]

    def has_reason() -> bool:
        status = get_custom(api, namespace, "kafkamirrors", "pay").get("status", {})
        conditions = status.get("conditions", [])
        found[0] = next((c for c in conditions if c["type"] == "SchemasSynced"), {})
        return found[0].get("reason") == reason

    wait_for(has_reason, 60, lambda: f"SchemasSynced {reason}; it is {found[0]}")
    return found[0]


def test_a_schema_under_a_subject_not_copied_waits_and_says_which(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    start_worker: StartWorker,
    start_registry: StartRegistry,
) -> None:
    """RecordNameStrategy: the schema is under `shop.Payment`, not `<topic>-value`, and it
    references `shop.Money`. Not listed in spec.schemaRegistry.subjects, the records wait and
    the partition names the subject; listed, they follow with their reference."""
    registry_a, registry_b = start_registry("A"), start_registry("B")
    occupy(registry_b, 4)
    client_a = SchemaRegistryClient({"url": registry_a.url})
    money = {
        "type": "record",
        "name": "Money",
        "namespace": "shop",
        "fields": [{"name": "cents", "type": "long"}, {"name": "currency", "type": "string"}],
    }
    client_a.register_schema("shop.Money", Schema(json.dumps(money), "AVRO"))
    priced = json.dumps(
        {
            "type": "record",
            "name": "Payment",
            "namespace": "shop",
            "fields": [{"name": "id", "type": "long"}, {"name": "price", "type": "shop.Money"}],
        }
    )
    with_reference = Schema(priced, "AVRO", [SchemaReference("shop.Money", "shop.Money", 1)])
    client_a.register_schema("shop.Payment", with_reference)
    topic = unique("orders-")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=1)
    values = [{"id": n, "price": {"cents": n * 100, "currency": "EUR"}} for n in range(30)]
    produce_avro(
        kafka_a,
        registry_a,
        topic,
        with_reference,
        values,
        conf={
            "auto.register.schemas": False,
            "use.latest.version": True,
            "subject.name.strategy": lambda _context, record_name: record_name,
        },
    )
    config = worker_config(
        kafka_a, kafka_b, [topic], schemaRegistry=registry_config(registry_a, registry_b.url)
    )
    worker = start_worker(config)
    wait_for(
        lambda: worker.metric("kafka_mirror_schemas_waiting", state="refused") == 1,
        60,
        "the schema refused",
    )
    metadata = _committed_metadata(kafka_a, config, topic, "spec.schemaRegistry.subjects")
    assert "shop.Payment" in metadata, metadata
    assert end_offsets(kafka_b.bootstrap_servers, f"{topic}.A").get(0, 0) == 0
    worker.stop()

    listed = {**config, "schemaRegistry": {**config["schemaRegistry"], "subjects": [r"shop\..*"]}}
    start_worker(listed, name="listed")
    remote = f"{topic}.A"
    wait_for(lambda: end_offsets(kafka_b.bootstrap_servers, remote).get(0) == 30, 90, "copies")
    assert read_avro(kafka_b, registry_b, remote) == values
    client_b = SchemaRegistryClient({"url": registry_b.url})
    assert set(client_b.get_subjects()) >= {"shop.Payment", "shop.Money"}


def _committed_metadata(cluster: LocalKafka, config: dict[str, Any], topic: str, says: str) -> str:
    """What the workers' group committed beside partition 0's offset once it `says` it: the
    reason the partition stopped."""
    group = "kafka-mirror." + config["mirror"].replace("/", ".")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    seen = [""]
    try:

        def committed() -> bool:
            [point] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
            seen[0] = point.metadata or ""
            return says in seen[0]

        wait_for(committed, 30, lambda: f"{says!r} in the committed reason ({seen[0]!r})")
        return seen[0]
    finally:
        consumer.close()


@pytest.mark.spark
def test_the_audit_checks_each_copy_names_the_same_schema_on_the_target(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    start_worker: StartWorker,
    start_registry: StartRegistry,
    spark: SparkSession,
) -> None:
    """The audit passes copies whose ids the worker translated, because each names on B the
    schema its original names on A; judged without the registries, every copy is altered."""
    registry_a, registry_b = start_registry("A"), start_registry("B")
    occupy(registry_b, 2)
    topic = unique("payments-")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=1)
    produce_avro(kafka_a, registry_a, topic, payment(1), payments(0, 40, 1))
    produce_avro(kafka_a, registry_a, topic, payment(2), payments(40, 20, 2))
    config = worker_config(
        kafka_a, kafka_b, [topic], schemaRegistry=registry_config(registry_a, registry_b.url)
    )
    start_worker(config)
    wait_for(lambda: committed_everything(config, topic), 90, "everything committed")

    report = audit(WorkerConfig.model_validate(config), spark, full=True)
    assert report.result == "Passed", report.summary().message
    assert (report.records_checked, report.missing, report.altered) == (60, 0, 0)

    unjudged = {k: v for k, v in config.items() if k != "schemaRegistry"}
    blind = audit(WorkerConfig.model_validate(unjudged), spark, full=True)
    assert (blind.records_checked, blind.altered) == (60, 60), blind.summary().message


def test_a_binary_value_naming_another_topics_schema_is_not_rewritten(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    start_worker: StartWorker,
    start_registry: StartRegistry,
) -> None:
    """Every topic is read as the wire format by default; a binary value of `counters` that
    starts with a zero byte and id 1 (the `payments` schema's) is not copied as a payment: it
    waits, naming the subjects, while `payments` flows."""
    registry_a, registry_b = start_registry("A"), start_registry("B")
    occupy(registry_b, 1)
    payments_topic, counters = unique("payments-"), unique("counters-")
    create_topics(kafka_a.bootstrap_servers, [payments_topic, counters], partitions=1)
    produce_avro(kafka_a, registry_a, payments_topic, payment(1), payments(0, 10, 1))
    produce(
        kafka_a.bootstrap_servers, counters, [Record(None, b"\0\0\0\0\1" + b"count", partition=0)]
    )
    config = worker_config(
        kafka_a,
        kafka_b,
        [payments_topic, counters],
        schemaRegistry=registry_config(registry_a, registry_b.url),
    )
    start_worker(config)
    remote = f"{payments_topic}.A"
    wait_for(lambda: end_offsets(kafka_b.bootstrap_servers, remote).get(0) == 10, 90, "copies")
    assert read_avro(kafka_b, registry_b, remote) == payments(0, 10, 1)
    metadata = _committed_metadata(kafka_a, config, counters, "no subject this mirror copies")
    assert f"{payments_topic}-value" in metadata, metadata
    assert end_offsets(kafka_b.bootstrap_servers, f"{counters}.A").get(0, 0) == 0


@pytest.mark.spark
def test_the_audits_rewrite_is_the_workers(spark: SparkSession) -> None:
    """The audit's Spark expression against the workers' own function, on the values that
    are hard: ids with leading zero bytes, ids of 32 bits, short, empty and null values, a
    topic not in the format, an id only a listed subject has."""
    ids = Equivalents(own={"t": {1: 0x01020304, 0x00000A: 7}, "u": {}}, listed={9: 0x7FFFFFFF})
    values: list[tuple[str, bytes | None]] = [
        ("t", framed(1, b"payload")),
        ("t", framed(0x0A, b"")),
        ("t", framed(9, b"listed")),
        ("u", framed(9, b"listed too")),
        ("t", framed(0xFFFFFFFF, b"unknown, 32 bits")),
        ("t", framed(2**31, b"unknown")),
        ("t", b"\0\0\0"),
        ("t", b""),
        ("t", None),
        ("t", b"\1" + framed(1, b"")[1:]),
        ("other", framed(1, b"not in the format")),
    ]
    frame = spark.createDataFrame(values, "topic string, value binary")
    got = [
        row.value
        for row in frame.select(with_target_ids(F.col("value"), ids).alias("value")).collect()
    ]

    def workers(topic: str, value: bytes | None) -> bytes | None:
        if value is None or topic not in ids.own:
            return value
        mapping = {**ids.listed, **ids.own[topic]}
        return translated(value, mapping) or value  # (an unknown id: the worker waits)

    assert got == [workers(t, v) for t, v in values]
    assert got[0] == framed(0x01020304, b"payload") and got[3] == framed(0x7FFFFFFF, b"listed too")


def framed(schema: int, payload: bytes) -> bytes:
    return b"\0" + schema.to_bytes(4, "big") + payload


def order_type() -> Any:
    """A Protobuf message class, as an application's generated code would give it."""
    label, kinds = descriptor_pb2.FieldDescriptorProto, descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop")
    file.syntax = "proto3"
    order = file.message_type.add(name="Order")
    for number, (name, kind) in enumerate(
        [("id", kinds.TYPE_INT64), ("item", kinds.TYPE_STRING), ("cents", kinds.TYPE_INT64)], 1
    ):
        order.field.add(name=name, number=number, type=kind, label=label.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_protobuf_records_follow_with_their_schema(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    start_worker: StartWorker,
    start_registry: StartRegistry,
) -> None:
    """confluent-kafka's ProtobufSerializer on A (its wire format: the id, then the message
    indexes), ProtobufDeserializer on B with B's registry, which holds other schemas under
    the ids A's records carry."""
    registry_a, registry_b = start_registry("A"), start_registry("B")
    occupy(registry_b, 2)
    order = order_type()
    topic = unique("orders-")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=1)
    serializer = ProtobufSerializer(
        order, SchemaRegistryClient({"url": registry_a.url}), {"use.deprecated.format": False}
    )
    context = SerializationContext(topic, MessageField.VALUE)
    sent = [order(id=n, item=f"item {n}", cents=n * 250) for n in range(40)]
    producer = Producer({"bootstrap.servers": kafka_a.bootstrap_servers})
    for message in sent:
        producer.produce(topic, value=serializer(message, context), partition=0)
    assert producer.flush(30) == 0
    config = worker_config(
        kafka_a, kafka_b, [topic], schemaRegistry=registry_config(registry_a, registry_b.url)
    )
    start_worker(config)
    remote = f"{topic}.A"
    wait_for(lambda: end_offsets(kafka_b.bootstrap_servers, remote).get(0) == 40, 90, "copies")

    deserializer = ProtobufDeserializer(
        order,
        {"use.deprecated.format": False},
        SchemaRegistryClient({"url": registry_b.url}),
    )
    on_b = SerializationContext(remote, MessageField.VALUE)
    copies = read_partition(kafka_b, remote, 0, 0)
    assert [deserializer(c.value, on_b) for c in copies] == sent
    client_b = SchemaRegistryClient({"url": registry_b.url})
    ids = {schema_id(c.value or b"") for c in copies}
    assert ids == {3}, ids  # B's own 1 and 2 are the other application's
    assert client_b.get_schema(3).schema_type == "PROTOBUF"
    assert client_b.get_versions(f"{remote}-value") == [1]
