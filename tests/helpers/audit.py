"""Audit test helpers: mirror with the real worker until its group committed every record, and
move a group's committed offsets as a faulty mirror would have."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.controller.status import (
    DeploymentState,
    KafkaState,
    MirrorObservation,
    mirror_status,
)
from kafka_mirror.kafka.formats import checkpoints_topic
from kafka_mirror.kafka.observe import ClusterReader, PartitionProgress
from kafka_mirror.topics import TopicPlan
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import admin_for, create_topics, end_offsets, produce, records, unique
from tests.helpers.worker import WorkerProcess, wait_for, worker_config


def commit(cluster: LocalKafka, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit `offsets` (partition → offset) for `group`, which has no member now."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    consumer.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
    )
    consumer.close()


def delete_before(cluster: LocalKafka, topic: str, offsets: dict[int, int]) -> None:
    """What retention does to a log: its start moves to `offsets` (DeleteRecords)."""
    admin = admin_for(cluster.bootstrap_servers)
    request = [TopicPartition(topic, p, o) for p, o in offsets.items()]
    for future in admin.delete_records(request).values():
        future.result(timeout=30)


def committed_everything(config: dict[str, Any], topic: str) -> bool:
    """The worker's group committed every partition of `topic` at its end on the source."""
    parsed = WorkerConfig.model_validate(config)
    ends = end_offsets(parsed.source.bootstrap_servers, topic)
    reader = ClusterReader(parsed.source.alias, parsed.source.client_config())
    try:
        progress = reader.progress(parsed.consumer_group, {topic: len(ends)})
    finally:
        reader.close()
    return all(p.committed == ends[p.partition] for p in progress)


def mirror_everything(
    config: dict[str, Any],
    topic: str,
    tmp_path: Path,
    target: LocalKafka,
    name: str = "worker",
) -> WorkerProcess:
    """Run the worker until its group committed every record of `topic` and it wrote
    checkpoints (a few rounds, one a second); it is stopped and returned (its log, metrics)."""
    worker = WorkerProcess(config, tmp_path, name).start()
    try:
        wait_for(
            lambda: committed_everything(config, topic), 90, "the worker to commit every record"
        )
        alias = config["source"]["alias"]
        wait_for(
            lambda: (
                checkpoints_topic(alias) in admin_for(target.bootstrap_servers).list_topics().topics
            ),
            30,
            "checkpoints on the target",
        )
        time.sleep(3)
    finally:
        assert worker.stop() == 0
    return worker


def mirror_new_topic(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    tmp_path: Path,
    partitions: int = 1,
    count: int = 100,
    config: dict[str, str] | None = None,
) -> tuple[str, dict[str, object]]:
    """A new topic on A with `count` records, mirrored to B until the workers' group committed
    them all (the worker stopped); the topic and the worker's configuration."""
    topic = unique()
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=partitions, config=config)
    if count:
        produce(kafka_a.bootstrap_servers, topic, records(count, partitions))
    worker = worker_config(kafka_a, kafka_b, [re.escape(topic)])
    mirror_everything(worker, topic, tmp_path, kafka_b)
    return topic, worker


def status_from(
    plan: TopicPlan, progress: list[PartitionProgress], acknowledged_lost: int = 0
) -> KafkaMirrorStatus:
    """The status the operator computes for a mirror with one ready worker, every remote topic
    there, and this progress on the source (and `spec.acknowledgedLostToRetention`)."""
    observation = MirrorObservation(
        generation=1,
        paused=False,
        label_selector="",
        deployment=DeploymentState(1, 1, 1),
        selection_problems=[],
        selection_count=1,
        kafka=KafkaState(plan, set(plan.mirrored.values()), progress, {}, datetime.now(UTC)),
        acknowledged_lost_to_retention=acknowledged_lost,
    )
    return mirror_status(observation, KafkaMirrorStatus(), datetime.now(UTC))
