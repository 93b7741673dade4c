"""How many mirroring processes a pod runs, from its cgroup's CPU limit; and the metrics a
process stops showing."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from unittest import mock

import pytest

from kafka_mirror.worker import supervisor
from kafka_mirror.worker.metrics import WorkerMetrics


def cgroup_v1(root: Path, quota: int, period: int = 100_000) -> Path:
    (root / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (root / "cpu.cfs_period_us").write_text(f"{period}\n")
    return root


@pytest.mark.parametrize(
    ("cpu_max", "limit"), [("max 100000\n", None), ("250000 100000\n", 2.5), ("50000 100000", 0.5)]
)
def test_the_limit_is_read_from_cgroup_v2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_max: str, limit: float | None
) -> None:
    (tmp_path / "cpu.max").write_text(cpu_max)
    monkeypatch.setattr(supervisor, "CGROUP_V2_CPU", tmp_path / "cpu.max")
    assert supervisor.cpu_limit() == limit


@pytest.mark.parametrize(("quota", "limit"), [(-1, None), (200_000, 2.0), (150_000, 1.5)])
def test_the_limit_is_read_from_cgroup_v1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quota: int, limit: float | None
) -> None:
    monkeypatch.setattr(supervisor, "CGROUP_V2_CPU", tmp_path / "absent")
    monkeypatch.setattr(supervisor, "CGROUP_V1_CPU", cgroup_v1(tmp_path, quota))
    assert supervisor.cpu_limit() == limit


@pytest.mark.parametrize(
    ("configured", "limit", "count"),
    [(3, None, 3), (None, None, 1), (None, 1.5, 2), (None, 0.2, 1), (None, 64.0, None)],
)
def test_process_count(
    monkeypatch: pytest.MonkeyPatch,
    configured: int | None,
    limit: float | None,
    count: int | None,
) -> None:
    monkeypatch.setattr(supervisor, "cpu_limit", lambda: limit)
    cores = len(os.sched_getaffinity(0))
    # Never more processes than cores to run them on, unless asked for.
    expected = count if configured is not None else min(count or cores, cores)
    assert supervisor.process_count(configured) == expected


def test_a_topic_no_longer_mirrored_leaves_the_metrics() -> None:
    metrics = WorkerMetrics()
    metrics.set_topics({"a": "a.A", "b": "b.A"}, [("c", "cycle")])
    metrics.set_topics({"a": "a.A"}, [])
    shown = {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name in ("kafka_mirror_active_topic", "kafka_mirror_skipped_topic")
    }
    assert shown == {("kafka_mirror_active_topic", (("remote_topic", "a.A"), ("topic", "a")))}


def test_each_process_is_sent_sigterm_once(tmp_path: Path) -> None:
    """A second SIGTERM (the pod's, then the supervisor's own when one process has ended) could
    reach a process while its interpreter finalizes, with the default handler back: exit -15."""
    pod = supervisor.Supervisor(tmp_path / "worker.yaml", 2, 0)
    pod.processes = [
        pod.context.Process(target=time.sleep, args=(30,), name=f"mirror-{i}") for i in range(2)
    ]
    for process in pod.processes:
        process.start()
    sent: list[tuple[int, int]] = []
    try:
        with mock.patch.object(os, "kill", lambda pid, signum: sent.append((pid, signum))):
            pod._pass_on(signal.SIGTERM, None)
            pod._pass_on(signal.SIGTERM, None)
    finally:
        for process in pod.processes:
            process.kill()
            process.join()
    assert sorted(sent) == sorted((p.pid, signal.SIGTERM) for p in pod.processes if p.pid)
