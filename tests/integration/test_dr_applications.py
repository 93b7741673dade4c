"""The seed's disaster-recovery scenario with the applications as they run in production (issue
62): each under its own principal on two clusters that check ACLs (KRaft's StandardAuthorizer),
writing and reading Avro records through each side's own schema registry (Apicurio, Confluent's
API), and the failover asked from the product's CLI of the real operator on the real API server.
A worker process mirrors A→B as its pod would; it stops as A is lost.

On A, the consumer may only read `t` and its group, the producer may only write `t`, and eve
may do nothing. After `kafka-mirror failover`, judged by Kafka and by the applications' own
deserializers: the consumer resumes its group on `t.A` on B under the same principal and reads
every record it had not read, each with its schema; the producer writes `t` on B, a right the
failover moved; eve has nothing on B.

And back, once A returns: the producer wrote 50 orders to `t` on B with an evolved schema (a
version A's registry never had) and the consumer read 20 of them. `b-to-a` mirrors `t` to `t.B`
on A with the ACL and schema syncs the other way, and `kafka-mirror return` hands back: the
producer may no longer write `t` on B; on A the consumer reads the other 30 in `t.B` with the
evolved schema from A's registry, and, once the producer writes `t` on A again, reads only the
new orders there (its group resumed from what it read of `t.A` on B)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AclOperation, ResourceType
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kubernetes import client

from kafka_mirror.kafka.acl_grants import Grant
from kafka_mirror.kube import apply
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.schema_registry import LocalSchemaRegistry
from tests.helpers.dr import checkpoints_follow, operation_of, run_cli
from tests.helpers.kafka import create_topics, unique
from tests.helpers.objects import get_custom, mirror, selection
from tests.helpers.worker import StartWorker, wait_for, worker_config
from tests.integration.test_acl_sync import bind, grants_on
from tests.integration.test_schema_sync import StartRegistry
from tests.integration.test_security import scram_login, set_scram_password

pytestmark = [pytest.mark.kafka, pytest.mark.kube]

PARTITIONS, WRITTEN, READ_ON_A, ON_B, READ_ON_B = 3, 300, 120, 50, 20
ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "cents", "type": "long"},
        ],
    }
)


# What the producer writes on B during the outage: the schema evolved (a field with a default),
# a version A's registry never had.
NOTE = {"name": "note", "type": "string", "default": ""}
ORDER_V2 = json.dumps({**json.loads(ORDER), "fields": [*json.loads(ORDER)["fields"], NOTE]})


def order(n: int) -> dict[str, Any]:
    return {"id": n, "item": f"item-{n % 17}", "cents": 100 * n + 7}


def order_v2(n: int) -> dict[str, Any]:
    return {**order(n), "note": f"written on B {n}"}


class Application:
    """An application's client under its own principal on one cluster, serializing with that
    cluster's registry."""

    def __init__(
        self, cluster: LocalKafka, registry: LocalSchemaRegistry, user: str, password: str
    ) -> None:
        self.login = scram_login(cluster, user, password)
        self.registry = SchemaRegistryClient({"url": registry.url})

    def write(self, topic: str, values: list[dict[str, Any]], schema: str = ORDER) -> str:
        """ "written", or the first error the broker answers."""
        serializer = AvroSerializer(self.registry, schema)
        context = SerializationContext(topic, MessageField.VALUE)
        answers: list[str] = []

        def delivered(error: KafkaError | None, _: object) -> None:
            answers.append("written" if error is None else str(error.name()))

        producer = Producer({**self.login, "message.timeout.ms": 15_000, "retries": 0})
        for value in values:
            producer.produce(
                topic,
                key=str(value["id"]).encode(),
                value=serializer(value, context),
                on_delivery=delivered,
            )
        producer.flush(60)
        refused = [a for a in answers if a != "written"]
        return refused[0] if refused else "written" if len(answers) == len(values) else "lost"

    def read(
        self, topic: str, group: str, at_least: int, stop: bool = False
    ) -> list[dict[str, Any]] | str:
        """What the group reads of `topic` as a member, deserialized, until it has `at_least`
        (`stop`) or, after those, until nothing more comes for 3 s (so that re-reads show),
        committing it; or the error."""
        deserializer = AvroDeserializer(self.registry)
        context = SerializationContext(topic, MessageField.VALUE)
        consumer = Consumer(
            {
                **self.login,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        values: list[dict[str, Any]] = []
        try:
            consumer.subscribe([topic])
            deadline, quiet_since = time.monotonic() + 90, time.monotonic()
            while time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is None:
                    if len(values) >= at_least and time.monotonic() - quiet_since > 3:
                        break
                    continue
                error = message.error()
                if error is not None:
                    if not error.retriable():
                        return str(error.name())
                    continue
                values.append(deserializer(message.value(), context))
                quiet_since = time.monotonic()
                if stop and len(values) == at_least:
                    break
            if values:
                consumer.commit(asynchronous=False)
            return values
        finally:
            consumer.close()


def same_user(*clusters: LocalKafka) -> tuple[str, str]:
    """A SCRAM user of this test with the same name and password on every cluster."""
    user, password = unique("app-"), f"scram-{unique()}"
    for cluster in clusters:
        set_scram_password(cluster, user, password)
    return user, password


@pytest.mark.long  # two clusters with an authorizer and two registries for one scenario
@pytest.mark.usefixtures("granting_operator")
def test_the_applications_carry_on_on_b_and_back_on_a_with_their_principals_and_schemas(
    kafka_a_acl: LocalKafka,
    kafka_b_acl: LocalKafka,
    kube_api: client.ApiClient,
    kube_apiserver: KubeApiServer,
    namespace: str,
    start_worker: StartWorker,
    start_registry: StartRegistry,
) -> None:
    a, b = kafka_a_acl, kafka_b_acl
    registry_a, registry_b = start_registry("A"), start_registry("B")
    topic, group = unique("orders-"), unique("billing-")
    remote = f"{topic}.A"
    create_topics(a.bootstrap_servers, [topic], partitions=PARTITIONS)
    # The local `t` on B, made ahead as the runbook's "before a disaster" says: the producers'
    # WRITE lets them write it, not create it.
    create_topics(b.bootstrap_servers, [topic], partitions=PARTITIONS)
    (consumer, consumer_pw), (producer, producer_pw) = same_user(a, b), same_user(a, b)
    eve, eve_pw = same_user(a, b)  # no binding anywhere
    # The mirror's own rights (User:ANONYMOUS over PLAINTEXT), made by hand; on B, someone
    # else's binding on the local `t`, so that B's authorizer guards it (no ACL: open to all).
    mirror_rights = [(a, topic), (b, remote)]
    for cluster, name in mirror_rights:
        bind(cluster, name, "User:ANONYMOUS", AclOperation.ALL)
    for cluster in (a, b):
        bind(cluster, group, "User:ANONYMOUS", AclOperation.ALL, resource=ResourceType.GROUP)
    bind(b, topic, "User:ops", AclOperation.READ)
    # The applications' rights, on A only.
    bind(a, topic, f"User:{consumer}", AclOperation.READ)
    bind(a, group, f"User:{consumer}", AclOperation.READ, resource=ResourceType.GROUP)
    bind(a, topic, f"User:{producer}", AclOperation.WRITE)

    # On A: the producer writes 300 orders; the consumer reads 120 of them in its group.
    on_a = Application(a, registry_a, producer, producer_pw)
    assert on_a.write(topic, [order(n) for n in range(WRITTEN)]) == "written"
    reader_a = Application(a, registry_a, consumer, consumer_pw)
    read_on_a = reader_a.read(topic, group, READ_ON_A, stop=True)
    assert isinstance(read_on_a, list) and len(read_on_a) == READ_ON_A, read_on_a
    assert Application(a, registry_a, eve, eve_pw).write(topic, [order(0)]) == (
        "TOPIC_AUTHORIZATION_FAILED"
    )

    # A→B mirrors, with the ACL sync (moving the applications' rights) and the schema sync.
    acl_sync = {"intervalSeconds": 10, "moveApplications": True}
    registries = {"source": {"url": registry_a.url}, "target": {"url": registry_b.url}}
    config = worker_config(
        a,
        b,
        [re.escape(topic)],
        mirror=f"{namespace}/a-to-b",
        aclSync=acl_sync,
        schemaRegistry=registries,
    )
    worker = start_worker(config, "worker-a-to-b")
    copy = Grant("TOPIC", remote, f"User:{consumer}", "*", "READ", "ALLOW")
    wait_for(lambda: copy in grants_on(b, remote), 90, "the consumer's READ copied")
    wait_for(
        lambda: worker.metric("kafka_mirror_records_total", topic=topic) == WRITTEN,
        120,
        "every order mirrored",
    )
    checkpoints_follow(b, a, group, topic)

    # The mirror as the operator knows it; then A is lost: its worker stops, and the on-call
    # engineer fails over from the CLI.
    source = {"bootstrapServers": a.bootstrap_servers}
    target = {"bootstrapServers": b.bootstrap_servers}
    declared = mirror("a-to-b", namespace, source, target, aclSync=acl_sync)
    declared["spec"]["schemaRegistry"] = registries
    apply(kube_api, selection("orders", namespace, "a-to-b", [re.escape(topic)]))
    apply(kube_api, declared)
    worker.stop()
    said = run_cli(
        kube_apiserver.kubeconfig, "failover", "a-to-b", "--namespace", namespace, "--id", "a-lost"
    )
    status = get_custom(kube_api, namespace, "kafkamirrors", "a-to-b")["status"]["operation"]
    assert status["phase"] == "Completed", said
    # The producer's WRITE, the consumer's READ, and the mirror's own ALL on t on A (as any
    # principal's: WRITE, READ and DESCRIBE).
    moved = {(g["principal"], g["operation"]) for g in status["movedRights"]["grants"]}
    assert moved == {
        (f"User:{producer}", "WRITE"),
        (f"User:{consumer}", "READ"),
        *(("User:ANONYMOUS", op) for op in ("WRITE", "READ", "DESCRIBE")),
    }, status["movedRights"]

    # On B, under the same principals: the consumer resumes its group on t.A and reads every
    # order it had not read on A, each deserialized with B's registry; the producer writes t.
    reader_b = Application(b, registry_b, consumer, consumer_pw)
    read_on_b = reader_b.read(remote, group, WRITTEN - len(read_on_a))
    assert isinstance(read_on_b, list), read_on_b
    ids_a, ids_b = [v["id"] for v in read_on_a], [v["id"] for v in read_on_b]
    assert set(ids_a) | set(ids_b) == set(range(WRITTEN)), "an order was skipped"
    reread = len(set(ids_a) & set(ids_b))
    assert reread == 0 and len(ids_b) == len(set(ids_b)), (reread, len(ids_b))
    assert all(v == order(v["id"]) for v in read_on_b), "a field read differently on B"
    on_b = Application(b, registry_b, producer, producer_pw)
    on_b_ids = range(WRITTEN, WRITTEN + ON_B)
    assert on_b.write(topic, [order_v2(n) for n in on_b_ids], ORDER_V2) == "written"
    # The consumer reads some of them in its group, with the READ on t the failover moved too.
    local = reader_b.read(topic, group, READ_ON_B, stop=True)
    assert isinstance(local, list) and len(local) == READ_ON_B, local
    assert all(v == order_v2(v["id"]) for v in local) and {v["id"] for v in local} <= set(on_b_ids)
    # Eve had nothing on A and has nothing on B; nobody but the mirror writes the copy.
    assert Application(b, registry_b, eve, eve_pw).write(topic, [order(0)]) == (
        "TOPIC_AUTHORIZATION_FAILED"
    )
    assert Application(b, registry_b, eve, eve_pw).read(remote, unique("eve-"), 1) == (
        "TOPIC_AUTHORIZATION_FAILED"
    )
    assert on_b.write(remote, [order(0)]) == "TOPIC_AUTHORIZATION_FAILED"

    # A is back: b-to-a mirrors B's t to t.B on A with both syncs the other way (the consumer's
    # READ on t, the evolved schema), and the Return hands the applications back to A.
    back = f"{topic}.B"
    bind(a, back, "User:ANONYMOUS", AclOperation.ALL)  # b-to-a's own right, made by hand
    reverse_registries = {"source": {"url": registry_b.url}, "target": {"url": registry_a.url}}
    failback = worker_config(
        b,
        a,
        [re.escape(topic)],
        mirror=f"{namespace}/b-to-a",
        source={"alias": "B", "bootstrapServers": b.bootstrap_servers},
        target={"alias": "A", "bootstrapServers": a.bootstrap_servers},
        aclSync={"intervalSeconds": 10},
        schemaRegistry=reverse_registries,
    )
    reverse_worker = start_worker(failback, "worker-b-to-a")
    wait_for(
        lambda: reverse_worker.metric("kafka_mirror_records_total", topic=topic) == ON_B,
        120,
        "B's orders mirrored back to A",
    )
    checkpoints_follow(a, b, group, topic, source_alias="B")
    # The consumer's READ the failover moved onto B's t, copied as its right on t.B on A.
    copy_back = Grant("TOPIC", back, f"User:{consumer}", "*", "READ", "ALLOW")
    wait_for(lambda: copy_back in grants_on(a, back), 90, "the consumer's READ copied back")
    declared["spec"]["reverse"] = "b-to-a"
    apply(kube_api, declared)
    reverse = mirror(
        "b-to-a",
        namespace,
        {"alias": "B", "bootstrapServers": b.bootstrap_servers},
        {"alias": "A", "bootstrapServers": a.bootstrap_servers},
        aclSync={"intervalSeconds": 10},
        standbyFor="a-to-b",
    )
    reverse["spec"]["schemaRegistry"] = reverse_registries
    apply(kube_api, selection("failback", namespace, "b-to-a", [re.escape(topic)]))
    apply(kube_api, reverse)
    run_cli(
        kube_apiserver.kubeconfig,
        *("return", "b-to-a", "--resume", "a-to-b", "--namespace", namespace),
        *("--id", "back-to-a", "--timeout", "0"),
    )
    # Without a kubelet a-to-b's workers never start, so the Return waits in ResumingMirror; the
    # rights the failover moved are taken off B as the Return starts a-to-b again.
    wait_for(
        lambda: operation_of(kube_api, namespace, "b-to-a").get("phase") == "ResumingMirror",
        180,
        lambda: f"the Return to resume a-to-b: {operation_of(kube_api, namespace, 'b-to-a')}",
    )
    reverse_worker.stop()
    wait_for(
        lambda: "returnedAt" in operation_of(kube_api, namespace)["movedRights"],
        60,
        "the moved rights returned",
    )
    committed = {
        (c["group"], c["topic"]) for c in operation_of(kube_api, namespace, "b-to-a")["committed"]
    }
    assert {(group, back), (group, topic)} <= committed, committed

    # On B the producer may no longer write t. On A the consumer reads in its group the orders
    # of t.B it had not read on B, each with the evolved schema through A's registry; then the
    # producer writes t on A again, and the consumer, resumed in t where it stood on B's t.A,
    # reads only those.
    assert on_b.write(topic, [order_v2(0)], ORDER_V2) == "TOPIC_AUTHORIZATION_FAILED"
    reader_back = Application(a, registry_a, consumer, consumer_pw)
    read_back = reader_back.read(back, group, ON_B - READ_ON_B)
    assert isinstance(read_back, list), read_back
    ids_back = [v["id"] for v in read_back]
    assert sorted(ids_back + [v["id"] for v in local]) == list(on_b_ids), "skipped or re-read"
    assert all(v == order_v2(v["id"]) for v in read_back), "a field read differently on A"
    after = range(WRITTEN + ON_B, WRITTEN + ON_B + 40)
    assert on_a.write(topic, [order(n) for n in after]) == "written"
    resumed = reader_back.read(topic, group, len(after))
    assert isinstance(resumed, list), resumed
    assert sorted(v["id"] for v in resumed) == list(after), "t on A not resumed where B left it"
    print(
        f"read on A {len(ids_a)}, on B {len(ids_b)}, skipped 0, re-read {reread}; "
        f"the producer wrote {ON_B} to t on B, the consumer read {READ_ON_B} there and the "
        f"other {len(ids_back)} of t.B on A after the Return, then only the {len(after)} new "
        f"in t; failover: {status['message']}"
    )
