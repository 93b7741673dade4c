"""What every case of the fault matrix shares: traffic at a rate, a topic with its worker, the
reasons committed beside the offsets, and the verdict (the independent content check straight
from Kafka, then our audit, with a row of figures)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions
from pyspark.sql import SparkSession

from kafka_mirror.devstack.kafka import KafkaCluster
from tests.helpers.content import check_content
from tests.helpers.faults import Outcome, audited, settle
from tests.helpers.kafka import admin_for, create_topics, unique
from tests.helpers.traffic import TrafficGenerator, TrafficSpec
from tests.helpers.worker import StartWorker, WorkerProcess, worker_config, worker_group

RATE = 10_000


def traffic(
    source: KafkaCluster, topic: str, workdir: Path, name: str, **options: Any
) -> TrafficGenerator:
    spec = TrafficSpec.for_topics(source.bootstrap_servers, [topic], **options)
    return TrafficGenerator(spec, workdir, name).start()


def mirror_topic(
    source: KafkaCluster, target: KafkaCluster, start_worker: StartWorker, prefix: str, count: int
) -> tuple[str, dict[str, Any], str, WorkerProcess]:
    """A new topic of `count` partitions on the source and a worker mirroring it: the topic,
    the worker's configuration, its group and the worker."""
    topic = unique(prefix)
    create_topics(source.bootstrap_servers, [topic], partitions=count)
    config = worker_config(source, target, [re.escape(topic)])
    return topic, config, worker_group(config), start_worker(config)


def committed_problems(source: KafkaCluster, group: str) -> dict[int, str]:
    """The reasons the workers committed with their offsets, per partition (read straight from
    the source's group coordinator)."""
    admin = admin_for(source.bootstrap_servers)
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {
        tp.partition: tp.metadata
        for tp in result.result(timeout=10).topic_partitions or []
        if tp.metadata
    }


def verify(
    outcomes: list[Outcome],
    fault: str,
    source: KafkaCluster,
    target: KafkaCluster,
    config: dict[str, Any],
    topic: str,
    workers: list[WorkerProcess],
    spark: SparkSession,
    bound: int,
    recovery: float,
    audit: bool = True,
) -> None:
    """The independent content check, then our audit; no worker exited; figures recorded."""
    total = settle(source, config, [topic])
    report = check_content(
        source.bootstrap_servers, target.bootstrap_servers, {topic: f"{topic}.A"}
    )
    print(f"{fault}: {report}")
    assert report.source_records == total
    assert report.lossless, report
    assert report.duplicates <= bound, (report.duplicates, bound)
    if audit:
        audited(config, spark, total)
    for worker in workers:
        assert worker.running(), f"{worker.name} exited:\n{worker.log()[-3000:]}"
    outcomes.append(Outcome(fault, total, report.missing, report.duplicates, bound, recovery))
