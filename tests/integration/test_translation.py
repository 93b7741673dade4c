"""Exact checkpoint translation end to end: the real worker (a process) mirrors 200,000 records
while consumer groups stand still on A; Kafka's own MirrorMaker 2 client reads their checkpoints
on B, and a consumer failed over there re-reads nothing it had committed and skips nothing.

The figures go to docs/translation.md: `.venv/bin/pytest tests/integration/test_translation.py`.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from kafka_mirror.kafka.formats import Checkpoint, OffsetSync, offset_syncs_topic
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.failover import Resumed, newest_checkpoints, resumed, source_offsets
from tests.helpers.kafka import create_topics, end_offsets, produce, records, unique
from tests.helpers.mirror_client import translate_groups
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import (
    commit_group,
    group_offsets,
    read_partition,
    wait_for,
    wait_until_mirrored,
    worker_config,
    worker_group,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 4
RECORDS = 200_000
PER_PARTITION = RECORDS // PARTITIONS
MIDDLE = PER_PARTITION // 2
STEADY_CHUNKS, STEADY_CHUNK = 20, 2_000  # records added during steady mirroring, 5 s or so


@dataclass(frozen=True)
class Stop:
    """A consumer group stopped on A: when, and where in each partition."""

    phase: str
    name: str
    group: str
    positions: dict[int, int]


@dataclass(frozen=True)
class Failover:
    """One partition of a group resumed on B at its translated offset."""

    stop: Stop
    partition: int
    checkpoint: int
    read: Resumed
    # The same with MirrorMaker 2's rule from the nearest sync published (its best case: its
    # store keeps fewer); None: no sync at or before the position, so no checkpoint at all.
    mm2_reread: int | None


def test_a_failed_over_group_rereads_nothing_it_had_committed(
    stack: MirrorStack,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = unique("ledger")
    remote = f"{topic}.A"
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=PARTITIONS)
    produce(stack.kafka_a.bootstrap_servers, topic, records(RECORDS, partitions=PARTITIONS))
    stops: list[Stop] = []

    def stop(phase: str, name: str, positions: dict[int, int]) -> None:
        group = unique(f"{phase}-{name.replace(' ', '-')}-")
        commit_group(stack.kafka_a, group, topic, positions)
        stops.append(Stop(phase, name, group, positions))

    def everywhere(position: int) -> dict[int, int]:
        return dict.fromkeys(range(PARTITIONS), position)

    # Before the mirror starts: at the start, the middle and the end of the partitions.
    stop("before", "start", everywhere(0))
    stop("before", "middle", everywhere(MIDDLE))
    stop("before", "end", everywhere(PER_PARTITION))
    stop("before", "mixed", {0: 0, 1: 12_345, 2: MIDDLE + 1, 3: PER_PARTITION - 1})
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    worker = stack.start_worker(config)

    # While it catches up with the 200,000 records (it commits every second).
    mirrored: list[int] = []

    def under_way() -> bool:
        mirrored[:] = [sum(group_offsets(stack.kafka_a, worker_group(config)).values())]
        return mirrored[0] > 0

    wait_for(under_way, 60, "the worker to commit its first records", every=0.05)
    stop("catch-up", "middle", {p: MIDDLE + 1_000 * p for p in range(PARTITIONS)})
    stop("catch-up", "end", everywhere(PER_PARTITION))
    wait_until_mirrored(stack.kafka_a, config, topic)

    # While it mirrors a steady flow: near the live end, and some way behind it.
    flow = threading.Thread(target=produce_steadily, args=(stack.kafka_a, topic), daemon=True)
    flow.start()
    wait_for(
        lambda: sum(end_offsets(stack.kafka_a.bootstrap_servers, topic).values()) > RECORDS + 8_000,
        60,
        "the steady flow to be under way",
    )
    ends = end_offsets(stack.kafka_a.bootstrap_servers, topic)
    stop("steady", "end", ends)
    stop("steady", "near end", {p: end - 37 for p, end in ends.items()})
    stop("steady", "behind", {p: end - 20_000 for p, end in ends.items()})
    flow.join(timeout=120)
    wait_until_mirrored(stack.kafka_a, config, topic)

    translations = "kafka_mirror_checkpoint_translations_total"
    try:
        wait_for(lambda: worker.metric(translations, how="exact") > 0, 30, "exact translations")
        exact = True
    except AssertionError:
        exact = False
    if not exact:
        pytest.fail(
            f"the worker translated nothing from the target ({translations}: exact 0, sync "
            f"{worker.metric(translations, how='sync'):.0f}): worker/mirror.py does not give "
            "the Checkpointer its target_reader (a ProvenanceReader) yet, so checkpoints use "
            "MirrorMaker 2's rule alone (and groups older than the first sync get none)"
        )
    # The checkpoints as MirrorMaker 2's client read them: the same before and after it read
    # them (a late improvement of a translation made before the mirror had reached a position
    # may land in between on a busy machine; then read again).
    agreed: list[Any] = [None, None]

    def read_alike() -> bool:
        agreed[0] = settled_checkpoints(stack.kafka_b, remote, stops)
        agreed[1] = translate_groups(stack.kafka_b, [s.group for s in stops])
        newest = newest_checkpoints(stack.kafka_b, remote)
        return {key: newest[key].downstream_offset for key in agreed[0]} == agreed[0]

    wait_for(read_alike, 300, "the checkpoints unchanged while MirrorMaker 2's client read them")
    checkpoints, translated = agreed
    for s in stops:
        for p in s.positions:
            # MirrorMaker 2's client reads exactly what we wrote.
            assert translated[s.group].get((remote, p)) == checkpoints[(s.group, p)], (s, p)

    failovers = fail_over(stack.kafka_a, stack.kafka_b, topic, stops, translated)
    with capsys.disabled():
        print(f"\n(the catch-up groups stopped with {mirrored[0]:,} of {RECORDS:,} mirrored)")
        print(table(failovers))
    skips = [f for f in failovers if f.read.skipped]
    assert not skips, f"a failover would skip records: {skips}"
    # At-least-once re-sends (a replaced producer, a restart) put second copies on B, which a
    # consumer reads again; translation itself must add none.
    rereads = [f for f in failovers if f.read.reread > f.read.resent]
    assert not rereads, f"failovers re-read records B holds once: {rereads}"


def produce_steadily(cluster: LocalKafka, topic: str) -> None:
    for _ in range(STEADY_CHUNKS):
        produce(cluster.bootstrap_servers, topic, records(STEADY_CHUNK, partitions=PARTITIONS))
        time.sleep(0.2)


def settled_checkpoints(
    kafka_b: LocalKafka, remote: str, stops: list[Stop]
) -> dict[tuple[str, int], int]:
    """Every group's newest checkpoints once they name its positions and stop changing (the
    worker checkpoints every second; a translation made before the mirror had reached a
    position improves once it has)."""
    snapshots: list[dict[tuple[str, int], Checkpoint]] = [{}]
    missing: list[tuple[str, int, int | None]] = []  # group, partition, checkpointed position

    def settled() -> bool:
        newest = newest_checkpoints(kafka_b, remote)
        missing[:] = [
            (f"{s.phase}/{s.name}", p, c.upstream_offset if c else None)
            for s in stops
            for p, position in s.positions.items()
            if (c := newest.get((s.group, p))) is None or c.upstream_offset != position
        ]
        steady, snapshots[0] = newest == snapshots[0], newest
        return not missing and steady

    try:
        wait_for(settled, 90, "the checkpoints to reach every position and settle", every=2.5)
    except AssertionError as error:
        raise AssertionError(f"{error}; not there (group, partition, at): {missing}") from None
    return {key: c.downstream_offset for key, c in snapshots[0].items()}


def fail_over(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    topic: str,
    stops: list[Stop],
    translated: dict[str, dict[tuple[str, int], int]],
) -> list[Failover]:
    """What each group would read on B from its translated offset, by the provenance headers."""
    remote = f"{topic}.A"
    source_ends = end_offsets(kafka_a.bootstrap_servers, topic)
    origins = {p: source_offsets(kafka_b, remote, p) for p in range(PARTITIONS)}
    syncs = published_syncs(kafka_a, topic)
    failovers = []
    for s in stops:
        for p, position in s.positions.items():
            start = translated[s.group][(remote, p)]
            failovers.append(
                Failover(
                    s,
                    p,
                    start,
                    resumed(origins[p], position, start, source_ends[p]),
                    mm2_reread=mm2_reread(syncs[p], origins[p], position),
                )
            )
    return failovers


def mm2_reread(syncs: list[tuple[int, int]], origins: list[int], position: int) -> int | None:
    """Records before `position` a consumer reads again from MirrorMaker 2's translation."""
    older = [sync for sync in syncs if sync[0] <= position]
    if not older:
        return None
    u, d = max(older)
    return sum(1 for offset in origins[d if u == position else d + 1 :] if offset < position)


def published_syncs(kafka_a: LocalKafka, topic: str) -> dict[int, list[tuple[int, int]]]:
    """Every offset sync the worker published for `topic` (on A: the default location)."""
    syncs: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    for record in read_partition(kafka_a, offset_syncs_topic("A", "B", "source"), 0, 0):
        assert record.key is not None and record.value is not None
        sync = OffsetSync.decode(record.key, record.value)
        if sync.topic == topic:
            syncs[sync.partition].append((sync.upstream_offset, sync.downstream_offset))
    return syncs


def table(failovers: list[Failover]) -> str:
    lines = [
        "| stopped | group | partition | position on A | checkpoint on B | re-read "
        "| of which re-sent | skipped | MirrorMaker 2's rule: re-read |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for f in failovers:
        lines.append(
            f"| {f.stop.phase} | {f.stop.name} | {f.partition} "
            f"| {f.stop.positions[f.partition]:,} | {f.checkpoint:,} | {f.read.reread} "
            f"| {f.read.resent} | {f.read.skipped} "
            f"| {'no checkpoint' if f.mm2_reread is None else f.mm2_reread} |"
        )
    return "\n".join(lines)
