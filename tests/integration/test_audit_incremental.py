"""The incremental audit against real Kafka, the real worker and real PySpark: a run after new
records audits only those, with a full run's verdict; runs on a live mirror (copies past the
committed offsets, traffic flowing, a worker restarting) pass and resume; a loss among the new
records is found, and found again by the next run; a re-created topic starts over; a full audit
(`--full`, or a new full-audit request) ignores the watermark; a checkpoint behind it is still
judged."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.audit.main import audit
from kafka_mirror.audit.report import AuditReport
from kafka_mirror.audit.watermarks import read_watermarks
from tests.helpers.audit import commit, committed_everything, mirror_everything, mirror_new_topic
from tests.helpers.content import check_content
from tests.helpers.kafka import admin_for, create_topics, end_offsets, produce, records, unique
from tests.helpers.stack import MirrorStack
from tests.helpers.traffic import TrafficGenerator, TrafficSpec
from tests.helpers.worker import wait_for, worker_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def verified_offsets(config: dict[str, Any], topic: str) -> dict[int, int]:
    """Partition → the watermark kept on B for the mirror's `topic`."""
    parsed = WorkerConfig.model_validate(config)
    kept = read_watermarks(parsed.target.client_config(), "A", parsed.mirror)
    return {w.partition: w.source_offset for w in kept if w.topic == topic}


def counts(report: AuditReport) -> tuple[int, int, int]:
    """Records checked by the run, records verified in all, partitions resumed."""
    return report.records_checked, report.records_verified, report.partitions_resumed


def test_a_run_after_new_records_audits_only_those_with_the_full_runs_verdict(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    topic, config = mirror_new_topic(
        stack.kafka_a, stack.kafka_b, tmp_path, partitions=3, count=300
    )
    parsed = WorkerConfig.model_validate(config)
    first = audit(parsed, stack.spark)
    assert first.result == "Passed", first
    assert counts(first) == (300, 300, 0)
    assert verified_offsets(config, topic) == dict.fromkeys(range(3), 100)

    produce(stack.kafka_a.bootstrap_servers, topic, records(60, 3))
    mirror_everything(config, topic, tmp_path, stack.kafka_b, name="worker-again")
    second = audit(parsed, stack.spark)
    assert second.result == "Passed", second
    assert counts(second) == (60, 360, 3)
    assert [(v.audited_from, v.verified_to) for v in second.verified] == [(100, 120)] * 3
    assert second.summary().message.endswith(
        "; 3 partitions audited from the last verified watermark, 360 records verified in all"
    )
    assert second.summary().records_verified == 360

    full = audit(parsed, stack.spark, full=True)
    assert counts(full) == (360, 360, 0)
    verdict = ("result", "missing", "altered", "duplicates", "lost_to_retention")
    assert [getattr(second, k) for k in verdict] == [getattr(full, k) for k in verdict]
    assert verified_offsets(config, topic) == dict.fromkeys(range(3), 120)


def test_copies_past_the_committed_offsets_wait_for_the_next_run(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    """A live mirror: its target holds copies of records its group has not committed yet (found
    on the real node, where such a run crashed). The run audits up to the committed offsets and
    passes; its watermark's copies start at the first copy after them; the next run, after the
    commit, audits the rest."""
    topic, config = mirror_new_topic(
        stack.kafka_a, stack.kafka_b, tmp_path, partitions=2, count=200
    )
    parsed = WorkerConfig.model_validate(config)
    commit(stack.kafka_a, parsed.consumer_group, topic, {0: 60, 1: 70})  # copied up to 100 each
    first = audit(parsed, stack.spark)
    assert first.result == "Passed", first
    assert counts(first) == (130, 130, 0)
    kept = read_watermarks(parsed.target.client_config(), "A", parsed.mirror)
    assert {w.partition: (w.source_offset, w.target_offset) for w in kept if w.topic == topic} == {
        0: (60, 60),
        1: (70, 70),
    }
    commit(stack.kafka_a, parsed.consumer_group, topic, dict.fromkeys(range(2), 100))
    second = audit(parsed, stack.spark)
    assert second.result == "Passed", second
    assert counts(second) == (70, 200, 2)


def test_runs_while_traffic_flows_and_a_worker_restarts_pass_and_resume(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    """The CronJob's runs overlap the traffic, and a worker restarts between them as a roll
    restarts it: each run passes and resumes where the last ended; once the traffic is
    mirrored, a full audit and the records read straight from Kafka agree."""
    topic = unique()
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=3)
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    parsed = WorkerConfig.model_validate(config)
    spec = TrafficSpec(stack.kafka_a.bootstrap_servers, {topic: 3}, rate=2_000)
    traffic = TrafficGenerator(spec, tmp_path).start()
    try:
        workers = [stack.start_worker(config, "worker-0"), stack.start_worker(config, "worker-1")]
        wait_for(
            lambda: sum(end_offsets(stack.kafka_b.bootstrap_servers, f"{topic}.A").values()) > 0,
            60,
            "copies on B",
        )
        checked = 0
        for run in range(3):
            report = audit(parsed, stack.spark)
            assert report.result == "Passed", report
            assert report.partitions_resumed == (3 if run else 0)
            checked += report.records_checked
            workers[run % 2].stop()
            workers[run % 2] = stack.start_worker(config, f"worker-{run % 2}-{run}")
        stats = traffic.finish()
    finally:
        if traffic.running():
            traffic.kill()
    wait_for(lambda: committed_everything(config, topic), 120, "the workers to commit everything")
    full = audit(parsed, stack.spark, full=True)
    assert full.result == "Passed", full
    assert full.records_checked == stats.acked_total >= checked
    content = check_content(
        stack.kafka_a.bootstrap_servers, stack.kafka_b.bootstrap_servers, {topic: f"{topic}.A"}
    )
    assert content.lossless and content.source_records == stats.acked_total, content


def test_a_loss_in_the_new_records_is_found_and_audited_again(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    """10 records after the watermark that the workers' group committed though the target
    never got them: found by the incremental run, and by the next, since the watermark stays
    before them."""
    topic, config = mirror_new_topic(stack.kafka_a, stack.kafka_b, tmp_path)
    parsed = WorkerConfig.model_validate(config)
    assert audit(parsed, stack.spark).result == "Passed"
    produce(stack.kafka_a.bootstrap_servers, topic, records(15, 1))
    commit(stack.kafka_a, parsed.consumer_group, topic, {0: 110})  # 100 to 109 never mirrored
    for _ in range(2):
        report = audit(parsed, stack.spark)
        assert report.result == "Failed"
        assert (report.records_checked, report.missing, report.partitions_resumed) == (10, 10, 1)
        (finding,) = report.findings
        assert finding.missing_offsets == list(range(100, 110))
        assert verified_offsets(config, topic) == {0: 100}


def test_a_recreated_topic_starts_over(stack: MirrorStack, tmp_path: Path) -> None:
    topic, config = mirror_new_topic(stack.kafka_a, stack.kafka_b, tmp_path, count=100)
    parsed = WorkerConfig.model_validate(config)
    assert counts(audit(parsed, stack.spark)) == (100, 100, 0)
    admin = admin_for(stack.kafka_a.bootstrap_servers)
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=30)
    wait_for(lambda: topic not in admin.list_topics().topics, 30, "the topic to go")
    create_topics(stack.kafka_a.bootstrap_servers, [topic])
    produce(stack.kafka_a.bootstrap_servers, topic, records(150, 1))  # past the old watermark
    mirror_everything(config, topic, tmp_path, stack.kafka_b, name="worker-again")
    report = audit(parsed, stack.spark)
    assert report.result == "Passed", report
    assert counts(report) == (150, 150, 0)


def test_a_full_audit_ignores_the_watermark_and_a_checkpoint_behind_it_is_judged(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    """Two partitions; group "app" at 50 on partition 1, checkpointed: its checkpoint lies
    behind partition 1's watermark, so that partition is audited in full every run."""
    topic, config = mirror_new_topic(
        stack.kafka_a, stack.kafka_b, tmp_path, partitions=2, count=200
    )
    commit(stack.kafka_a, "app", topic, {1: 50})
    mirror_everything(config, topic, tmp_path, stack.kafka_b, name="worker-checkpoints")
    parsed = WorkerConfig.model_validate(config)
    assert audit(parsed, stack.spark).records_checked == 200
    again = audit(parsed, stack.spark)
    assert (again.records_checked, again.partitions_resumed, again.checkpoints_checked) == (
        100,
        1,
        1,
    )
    assert again.result == "Passed", again

    requested = audit(parsed, stack.spark, full_request="2026-11-23")
    assert (requested.records_checked, requested.partitions_resumed) == (200, 0)
    assert audit(parsed, stack.spark, full_request="2026-11-23").partitions_resumed == 1

    # The command: --full audits everything, whatever the watermark.
    config_path, report_path = tmp_path / "worker.yaml", tmp_path / "report.json"
    config_path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "kafka_mirror", "audit", "--config", str(config_path)]
    options = ["--master", "local[1]", "--no-status", "--report", str(report_path), "--full"]
    finished = subprocess.run([*command, *options], capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    written = yaml.safe_load(report_path.read_text())
    assert (written["recordsChecked"], written["partitionsResumed"]) == (200, 0)
