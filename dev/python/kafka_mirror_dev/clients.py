"""Kafka clients of the dev tools and tests that are destroyed where a hang stalls nothing.

librdkafka can block forever destroying a client after one of its brokers went away and came
back: a broker thread keeps a reference it never drops, and the destroy joins that thread
(confluentinc/librdkafka#4519). A CI run hung so for half an hour, inside the garbage collector on
the test's main thread, where no test timeout can interrupt it. confluent-kafka releases the GIL
while it destroys, so destroying on a daemon thread costs one stuck thread at worst."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from confluent_kafka.admin import AdminClient


def destroy_in_background(clients: list[Any]) -> None:
    """Destroy the clients in `clients` on a daemon thread. The list is emptied; the caller must
    hold no other reference to them."""
    owned = clients.copy()
    clients.clear()
    threading.Thread(target=owned.clear, name="destroy-kafka-clients", daemon=True).start()


class DetachedAdmin:
    """An admin client for a few requests around broker restarts (`with DetachedAdmin(servers)
    as admin: admin.client.list_topics()`, never keeping `admin.client` in a name). It holds
    the only lasting reference to the client, and gives it to `destroy_in_background` at the end
    of the block."""

    def __init__(self, bootstrap_servers: str) -> None:
        self._owned = [AdminClient({"bootstrap.servers": bootstrap_servers})]

    @property
    def client(self) -> AdminClient:
        return self._owned[0]

    def __enter__(self) -> DetachedAdmin:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        destroy_in_background(self._owned)
