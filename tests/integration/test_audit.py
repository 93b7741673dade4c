"""The audit against real Kafka A and B, mirrored by the real worker, checked by real PySpark:
a clean mirror passes with exact counts; loss, duplicates and a wrong checkpoint are found with
their partitions and offsets."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.audit.main import append_history, audit
from kafka_mirror.kafka.formats import Checkpoint, OffsetSync, checkpoints_topic, offset_syncs_topic
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.audit import commit, mirror_everything
from tests.helpers.kafka import create_topics, produce, records, unique
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import worker_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
PARTITIONS, PER_PARTITION = 3, 100


def mirrored(
    kafka_a: LocalKafka, kafka_b: LocalKafka, tmp_path: Path
) -> tuple[str, dict[str, Any]]:
    """A topic on A, mirrored to B by the worker until its group committed everything, with an
    application group at offset 50 whose checkpoints the worker wrote; the worker is stopped."""
    topic = f"{unique()}.audited"
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=PARTITIONS)
    produce(kafka_a.bootstrap_servers, topic, records(PARTITIONS * PER_PARTITION, PARTITIONS))
    commit(kafka_a, "app", topic, dict.fromkeys(range(PARTITIONS), 50))
    config = worker_config(kafka_a, kafka_b, [re.escape(topic)])
    mirror_everything(config, topic, tmp_path, kafka_b)
    return topic, config


def test_a_clean_mirror_passes_with_exact_counts(stack: MirrorStack, tmp_path: Path) -> None:
    topic, config = mirrored(stack.kafka_a, stack.kafka_b, tmp_path)
    # A sync for a record written after the audit read the target (found on the real node:
    # an audit run while traffic flows): not judged, not counted as wrong.
    parsed = WorkerConfig.model_validate(config)
    ahead = OffsetSync(topic, 0, PER_PARTITION + 50, PER_PARTITION + 50)
    syncs = offset_syncs_topic("A", "B", parsed.offset_syncs.location)
    holder = stack.kafka_a if parsed.offset_syncs.location == "source" else stack.kafka_b
    producer = Producer({"bootstrap.servers": holder.bootstrap_servers})
    producer.produce(syncs, ahead.value(), ahead.key())
    assert producer.flush(10) == 0
    report = audit(parsed, stack.spark)
    append_history(stack.spark, report, str(tmp_path / "history"))
    assert report.result == "Passed", report
    assert (report.partitions_checked, report.records_checked) == (3, 300)
    assert (report.altered, report.lost_to_retention, report.skipped_cycles) == (0, 0, 0)
    assert (report.expired_on_source, report.expired_on_target) == (0, 0)
    assert (report.missing, report.duplicates, report.unsafe_checkpoints) == (0, 0, 0)
    assert report.offset_syncs_checked >= 3 and report.bad_offset_syncs == 0
    assert report.checkpoints_checked == 3  # group "app", three partitions
    assert report.summary().message.startswith("300 records in 3 partitions mirrored exactly once")
    (row,) = stack.spark.read.parquet(str(tmp_path / "history")).collect()
    assert (row["result"], row["recordsChecked"]) == ("Passed", 300)


def test_loss_duplicates_and_a_wrong_checkpoint_are_found_with_partitions_and_offsets(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    topic, config = mirrored(stack.kafka_a, stack.kafka_b, tmp_path)
    remote = f"{topic}.A"
    b = stack.kafka_b.bootstrap_servers
    # Loss: 10 more records on partition 0 of A that the workers' group committed as mirrored
    # though the target never got them (a mirror that commits too far).
    produce(
        stack.kafka_a.bootstrap_servers, topic, [replace(r, partition=0) for r in records(10, 1)]
    )
    commit(stack.kafka_a, WorkerConfig.model_validate(config).consumer_group, topic, {0: 110})
    # Duplicates: records 20..24 of partition 1 written to B again, headers, timestamp and all
    # (as an at-least-once re-send writes them).
    reader = Consumer({"bootstrap.servers": b, "group.id": unique("reader")})
    reader.assign([TopicPartition(remote, 1, 20)])
    copies = []
    while len(copies) < 5:
        for message in reader.consume(5 - len(copies), timeout=5):
            copies.append(message)
    reader.close()
    producer = Producer({"bootstrap.servers": b})
    for message in copies:
        producer.produce(
            remote,
            message.value(),
            message.key(),
            1,
            timestamp=message.timestamp()[1],
            headers=message.headers(),
        )
    # A wrong checkpoint: group "app" at source offset 10 translated to target offset 60.
    wrong = Checkpoint("app", remote, 2, 10, 60)
    producer.produce(checkpoints_topic("A"), wrong.value(), wrong.key())
    assert producer.flush(10) == 0

    report = audit(WorkerConfig.model_validate(config), stack.spark)
    assert report.result == "Failed"
    assert (report.missing, report.duplicates, report.unsafe_checkpoints) == (10, 5, 1)
    findings = {(f.topic, f.partition): f for f in report.findings}
    assert findings[(topic, 0)].missing_offsets == list(range(100, 110))
    assert findings[(topic, 1)].duplicated_offsets == [20, 21, 22, 23, 24]
    (unsafe,) = report.unsafe
    assert (unsafe.group, unsafe.topic, unsafe.partition) == ("app", remote, 2)
    assert (unsafe.skipped, unsafe.first_skipped_offset) == (50, 10)
    assert "10 records missing on the target" in report.summary().message
    assert f"{topic}/0 offsets [100, 101, 102]" in report.summary().message

    # The command the CronJob runs says so in its JSON report, and exits 0: a Failed verdict is
    # a result, which the Job must not re-run as if the audit had crashed.
    config_path, report_path = tmp_path / "worker.yaml", tmp_path / "report.json"
    config_path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "kafka_mirror", "audit", "--config", str(config_path)]
    options = ["--master", "local[1]", "--no-status", "--report", str(report_path)]
    finished = subprocess.run([*command, *options], capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    written = json.loads(report_path.read_text())
    assert (written["result"], written["missing"], written["unsafeCheckpoints"]) == (
        "Failed",
        10,
        1,
    )
