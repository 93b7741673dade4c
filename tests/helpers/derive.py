"""An application on one cluster that derives new records from the ones mirrored into a topic,
copying their headers as Kafka Streams does by default: the case a mirror pair under identity
naming must not take for its own copies."""

from __future__ import annotations

import threading
import uuid
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, Message, Producer

from kafka_mirror.kafka.formats import PROVENANCE_HEADER
from kafka_mirror.worker.clients import ONE_REQUEST_IN_FLIGHT
from tests.helpers.content import Header

DERIVED_HEADER = ("derived", b"1")


class DerivingApp(threading.Thread):
    """Reads `source` on `bootstrap` from its start and, for each record mirrored into it (with a
    provenance header), writes one to `derived`: same partition, key and timestamp, the value
    prefixed, every header copied (the mirror's among them) and one added. Stops once it has
    derived `expected` records."""

    def __init__(self, bootstrap: str, source: str, derived: str, expected: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.source, self.derived = bootstrap, source, derived
        self.expected = expected
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"deriving-app-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "linger.ms": 5,
                "enable.idempotence": True,
                **ONE_REQUEST_IN_FLIGHT,  # no spin while the broker answers (docs/performance.md)
            }
        )
        failures: list[str] = []

        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                failures.append(str(error))

        try:
            consumer.subscribe([self.source])
            while self.written < self.expected:
                for message in consumer.consume(1000, timeout=0.5):
                    # A consumed message's headers are a list (a dict only when produced).
                    headers = cast(list[Header], message.headers() or [])
                    if message.error() is not None or all(
                        name != PROVENANCE_HEADER for name, _ in headers
                    ):
                        continue  # the topic's own records: nothing to derive
                    derived: dict[str, Any] = {
                        "value": b"derived:" + (message.value() or b""),
                        "key": message.key(),
                        "partition": message.partition(),
                        "timestamp": message.timestamp()[1],
                        "headers": [*headers, DERIVED_HEADER],
                        "on_delivery": delivered,
                    }
                    while True:
                        try:
                            producer.produce(self.derived, **derived)
                            break
                        except BufferError:  # the local queue is full: let deliveries drain
                            producer.poll(0.1)
                    self.written += 1
                producer.poll(0)
            assert producer.flush(60) == 0 and not failures, failures[:5] or "not flushed"
        except BaseException as error:  # shown by finish()
            self.error = error
        finally:
            consumer.close()

    def finish(self, timeout: float = 300) -> int:
        """Wait until it has derived every record it expects; how many it wrote."""
        self.join(timeout)
        assert not self.is_alive(), f"derived {self.written} of {self.expected} records"
        assert self.error is None, f"deriving failed: {self.error!r}"
        return self.written
