"""The application side of the disaster-recovery tests: its records, its consumer group reading
from its committed offsets, and the mirror a-to-b it relies on; read straight from Kafka."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from kubernetes import client

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.kube import apply
from kafka_mirror.render import WORKER_GRACE_SECONDS, label_selector
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.failover import newest_checkpoints
from tests.helpers.kafka import Record, consume, create_topics, end_offsets, produce, unique
from tests.helpers.objects import condition, get_custom, mirror, selection, status_of
from tests.helpers.worker import group_offsets, read_partition, serves, wait_for

PARTITIONS = 3
MAX_LAG = 100  # offsetSyncs.maxLag: the documented re-read bound, per partition
REREAD_BOUND = MAX_LAG * PARTITIONS


def values(tag: str, first: int, count: int) -> list[Record]:
    return [
        Record(key=f"k{i}".encode(), value=f"{tag}-{i}".encode(), partition=i % PARTITIONS)
        for i in range(first, first + count)
    ]


def application(
    cluster: LocalKafka, group: str, topics: list[str], limit: int | None
) -> list[bytes]:
    """The application's consumer: reads `topics` in its group, from its committed offsets,
    `limit` records (then commits mid-stream and leaves) or, without a limit, to their ends."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    ends = {
        TopicPartition(t, p): end
        for t in topics
        for p, end in end_offsets(cluster.bootstrap_servers, t).items()
    }
    # Where the group starts: one before, as if it had read the record there.
    last = {
        (tp.topic, tp.partition): tp.offset - 1
        for tp in consumer.committed(list(ends), timeout=10)
        if tp.offset >= 0
    }
    consumer.subscribe(topics)
    read: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if limit is None and all(
                last.get((tp.topic, tp.partition), -1) >= end - 1 for tp, end in ends.items()
            ):
                break
            for message in consumer.consume(num_messages=1 if limit else 500, timeout=0.5):
                if message.error() is None and (limit is None or len(read) < limit):
                    read.append(message.value() or b"")
                    last[(message.topic() or "", message.partition() or 0)] = message.offset() or 0
            if limit is not None and len(read) >= limit:
                break
        if read:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return read


def remote_values(target: LocalKafka, remote: str, count: int) -> set[bytes]:
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
    kube_api: client.ApiClient, namespace: str, a: LocalKafka, b: LocalKafka
) -> Scenario:
    """The mirror a-to-b of a new topic; a producer writes 300 records on A and the application
    reads 200 of them, commits mid-stream and leaves."""
    topic, app = unique("dr-"), unique("app-")
    create_topics(a.bootstrap_servers, [topic], partitions=PARTITIONS)
    source = {"bootstrapServers": a.bootstrap_servers}
    target = {"bootstrapServers": b.bootstrap_servers}
    apply(
        kube_api,
        mirror(
            "a-to-b", namespace, source, target, offsetSyncs={"maxLag": MAX_LAG}, reverse="b-to-a"
        ),
    )
    apply(kube_api, selection("app-topics", namespace, "a-to-b", [topic]))
    produce(a.bootstrap_servers, topic, values(topic, 0, 300))
    read_on_a = application(a, app, [topic], limit=200)
    assert len(read_on_a) == 200
    return Scenario(topic, app, read_on_a)


def checkpoints_follow(
    b: LocalKafka, a: LocalKafka, group: str, topic: str, source_alias: str = "A"
) -> None:
    """Until the group's checkpoints on B name its committed offsets on A (whose alias is
    `source_alias`)."""
    at = {p: o for (t, p), o in group_offsets(a, group).items() if t == topic}

    def done() -> bool:
        newest = newest_checkpoints(b, f"{topic}.{source_alias}", source_alias)
        return all(
            (c := newest.get((group, p))) is not None and c.upstream_offset == o
            for p, o in at.items()
        )

    wait_for(done, 60, f"the checkpoints of {group}")


def operation_of(api: client.ApiClient, namespace: str, name: str = "a-to-b") -> dict[str, Any]:
    return dict(status_of(api, namespace, name).get("operation") or {})


def restart_operator_during(
    operator: OperatorProcess, api: client.ApiClient, namespace: str
) -> None:
    """SIGKILL the operator once the operation has started, and start it again."""
    wait_for(lambda: bool(operation_of(api, namespace)), 60, "the operation to start")
    operator.kill()
    operator.start()


def failed_over_consumer_checks(
    b: LocalKafka, group: str, remote: str, on_b: set[bytes], read_on_a: list[bytes]
) -> int:
    """The group resumed on B from the committed offsets: no record of B skipped; returns the
    re-reads (records it had already read on A)."""
    read_on_b = application(b, group, [remote], limit=None)
    skipped = on_b - set(read_on_a) - set(read_on_b)
    assert not skipped, (
        f"{len(skipped)} records never read by the group, e.g. {sorted(skipped)[:3]}"
    )
    rereads = sum(1 for value in read_on_b if value in set(read_on_a))
    assert rereads <= REREAD_BOUND, rereads
    return rereads


def patch_spec(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    """A merge patch of a mirror's spec, as `kubectl patch --type=merge` (None removes a field)."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "kafkamirrors", name, {"spec": spec}
    )


def run_cli(kubeconfig: Path, *args: str, timeout: float = 240) -> str:
    """`kafka-mirror ARGS` as a person at a terminal runs it; fails with its output."""
    done = subprocess.run(
        [sys.executable, "-m", "kafka_mirror", *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


FORMS = ["declarative", "cli"]  # the same operation as a spec change, or from the CLI verb


def request_operation(
    form: str,
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    name: str,
    op: dict[str, str],
) -> None:
    """Ask for an operation as GitOps would (a change of the spec) or as a person at a terminal
    (`kafka-mirror promote|failover`, not waiting: the test follows the status itself)."""
    if form == "declarative":
        patch_spec(api, namespace, name, {"operation": op})
        return
    verb = op["type"].lower()
    run_cli(kubeconfig, verb, name, "--namespace", namespace, "--id", op["id"], "--timeout", "0")


def workers_stopped(api: client.ApiClient, namespace: str, mirror_name: str) -> bool:
    """The Deployment asks for no worker and none is left, stopping ones included (a pod in its
    grace period may still mirror)."""
    deployment = client.AppsV1Api(api).read_namespaced_deployment(
        f"{mirror_name}-worker", namespace
    )
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=label_selector(mirror_name)
    )
    return deployment.spec.replicas == 0 and not pods.items


# A worker may take its whole grace period to stop, after the operator and the ReplicaSet saw
# the pause (on a busy machine, a minute and more: CI waited 60 s and read a pod still there).
WORKERS_STOP = WORKER_GRACE_SECONDS + 60


def pause_until_stopped(api: client.ApiClient, namespace: str, mirror_name: str) -> None:
    """Pause the mirror and wait until none of its workers is left."""
    patch_spec(api, namespace, mirror_name, {"paused": True})
    wait_for(
        lambda: workers_stopped(api, namespace, mirror_name), WORKERS_STOP, "the workers to stop"
    )


class AckedProducer(threading.Thread):
    """An application's producer under load: writes `topic` as fast as it can until stopped
    and keeps, for each record the cluster acknowledged, when the acknowledgement arrived (wall
    clock)."""

    def __init__(self, cluster: LocalKafka, topic: str, first: int) -> None:
        super().__init__(daemon=True)
        self.topic, self.next = topic, first
        self.producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "linger.ms": 5,
                "queue.buffering.max.messages": 20_000,  # BufferError: poll, then go on
                "message.timeout.ms": 10_000,  # records A never took fail, not linger
            }
        )
        self.acked: dict[bytes, float] = {}
        self.stopping = threading.Event()

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.acked[message.value() or b""] = time.time()

    def run(self) -> None:
        while not self.stopping.is_set():
            record = values(self.topic, self.next, 1)[0]
            try:
                self.producer.produce(
                    self.topic,
                    value=record.value,
                    key=record.key,
                    partition=record.partition or 0,
                    on_delivery=self._delivered,
                )
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.producer.poll(0)
            self.next += 1

    def stop(self) -> None:
        """Stop writing; wait for every acknowledgement or failure of what was sent."""
        self.stopping.set()
        self.join(30)
        self.producer.flush(30)


def mirrored_scenario(
    api: client.ApiClient, namespace: str, a: LocalKafka, b: LocalKafka
) -> Scenario:
    """The scenario started, 100 more records on A, and all 400 on B with the group's
    checkpoints."""
    scenario = start_scenario(api, namespace, a, b)
    produce(a.bootstrap_servers, scenario.topic, values(scenario.topic, 300, 100))
    assert len(remote_values(b, scenario.remote, 400)) == 400
    checkpoints_follow(b, a, scenario.app, scenario.topic)
    return scenario


def fail_over_behind(
    api: client.ApiClient,
    namespace: str,
    a: LocalKafka,
    b: LocalKafka,
    scenario: Scenario,
    on_b: int,
    operator: OperatorProcess,
) -> list[bytes]:
    """From a scenario whose first 400 records B holds: the mirror falls behind by 50 records,
    A is lost, and a-to-b is failed over declaratively (RPO 50) and unpaused (its failover keeps
    it stopped). On B the group reads `t.A` from its translated offsets, producers write `on_b`
    records to the local `t` and the group reads 100 of them. A is started again, and a-to-b
    counts what A holds that B never had (the 50). Returns what the group read on B."""
    t, app = scenario.topic, scenario.app
    pause_until_stopped(api, namespace, "a-to-b")
    produce(a.bootstrap_servers, t, values(t, 400, 50))
    wait_for(lambda: status_of(api, namespace, "a-to-b").get("totalLag") == 50, 60, "lag 50")
    a.stop()
    try:
        patch_spec(api, namespace, "a-to-b", {"operation": {"type": "Failover", "id": "a-lost"}})
        wait_for(lambda: operation_of(api, namespace).get("phase") == "Completed", 120, "failover")
        assert operation_of(api, namespace)["rpo"]["totalRecords"] == 50
        patch_spec(api, namespace, "a-to-b", {"paused": False})
        read_on_b = application(b, app, [scenario.remote], limit=None)
        create_topics(b.bootstrap_servers, [t], partitions=PARTITIONS)
        produce(b.bootstrap_servers, t, values(f"{t}-on-b", 0, on_b))
        read_on_b += application(b, app, [t], limit=100)
    finally:
        a.start()
    # A restarted serves its partitions a while after it listens (on a busy machine, over a
    # minute); then the operator's refresh counts. Two waits, so a failure says which stood still.
    wait_for(lambda: serves(a, t), 600, f"A, started again, to serve {t}'s partitions")
    wait_for(
        lambda: bool(operation_of(api, namespace).get("sourceBack")),
        240,
        lambda: (
            f"a-to-b to count A's records: {status_of(api, namespace, 'a-to-b')}; "
            f"{operator.status_loop_seen()}"
        ),
    )
    assert operation_of(api, namespace)["sourceBack"]["totalRecords"] == 50
    return read_on_b


def start_failback(
    api: client.ApiClient, namespace: str, a: LocalKafka, b: LocalKafka, topic: str
) -> None:
    """The reverse mirror b-to-a (`t` as `t.B`; never `t.A` back), once it is Ready."""
    source = {"alias": "B", "bootstrapServers": b.bootstrap_servers}
    target = {"alias": "A", "bootstrapServers": a.bootstrap_servers}
    apply(
        api,
        mirror(
            "b-to-a",
            namespace,
            source,
            target,
            offsetSyncs={"maxLag": MAX_LAG},
            standbyFor="a-to-b",  # as the runbook's manifest: the pair a Return starts again
        ),
    )
    apply(api, selection("failback", namespace, "b-to-a", [topic], (".*\\.A",)))

    def ready() -> bool:
        b_to_a = get_custom(api, namespace, "kafkamirrors", "b-to-a")
        return condition(b_to_a, "Ready").get("status") == "True"

    wait_for(ready, 120, lambda: f"b-to-a to be Ready: {status_of(api, namespace, 'b-to-a')}")
