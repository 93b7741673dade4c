"""MirrorMaker 2's record formats, byte for byte, and our provenance header.

Kafka's `Struct` serialization: STRING is an INT16 length then UTF-8; integers are big-endian.
Checkpoint and heartbeat values start with an INT16 version (0); offset syncs have none. Topic
names are MirrorMaker 2's, so `MirrorClient` and `RemoteClusterUtils` read what we write.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

HEARTBEATS_TOPIC = "heartbeats"
PROVENANCE_HEADER = "kmirror.src"
PROVENANCE_OFFSET = struct.Struct(">q")

SyncsLocation = Literal["source", "target"]  # the cluster holding the offset-syncs topic


def checkpoints_topic(source_alias: str) -> str:
    return f"{source_alias}.checkpoints.internal"


def offset_syncs_topic(source_alias: str, target_alias: str, location: SyncsLocation) -> str:
    """MirrorMaker 2's name: after the cluster at the other end of the flow from the one holding
    the topic. Syncs on the source are named after the target; on the target, after the source,
    so two flows into one target (A → B, C → B) each have their own topic there."""
    other = target_alias if location == "source" else source_alias
    return f"mm2-offset-syncs.{other}.internal"


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.position)
        self.position += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str:
        length = self.take(">h")
        if length < 0:
            raise ValueError("null STRING where MirrorMaker 2 writes a value")
        text = self.data[self.position : self.position + length].decode("utf-8")
        self.position += length
        return text


def _string(text: str) -> bytes:
    encoded = text.encode("utf-8")
    return struct.pack(">h", len(encoded)) + encoded


@dataclass(frozen=True)
class OffsetSync:
    """Upstream offset `upstream_offset` of `topic`/`partition` is at `downstream_offset`."""

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        return _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">qq", self.upstream_offset, self.downstream_offset)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        k, v = _Reader(key), _Reader(value)
        return cls(k.string(), k.take(">i"), v.take(">q"), v.take(">q"))


@dataclass(frozen=True)
class Checkpoint:
    """A consumer group's position, upstream and translated to the downstream (remote) topic."""

    group: str
    topic: str  # the downstream (remote) topic
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">hqq", 0, self.upstream_offset, self.downstream_offset) + _string(
            self.metadata
        )

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        k, v = _Reader(key), _Reader(value)
        group, topic, partition = k.string(), k.string(), k.take(">i")
        version = v.take(">h")
        if version != 0:
            raise ValueError(f"unknown checkpoint version {version}")
        return cls(group, topic, partition, v.take(">q"), v.take(">q"), v.string())


@dataclass(frozen=True)
class Heartbeat:
    source_alias: str
    target_alias: str
    timestamp_ms: int

    def key(self) -> bytes:
        return _string(self.source_alias) + _string(self.target_alias)

    def value(self) -> bytes:
        return struct.pack(">hq", 0, self.timestamp_ms)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        k, v = _Reader(key), _Reader(value)
        source, target = k.string(), k.string()
        if v.take(">h") != 0:
            raise ValueError("unknown heartbeat version")
        return cls(source, target, v.take(">q"))


@dataclass(frozen=True)
class Provenance:
    """Where a mirrored record came from: the header our worker adds to every record."""

    alias: str
    partition: int
    offset: int

    def encode(self) -> bytes:
        return self.prefix(self.alias, self.partition) + PROVENANCE_OFFSET.pack(self.offset)

    @staticmethod
    def prefix(alias: str, partition: int) -> bytes:
        """The encoding up to the offset, the same for every record of a partition: the hot
        path appends `PROVENANCE_OFFSET.pack(offset)` to it."""
        return _string(alias) + struct.pack(">i", partition)

    @classmethod
    def decode(cls, data: bytes) -> Provenance:
        reader = _Reader(data)
        return cls(reader.string(), reader.take(">i"), reader.take(">q"))


def newest_provenance(headers: Sequence[tuple[str, str | bytes | None]]) -> Provenance | None:
    """This hop's provenance: a record mirrored again carries one header per hop, oldest first."""
    for key, value in reversed(headers):
        if key == PROVENANCE_HEADER and isinstance(value, bytes):
            try:
                return Provenance.decode(value)
            except (struct.error, ValueError):
                return None  # not ours: the target cannot show where the record came from
    return None


def provenance_aliases(headers: Sequence[tuple[str, str | bytes | None]]) -> list[str]:
    """Every cluster a record has been mirrored from, oldest hop first. A header of our name
    that is not ours (an application's, malformed) names none: the record is mirrored."""
    aliases = []
    for name, value in headers:
        if name != PROVENANCE_HEADER or not isinstance(value, bytes):
            continue
        try:
            aliases.append(Provenance.decode(value).alias)
        except (struct.error, ValueError):  # UnicodeDecodeError is a ValueError
            continue
    return aliases
