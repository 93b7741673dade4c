"""The fault matrix's consumer-group events, while records stream in at 10,000 records/s: a
group reset (rewound) on the source with Kafka's own tool. Its checkpoint on the target follows
it back, as MirrorMaker 2 propagates an upstream rewind, Kafka's own `RemoteClusterUtils`
translates it, and a consumer failed over there skips nothing and re-reads only re-sent copies.
Each case ends with the independent content check and our audit (`tests/helpers/matrix.py`)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from kafka_mirror_dev.builds import kafka_libs
from kafka_mirror_dev.kafka import DEV_JVM, LocalKafka, java_command
from tests.helpers.failover import newest_checkpoints, resumed, source_offsets
from tests.helpers.faults import Outcome
from tests.helpers.kafka import end_offsets, unique
from tests.helpers.matrix import RATE, mirror_topic, traffic
from tests.helpers.mirror_client import translate_groups
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import group_offsets, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SHIFT = 5_000  # records a partition the group is rewound by


def consume_and_commit(source: LocalKafka, group: str, topic: str, partitions: int) -> None:
    """An application reading `topic` until it is past SHIFT records in each partition (as
    fast as the traffic writes them, however busy the machine), committing, then leaving."""
    consumer = Consumer(
        {
            "bootstrap.servers": source.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    read: dict[int, int] = {}

    def past_the_shift() -> bool:
        for message in consumer.consume(num_messages=1000, timeout=0.2):
            if message.error() is None:
                read[message.partition()] = message.offset() + 1
        return len(read) == partitions and min(read.values()) > SHIFT

    wait_for(
        past_the_shift,
        120,
        lambda: f"{group} to read past offset {SHIFT:,} of each partition (read to {read})",
        every=0,
    )
    consumer.commit(asynchronous=False)
    consumer.close()


def reset_by(source: LocalKafka, group: str, topic: str, shift: int) -> None:
    """Kafka's own kafka-consumer-groups tool, as an operator rewinds a stopped group."""
    subprocess.run(
        java_command(
            kafka_libs(),
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            source.bootstrap_servers,
            "--group",
            group,
            "--topic",
            topic,
            "--reset-offsets",
            "--shift-by",
            str(shift),
            "--execute",
            heap="256m",
            jvm=DEV_JVM,
        ),
        check=True,
        capture_output=True,
        text=True,
    )


def positions(source: LocalKafka, group: str, topic: str) -> dict[int, int]:
    return {p: o for (t, p), o in group_offsets(source, group).items() if t == topic}


def checkpointed(
    target: LocalKafka, remote: str, group: str, at: dict[int, int]
) -> Callable[[], bool]:
    """Whether the group's newest checkpoint of every partition names its position `at`."""

    def done() -> bool:
        newest = newest_checkpoints(target, remote)
        return all(
            (c := newest.get((group, p))) is not None and c.upstream_offset == position
            for p, position in at.items()
        )

    return done


def test_a_group_reset_on_the_source_reaches_its_checkpoint(
    stack: MirrorStack,
    outcomes: list[Outcome],
    tmp_path: Path,
) -> None:
    case = mirror_topic(stack.kafka_a, stack.kafka_b, stack.start_worker, "reset", 4)
    topic = case.topic
    remote = f"{topic}.A"
    running = traffic(stack.kafka_a, topic, tmp_path, "traffic", rate=RATE, count=RATE * 25)
    app = unique("app-")
    consume_and_commit(stack.kafka_a, app, topic, partitions=4)
    consumed = positions(stack.kafka_a, app, topic)
    assert len(consumed) == 4 and min(consumed.values()) > SHIFT, consumed
    wait_for(checkpointed(stack.kafka_b, remote, app, consumed), 60, "the group's checkpoints")

    started = time.monotonic()
    reset_by(stack.kafka_a, app, topic, -SHIFT)
    rewound = positions(stack.kafka_a, app, topic)
    assert rewound == {p: o - SHIFT for p, o in consumed.items()}, rewound
    wait_for(
        checkpointed(stack.kafka_b, remote, app, rewound), 60, "the checkpoints to follow back"
    )
    followed = time.monotonic() - started
    fault = f"a group rewound by {SHIFT:,} records a partition on A, 10,000 records/s"
    case.finish(outcomes, fault, stack.spark, started, running, recovery=followed)
    # Kafka's own client translates the rewound checkpoint; failed over from there, the group
    # reads every record from its position on and again only copies the mirror re-sent.
    translated = translate_groups(stack.kafka_b, [app])[app]
    newest = newest_checkpoints(stack.kafka_b, remote)
    source_ends = end_offsets(stack.kafka_a.bootstrap_servers, topic)
    for p, position in rewound.items():
        start = translated[(remote, p)]
        assert start == newest[(app, p)].downstream_offset, (p, start)
        read = resumed(source_offsets(stack.kafka_b, remote, p), position, start, source_ends[p])
        assert read.skipped == 0 and read.reread <= read.resent, (p, position, start, read)
