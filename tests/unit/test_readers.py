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


def test_a_namespaces_mirrors_get_only_so_many_connections_and_others_are_not_held_back() -> None:
    """A team giving each mirror other credentials cannot make the operator hold readers
    without bound: the mirror beyond its namespace's share is refused with a reason, the same
    connections shared stay open to it, and another namespace is not held back."""
    readers = Readers(per_namespace=2)
    readers.get("team-a/m1", "source", "A", PLAIN)
    readers.get("team-a/m1", "target", "B", ALICE)
    with pytest.raises(ClusterUnavailable, match="namespace team-a use 2 distinct") as refused:
        readers.get("team-a/m2", "source", "A", BOB)
    assert refused.value.reason == "TooManyConnections"
    readers.get("team-a/m2", "source", "A", dict(PLAIN))  # shared: no new connection
    readers.get("team-a/m1", "target", "B", BOB)  # a mirror may change its own
    readers.get("team-b/m1", "source", "A", BOB)  # another namespace's share
    readers.forget("team-a/m2")
    readers.forget("team-a/m1")
    readers.get("team-a/m3", "source", "A", ALICE)  # room again
    for mirror in ("team-a/m3", "team-b/m1"):
        readers.forget(mirror)


class AnsweredOffsets:
    """An admin client that answers the partitions' offsets at once."""

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Future[Any]]:
        return {tp: answered(SimpleNamespace(offset=0)) for tp in request}


def answered(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


def test_a_lost_answer_fails_the_read_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The status loop waits for every refresh: a read whose answer never comes must end. The
    group's offsets are asked where nothing listens: librdkafka waits for the coordinator with
    no limit of its own (GROUP_REQUEST_LIMIT)."""
    monkeypatch.setattr(observe, "ANSWER_WAIT", 0.5)
    reader = observe.ClusterReader("A", PLAIN)
    reader._admin = AnsweredOffsets()  # type: ignore[assignment]
    started = time.monotonic()
    with pytest.raises(ClusterUnavailable, match=r"no answer within 0.5 s") as failed:
        reader.progress("g", {"t": 2})
    assert failed.value.reason == "KafkaError"
    assert time.monotonic() - started < 10  # the child process's start, then the wait
    reader.close()
