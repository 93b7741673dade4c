"""What the unit tests of the operations share: a mirror's spec, its status, its clusters."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.status import KafkaMirrorStatus, TopicStatus
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.controller.operations import Access

NOW = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
ACCESS = Access({"bootstrap.servers": "a:9092"}, {"bootstrap.servers": "b:9092"})


def spec(operation: dict[str, str] | None = None, **extra: Any) -> KafkaMirrorSpec:
    data: dict[str, Any] = {
        "source": {"alias": "A", "bootstrapServers": "a:9092"},
        "target": {"alias": "B", "bootstrapServers": "b:9092"},
        **extra,
    }
    if operation is not None:
        data["operation"] = operation
    return KafkaMirrorSpec.model_validate(data)


CONFIG = WorkerConfig.model_validate(
    {
        "mirror": "ns/m",
        "source": {"alias": "A", "bootstrapServers": "a:9092"},
        "target": {"alias": "B", "bootstrapServers": "b:9092"},
    }
)


def status(lag: int = 0, replicas: int = 0, latency: float | None = 4.5) -> KafkaMirrorStatus:
    topics = [TopicStatus(name="t", remote_name="t.A", lag=lag, latency_seconds=latency)]
    return KafkaMirrorStatus(topics=topics, total_lag=lag, replicas=replicas, source_last_seen=NOW)
