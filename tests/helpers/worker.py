"""Run the real worker (`python -m kafka_mirror worker --config FILE`) as a local process."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from kafka_mirror.kafka.coordinator import GroupCoordinator
from kafka_mirror.kafka.formats import PROVENANCE_HEADER, Provenance
from kafka_mirror.kafka.groups import committed_offsets
from kafka_mirror_dev.clients import DetachedAdmin
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.prerequisites import worker_env
from kafka_mirror_dev.processes import ChildProcess, free_port, metric_samples
from tests.helpers.kafka import Record, create_topics, end_offsets, unique

StartWorker = Callable[..., "WorkerProcess"]  # the `start_worker` fixture


def worker_config(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    includes: list[str],
    excludes: list[str] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """A worker configuration for A → B with fast intervals, as the operator would render it."""
    config: dict[str, Any] = {
        "mirror": f"test/m-{uuid.uuid4().hex[:8]}",
        "source": {
            "alias": "A",
            "bootstrapServers": kafka_a.bootstrap_servers,
            "config": {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"},
        },
        "target": {"alias": "B", "bootstrapServers": kafka_b.bootstrap_servers},
        "selections": [{"name": "test", "includes": includes, "excludes": excludes or []}],
        "refreshTopicsIntervalSeconds": 1,
        "checkpoints": {"intervalSeconds": 1},
    }
    config.update(overrides)
    return config


class WorkerProcess(ChildProcess):
    """One worker process, as a pod would run it: command, config file, environment."""

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        name: str = "worker",
        env: dict[str, str] | None = None,
    ) -> None:
        self.config, self.workdir, self.name, self.env = config, workdir, name, env or {}
        self.metrics_port = free_port()
        self.config_path = workdir / f"{name}.yaml"
        super().__init__(workdir / f"{name}.log")
        self.write_config(config)

    def write_config(self, config: dict[str, Any]) -> None:
        self.config = config
        # Replace atomically, as the kubelet swaps a ConfigMap volume's files.
        partial = self.config_path.with_suffix(".partial")
        partial.write_text(yaml.safe_dump(config))
        partial.replace(self.config_path)

    def start(self) -> WorkerProcess:
        self.spawn(
            [sys.executable, "-m", "kafka_mirror", "worker", "--config", str(self.config_path)],
            env={
                **os.environ,
                **worker_env(),  # as its pod runs it, where this machine has the allocator
                **self.env,
                "KAFKA_MIRROR_METRICS_PORT": str(self.metrics_port),
            },
            cores=True,
        )
        wait_for(lambda: self.get("/healthz") is not None, 30, f"{self.name} serving health")
        return self

    def get(self, path: str) -> str | None:
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return str(response.read().decode())
        except OSError:
            return None

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a metric's samples whose labels include `labels` (0 if none)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        return sum(metric_samples(url, name, **labels) or [])

    def dump_stacks(self) -> None:
        """Every thread's stack into the log (the worker registers SIGUSR1 with faulthandler)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGUSR1)
        time.sleep(0.5)


def wait_for(
    condition: Callable[[], bool],
    timeout: float,
    what: str | Callable[[], str],
    every: float = 0.25,
) -> None:
    """Poll `condition`; a Kafka error or a request timing out while polling (a leader moving,
    a broker restarting) counts as not yet. On timeout the message says what was waited for
    (`what`, or what it returns then: what was seen last) and the last error seen."""
    deadline = time.monotonic() + timeout
    error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (KafkaException, TimeoutError) as failed:
            error = failed
        time.sleep(every)
    said = what() if callable(what) else what
    last = f"; last error: {error}" if error is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {said}{last}")


def wait_while_advancing(
    progress: Callable[[], int], goal: int, stall: float, what: str, every: float = 0.5
) -> None:
    """Wait until `progress()` reaches `goal` for as long as it advances: on a busy machine a
    drain takes longer, which proves nothing; standing still for `stall` seconds is a failure.
    The message says how far it got."""
    seen, moved = -1, time.monotonic()
    error: Exception | None = None
    while time.monotonic() - moved < stall:
        try:
            now = progress()
        except (KafkaException, TimeoutError) as failed:
            error, now = failed, seen
        if now >= goal:
            return
        if now > seen:
            seen, moved = now, time.monotonic()
        time.sleep(every)
    last = f"; last error: {error}" if error is not None else ""
    raise AssertionError(f"{what}: stood still at {seen:,} of {goal:,} for {stall:.0f}s{last}")


def group_offsets(cluster: LocalKafka, group: str) -> dict[tuple[str, int], int]:
    return committed_offsets(
        GroupCoordinator({"bootstrap.servers": cluster.bootstrap_servers}), group
    )


def read_partition(cluster: LocalKafka, topic: str, partition: int, start: int) -> list[Record]:
    """The records of one partition from `start` to its end (as of the call)."""
    end = end_offsets(cluster.bootstrap_servers, topic)[partition]
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": unique(),
            "enable.auto.commit": False,
            # Ends a partition whose last offsets are no records (transaction markers).
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, partition, start)])
    out: list[Record] = []
    last = start - 1  # the offset of the last record read
    deadline = time.monotonic() + 30
    try:
        while last < end - 1 and time.monotonic() < deadline:
            for m in consumer.consume(5000, timeout=0.5):
                error = m.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    last = max(last, (m.offset() or 0) - 1)  # nothing before it left to read
                    continue
                if error is not None:
                    continue  # a passing fetch error; the deadline bounds the wait
                last = m.offset() or 0
                out.append(
                    Record(
                        m.key(),
                        m.value(),
                        tuple(m.headers() or ()),
                        m.timestamp()[1],
                        m.partition(),
                        last,
                    )
                )
    finally:
        consumer.close()
    return out


def copies(kafka_b: LocalKafka, remote: str, partition: int) -> Counter[int]:
    """How many copies of each source offset the remote partition holds (by their headers)."""
    found: Counter[int] = Counter()
    for record in read_partition(kafka_b, remote, partition, 0):
        headers = [v for k, v in record.headers if k == PROVENANCE_HEADER]
        found[Provenance.decode(headers[-1]).offset] += 1
    return found


def serves(cluster: LocalKafka, topic: str) -> bool:
    """Whether every partition of `topic` answers for its end offset, asked by a new client (one
    kept across a restart is refused for good: FENCED_LEADER_EPOCH). A broker just started
    answers its metadata before it leads its partitions again. Raises what it is refused with."""
    with DetachedAdmin(cluster.bootstrap_servers) as admin:
        return bool(end_offsets(cluster.bootstrap_servers, topic, admin.client))


def commit_group(cluster: LocalKafka, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Set `group`'s committed offsets on `cluster`, as a consumer stopping there leaves them."""
    coordinator = GroupCoordinator({"bootstrap.servers": cluster.bootstrap_servers})
    refused = coordinator.commit(group, {(topic, p): o for p, o in offsets.items()}, 10)
    assert not refused, refused


def worker_group(config: dict[str, Any]) -> str:
    return "kafka-mirror." + config["mirror"].replace("/", ".")


def wait_until_mirrored(
    kafka_a: LocalKafka, config: dict[str, Any], topic: str, timeout: float = 120
) -> None:
    """Until the workers committed the source's end offsets: all of it acknowledged by B.

    (Counting records on B is not enough: re-sent duplicates can make up for missing ones.)
    """
    wait_until_settled([(kafka_a, config, [topic])], timeout)


Mirror = tuple[LocalKafka, dict[str, Any], list[str]]  # source cluster, configuration, topics


def wait_until_settled(mirrors: list[Mirror], timeout: float = 180) -> None:
    """Until each mirror's workers committed the end offsets of its topics on its source, all at
    once: a pair mirroring both ways writes into its own sources, which grow until both have
    caught up."""

    def caught_up() -> bool:
        for source, config, topics in mirrors:
            committed = group_offsets(source, worker_group(config))
            for topic in topics:
                ends = end_offsets(source.bootstrap_servers, topic)
                if any(committed.get((topic, p), -1) < end for p, end in ends.items()):
                    return False
        return True

    wait_for(caught_up, timeout, "the workers to commit the whole of their topics", every=1)


@dataclass
class IdentityPair:
    """Clusters A and B mirroring `topic` both ways under identity naming (two mirrors, A → B
    and B → A, so two workers), and `derived`, a topic of A's for the records an application
    derives there, which A → B mirrors too."""

    kafka_a: LocalKafka
    kafka_b: LocalKafka
    topic: str
    derived: str
    forward: dict[str, Any]
    backward: dict[str, Any]
    workers: list[WorkerProcess]

    def wait_until_settled(self, timeout: float = 180) -> None:
        topics = [self.topic, self.derived]
        wait_until_settled(
            [(self.kafka_a, self.forward, topics), (self.kafka_b, self.backward, topics)], timeout
        )


def start_identity_pair(
    kafka_a: LocalKafka, kafka_b: LocalKafka, start_worker: StartWorker, partitions: int
) -> IdentityPair:
    topic, derived = unique("identity"), unique("derived")
    for cluster in (kafka_a, kafka_b):
        create_topics(cluster.bootstrap_servers, [topic], partitions=partitions)
    create_topics(kafka_a.bootstrap_servers, [derived], partitions=partitions)
    includes = [re.escape(topic), re.escape(derived)]
    # Active/active: each side's topics are its applications' own, which both mirrors adopt.
    naming = {"policy": "identity", "adopt": includes}
    forward = worker_config(kafka_a, kafka_b, includes, topicNaming=naming)
    backward = worker_config(kafka_b, kafka_a, includes, topicNaming=naming)
    backward["source"]["alias"], backward["target"]["alias"] = "B", "A"
    workers = [start_worker(forward, "worker-a-to-b"), start_worker(backward, "worker-b-to-a")]
    return IdentityPair(kafka_a, kafka_b, topic, derived, forward, backward, workers)
