"""Readers: one Kafka reader per cluster connection, shared by the mirrors using it."""

from __future__ import annotations

from kafka_mirror.controller.readers import Readers

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
