"""What the fault matrix's cases share beside `faults.py`: traffic at a rate from a generator in
its own process, a new topic with its worker, and the tail every case ends with."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from kafka_mirror.worker.clients import TRANSACTIONAL_TUNING
from kafka_mirror.worker.flows import PARTITION_STALL_SECONDS
from kafka_mirror.worker.mirror import PRODUCER_STALL_SECONDS
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.faults import Outcome, settle, verify
from tests.helpers.kafka import create_topics, unique
from tests.helpers.traffic import TrafficGenerator, TrafficSpec
from tests.helpers.worker import StartWorker, WorkerProcess, worker_config, worker_group

RATE = 10_000
# A target outage proves what it proves by outlasting the timeouts it passes through, no more:
# the worker's stall timers (a partition, the producer), the transaction timeout, and
# librdkafka's request timeout (`socket.timeout.ms`, 60 s by default). Half a minute past the
# longest, so each has fired (and the transaction is the coordinator's to abort) well before the
# target is back.
LIBRDKAFKA_REQUEST_TIMEOUT_SECONDS = 60.0
OUTAGE_SECONDS = 30 + max(
    PARTITION_STALL_SECONDS,
    PRODUCER_STALL_SECONDS,
    TRANSACTIONAL_TUNING["transaction.timeout.ms"] / 1000,
    LIBRDKAFKA_REQUEST_TIMEOUT_SECONDS,
)


def traffic(
    source: LocalKafka, topic: str, workdir: Path, name: str, **options: Any
) -> TrafficGenerator:
    spec = TrafficSpec.for_topics(source.bootstrap_servers, [topic], **options)
    return TrafficGenerator(spec, workdir, name).start()


@dataclass(frozen=True)
class Case:
    """One case of the matrix: a topic on the source and the worker mirroring it."""

    source: LocalKafka
    target: LocalKafka
    topic: str
    config: dict[str, Any]
    worker: WorkerProcess

    @property
    def group(self) -> str:
        return worker_group(self.config)

    def finish(
        self,
        outcomes: list[Outcome],
        fault: str,
        spark: SparkSession,
        since: float,
        generator: TrafficGenerator | None = None,
        bound: int = 0,
        recovery: float | None = None,
    ) -> None:
        """The tail every case shares: every record the traffic sent acknowledged, everything
        on the source committed, then `verify`'s content check and audit, re-sends held to
        `bound`, figures recorded. The recovery time runs from `since` to the final commits
        unless the case measured its own."""
        if generator is not None:
            stats = generator.finish(timeout=600)
            assert stats.failed == 0, stats.errors
        settle(self.source, self.config, [self.topic])
        if recovery is None:
            recovery = time.monotonic() - since
        verify(
            outcomes,
            fault,
            self.source,
            self.target,
            self.config,
            [self.topic],
            [self.worker],
            spark,
            bound,
            recovery,
        )


def target_down(target: LocalKafka, worker: WorkerProcess, seconds: float) -> None:
    """Stop the target for `seconds`, the worker checked alive and healthy throughout."""
    target.stop()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(5)
        assert worker.get("/healthz") is not None and worker.running(), "the worker died"
    target.start()


def mirror_topic(
    source: LocalKafka,
    target: LocalKafka,
    start_worker: StartWorker,
    prefix: str,
    count: int,
) -> Case:
    """A new topic of `count` partitions on the source and a worker mirroring it."""
    topic = unique(prefix)
    create_topics(source.bootstrap_servers, [topic], partitions=count)
    config = worker_config(source, target, [re.escape(topic)])
    return Case(source, target, topic, config, start_worker(config))
