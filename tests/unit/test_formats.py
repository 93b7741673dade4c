"""MirrorMaker 2's record formats, checked against bytes written out by hand from its schemas."""

from __future__ import annotations

from kafka_mirror.kafka.formats import (
    PROVENANCE_HEADER,
    Checkpoint,
    Heartbeat,
    OffsetSync,
    Provenance,
    checkpoints_topic,
    newest_provenance,
    offset_syncs_topic,
    provenance_aliases,
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


def test_provenance_header_round_trip_and_hops() -> None:
    first = Provenance("A", 3, 42)
    assert Provenance.decode(first.encode()) == first
    headers: list[tuple[str, str | bytes | None]] = [
        ("app", b"x"),
        (PROVENANCE_HEADER, first.encode()),
        (PROVENANCE_HEADER, Provenance("B", 0, 1).encode()),
    ]
    assert provenance_aliases(headers) == ["A", "B"]
    assert newest_provenance(headers) == Provenance("B", 0, 1)  # this hop's: the last one
    assert newest_provenance([("app", b"x")]) is None


def test_a_malformed_provenance_header_names_no_cluster() -> None:
    good = Provenance("B", 3, 42).encode()
    headers: list[tuple[str, str | bytes | None]] = [
        (PROVENANCE_HEADER, b"\x00"),  # too short
        (PROVENANCE_HEADER, b"\x00\x02\xff\xfe" + bytes(12)),  # not UTF-8
        (PROVENANCE_HEADER, good),
    ]
    assert provenance_aliases(headers) == ["B"]
