"""The dev tools find a group per `__consumer_offsets` partition as Kafka places groups; the
hashes below are Java 17's `String.hashCode` of the same strings."""

from __future__ import annotations

from kafka_mirror_dev.coordinators import (
    GROUP_PARTITIONS,
    _java_hash,
    coordinator_partition,
    probe_groups,
)


def test_groups_are_placed_as_kafka_places_them() -> None:
    assert _java_hash("dev-stack-probe-0") == 1294723926
    assert _java_hash("kafka-mirror.test.m-d1ba4b9f") == 1782833243
    assert _java_hash("polygenelubricants") == -(2**31)  # Kafka's abs() takes it to 0
    assert coordinator_partition("dev-stack-probe-0") == 6
    assert coordinator_partition("kafka-mirror.test.m-d1ba4b9f") == 3
    assert coordinator_partition("polygenelubricants") == 0


def test_one_probe_group_per_partition() -> None:
    groups = probe_groups()
    assert [coordinator_partition(g) for g in groups] == list(range(GROUP_PARTITIONS))
