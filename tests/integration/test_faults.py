"""Faults against the real parts, each ending with the real audit (PySpark reading A and B):
workers SIGKILLed again and again, the target and the source broker restarted mid-stream, the
operator killed mid-reconcile, the API server restarted. Each loses no record, re-sends at most
what was not committed when the fault hit, and recovers; the figures are printed as a table
(docs/reliability.md has a run's)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from pyspark.sql import SparkSession

from kafka_mirror import render
from kafka_mirror.audit.main import audit
from kafka_mirror.audit.report import AuditReport
from kafka_mirror.audit.spark import session
from kafka_mirror.devstack.kafka import KafkaCluster
from kafka_mirror.devstack.kube import KubeApiServer
from kafka_mirror.devstack.kubelet import LocalKubelet
from kafka_mirror.devstack.operator import OperatorProcess
from kafka_mirror.kube import apply
from kafka_mirror.worker.config import WorkerConfig
from tests.helpers.kafka import create_topics, end_offsets, produce, records, unique
from tests.helpers.objects import condition, get_custom, mirror, selection, status_of
from tests.helpers.worker import (
    StartWorker,
    group_offsets,
    wait_for,
    worker_config,
    worker_group,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@dataclass
class Outcome:
    """What a user wants to know after a fault."""

    fault: str
    records: int  # source records the audit checked
    lost: int
    duplicates: int
    duplicate_bound: int  # records not yet committed when the faults hit
    recovery_seconds: float  # until everything produced before the fault was committed


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    spark = session("local[2]", {})
    yield spark
    spark.stop()


@pytest.fixture(scope="module")
def outcomes() -> Iterator[list[Outcome]]:
    """Collects each test's figures; printed as a table (and written as JSON to the path in
    $FAULT_FIGURES, for the docs) after the module."""
    rows: list[Outcome] = []
    yield rows
    print("\n| fault | records | lost | duplicates (bound) | recovery s |")
    for row in rows:
        print(
            f"| {row.fault} | {row.records:,} | {row.lost} | "
            f"{row.duplicates:,} (≤ {row.duplicate_bound:,}) | {row.recovery_seconds:.1f} |"
        )
    if target := os.environ.get("FAULT_FIGURES"):
        Path(target).write_text(json.dumps([asdict(row) for row in rows], indent=2))


class SteadyProducer(threading.Thread):
    """Produces `total` records to `topic` at about `per_second`, in batches."""

    def __init__(self, cluster: KafkaCluster, topic: str, total: int, per_second: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic, self.total, self.per_second = cluster, topic, total, per_second
        self.error: BaseException | None = None

    def run(self) -> None:
        batch = max(self.per_second // 4, 1)
        try:
            for _ in range(self.total // batch):
                started = time.monotonic()
                produce(self.cluster.bootstrap_servers, self.topic, records(batch, partitions=8))
                time.sleep(max(0.0, 0.25 - (time.monotonic() - started)))
        except BaseException as error:  # shown by finish()
            self.error = error

    def finish(self, timeout: float = 300) -> None:
        self.join(timeout)
        assert not self.is_alive(), "the producer did not finish"
        assert self.error is None, f"producing failed: {self.error}"


def resend_bound(
    source: KafkaCluster, group: str, topics: list[str], fault: Callable[[], None]
) -> int:
    """Run `fault`; what it can make the workers send again: the records not committed before
    it began, up to the source's end once it is over (an upper bound)."""
    committed = group_offsets(source, group)
    fault()
    return sum(max(end - committed.get(key, 0), 0) for key, end in ends(source, topics).items())


def committed_through(
    source: KafkaCluster, group: str, targets: dict[tuple[str, int], int]
) -> Callable[[], bool]:
    def done() -> bool:
        committed = group_offsets(source, group)
        return all(committed.get(key, -1) >= offset for key, offset in targets.items())

    return done


def ends(source: KafkaCluster, topics: list[str]) -> dict[tuple[str, int], int]:
    return {
        (topic, partition): end
        for topic in topics
        for partition, end in end_offsets(source.bootstrap_servers, topic).items()
    }


def seconds_until_committed(
    source: KafkaCluster, group: str, topics: list[str], since: float, timeout: float = 180
) -> float:
    """Seconds from `since` until the workers committed everything on the source now."""
    wait_for(committed_through(source, group, ends(source, topics)), timeout, "the commits")
    return time.monotonic() - since


def audited(config: dict[str, Any], spark: SparkSession, total: int) -> AuditReport:
    report = audit(WorkerConfig.model_validate(config), spark)
    assert report.result == "Passed", report.summary().message
    assert report.missing == 0 and report.records_checked == total, report.summary().message
    return report


def settle(kafka_a: KafkaCluster, config: dict[str, Any], topics: list[str]) -> int:
    """Wait until everything on the source is committed; the number of source records."""
    targets = ends(kafka_a, topics)
    wait_for(committed_through(kafka_a, worker_group(config), targets), 180, "final commits")
    return sum(targets.values())


def audit_and_record(
    outcomes: list[Outcome],
    fault: str,
    kafka_a: KafkaCluster,
    config: dict[str, Any],
    topics: list[str],
    spark: SparkSession,
    bound: int,
    recovery: float,
) -> None:
    """Wait for the final commits, run the audit (it must pass with nothing missing), hold the
    re-sends to `bound`, and record the figures."""
    total = settle(kafka_a, config, topics)
    report = audited(config, spark, total)
    assert report.duplicates <= bound, (report.duplicates, bound)
    outcomes.append(Outcome(fault, total, report.missing, report.duplicates, bound, recovery))


# --- the worker ----------------------------------------------------------------------------


def test_a_worker_sigkilled_every_few_seconds_loses_nothing(
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    start_worker: StartWorker,
    spark: SparkSession,
    outcomes: list[Outcome],
) -> None:
    topic = unique("kills")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=8)
    config = worker_config(kafka_a, kafka_b, [re.escape(topic)])
    group = worker_group(config)
    replicas = [start_worker(config, "replica-0"), start_worker(config, "replica-1")]
    producer = SteadyProducer(kafka_a, topic, 1_000_000, per_second=40_000)
    producer.start()
    kills, bound, last_kill = 0, 0, time.monotonic()
    while producer.is_alive() or kills < 6:
        time.sleep(4)
        # SIGKILL: no commit, no leaving the group.
        bound += resend_bound(kafka_a, group, [topic], replicas[kills % 2].kill)
        last_kill = time.monotonic()
        # The kubelet starts a new pod in its place.
        replicas[kills % 2] = start_worker(config, f"replica-{kills % 2}-{kills}")
        kills += 1
    producer.finish()
    recovery = seconds_until_committed(kafka_a, group, [topic], since=last_kill)
    fault = f"worker SIGKILLed {kills} times, every 4 s"
    audit_and_record(outcomes, fault, kafka_a, config, [topic], spark, bound, recovery)


@pytest.mark.parametrize("broker", ["target", "source"])
def test_a_broker_restarted_mid_stream_loses_nothing(
    broker: str,
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    start_worker: StartWorker,
    spark: SparkSession,
    outcomes: list[Outcome],
) -> None:
    topic = unique(f"{broker}-restart")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=8)
    config = worker_config(kafka_a, kafka_b, [re.escape(topic)])
    group = worker_group(config)
    start_worker(config)
    producer = SteadyProducer(kafka_a, topic, 200_000, per_second=10_000)
    producer.start()
    wait_for(
        lambda: sum(group_offsets(kafka_a, group).values()) > 20_000,
        60,
        "mirroring to be under way (20,000 records committed)",
    )
    restarted = kafka_b if broker == "target" else kafka_a

    def restart() -> None:
        restarted.stop()
        time.sleep(5)
        restarted.start()

    bound = resend_bound(kafka_a, group, [topic], restart)
    back = time.monotonic()
    recovery = seconds_until_committed(kafka_a, group, [topic], since=back)
    producer.finish()
    fault = f"{broker} broker stopped for 5 s mid-stream"
    audit_and_record(outcomes, fault, kafka_a, config, [topic], spark, bound, recovery)


# --- the operator and the API server ---------------------------------------------------------


def applied_config(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The worker configuration the operator wrote, as its pods read it."""
    config_map = client.CoreV1Api(api).read_namespaced_config_map(
        render.config_map_name(name), namespace
    )
    return dict(yaml.safe_load(config_map.data[render.CONFIG_FILE]))


def is_ready(api: client.ApiClient, namespace: str, name: str) -> bool:
    found = get_custom(api, namespace, "kafkamirrors", name)
    return condition(found, "Ready").get("status") == "True"


@pytest.mark.kube
def test_an_operator_killed_mid_reconcile_loses_nothing_and_converges(
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    kube_api: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    kubelet: LocalKubelet,
    spark: SparkSession,
    outcomes: list[Outcome],
) -> None:
    first, second = unique("op-a"), unique("op-b")
    create_topics(kafka_a.bootstrap_servers, [first, second], partitions=8)
    plain = {"bootstrapServers": kafka_a.bootstrap_servers}
    target = {"bootstrapServers": kafka_b.bootstrap_servers}
    apply(kube_api, mirror("m", namespace, plain, target, replicas=2))
    apply(kube_api, selection("first", namespace, "m", [re.escape(first)]))
    wait_for(lambda: is_ready(kube_api, namespace, "m"), 120, "the mirror to be Ready")
    producers = [SteadyProducer(kafka_a, t, 100_000, per_second=5_000) for t in (first, second)]
    for producer in producers:
        producer.start()
    time.sleep(3)

    # A second selection and a third replica, and the operator killed while it applies them.
    apply(kube_api, selection("second", namespace, "m", [re.escape(second)]))
    apply(kube_api, mirror("m", namespace, plain, target, replicas=3))
    time.sleep(0.1)  # the operator has the watch events and is applying the children
    group = f"kafka-mirror.{namespace}.m"
    bound = resend_bound(kafka_a, group, [first, second], operator.kill)
    operator.start()
    restarted = time.monotonic()
    wait_for(
        lambda: (
            len(kubelet.pods_of("m-worker")) == 3
            and status_of(kube_api, namespace, "m").get("activeTopicCount") == 2
            and is_ready(kube_api, namespace, "m")
        ),
        120,
        "three workers mirroring both topics, Ready",
    )
    recovery = time.monotonic() - restarted
    for producer in producers:
        producer.finish()
    config = applied_config(kube_api, namespace, "m")
    fault = "operator SIGKILLed 0.1 s after a new selection and replicas 2→3"
    audit_and_record(outcomes, fault, kafka_a, config, [first, second], spark, bound, recovery)


@pytest.mark.kube
def test_an_api_server_restart_loses_nothing_and_the_status_resumes(
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    kube_apiserver: KubeApiServer,
    kube_api: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    kubelet: LocalKubelet,
    spark: SparkSession,
    outcomes: list[Outcome],
) -> None:
    p = unique("api")
    topic, later = f"{p}.first", f"{p}.later"
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=8)
    plain = {"bootstrapServers": kafka_a.bootstrap_servers}
    target = {"bootstrapServers": kafka_b.bootstrap_servers}
    apply(kube_api, mirror("m", namespace, plain, target))
    apply(kube_api, selection("all", namespace, "m", [f"{re.escape(p)}\\..*"]))
    wait_for(lambda: is_ready(kube_api, namespace, "m"), 120, "the mirror to be Ready")
    producer = SteadyProducer(kafka_a, topic, 100_000, per_second=5_000)
    producer.start()
    time.sleep(3)

    before = sum(end_offsets(kafka_b.bootstrap_servers, f"{topic}.A").values())
    bound = resend_bound(
        kafka_a,
        f"kafka-mirror.{namespace}.m",
        [topic],
        lambda: kube_apiserver.restart_apiserver(down_seconds=10),
    )
    back = time.monotonic()
    # The workers need no API server: they mirrored all along.
    assert sum(end_offsets(kafka_b.bootstrap_servers, f"{topic}.A").values()) > before
    # The operator is back at work: a topic created now shows in the status.
    create_topics(kafka_a.bootstrap_servers, [later], partitions=1)
    produce(kafka_a.bootstrap_servers, later, records(100, partitions=1))
    wait_for(
        lambda: later in (status_of(kube_api, namespace, "m").get("activeTopics") or []),
        120,
        "the status to show the topic created after the restart",
    )
    recovery = time.monotonic() - back
    assert operator.running()
    producer.finish()
    config = applied_config(kube_api, namespace, "m")
    fault = "kube-apiserver down for 10 s (recovery: status current again)"
    audit_and_record(outcomes, fault, kafka_a, config, [topic, later], spark, bound, recovery)
