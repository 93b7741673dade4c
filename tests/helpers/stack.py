"""The stack most integration tests start from: Kafka clusters A and B, the worker launcher and
Spark for the audit, as one fixture (`stack` in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.worker import StartWorker


@dataclass(frozen=True)
class MirrorStack:
    kafka_a: LocalKafka
    kafka_b: LocalKafka
    start_worker: StartWorker
    request: pytest.FixtureRequest

    @property
    def spark(self) -> SparkSession:
        """The process's Spark session, started on first use. A test that uses it is marked
        `spark`, so that the tiers (`make check` leaves Spark out) select by what it starts."""
        test = self.request.node
        if test.get_closest_marker("spark") is None:
            raise RuntimeError(f"{test.name} uses Spark: mark it (or its module) `spark`")
        session: SparkSession = self.request.getfixturevalue("spark")
        return session


class BrokerLogs:
    """What the clusters' brokers logged during one test, printed after it (pytest shows it
    with a failure): the brokers' side of what a worker saw."""

    def __init__(self, *clusters: LocalKafka) -> None:
        self.starts = {path: _size(path) for c in clusters for path in c.server_logs()}

    def print(self, last: int = 40) -> None:
        for path, start in self.starts.items():
            if not path.exists():  # a node never started
                continue
            with path.open("rb") as log:
                log.seek(start)
                lines = log.read().decode(errors="replace").splitlines()
            if lines:
                print(
                    f"----- {path}, its last {last} lines of the test -----",
                    *lines[-last:],
                    sep="\n",
                )


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def run_operator(process: OperatorProcess) -> Iterator[OperatorProcess]:
    """A fixture's body: the operator started, stopped after the test, its log's tail shown."""
    yield process.start()
    assert process.process is not None
    code = process.process.poll()
    if code is None:
        process.stop()
    exited = "" if code is None else f" (it had exited: {code})"
    print(f"----- operator log{exited} -----\n{process.log()[-6000:]}")
    if code is not None:
        print(process.native_stacks())
