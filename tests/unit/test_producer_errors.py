"""A fatal error belongs to the producer that had it: one that a replaced producer reports late
(its purge serves its queued events) must not replace its successor as well, which would send
everything in flight a second time."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.worker.clients import Clients


def offline_clients(reported: list[tuple[str, KafkaError]]) -> Clients:
    config = WorkerConfig.model_validate(
        {
            "mirror": "ns/a-to-b",
            "source": {"alias": "A", "bootstrapServers": "127.0.0.1:1"},
            "target": {"alias": "B", "bootstrapServers": "127.0.0.1:1"},
        }
    )

    def on_error(cluster: str) -> Callable[[KafkaError], None]:
        return lambda error: reported.append((cluster, error))

    return Clients(config, on_error, lambda error, partitions: None)


def test_only_the_current_producers_fatal_error_is_handed_on() -> None:
    reported: list[tuple[str, KafkaError]] = []
    clients = offline_clients(reported)
    try:
        first = clients._with_error_callback({})["error_cb"]
        second = clients._with_error_callback({})["error_cb"]
        fatal = KafkaError(KafkaError._GAPLESS_GUARANTEE, "ProduceRequest failed", fatal=True)
        transport = KafkaError(KafkaError._TRANSPORT, "connection refused")
        first(fatal)
        first(transport)
        second(fatal)
        assert reported == [("target", transport), ("target", fatal)]
    finally:
        clients.close()
