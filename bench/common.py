"""What the benchmarks share: Kafka's own producer tool to preload a topic, and a worker run
exactly as a pod runs it."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_mirror.devstack.builds import kafka_libs
from kafka_mirror.devstack.kafka import KafkaCluster, java_command
from kafka_mirror.devstack.processes import free_port


def preload(cluster: KafkaCluster, topic: str, records: int, size: int, partitions: int) -> None:
    """`records` records of `size` bytes on a new topic, written by Kafka's ProducerPerformance."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result()
    print(f"preloading {records:,} records of {size} B on {cluster.alias}…", flush=True)
    subprocess.run(
        java_command(
            kafka_libs(),
            "org.apache.kafka.tools.ProducerPerformance",
            *("--topic", topic, "--num-records", str(records), "--record-size", str(size)),
            *("--throughput", "-1", "--producer-props"),
            f"bootstrap.servers={cluster.bootstrap_servers}",
            "acks=1",
            "linger.ms=10",
            "batch.size=262144",
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def worker_config(a: KafkaCluster, b: KafkaCluster, mirror: str, topic: str) -> dict[str, Any]:
    return {
        "mirror": mirror,
        "source": {"alias": "A", "bootstrapServers": a.bootstrap_servers},
        "target": {"alias": "B", "bootstrapServers": b.bootstrap_servers},
        "selections": [{"name": "bench", "includes": [topic]}],
        "metricsPort": free_port(),
    }


def start_worker(config: dict[str, Any], workdir: Path) -> subprocess.Popen[bytes]:
    """`python -m kafka_mirror worker --config FILE`, logging to workdir/worker.log."""
    config_path = workdir / "worker.yaml"
    config_path.write_text(yaml.safe_dump(config))
    return subprocess.Popen(
        [sys.executable, "-m", "kafka_mirror", "worker", "--config", str(config_path)],
        stdout=(workdir / "worker.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


@contextmanager
def two_clusters() -> Iterator[tuple[Path, KafkaCluster, KafkaCluster]]:
    """A work directory and Kafka A and B started in it; removed afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="kafka-mirror-bench-"))
    a, b = KafkaCluster("A", workdir / "A"), KafkaCluster("B", workdir / "B")
    try:
        print("starting Kafka A and B…", flush=True)
        a.start()
        b.start()
        yield workdir, a, b
    finally:
        a.remove()
        b.remove()
