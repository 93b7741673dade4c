"""Readers: one Kafka reader per cluster connection, shared by the mirrors using it."""

from __future__ import annotations

import time
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_mirror.controller.readers import Readers
from kafka_mirror.kafka import observe
from kafka_mirror.kafka.client import ClusterUnavailable

# Nothing listens there: a reader's clients connect lazily, and these tests never read.
PLAIN = {"bootstrap.servers": "127.0.0.1:1", "log_level": "0"}
ALICE = {**PLAIN, "sasl.username": "alice", "sasl.password": "secret-a"}
BOB = {**PLAIN, "sasl.username": "bob", "sasl.password": "secret-b"}


def test_mirrors_on_the_same_connection_share_a_reader_and_other_credentials_never_do() -> None:
    readers = Readers()
    first = readers.get("ns/m1", "source", "A", PLAIN)
    assert readers.get("ns/m2", "source", "A", dict(PLAIN)) is first
    alice = readers.get("ns/m3", "source", "A", ALICE)
    assert alice is not first
    assert readers.get("ns/m4", "source", "A", BOB) is not alice
    assert readers.get("ns/m5", "source", "A", dict(ALICE)) is alice
    for mirror in ("ns/m1", "ns/m2", "ns/m3", "ns/m4", "ns/m5"):
        readers.forget(mirror)


def test_a_reader_lives_while_a_mirror_uses_it() -> None:
    readers = Readers()
    shared = readers.get("ns/m1", "source", "A", PLAIN)
    assert readers.get("ns/m2", "source", "A", PLAIN) is shared
    readers.forget("ns/m1")
    assert readers.get("ns/m2", "source", "A", PLAIN) is shared  # m2 still holds it
    readers.get("ns/m2", "source", "A", ALICE)  # m2 moved to other credentials
    assert readers.get("ns/m3", "source", "A", PLAIN) is not shared  # closed, made anew
    readers.forget("ns/m2")
    readers.forget("ns/m3")


class LostAnswers:
    """An admin client whose group requests are never answered, as librdkafka's can be around
    a broker restart (its coordinator requests: librdkafka#3663); offsets are answered."""

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Future[Any]]:
        return {tp: answered(SimpleNamespace(offset=0)) for tp in request}

    def list_consumer_group_offsets(self, request: list[Any], **_: Any) -> dict[str, Future[Any]]:
        return {request[0].group_id: Future()}


def answered(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


def test_a_lost_answer_fails_the_read_in_time_and_the_next_read_uses_a_new_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The status loop waits for every refresh: a read whose answer never comes must end."""
    monkeypatch.setattr(observe, "REQUEST_TIMEOUT", 0.1)
    monkeypatch.setattr(observe, "RENEW_SECONDS", 0.0)
    reader = observe.ClusterReader("A", PLAIN)
    lost = LostAnswers()
    reader._admin = lost  # type: ignore[assignment]
    started = time.monotonic()
    with pytest.raises(ClusterUnavailable, match=r"no answer within 0.2 s") as failed:
        reader.progress("g", {"t": 2})
    assert failed.value.reason == "KafkaError"
    assert time.monotonic() - started < 5
    assert reader._admin is not lost
    reader.close()
