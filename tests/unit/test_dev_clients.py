"""The dev tools' clients around broker restarts are destroyed on a daemon thread, never on the
caller's (kafka_mirror_dev.clients says why)."""

from __future__ import annotations

import threading

from kafka_mirror_dev.clients import destroy_in_background


class Client:
    def __init__(self, destroyed: threading.Event, where: list[str]) -> None:
        self.destroyed, self.where = destroyed, where

    def __del__(self) -> None:
        self.where.append(threading.current_thread().name)
        self.destroyed.set()


def test_the_last_reference_goes_on_a_daemon_thread() -> None:
    destroyed, where = threading.Event(), []
    owned = [Client(destroyed, where), Client(threading.Event(), where)]
    destroy_in_background(owned)
    assert owned == []
    assert destroyed.wait(5)
    assert where and all(name == "destroy-kafka-clients" for name in where)
