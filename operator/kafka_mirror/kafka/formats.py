"""MirrorMaker 2's record formats, byte for byte, and our provenance header.

Kafka's `Struct` serialization: STRING is an INT16 length then UTF-8; integers are big-endian.
Checkpoint and heartbeat values start with an INT16 version (0); offset syncs have none. Topic
names are MirrorMaker 2's, so `MirrorClient` and `RemoteClusterUtils` read what we write.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, cast

HEARTBEATS_TOPIC = "heartbeats"
PROVENANCE_HEADER = "kmirror.src"
# On a checkpoint, the mirror (namespace/name) that wrote it: mirrors from one source alias share
# the target's checkpoints topic, and an operation hands over only its own mirror's groups.
WRITER_HEADER = "kmirror.mirror"
TOPIC_ID_BYTES = 16  # a Kafka topic ID (a UUID), as Kafka writes it: two big-endian INT64
PROVENANCE_FIELDS_BYTES = 12  # after the alias: INT32 partition, INT64 offset

Header = tuple[str, str | bytes | None]

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


Packer = Callable[[bytes, int, bytes], bytes]


def provenance_packer(prefix_length: int, suffix_length: int) -> Packer:
    """The provenance header's encoder, `pack(prefix, offset, suffix)`: one C call per record,
    where the prefix (alias, partition) and the suffix (the topic ID, or nothing) are the same
    for every record of a partition and are encoded once (`Provenance.prefix`, `.suffix`)."""
    return struct.Struct(f">{prefix_length}sq{suffix_length}s").pack


@dataclass(frozen=True)
class Provenance:
    """Where a mirrored record came from: the header our worker adds to every record.

    STRING alias, INT32 partition, INT64 offset, then the source topic's ID (16 bytes): the
    topic's incarnation, new when a topic is deleted and created again. Headers written before
    the ID was added end at the offset and decode with `topic_id` None; a reader of the first
    three fields alone (an older worker, the audit) reads both forms.
    """

    alias: str
    partition: int
    offset: int
    topic_id: bytes | None = None

    def encode(self) -> bytes:
        prefix, suffix = self.prefix(self.alias, self.partition), self.suffix(self.topic_id)
        return provenance_packer(len(prefix), len(suffix))(prefix, self.offset, suffix)

    @staticmethod
    def prefix(alias: str, partition: int) -> bytes:
        """The encoding before the offset."""
        return _string(alias) + struct.pack(">i", partition)

    @staticmethod
    def suffix(topic_id: bytes | None) -> bytes:
        """The encoding after the offset: the topic ID, or nothing where none is known."""
        if topic_id is not None and len(topic_id) != TOPIC_ID_BYTES:
            raise ValueError(f"a topic ID is {TOPIC_ID_BYTES} bytes, not {len(topic_id)}")
        return topic_id or b""

    @classmethod
    def decode(cls, data: bytes) -> Provenance:
        reader = _Reader(data)
        alias, partition, offset = reader.string(), reader.take(">i"), reader.take(">q")
        rest = data[reader.position :]
        if len(rest) not in (0, TOPIC_ID_BYTES):
            raise ValueError(f"{len(rest)} bytes after the offset: not a topic ID")
        return cls(alias, partition, offset, rest or None)


def _decoded(value: str | bytes | None) -> Provenance | None:
    """A provenance header's value decoded; None for one of our name that is not ours (an
    application's, malformed): it names no cluster."""
    if not isinstance(value, bytes):
        return None
    try:
        return Provenance.decode(value)
    except (struct.error, ValueError):  # UnicodeDecodeError is a ValueError
        return None


def newest_provenance(headers: Sequence[Header]) -> Provenance | None:
    """This hop's provenance: a record mirrored again carries one header per hop, oldest first."""
    for key, value in reversed(headers):
        if key == PROVENANCE_HEADER and isinstance(value, bytes):
            return _decoded(value)
    return None


def provenance_from(headers: Any, alias: str, partition: int) -> Provenance | None:
    """A consumed record's provenance when it is this hop's copy of a record of partition
    `partition` on cluster `alias`; None for any other record."""
    if isinstance(headers, dict):  # the client's typing allows it; consumers give lists
        headers = list(headers.items())
    provenance = newest_provenance(headers or [])
    if provenance is None or (provenance.alias, provenance.partition) != (alias, partition):
        return None
    return provenance


def is_copy_from(headers: Sequence[Header], alias: str, topic_id: bytes | None) -> bool:
    """Whether a record is a mirror's copy of a record of the topic with ID `topic_id` on the
    cluster `alias`: one of its provenance headers (one per hop) names both.

    A record an application derived from such a copy, its headers copied (as Kafka Streams
    does), names the cluster too but another topic: it is new data, not a copy. A header
    written before topic IDs were added, or `topic_id` None (a cluster that gives its topics
    none), is matched by the alias alone. A header of our name that does not decode names
    nothing.
    """
    # Compared as bytes rather than decoded (the test runs on every record under identity
    # naming): after the alias, any 12 bytes decode as partition and offset, then the header
    # ends or holds a topic ID.
    for name, value in headers:
        if name == PROVENANCE_HEADER and isinstance(value, bytes):
            named = _alias_field(alias)
            after_offset = len(value) - len(named) - PROVENANCE_FIELDS_BYTES
            if value.startswith(named) and (
                after_offset == 0
                or (
                    after_offset == TOPIC_ID_BYTES
                    and (topic_id is None or value.endswith(topic_id))
                )
            ):
                return True
    return False


@cache
def _alias_field(alias: str) -> bytes:
    return _string(alias)


LOSS_MARK = "lost-to-retention"


@dataclass(frozen=True)
class RetentionLoss:
    """Records of a source partition that left it (retention, DeleteRecords) before the mirror
    copied them: `records` in all, the newest of them offsets [first, end)."""

    records: int
    first: int
    end: int

    def add(self, first: int, end: int) -> RetentionLoss:
        return RetentionLoss(self.records + end - first, first, end)


def commit_note(problem: str, loss: RetentionLoss | None) -> str:
    """The metadata the workers commit beside a partition's offset, where the operator and the
    audit read it: the loss to retention (a first line of its own), then why it does not flow."""
    if loss is None:
        return problem
    return f"{LOSS_MARK} {loss.records} {loss.first}-{loss.end}\n{problem}"


def read_commit_note(metadata: str) -> tuple[str, RetentionLoss | None]:
    """`commit_note` read back: (problem, loss). Metadata written before losses were counted
    is the problem alone."""
    first_line, _, rest = metadata.partition("\n")
    words = first_line.split(" ")
    if len(words) == 3 and words[0] == LOSS_MARK:
        first, _, end = words[2].partition("-")
        try:
            return rest, RetentionLoss(int(words[1]), int(first), int(end))
        except ValueError:
            pass
    return metadata, None


SchemaWaitState = Literal["pending", "unreachable", "refused"]
# A partition's commit note when it stops at a record whose schema is not on the target's
# registry: `stopped at <topic>[<p>] offset <n>: waits for schema id <id> (<state>): <why>`.
# Topic names have no spaces or colons, so the operator reads it back unambiguously.
_SCHEMA_WAIT = re.compile(
    r"stopped at \S+ offset \d+: waits for schema id (\d+) \((pending|unreachable|refused)\)"
)


def schema_wait_reason(schema_id: int, state: SchemaWaitState, why: str) -> str:
    """Why a partition stops at a record waiting for its schema (`read_schema_wait`)."""
    return f"waits for schema id {schema_id} ({state}): {why}"


def read_schema_wait(problem: str) -> tuple[int, SchemaWaitState] | None:
    """The schema id and state a partition's problem says it waits for, if it does."""
    found = _SCHEMA_WAIT.match(problem)
    if found is None:
        return None
    return int(found[1]), cast(SchemaWaitState, found[2])
