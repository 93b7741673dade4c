"""An independent check of what a mirror wrote: every record of the source topics (cluster A)
against every record of their remote topics (cluster B), read straight from Kafka with
confluent_kafka. Nothing of ours takes part (not the audit, not the worker's code), only the
name of the provenance header the mirror adds.

Records are compared per partition (a remote partition is the copy of the source partition of
the same number) by content: key, value, headers (less the provenance header the mirror
appended) and timestamp, each record reduced to a 16-byte BLAKE2b digest of them. A
partition's source digests are counted as a multiset (equal records count once each), then its
target records are matched against them one by one:

- a target record whose content the source partition has, while copies are left: a copy;
- one whose content the source has, but every copy is already matched: a duplicate;
- one whose content the source does not have: unexpected;
- the source copies left unmatched at the end: missing (their offsets found by a second read,
  done only when something is missing).

Memory is one partition's source digests at a time (about 100 bytes a record), besides the
consumers' fetch buffers. The traffic generator (`tests/helpers/traffic.py`) makes every record
unique (the key holds the run and the record's number), so with its records every multiset is a
set; the check does not rely on that. Run it once the mirror has caught up and the producers
have stopped: a record read on one side and not yet on the other counts as a fault.

A topic mirrored both ways under identity naming holds its own records and the other side's
copies: `local_only` compares only the source's own records (no provenance header) with the
target's copies (with one), the target's own records left aside. A record mirrored back into
the topic it came from then shows as unexpected on the way back.
"""

from __future__ import annotations

import marshal
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kafka_mirror.kafka.formats import PROVENANCE_HEADER

Header = tuple[str, str | bytes | None]
Headers = list[Header]  # spelled once: a type expression in `_headers` was built per record
# What a partition's former leader, one not elected yet, or a new one whose high watermark has
# not caught up answers.
LEADER_MOVED = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
}


@dataclass(frozen=True)
class Place:
    """Where a record is: topic, partition, offset."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass
class ContentReport:
    """What the check found, with the first few places of each kind of fault."""

    source_records: int = 0
    target_records: int = 0
    missing: int = 0  # source records with no identical copy on the target
    duplicates: int = 0  # target copies of a source record beyond the first
    unexpected: int = 0  # target records identical to no source record
    first_missing: list[Place] = field(default_factory=list)  # on the source
    first_duplicates: list[Place] = field(default_factory=list)  # on the target
    first_unexpected: list[Place] = field(default_factory=list)  # on the target
    seconds: float = 0.0

    @property
    def lossless(self) -> bool:
        """Every source record has a copy and the target holds nothing else (duplicates are
        allowed: the mirror delivers at least once)."""
        return self.missing == 0 and self.unexpected == 0

    def __str__(self) -> str:
        def first(places: list[Place]) -> str:
            return f" (first: {', '.join(map(str, places))})" if places else ""

        return (
            f"source {self.source_records:,} records, target {self.target_records:,}: "
            f"missing {self.missing:,}{first(self.first_missing)}, "
            f"duplicates {self.duplicates:,}{first(self.first_duplicates)}, "
            f"unexpected {self.unexpected:,}{first(self.first_unexpected)}; "
            f"checked in {self.seconds:.1f} s"
        )


def check_content(
    source: str,
    target: str,
    remote_topics: Mapping[str, str],
    examples: int = 5,
    local_only: bool = False,
) -> ContentReport:
    """Compare each source topic on `source` (bootstrap servers) with its remote topic on
    `target` (`remote_topics`: source topic → remote topic), every partition from its log start
    to its end offset when it is read (`local_only`: see above). Run it once the mirror has
    caught up."""
    report = ContentReport()
    for topic, remote in sorted(remote_topics.items()):
        _check_copies(source, target, topic, {remote: report}, examples, local_only)
    return report


def check_copies(
    source: str, target: str, topic: str, remotes: Sequence[str], examples: int = 5
) -> dict[str, ContentReport]:
    """`check_content` of one source topic against several copies of it on `target` (mirrors
    of it under different aliases), each judged on its own, the source read once."""
    reports = {remote: ContentReport() for remote in remotes}
    _check_copies(source, target, topic, reports, examples, local_only=False)
    return reports


def _check_copies(
    source: str,
    target: str,
    topic: str,
    reports: Mapping[str, ContentReport],
    examples: int,
    local_only: bool,
) -> None:
    """Add to each remote topic's report what its partitions hold against `topic`'s."""
    started = time.monotonic()
    source_reader, target_reader = reader_for(source), reader_for(target)
    try:
        partitions = _partitions(source_reader, topic)
        for remote in reports:
            partitions |= _partitions(target_reader, remote)
        for partition in sorted(partitions):
            source_counts = _source_counts(source_reader, topic, partition, local_only)
            for remote, report in reports.items():
                counts = dict(source_counts)
                report.source_records += sum(counts.values())
                _match_target(
                    report, target_reader, remote, partition, counts, examples, local_only
                )
                missing = sum(counts.values())
                if missing:
                    report.missing += missing
                    room = examples - len(report.first_missing)
                    report.first_missing += _missing_places(
                        source_reader, topic, partition, counts, room, local_only
                    )
    finally:
        source_reader.close()
        target_reader.close()
    for report in reports.values():
        report.seconds += time.monotonic() - started


def open_transactions(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """The partitions of `topic` where a transaction is still open, each with its last stable
    offset and its end: a `read_committed` reader (this check's) sees only up to the former,
    and a writer killed mid-transaction holds it until the transaction times out."""
    committed = reader_for(bootstrap)
    everything = reader_for(bootstrap, "read_uncommitted")
    try:
        found = {}
        for partition in sorted(_partitions(committed, topic)):
            point = TopicPartition(topic, partition)
            stable = watermarks(committed, point)[1]
            end = watermarks(everything, point)[1]
            if stable < end:
                found[partition] = (stable, end)
        return found
    finally:
        committed.close()
        everything.close()


def _source_counts(
    reader: Consumer, topic: str, partition: int, local_only: bool
) -> dict[bytes, int]:
    counts: dict[bytes, int] = {}
    for message in _read(reader, topic, partition, _own if local_only else None):
        digest = content_digest(message.key(), message.value(), _headers(message), _time(message))
        counts[digest] = counts.get(digest, 0) + 1
    return counts


def _match_target(
    report: ContentReport,
    reader: Consumer,
    remote: str,
    partition: int,
    counts: dict[bytes, int],
    examples: int,
    local_only: bool,
) -> None:
    """Match the remote partition's records against `counts`, taking matched copies off."""
    for message in _read(reader, remote, partition, _copy if local_only else None):
        report.target_records += 1
        headers = without_provenance(_headers(message))
        digest = content_digest(message.key(), message.value(), headers, _time(message))
        left = counts.get(digest)
        if left:
            counts[digest] = left - 1
            continue
        if left is None:
            report.unexpected += 1
            places = report.first_unexpected
        else:  # every copy of it is matched already
            report.duplicates += 1
            places = report.first_duplicates
        if len(places) < examples:
            places.append(Place(remote, partition, message.offset() or 0))


def _missing_places(
    reader: Consumer,
    topic: str,
    partition: int,
    counts: dict[bytes, int],
    wanted: int,
    local_only: bool,
) -> list[Place]:
    """The first `wanted` source records whose content was left unmatched (of equal records,
    the first ones are named)."""
    left = {digest: count for digest, count in counts.items() if count}
    places: list[Place] = []
    if wanted <= 0:
        return places
    for message in _read(reader, topic, partition, _own if local_only else None):
        digest = content_digest(message.key(), message.value(), _headers(message), _time(message))
        if left.get(digest):
            left[digest] -= 1
            places.append(Place(topic, partition, message.offset() or 0))
            if len(places) == wanted:
                break
    return places


def content_digest(
    key: str | bytes | None,
    value: str | bytes | None,
    headers: Sequence[Header],
    timestamp: int,
) -> bytes:
    """A record's content as 16 bytes: the digest of its fields as marshal's version 2 writes
    them, each with its type and length, so no two different records (a value moved into the
    key, a header split in two, None for b"") hash the same input; unlike later versions, it
    writes no references between equal objects, so equal records always serialize alike. In C,
    it takes under half the CPU time of hashing field by field in Python (2 µs against 5)."""
    fields = (key, value, tuple(headers), timestamp)
    return blake2b(marshal.dumps(fields, 2), digest_size=16).digest()


def without_provenance(headers: list[Header]) -> list[Header]:
    """The headers less the last provenance header: the one the mirror appended (a record
    mirrored before keeps the provenance headers of its earlier hops)."""
    for index in range(len(headers) - 1, -1, -1):
        if headers[index][0] == PROVENANCE_HEADER:
            return headers[:index] + headers[index + 1 :]
    return headers


def _own(message: Message) -> bool:
    """Written to its topic by an application, not mirrored into it."""
    return all(name != PROVENANCE_HEADER for name, _ in _headers(message))


def _copy(message: Message) -> bool:
    return not _own(message)


def _headers(message: Message) -> list[Header]:
    # A consumed message's headers are a list (a dict only when given to produce()).
    return cast(Headers, message.headers() or [])


def _time(message: Message) -> int:
    return message.timestamp()[1]


def reader_for(bootstrap: str, isolation: str = "read_committed") -> Consumer:
    """The check's reader of a cluster: assigned partitions only, never a group member."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"content-check-{uuid.uuid4().hex[:8]}",  # never joined: assign only
            "enable.auto.commit": False,
            # What applications read (librdkafka's default, said here because exactly-once
            # copies are judged by it): never a copy of an aborted transaction, and the end of
            # a partition is its last stable offset.
            "isolation.level": isolation,
            # Ends a partition whose last offsets are no records (transaction markers).
            "enable.partition.eof": True,
        }
    )


def _partitions(reader: Consumer, topic: str) -> set[int]:
    """The topic's partitions (none if it does not exist)."""
    found = reader.list_topics(topic, timeout=10).topics.get(topic)
    return set(found.partitions) if found is not None and found.error is None else set()


def watermarks(reader: Consumer, point: TopicPartition, timeout: float = 60) -> tuple[int, int]:
    """The partition's log start and end, asked of its leader. A leader that just moved (a
    broker restarted, its preferred leadership handed back) answers NOT_LEADER_FOR_PARTITION
    until the reader's metadata is refreshed: refreshed, and asked again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return cast(
                tuple[int, int], reader.get_watermark_offsets(point, timeout=10, cached=False)
            )
        except KafkaException as failed:
            if failed.args[0].code() not in LEADER_MOVED or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            reader.list_topics(point.topic, timeout=10)  # its leaders as the cluster has them now


def _read(
    reader: Consumer,
    topic: str,
    partition: int,
    wanted: Callable[[Message], bool] | None = None,
    timeout: float = 30,
) -> Iterator[Message]:
    """Every record of a partition from its log start to its end offset now, or those of them
    that are `wanted`."""
    low, high = watermarks(reader, TopicPartition(topic, partition))
    reader.assign([TopicPartition(topic, partition, low)])
    position, idle_since = low, time.monotonic()
    try:
        while position < high:
            # A batch returns when it is full or at its timeout: ask for no more than is left.
            batch = reader.consume(num_messages=min(high - position, 10_000), timeout=1)
            if not batch and time.monotonic() - idle_since > timeout:
                raise TimeoutError(f"{topic}[{partition}]: nothing read for {timeout:.0f} s")
            if batch:
                idle_since = time.monotonic()
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:  # the rest are no records
                        return  # (transaction markers, compacted away)
                    raise KafkaException(error)
                position = (message.offset() or 0) + 1
                if position > high:
                    return
                if wanted is None or wanted(message):
                    yield message
    finally:
        reader.unassign()
