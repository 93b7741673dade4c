"""What a consumer group failed over to the target would read: the checkpoints on the target,
and, by the provenance headers, what it reads again and what it skips from its translated
offset."""

from __future__ import annotations

from dataclasses import dataclass

from kafka_mirror.kafka.formats import Checkpoint, checkpoints_topic, newest_provenance
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import admin_for
from tests.helpers.worker import read_partition


def newest_checkpoints(
    target: LocalKafka, remote: str, source_alias: str = "A"
) -> dict[tuple[str, int], Checkpoint]:
    """The newest checkpoint of each (group, partition) of `remote`, read straight from the
    target's checkpoints topic."""
    newest: dict[tuple[str, int], Checkpoint] = {}
    topic = checkpoints_topic(source_alias)
    listed = admin_for(target.bootstrap_servers).list_topics(topic, timeout=10).topics.get(topic)
    if listed is None or listed.error is not None:
        return newest  # none written yet: a worker creates the topic when it starts
    for record in read_partition(target, topic, 0, 0):
        assert record.key is not None and record.value is not None
        checkpoint = Checkpoint.decode(record.key, record.value)
        if checkpoint.topic == remote:
            newest[(checkpoint.group, checkpoint.partition)] = checkpoint
    return newest


def source_offsets(target: LocalKafka, remote: str, partition: int, alias: str = "A") -> list[int]:
    """The source offset of each record of a remote partition, in order, by its header."""
    copies = read_partition(target, remote, partition, 0)
    assert [r.offset for r in copies] == list(range(len(copies)))
    origins = []
    for record in copies:
        provenance = newest_provenance(list(record.headers))
        assert provenance is not None and provenance.alias == alias, record.headers
        origins.append(provenance.offset)
    return origins


@dataclass(frozen=True)
class Resumed:
    """A partition of a group resumed on the target at `start`, having stopped at `position`
    on the source."""

    reread: int  # records before the group's position read again
    resent: int  # of those, copies re-sent by the mirror (another copy lies before `start`)
    skipped: int  # records at or past the position (up to the source's end) never read


def resumed(origins: list[int], position: int, start: int, source_end: int) -> Resumed:
    """`origins`: `source_offsets` of the remote partition."""
    before, after = set(origins[:start]), origins[start:]
    present = set(after)
    reread = [offset for offset in after if offset < position]
    return Resumed(
        reread=len(reread),
        resent=sum(1 for offset in reread if offset in before),
        skipped=sum(1 for o in range(position, source_end) if o not in present),
    )
