"""MirrorMaker 2's record formats, checked against bytes written out by hand from its schemas,
and our provenance header in both its forms (with the source topic's ID, and without)."""

from __future__ import annotations

import base64
import struct

import pytest
from confluent_kafka import Uuid
from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.kafka.admin import id_bytes
from kafka_mirror.kafka.formats import (
    PROVENANCE_HEADER,
    Checkpoint,
    Header,
    Heartbeat,
    OffsetSync,
    Provenance,
    checkpoints_topic,
    newest_provenance,
    offset_syncs_topic,
    provenance_packer,
)


def test_topic_names() -> None:
    assert checkpoints_topic("A") == "A.checkpoints.internal"
    # MirrorMaker 2 names the topic after the cluster at the other end from the one holding it.
    assert offset_syncs_topic("A", "B", "source") == "mm2-offset-syncs.B.internal"
    assert offset_syncs_topic("A", "B", "target") == "mm2-offset-syncs.A.internal"
    # Fan-in with syncs on the target: one topic per flow on B, not one shared.
    assert offset_syncs_topic("C", "B", "target") == "mm2-offset-syncs.C.internal"


def test_offset_sync_bytes() -> None:
    sync = OffsetSync("t", 2, upstream_offset=5, downstream_offset=7)
    assert sync.key() == b"\x00\x01t" + b"\x00\x00\x00\x02"
    assert sync.value() == (5).to_bytes(8, "big") + (7).to_bytes(8, "big")
    assert OffsetSync.decode(sync.key(), sync.value()) == sync


def test_checkpoint_bytes() -> None:
    checkpoint = Checkpoint("g", "t.A", 1, upstream_offset=10, downstream_offset=9, metadata="m")
    assert checkpoint.key() == b"\x00\x01g" + b"\x00\x03t.A" + b"\x00\x00\x00\x01"
    assert checkpoint.value() == (
        b"\x00\x00" + (10).to_bytes(8, "big") + (9).to_bytes(8, "big") + b"\x00\x01m"
    )
    assert Checkpoint.decode(checkpoint.key(), checkpoint.value()) == checkpoint


def test_heartbeat_bytes() -> None:
    beat = Heartbeat("A", "B", 1_700_000_000_000)
    assert beat.key() == b"\x00\x01A\x00\x01B"
    assert beat.value() == b"\x00\x00" + (1_700_000_000_000).to_bytes(8, "big")
    assert Heartbeat.decode(beat.key(), beat.value()) == beat


def test_unicode_names_count_bytes_not_characters() -> None:
    sync = OffsetSync("tópico", 0, 0, 0)
    assert sync.key()[:2] == (len("tópico".encode())).to_bytes(2, "big")
    assert OffsetSync.decode(sync.key(), sync.value()).topic == "tópico"


TOPIC_ID = bytes(range(16))


def test_provenance_header_bytes_with_and_without_the_topic_id() -> None:
    fields = b"\x00\x01A" + (3).to_bytes(4, "big") + (42).to_bytes(8, "big")
    assert Provenance("A", 3, 42, TOPIC_ID).encode() == fields + TOPIC_ID
    # Written before topic IDs were added: the same fields, nothing after the offset.
    assert Provenance("A", 3, 42).encode() == fields
    assert Provenance.decode(fields) == Provenance("A", 3, 42, None)
    assert Provenance.decode(fields + TOPIC_ID) == Provenance("A", 3, 42, TOPIC_ID)


def test_the_packer_the_worker_uses_writes_the_same_bytes() -> None:
    prefix, suffix = Provenance.prefix("A", 3), Provenance.suffix(TOPIC_ID)
    pack = provenance_packer(len(prefix), len(suffix))
    assert pack(prefix, 42, suffix) == Provenance("A", 3, 42, TOPIC_ID).encode()


@given(
    alias=st.text(max_size=40),
    partition=st.integers(-(2**31), 2**31 - 1),
    offset=st.integers(-(2**63), 2**63 - 1),
    topic_id=st.none() | st.binary(min_size=16, max_size=16),
)
def test_provenance_header_round_trip(
    alias: str, partition: int, offset: int, topic_id: bytes | None
) -> None:
    provenance = Provenance(alias, partition, offset, topic_id)
    assert Provenance.decode(provenance.encode()) == provenance


@given(data=st.binary(max_size=64))
def test_any_bytes_decode_to_the_header_they_encode_or_fail(data: bytes) -> None:
    """An application's header of our name decodes only if it is exactly our encoding."""
    try:
        provenance = Provenance.decode(data)
    except (struct.error, ValueError):
        return
    assert provenance.encode() == data


def test_malformed_provenance_headers_do_not_decode() -> None:
    fields = Provenance("A", 3, 42).encode()
    for data in (
        b"\x00",  # too short
        fields[:-1],  # the offset cut short
        fields + bytes(15),  # not a topic ID after the offset
        fields + TOPIC_ID + b"\x00",
        b"\x00\x02\xff\xfe" + bytes(12),  # not UTF-8
    ):
        with pytest.raises((struct.error, ValueError)):
            Provenance.decode(data)
    with pytest.raises(ValueError, match="16 bytes"):
        Provenance("A", 3, 42, bytes(15)).encode()


def test_newest_provenance_is_this_hops() -> None:
    first = Provenance("A", 3, 42, TOPIC_ID)
    headers: list[Header] = [
        ("app", b"x"),
        (PROVENANCE_HEADER, first.encode()),
        (PROVENANCE_HEADER, Provenance("B", 0, 1).encode()),  # an older worker's
    ]
    assert newest_provenance(headers) == Provenance("B", 0, 1)  # the last one
    assert newest_provenance(headers[:2]) == first
    assert newest_provenance([("app", b"x")]) is None
    assert newest_provenance([(PROVENANCE_HEADER, b"\x00")]) is None  # not ours


def test_a_topic_id_is_the_16_bytes_kafka_writes() -> None:
    # Kafka's Uuid is two signed INT64; its text form is the base64 of those 16 bytes.
    topic_id = Uuid(8116405284123066503, -6547761839202517223)
    assert id_bytes(topic_id) == base64.b64decode(str(topic_id) + "==")
    assert id_bytes(Uuid(0, 0)) is None  # Kafka's "no ID"
