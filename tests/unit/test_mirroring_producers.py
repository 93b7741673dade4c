"""The worker writes through two producers (`worker/clients.MirroringProducers`): each remote
partition always through the same one, so its records stay in order and that producer's reports
vouch for them; and one producer stalling while the other goes on is noticed and cured. The
commit model (`test_commit_model.py`) checks the commit invariant with two producers."""

from __future__ import annotations

import random
from typing import cast

from confluent_kafka import Producer

from kafka_mirror.worker.clients import MirroringProducers
from tests.helpers.worker_fakes import (
    PARTITIONS,
    REMOTE,
    FakeClients,
    FakeProducer,
    Source,
    Target,
    fake_worker,
    loop_once,
    unacknowledged_below_commits,
)


def test_each_partition_goes_through_one_producer_and_a_topic_uses_both() -> None:
    target = Target()
    fakes = [FakeProducer(target, 10), FakeProducer(target, 10)]
    producers = MirroringProducers(cast(list[Producer], fakes))
    members = [producers.index(REMOTE, partition) for partition in range(8)]
    assert members == [producers.index(REMOTE, partition) for partition in range(8)]
    assert set(members) == {0, 1}


def test_one_producer_stalled_while_the_other_goes_on_is_replaced_and_nothing_is_lost() -> None:
    source = Source(logs=[[True] * 40 for _ in range(PARTITIONS)])
    clients = FakeClients(source, Target(), random.Random(3), capacity=1000, producers=2)
    worker = fake_worker(clients, offsetSyncs={"location": "target", "maxLag": 3})
    worker.reachable["target"] = True
    for _ in range(20):
        loop_once(worker)
    stuck = clients.producer.index(REMOTE, 0)
    assert clients.fakes[stuck].queue, "records wait in the producer that stalls"
    going = clients.fakes[1 - stuck]
    # The target acknowledges everything the other producer sends, nothing of this one's.
    for _ in range(3):
        going.deliver(1000)
        loop_once(worker)
        worker._check_deliveries()
        if worker.producer_failure is not None:
            break
        for watch in worker.delivery_watches:
            watch.since -= 61  # a minute passes between two checks
    assert worker.producer_failure is not None
    assert f"to producer {stuck} although it answers" in worker.producer_failure

    for _ in range(40):  # replaced: the records it held go again, and now reach the target
        loop_once(worker)
        for producer in clients.fakes:
            producer.deliver(1000)
        worker._commit()
    assert source.committed == {p: 40 for p in range(PARTITIONS)}
    assert not unacknowledged_below_commits(source, clients.target)


def test_a_flush_waits_for_every_producer_and_counts_what_is_left() -> None:
    clients = FakeClients(Source(), Target(), random.Random(1), capacity=10, producers=2)
    first, second = clients.fakes
    first.queue.append((0, 0, None))
    second.queue += [(1, 0, None), (1, 1, None)]
    assert clients.producer.flush(0) == 3  # no time to wait: nothing acknowledged
    assert clients.producer.flush(1.0) == 0 and not first.queue and not second.queue
