"""The fixture the unit tests of the operations share (tests/unit/test_operations.py,
test_return.py)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException

from kafka_mirror.api.operations import OperationStatus
from kafka_mirror.controller import operations


@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Stands in for the Kafka calls: the checkpoints on B, the groups on A, the commits."""
    state: dict[str, Any] = {"checkpoints": {}, "positions": {}, "fail": False, "commits": 0}

    def maybe_fail() -> None:
        if state["fail"]:
            raise KafkaException("down")

    def checkpoints(*_: Any) -> dict[Any, Any]:
        maybe_fail()
        return dict(state["checkpoints"])

    def positions(*_: Any) -> dict[str, Any]:
        maybe_fail()
        return dict(state["positions"])

    def commit(_config: Any, _access: Any, op: OperationStatus) -> None:
        maybe_fail()
        state["commits"] += 1

    monkeypatch.setattr(operations, "newest_checkpoints", checkpoints)
    monkeypatch.setattr(operations, "_source_positions", positions)
    monkeypatch.setattr(operations, "_commit", commit)
    return state
