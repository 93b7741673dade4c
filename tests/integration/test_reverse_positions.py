"""Where the copies end and where a group resumes on the original cluster, read from real
Kafka with transactions (issue 64.2): exactly once, each transaction of copies ends in a commit
marker, which takes an offset and is no record, and an aborted transaction leaves records no
read_committed reader gets. The last copy is the last record a reader gets, however many
markers and aborted records follow it."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from kafka_mirror.kafka.formats import PROVENANCE_HEADER, Provenance
from kafka_mirror.kafka.reverse import copied_ends, original_positions
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import create_topics, end_offsets, unique

pytestmark = pytest.mark.kafka


class Copies:
    """Writes copies of records of cluster A's partitions, as the worker does, in
    transactions."""

    def __init__(self, cluster: LocalKafka, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": unique("tx-")}
        )
        self.producer.init_transactions(30)

    def write(self, partition: int, originals: range, outcome: str = "commit") -> None:
        self.producer.begin_transaction()
        for offset in originals:
            header = Provenance("A", partition, offset).encode()
            self.producer.produce(
                self.topic, b"copy", partition=partition, headers=[(PROVENANCE_HEADER, header)]
            )
        assert self.producer.flush(30) == 0  # on the broker: an abort purges what is not
        if outcome == "commit":
            self.producer.commit_transaction(30)
        elif outcome == "abort":
            self.producer.abort_transaction(30)


def test_the_last_copy_is_found_past_commit_markers_aborted_records_and_an_open_transaction(
    kafka_b: LocalKafka,
) -> None:
    topic, aborted = unique("t-"), unique("aborted-")
    create_topics(kafka_b.bootstrap_servers, [topic], partitions=4)
    create_topics(kafka_b.bootstrap_servers, [aborted], partitions=1)
    copies = Copies(kafka_b, topic)
    for first in (0, 10, 20):  # 0: three transactions, each ending in its marker
        copies.write(0, range(first, first + 10))
    copies.write(1, range(10))  # 1: copies, then an aborted transaction of copies
    copies.write(1, range(10, 60), "abort")
    copies.write(3, range(20))  # 3: copies, then a transaction still open
    plain = Producer({"bootstrap.servers": kafka_b.bootstrap_servers})  # 2: at least once
    for offset in range(10):
        header = Provenance("A", 2, offset).encode()
        plain.produce(topic, b"copy", partition=2, headers=[(PROVENANCE_HEADER, header)])
    assert plain.flush(30) == 0
    only_aborted = Copies(kafka_b, aborted)
    only_aborted.write(0, range(5), "abort")
    open_transaction = Copies(kafka_b, topic)
    # Longer than the first span read back from the end (a worker killed mid-transaction):
    # a read_committed fetch at or past the last stable offset ends the partition at once.
    open_transaction.write(3, range(20, 60), "open")
    try:
        ends = end_offsets(kafka_b.bootstrap_servers, topic)
        # The markers take offsets: 3 after partition 0's 30 copies, 1 after the aborted 50.
        assert (ends[0], ends[1], ends[2], ends[3]) == (33, 62, 10, 61), ends
        settings = {"bootstrap.servers": kafka_b.bootstrap_servers}

        assert copied_ends(settings, topic, "A") == 30 + 10 + 10 + 20
        assert copied_ends(settings, aborted, "A") is None  # no record a reader gets
        assert copied_ends(settings, topic, "C") is None  # no copies from C

        def resumes(partition: int, at: int) -> int | None:
            found = original_positions(settings, {(topic, partition): at}, "A", {topic: "t"})
            return found.get(("t", partition))

        # Partition 0: copies at 0-9, 11-20, 22-31, markers at 10, 21, 32.
        assert [resumes(0, at) for at in (0, 5, 10, 11, 21, 31)] == [0, 5, 10, 10, 20, 29]
        assert resumes(0, 32) == resumes(0, 33) == 30  # at the last marker, past it: the end
        # Partition 1: copies at 0-9, marker 10, aborted 11-60, abort marker 61.
        assert [resumes(1, at) for at in (9, 10, 35, 61, 62)] == [9, 10, 10, 10, 10]
        assert [resumes(2, at) for at in (0, 9, 10)] == [0, 9, 10]
        # Partition 3: copies at 0-19, marker 20; the open transaction's 21-60 are not read (a
        # read_uncommitted group inside it read to the end of what is committed).
        assert [resumes(3, at) for at in (19, 20, 21, 40, 61)] == [19, 20, 20, 20, 20]
    finally:
        open_transaction.producer.abort_transaction(30)
