"""Mirrors from one source alias to one target share its checkpoints topic; an operation hands
over only the groups its own mirror checkpointed. Against a real Kafka: checkpoints of the same
group and partition written by two mirrors (their `kmirror.mirror` header); each mirror reads
only its own, and those an older version wrote without the header (one upgraded reads what its
workers wrote before the upgrade)."""

from __future__ import annotations

import pytest

from kafka_mirror.kafka.formats import WRITER_HEADER, Checkpoint
from kafka_mirror.kafka.groups import read_checkpoints
from tests.helpers.kafka import Record, create_topics, produce, unique
from tests.helpers.stack import MirrorStack

pytestmark = pytest.mark.kafka


def test_a_mirror_reads_only_the_checkpoints_it_wrote(stack: MirrorStack) -> None:
    bootstrap = stack.kafka_b.bootstrap_servers
    topic = unique("checkpoints")
    create_topics(bootstrap, [topic])

    def written(mirror: str | None, downstream: int) -> Record:
        checkpoint = Checkpoint("g", "t.A", 0, 100, downstream, "")
        headers = () if mirror is None else ((WRITER_HEADER, mirror.encode()),)
        return Record(checkpoint.key(), checkpoint.value(), headers, partition=0)

    # Team B's mirror wrote last: team A's Failover must still commit team A's position.
    produce(bootstrap, topic, [written(None, 7), written("team-a/m", 90), written("team-b/m", 5)])
    settings = {"bootstrap.servers": bootstrap}
    ours = read_checkpoints(settings, topic, "team-a/m")
    assert {k: c.downstream_offset for k, c in ours.items()} == {("g", "t.A", 0): 90}
    before_the_header = read_checkpoints(settings, topic, "team-c/m")
    assert {k: c.downstream_offset for k, c in before_the_header.items()} == {("g", "t.A", 0): 7}
