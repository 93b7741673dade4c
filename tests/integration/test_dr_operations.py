"""Promote and fail over as operations of the product, end to end: real Kafka A and B, the real
operator (restarted midway), the worker pods as local processes, and a real application's
producer and consumer group. Every check reads the records' content straight from Kafka: each
record is consumed at least once by the group, re-reads stay within the documented bound, and
the RPO the operator reports equals the records the test counts missing on B."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from kubernetes import client

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.devstack.kafka import KafkaCluster
from kafka_mirror.devstack.kube import KubeApiServer
from kafka_mirror.devstack.kubelet import LocalKubelet
from kafka_mirror.devstack.operator import OperatorProcess
from kafka_mirror.kube import apply
from tests.helpers.failover import newest_checkpoints
from tests.helpers.kafka import Record, consume, create_topics, end_offsets, produce, unique
from tests.helpers.objects import condition, get_custom, mirror, selection, status_of
from tests.helpers.worker import group_offsets, read_partition, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube]

PARTITIONS = 3
MAX_LAG = 100  # offsetSyncs.maxLag: the documented re-read bound, per partition
REREAD_BOUND = MAX_LAG * PARTITIONS


def values(tag: str, first: int, count: int) -> list[Record]:
    return [
        Record(key=f"k{i}".encode(), value=f"{tag}-{i}".encode(), partition=i % PARTITIONS)
        for i in range(first, first + count)
    ]


def application(cluster: KafkaCluster, group: str, topic: str, limit: int | None) -> list[bytes]:
    """The application's consumer: reads `topic` in its group, from its committed offsets,
    `limit` records (then commits mid-stream and leaves) or, without a limit, to the end."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    ends = end_offsets(cluster.bootstrap_servers, topic)
    read: list[bytes] = []
    last: dict[int, int] = {}
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1 if limit else 500, timeout=0.5):
                if message.error() is None and (limit is None or len(read) < limit):
                    read.append(message.value() or b"")
                    last[message.partition() or 0] = message.offset() or 0
            if limit is not None and len(read) >= limit:
                break
            if limit is None and all(last.get(p, -1) >= end - 1 for p, end in ends.items()):
                break
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return read


def remote_values(target: KafkaCluster, remote: str, count: int) -> set[bytes]:
    """Every value on the remote topic of B, once it holds `count` distinct ones."""
    consume(target.bootstrap_servers, remote, count, timeout=90)  # until that many arrived
    return {r.value or b"" for p in range(PARTITIONS) for r in read_partition(target, remote, p, 0)}


@dataclass(frozen=True)
class Scenario:
    topic: str
    app: str  # the application's consumer group
    read_on_a: list[bytes]  # what the group read on A before it committed and left

    @property
    def remote(self) -> str:
        return f"{self.topic}.A"


def start_scenario(
    kube_api: client.ApiClient, namespace: str, a: KafkaCluster, b: KafkaCluster
) -> Scenario:
    """The mirror a-to-b of a new topic; a producer writes 300 records on A and the application
    reads 200 of them, commits mid-stream and leaves."""
    topic, app = unique("dr-"), unique("app-")
    create_topics(a.bootstrap_servers, [topic], partitions=PARTITIONS)
    source = {"bootstrapServers": a.bootstrap_servers}
    target = {"bootstrapServers": b.bootstrap_servers}
    apply(kube_api, mirror("a-to-b", namespace, source, target, offsetSyncs={"maxLag": MAX_LAG}))
    apply(kube_api, selection("app-topics", namespace, "a-to-b", [topic]))
    produce(a.bootstrap_servers, topic, values(topic, 0, 300))
    read_on_a = application(a, app, topic, limit=200)
    assert len(read_on_a) == 200
    return Scenario(topic, app, read_on_a)


def checkpoints_follow(b: KafkaCluster, a: KafkaCluster, group: str, topic: str) -> None:
    """Until the group's checkpoints on B name its committed offsets on A."""
    at = {p: o for (t, p), o in group_offsets(a, group).items() if t == topic}

    def done() -> bool:
        newest = newest_checkpoints(b, f"{topic}.A")
        return all(
            (c := newest.get((group, p))) is not None and c.upstream_offset == o
            for p, o in at.items()
        )

    wait_for(done, 60, f"the checkpoints of {group}")


def operation_of(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    return dict(status_of(api, namespace, "a-to-b").get("operation") or {})


def restart_operator_during(
    operator: OperatorProcess, api: client.ApiClient, namespace: str
) -> None:
    """SIGKILL the operator once the operation has started, and start it again."""
    wait_for(lambda: bool(operation_of(api, namespace)), 60, "the operation to start")
    operator.kill()
    operator.start()


def failed_over_consumer_checks(
    b: KafkaCluster, group: str, remote: str, on_b: set[bytes], read_on_a: list[bytes]
) -> int:
    """The group resumed on B from the committed offsets: no record of B skipped; returns the
    re-reads (records it had already read on A)."""
    read_on_b = application(b, group, remote, limit=None)
    skipped = on_b - set(read_on_a) - set(read_on_b)
    assert not skipped, (
        f"{len(skipped)} records never read by the group, e.g. {sorted(skipped)[:3]}"
    )
    rereads = sum(1 for value in read_on_b if value in set(read_on_a))
    assert rereads <= REREAD_BOUND, rereads
    return rereads


def test_a_failover_after_a_is_lost_commits_offsets_and_reports_the_records_lost(
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    kube_api: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    kubelet: LocalKubelet,
) -> None:
    scenario = start_scenario(kube_api, namespace, kafka_a, kafka_b)
    topic, app, remote, read_on_a = (
        scenario.topic,
        scenario.app,
        scenario.remote,
        scenario.read_on_a,
    )
    assert len(remote_values(kafka_b, remote, 300)) == 300
    checkpoints_follow(kafka_b, kafka_a, app, topic)

    # The mirror falls behind (its workers stop), A takes 120 more records, then A is lost.
    objects = client.CustomObjectsApi(kube_api)

    def patch(spec: dict[str, Any]) -> None:
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "kafkamirrors", "a-to-b", {"spec": spec}
        )

    patch({"paused": True})
    wait_for(lambda: not kubelet.pods_of("a-to-b-worker"), 60, "the workers to stop")
    produce(kafka_a.bootstrap_servers, topic, values(topic, 300, 120))

    def behind() -> bool:
        status = status_of(kube_api, namespace, "a-to-b")
        topics = status.get("topics") or [{}]
        return status.get("totalLag") == 120 and topics[0].get("latencySeconds") is not None

    wait_for(behind, 60, "the status to show the 120 records and their age")
    kafka_a.stop()
    try:
        patch({"operation": {"type": "Failover", "id": "region-a-lost"}})
        restart_operator_during(operator, kube_api, namespace)
        wait_for(
            lambda: operation_of(kube_api, namespace).get("phase") == "Completed",
            120,
            "the failover to complete",
        )
        done = operation_of(kube_api, namespace)

        # Counted independently: what A took that B does not hold.
        on_b = remote_values(kafka_b, remote, 300)
        produced = {r.value or b"" for r in values(topic, 0, 420)}
        lost = produced - on_b
        assert len(lost) == 120
        rpo = done["rpo"]
        assert rpo["totalRecords"] == len(lost), rpo
        assert [(t["name"], t["records"]) for t in rpo["topics"]] == [(topic, len(lost))]
        assert rpo["topics"][0]["seconds"] > 0 and rpo["sourceLastSeen"]

        # The group's offsets on B are its translated checkpoints, committed by the operator.
        newest = newest_checkpoints(kafka_b, remote)
        committed = {(c["group"], c["partition"]): c["offset"] for c in done["committed"]}
        assert committed == {key: c.downstream_offset for key, c in newest.items() if key[0] == app}
        assert {(t, p): o for (t, p), o in group_offsets(kafka_b, app).items()} == {
            (remote, p): o for (_, p), o in committed.items()
        }
        mirror_now = get_custom(kube_api, namespace, "kafkamirrors", "a-to-b")
        assert condition(mirror_now, "Ready")["reason"] == "FailedOver"
        assert condition(mirror_now, "OperationDone")["status"] == "True"

        rereads = failed_over_consumer_checks(kafka_b, app, remote, on_b, read_on_a)
        print(f"failover: RPO {rpo['totalRecords']} records, {rereads} re-reads")

        # The same id again (a GitOps sync, a restart) repeats nothing.
        patch({"operation": {"type": "Failover", "id": "region-a-lost"}, "replicas": 2})
        time.sleep(6)
        again = operation_of(kube_api, namespace)
        assert again["completedAt"] == done["completedAt"] and again["phase"] == "Completed"
        assert not kubelet.pods_of("a-to-b-worker")
        reasons = {
            e.reason for e in client.CoreV1Api(kube_api).list_namespaced_event(namespace).items
        }
        assert {"FailoverStarted", "CommittingOffsets", "FailedOver"} <= reasons, reasons
    finally:
        kafka_a.start()


def test_a_promote_from_the_cli_catches_up_commits_offsets_and_loses_nothing(
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    kube_api: client.ApiClient,
    kube_apiserver: KubeApiServer,
    namespace: str,
    operator: OperatorProcess,
    kubelet: LocalKubelet,
    tmp_path: Path,
) -> None:
    scenario = start_scenario(kube_api, namespace, kafka_a, kafka_b)
    topic, app, remote, read_on_a = (
        scenario.topic,
        scenario.app,
        scenario.remote,
        scenario.read_on_a,
    )
    produce(kafka_a.bootstrap_servers, topic, values(topic, 300, 100))  # then producers stop

    output = tmp_path / "promote.out"
    with output.open("w") as sink:
        cli = subprocess.Popen(
            [
                *(sys.executable, "-m", "kafka_mirror", "promote", "a-to-b"),
                *("--namespace", namespace, "--id", "planned-1", "--timeout", "180"),
                *("--kubeconfig", str(kube_apiserver.kubeconfig)),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        restart_operator_during(operator, kube_api, namespace)
        assert cli.wait(timeout=240) == 0, output.read_text()
    printed = output.read_text()
    assert "Promote planned-1 requested" in printed and "Completed" in printed, printed

    done = operation_of(kube_api, namespace)
    assert done["rpo"]["totalRecords"] == 0, done
    on_b = remote_values(kafka_b, remote, 400)
    assert on_b == {r.value or b"" for r in values(topic, 0, 400)}
    assert {c["group"] for c in done["committed"]} == {app}
    assert not kubelet.pods_of("a-to-b-worker")
    assert (
        condition(get_custom(kube_api, namespace, "kafkamirrors", "a-to-b"), "Ready")["reason"]
        == "Promoted"
    )

    rereads = failed_over_consumer_checks(kafka_b, app, remote, on_b, read_on_a)
    print(f"promote: {rereads} re-reads")
