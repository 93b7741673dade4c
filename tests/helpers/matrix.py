"""What the fault matrix's cases share beside `faults.py`: traffic at a rate from a generator in
its own process, and a new topic with its worker."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import create_topics, unique
from tests.helpers.traffic import TrafficGenerator, TrafficSpec
from tests.helpers.worker import StartWorker, WorkerProcess, worker_config, worker_group

RATE = 10_000


def traffic(
    source: LocalKafka, topic: str, workdir: Path, name: str, **options: Any
) -> TrafficGenerator:
    spec = TrafficSpec.for_topics(source.bootstrap_servers, [topic], **options)
    return TrafficGenerator(spec, workdir, name).start()


def mirror_topic(
    source: LocalKafka, target: LocalKafka, start_worker: StartWorker, prefix: str, count: int
) -> tuple[str, dict[str, Any], str, WorkerProcess]:
    """A new topic of `count` partitions on the source and a worker mirroring it: the topic,
    the worker's configuration, its group and the worker."""
    topic = unique(prefix)
    create_topics(source.bootstrap_servers, [topic], partitions=count)
    config = worker_config(source, target, [re.escape(topic)])
    return topic, config, worker_group(config), start_worker(config)
