"""The assignment callback's part (`worker/resume_points.py`): every partition assigned at once,
and each commit with a leader epoch sought to with it, so that librdkafka checks the epoch
against the log (it does not for a commit it fetched itself, librdkafka#5158)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kafka_mirror.worker.resume_points import assign_at_resume_points


class AssigningConsumer:
    def __init__(self, seek_fails: bool = False) -> None:
        self.assigned: list[TopicPartition] = []
        self.sought: list[TopicPartition] = []
        self.resumed: list[TopicPartition] = []
        self.seek_fails = seek_fails

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += partitions

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.resumed += partitions

    def seek(self, partition: TopicPartition) -> None:
        if self.seek_fails:
            raise KafkaException(KafkaError(KafkaError._STATE))
        self.sought.append(partition)


def test_commits_with_an_epoch_are_sought_to_with_it_and_the_rest_only_assigned() -> None:
    consumer = AssigningConsumer()
    committed = [
        TopicPartition("t", 0, 2000, leader_epoch=3),
        TopicPartition("t", 1, 500),  # committed by a version that wrote no epoch
        TopicPartition("other", 0, -1001),  # no commit: not mirrored here, so no resume point
    ]
    assign_at_resume_points(consumer, committed, {}, "A", {"t": "t.A"}, {})  # type: ignore[arg-type]
    assert [(tp.topic, tp.partition, tp.offset) for tp in consumer.assigned] == [
        ("t", 0, 2000),
        ("t", 1, 500),
        ("other", 0, -1001),
    ]
    assert [(tp.partition, tp.offset, tp.leader_epoch) for tp in consumer.sought] == [(0, 2000, 3)]
    assert [(tp.topic, tp.partition) for tp in consumer.resumed] == [
        ("t", 0),
        ("t", 1),
        ("other", 0),
    ]


def test_a_seek_refused_leaves_the_partition_assigned_unchecked() -> None:
    consumer = AssigningConsumer(seek_fails=True)
    committed = [TopicPartition("t", 0, 2000, leader_epoch=3)]
    assign_at_resume_points(consumer, committed, {}, "A", {"t": "t.A"}, {})  # type: ignore[arg-type]
    assert [(tp.partition, tp.offset) for tp in consumer.assigned] == [(0, 2000)]
