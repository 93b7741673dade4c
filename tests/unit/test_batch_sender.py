"""The send loop's pass over a partition's run of records (`worker/batches.py`): the headers each
record gets and where a run stops, with the commit model's fakes (`tests/helpers/worker_fakes.py`),
whose producer copies the headers it is given, as librdkafka does."""

from __future__ import annotations

import random

from kafka_mirror.kafka.formats import PROVENANCE_HEADER, Provenance
from kafka_mirror.worker.flows import commit_offsets
from kafka_mirror.worker.partitions import SIZE_SLACK
from tests.helpers.worker_fakes import (
    REMOTE,
    TOPIC,
    FakeClients,
    Message,
    Source,
    Target,
    fake_worker,
)


def test_each_record_gets_its_own_headers_then_its_own_provenance() -> None:
    clients = FakeClients(Source(), Target(), random.Random(1), 100)
    worker = fake_worker(clients)
    own = {offset: [("trace", b"t%d" % offset)] for offset in (1, 2, 5)}
    worker.sender.send([Message(TOPIC, 0, o, headers_=own.get(o, [])) for o in range(7)])

    assert sorted(clients.producer.sent) == [(0, offset) for offset in range(7)]
    for (_, offset), headers in clients.producer.sent.items():
        *theirs, (name, provenance) = headers
        assert theirs == own.get(offset, [])
        assert name == PROVENANCE_HEADER and Provenance.decode(provenance).offset == offset


def test_a_record_over_the_remote_topics_limit_stops_its_partition_at_it() -> None:
    clients = FakeClients(Source(), Target(), random.Random(1), 100)
    worker = fake_worker(clients, offsetSyncs={"location": "target", "maxLag": 100})
    worker.topics.max_record_bytes[REMOTE] = SIZE_SLACK + 100
    large = bytes(SIZE_SLACK + 200)
    worker.sender.send([Message(TOPIC, 0, o, value_=large if o == 3 else None) for o in range(6)])

    flow = worker.partitions.flows[(TOPIC, 0)]
    assert sorted(clients.producer.sent) == [(0, 0), (0, 1), (0, 2)]
    assert flow.stop is not None and flow.stop.offset == 3
    assert "max.message.bytes" in flow.stop.reason
    # One past the last record queued, and the records queued after the last one whose report
    # was asked for (the first, a sync point).
    assert flow.next_upstream == 3
    assert [upstream for upstream, *_ in flow.in_flight] == [0]
    assert flow.unreported_records == 2


def test_the_commit_carries_the_leader_epoch_of_a_record_at_or_after_the_last_handled() -> None:
    """Never an older epoch than the last handled record's (an intact log would then look
    truncated): a run fetched before a seek, whose records all lie below the flow, changes
    nothing; a later run's newer epoch is taken."""
    clients = FakeClients(Source(), Target(), random.Random(1), 100)
    worker = fake_worker(clients)
    worker.sender.send([Message(TOPIC, 0, o, leader_epoch_=3) for o in range(5)])
    flow = worker.partitions.flows[(TOPIC, 0)]
    assert flow.leader_epoch == 3
    worker.sender.send([Message(TOPIC, 0, o, leader_epoch_=2) for o in range(3)])  # pre-seek
    assert flow.leader_epoch == 3
    worker.sender.send([Message(TOPIC, 0, o, leader_epoch_=4) for o in range(5, 7)])
    assert flow.leader_epoch == 4
    (committed,) = commit_offsets([flow])
    assert committed.leader_epoch == 4
