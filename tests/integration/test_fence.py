"""A switchover's fence against a producer nobody stopped (issue 64, controller/fence.py): real
Kafka, the real operator on the real API server, a worker process as its pod would run it, and a
producer writing 1,000 records/s to A throughout, judged from Kafka by content.

With KRaft's StandardAuthorizer on A, the Promote denies WRITE on `t`: the producer gets
authorization errors from then on, every record A acknowledged is on B, the promote completes,
and the Return of `b-to-a` lifts the deny. Without an authorizer on A nothing can be denied: the
producer's records move A's ends past the fence's check, the switchover fails naming the topic,
and A and the mirror are as before."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AclOperation
from kubernetes import client

from kafka_mirror.kube import apply
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.dr import workers_stopped
from tests.helpers.kafka import create_topics, end_offsets, unique
from tests.helpers.objects import get_custom, mirror, selection
from tests.helpers.worker import StartWorker, read_partition, wait_for, worker_config
from tests.integration.test_acl_sync import bind

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.long]

PARTITIONS = 3


class SteadyProducer(threading.Thread):
    """Writes numbered records to `topic` at about 1,000 a second until stopped; keeps what A
    acknowledged and the errors of what it refused."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 30_000}
        )
        self.acked: set[bytes] = set()
        self.refused: dict[str, int] = {}
        self.stopping = threading.Event()

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.acked.add(message.value() or b"")
        else:
            self.refused[error.name()] = self.refused.get(error.name(), 0) + 1

    def run(self) -> None:
        i = 0
        while not self.stopping.wait(0.1):
            for _ in range(100):
                value = f"{self.topic}-{i}".encode()
                try:
                    self.producer.produce(self.topic, value, on_delivery=self._delivered)
                except KafkaException as error:  # refused at once: the topic is known denied
                    name = error.args[0].name()
                    self.refused[name] = self.refused.get(name, 0) + 1
                i += 1
            self.producer.poll(0)
        self.producer.flush(60)

    def stop(self) -> None:
        self.stopping.set()
        self.join(90)


def operation(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    status = get_custom(api, namespace, "kafkamirrors", name).get("status") or {}
    return dict(status.get("operation") or {})


def on_b(b: LocalKafka, remote: str) -> set[bytes]:
    """Every value on the remote topic (none before the mirror made it)."""
    partitions = end_offsets(b.bootstrap_servers, remote)
    return {r.value or b"" for p in partitions for r in read_partition(b, remote, p, 0)}


def switchover_pair(
    kube_api: client.ApiClient,
    namespace: str,
    a: LocalKafka,
    b: LocalKafka,
    topic: str,
    pattern: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """a-to-b mirroring `topic` (or what `pattern` selects), naming b-to-a, which stands by
    for it."""
    source = {"bootstrapServers": a.bootstrap_servers}
    target = {"bootstrapServers": b.bootstrap_servers}
    forward = mirror("a-to-b", namespace, source, target, reverse="b-to-a")
    back = mirror(
        "b-to-a",
        namespace,
        {**target, "alias": "B"},
        {**source, "alias": "A"},
        standbyFor="a-to-b",
    )
    apply(kube_api, selection("orders", namespace, "a-to-b", [pattern or re.escape(topic)]))
    apply(kube_api, forward)
    apply(kube_api, back)
    return forward, back


def promote(
    kube_api: client.ApiClient, namespace: str, forward: dict[str, Any], ends_in: str
) -> dict[str, Any]:
    """a-to-b's Promote, followed until its phase is `ends_in`: its operation status."""
    forward["spec"]["operation"] = {"type": "Promote", "id": "move"}
    apply(kube_api, forward)
    wait_for(
        lambda: operation(kube_api, namespace, "a-to-b").get("phase") == ends_in,
        180,
        lambda: f"the promote {ends_in}: {operation(kube_api, namespace, 'a-to-b')}",
    )
    return operation(kube_api, namespace, "a-to-b")


def takes_writes(a: LocalKafka, topic: str) -> None:
    """A acknowledges 100 records of a new producer."""
    producer = SteadyProducer(a.bootstrap_servers, topic)
    producer.start()
    wait_for(lambda: len(producer.acked) >= 100, 60, lambda: f"A taking writes: {producer.refused}")
    producer.stop()


@pytest.mark.usefixtures("operator")
def test_a_fenced_switchover_leaves_nothing_a_forgotten_producer_wrote_behind(
    kafka_a_acl: LocalKafka,
    kafka_b: LocalKafka,
    kube_api: client.ApiClient,
    namespace: str,
    start_worker: StartWorker,
) -> None:
    a, b, topic = kafka_a_acl, kafka_b, unique("fenced-")
    create_topics(a.bootstrap_servers, [topic], partitions=PARTITIONS)
    # The topic's own ACLs: the mirror and the producer (both User:ANONYMOUS over PLAINTEXT)
    # may do anything, so that the deny takes WRITE alone (on a topic with none, A's
    # allow.everyone.if.no.acl.found made it open to all, and its first ACL closes it).
    bind(a, topic, "User:ANONYMOUS", AclOperation.ALL)
    late, pattern = f"{topic}-late", f"{re.escape(topic)}(-late)?"
    forward, back = switchover_pair(kube_api, namespace, a, b, topic, pattern)
    start_worker(worker_config(a, b, [pattern], mirror=f"{namespace}/a-to-b"))
    producer = SteadyProducer(a.bootstrap_servers, topic)
    producer.start()
    try:
        wait_for(lambda: len(on_b(b, f"{topic}.A")) >= 2_000, 90, "the mirror copying")
        done = promote(kube_api, namespace, forward, "Completed")
    finally:
        producer.stop()
    assert done["fence"]["topics"] == [topic] and done["fence"]["holdsSince"], done
    # Fenced: A refused the producer from the fence on; everything A acknowledged is on B.
    assert producer.refused.get("TOPIC_AUTHORIZATION_FAILED", 0) > 0, (producer.refused, done)
    assert len(producer.acked) >= 2_000
    missing = producer.acked - on_b(b, f"{topic}.A")
    assert not missing, f"{len(missing)} acknowledged records not on B, e.g. {sorted(missing)[:3]}"

    # A forgotten producer creates a selected topic on A after the hand-over: it is fenced too,
    # and what it wrote there first, which nothing mirrors now, is told.
    create_topics(a.bootstrap_servers, [late], partitions=1)
    written = Producer({"bootstrap.servers": a.bootstrap_servers})
    for i in range(10):
        written.produce(late, f"late-{i}".encode())
    assert written.flush(30) == 0
    wait_for(
        lambda: late in operation(kube_api, namespace, "a-to-b")["fence"]["topics"],
        120,
        lambda: f"the fence widened: {operation(kube_api, namespace, 'a-to-b')}",
    )
    told = operation(kube_api, namespace, "a-to-b")["fence"]["message"]
    assert f"({late}) fenced too: the 10 records they hold" in told, told
    refused = SteadyProducer(a.bootstrap_servers, late)
    refused.start()
    wait_for(lambda: bool(refused.refused), 60, "the late topic's producer refused")
    refused.stop()
    assert not refused.acked and "TOPIC_AUTHORIZATION_FAILED" in refused.refused, refused.refused

    # The Return of b-to-a starts a-to-b again and lifts the fence: A takes writes again.
    back["spec"]["operation"] = {"type": "Return", "id": "back", "resume": "a-to-b"}
    apply(kube_api, back)
    wait_for(
        lambda: bool(operation(kube_api, namespace, "a-to-b").get("fence", {}).get("liftedAt")),
        180,
        lambda: f"the fence lifted: {operation(kube_api, namespace, 'a-to-b')}",
    )
    takes_writes(a, topic)
    takes_writes(a, late)


@pytest.mark.usefixtures("operator")
def test_without_an_authorizer_a_written_source_fails_the_switchover_and_stays_open(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    kube_api: client.ApiClient,
    namespace: str,
    start_worker: StartWorker,
) -> None:
    a, b, topic = kafka_a, kafka_b, unique("unfenced-")
    create_topics(a.bootstrap_servers, [topic], partitions=PARTITIONS)
    forward, _ = switchover_pair(kube_api, namespace, a, b, topic)
    start_worker(worker_config(a, b, [re.escape(topic)], mirror=f"{namespace}/a-to-b"))
    producer = SteadyProducer(a.bootstrap_servers, topic)
    producer.start()
    try:
        wait_for(lambda: len(on_b(b, f"{topic}.A")) >= 1_000, 90, "the mirror copying")
        failed = promote(kube_api, namespace, forward, "Failed")
        written = rf"records written to the source after its fence \({topic} \d+"
        assert re.search(written, failed["message"]), failed
        assert "no authorizer" in failed["message"] and not failed["fence"]["topics"]
        # Nothing was stopped or denied: A takes the producer's records, the mirror runs on.
        acked = len(producer.acked)
        wait_for(lambda: len(producer.acked) > acked + 500, 60, "A taking writes")
    finally:
        producer.stop()
    assert not producer.refused, producer.refused
    assert not workers_stopped(kube_api, namespace, "a-to-b")
    standby = get_custom(kube_api, namespace, "kafkamirrors", "b-to-a").get("status") or {}
    ready = {c["type"]: c for c in standby.get("conditions", [])}["Ready"]
    assert ready["reason"] == "Standby", standby


@pytest.mark.usefixtures("operator")
def test_a_fence_that_would_close_a_topic_to_everyone_is_lifted_and_fails(
    kafka_a_acl: LocalKafka, kafka_b: LocalKafka, kube_api: client.ApiClient, namespace: str
) -> None:
    """A topic with no ACL on a source that allows what no ACL names: the deny would be its
    first ACL and close it to every principal, the mirror too. Lifted, A open as before."""
    a, b, topic = kafka_a_acl, kafka_b, unique("open-")
    create_topics(a.bootstrap_servers, [topic], partitions=PARTITIONS)
    forward, _ = switchover_pair(kube_api, namespace, a, b, topic)
    failed = promote(kube_api, namespace, forward, "Failed")
    assert f"the fence hid 1 topics from the mirror ({topic})" in failed["message"], failed
    assert failed["fence"]["liftedAt"], failed
    takes_writes(a, topic)
