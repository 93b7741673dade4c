"""The audit command's exit status: 0 whenever it ran, a Failed verdict included (the Job must not
re-run a result as if it had crashed), 2 when it could not audit. Spark and Kafka are replaced:
this is the command's own logic."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest

import kafka_mirror.audit.main as main
from kafka_mirror.audit.report import AuditReport
from kafka_mirror.kafka.client import ClusterUnavailable


class FakeSpark:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


def run_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, outcome: Any
) -> tuple[int, FakeSpark]:
    """`run` as the CronJob calls it, where the audit itself returns or raises `outcome`."""
    spark = FakeSpark()

    def audit(*_: Any, **__: Any) -> AuditReport:
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(main, "load", lambda _: type("Config", (), {"mirror": "ns/m"})())
    monkeypatch.setattr(main, "session", lambda *_: spark)
    monkeypatch.setattr(main, "audit", audit)
    code = main.run(tmp_path / "c.yaml", tmp_path / "r.json", None, "local[1]", {}, None, False)
    return code, spark


def report(result: Literal["Passed", "Failed"], missing: int) -> AuditReport:
    when = datetime(2026, 11, 23, tzinfo=UTC)
    return AuditReport(mirror="ns/m", time=when, seconds=1, result=result, missing=missing)


def test_a_failed_verdict_is_a_result_written_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, spark = run_with(monkeypatch, tmp_path, report("Failed", 10))
    assert (code, spark.stopped) == (0, True)
    written = json.loads((tmp_path / "r.json").read_text())
    assert (written["result"], written["missing"]) == ("Failed", 10)
    assert run_with(monkeypatch, tmp_path, report("Passed", 0))[0] == 0


def test_an_audit_that_could_not_run_exits_2_and_writes_no_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, spark = run_with(monkeypatch, tmp_path, ClusterUnavailable("KafkaError", "down"))
    assert (code, spark.stopped) == (2, True)
    assert not (tmp_path / "r.json").exists()
