"""A refusal of the target that retrying cannot cure stops what it concerns and nothing else: an
authorization error its whole remote topic, a refused record its partition, each from its first
unacknowledged record, with a reason people can act on; the producer is not replaced again and
again, and nothing is committed past a record the target did not take. The fakes are the commit
model's (`tests/helpers/worker_fakes.py`), which keep librdkafka's guarantees and no more; the fatal
errors' messages are librdkafka 2.16's, as observed against Kafka 4.3."""

from __future__ import annotations

import random
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kafka_mirror.worker.at_least_once import AtLeastOnceWorker
from kafka_mirror.worker.exactly_once import ExactlyOnceWorker
from kafka_mirror.worker.flows import Stop, commit_offsets
from kafka_mirror.worker.mirror import MirrorWorker
from kafka_mirror.worker.partitions import REFUSALS_BEFORE_STOP
from kafka_mirror.worker.permanent import PermanentRefusal, permanent_refusal, refusal_in_fatal
from tests.helpers.worker_fakes import (
    PARTITIONS,
    REMOTE,
    TOPIC,
    FakeClients,
    Message,
    Source,
    Target,
    fake_worker,
    loop_once,
    unacknowledged_below_commits,
)

DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED
INVALID = KafkaError.INVALID_RECORD


def fatal(partition: int, code: int) -> str:
    """librdkafka's gapless-guarantee failure for a batch of REMOTE[partition] that the broker
    refused with `code`."""
    return (
        f"ProduceRequest for {REMOTE} [{partition}] with 50 message(s) failed: "
        f"{KafkaError(code).str()} (broker 1 PID{{Id:0,Epoch:0}}, base seq 16750): "
        "unable to satisfy gap-less guarantee"
    )


def mirror(
    records: int, capacity: int = 1000, worker_class: type[MirrorWorker] = AtLeastOnceWorker
) -> tuple[MirrorWorker, FakeClients]:
    """A worker over a source whose partitions hold `records` records each."""
    source = Source(logs=[[True] * records for _ in range(PARTITIONS)])
    clients = FakeClients(source, Target(), random.Random(7), capacity)
    syncs = {"location": "target", "maxLag": 3}
    return fake_worker(clients, worker_class, offsetSyncs=syncs), clients


def batch(partition: int, offsets: range) -> list[Any]:
    """Records as the consumer returns them (fakes, in the place of confluent-kafka's)."""
    return [Message(TOPIC, partition, offset) for offset in offsets]


def mirror_on(worker: MirrorWorker, clients: FakeClients, rounds: int = 60) -> None:
    """Rounds of the loop, the target acknowledging everything, and commits."""
    for _ in range(rounds):
        loop_once(worker)
        clients.producer.deliver(10_000)
        worker._serve_reports(0)
        worker._commit()


def stops(worker: MirrorWorker) -> dict[int, Stop]:
    return {
        p: flow.stop for (_, p), flow in worker.partitions.flows.items() if flow.stop is not None
    }


def replaced(worker: MirrorWorker) -> float:
    return (
        worker.metrics.registry.get_sample_value(
            "kafka_mirror_errors_total", {"kind": "producer replaced"}
        )
        or 0.0
    )


def test_librdkafkas_fatal_error_names_the_refused_partition_and_why() -> None:
    # As confluent-kafka raises it from poll().
    raised = KafkaException(KafkaError(KafkaError._GAPLESS_GUARANTEE, fatal(1, DENIED), fatal=True))
    assert refusal_in_fatal(str(raised)) == PermanentRefusal(REMOTE, 1, DENIED)
    assert refusal_in_fatal(fatal(0, INVALID)) == PermanentRefusal(REMOTE, 0, INVALID)
    # Not known to be permanent, or no refused batch at all: retried as before.
    assert refusal_in_fatal(fatal(2, KafkaError.NOT_ENOUGH_REPLICAS)) is None
    assert refusal_in_fatal("the target acknowledged nothing for 60s although it answers") is None


def test_the_reason_names_the_topic_the_error_and_what_to_do() -> None:
    denied = PermanentRefusal(REMOTE, 1, DENIED)
    assert denied.whole_topic and denied.concerns(REMOTE, 2) and not denied.concerns("x.A", 1)
    assert denied.reason() == (
        f"the target refuses every record of {REMOTE} (Broker: Topic authorization failed): "
        f"allow the mirror's principal to Write (and Describe) {REMOTE} on the target to go on"
    )
    invalid = permanent_refusal(INVALID, REMOTE, 0)
    assert invalid is not None and not invalid.whole_topic and not invalid.concerns(REMOTE, 1)
    assert f"{REMOTE}[0]" in invalid.reason() and "cleanup.policy" in invalid.reason()
    assert permanent_refusal(KafkaError._PURGE_QUEUE, REMOTE, 0) is None


def test_write_denied_stops_every_partition_of_the_topic_at_once() -> None:
    """A fatal error naming one partition: all of the topic's partitions stop, each at its first
    unacknowledged record, with the reason in the commit's metadata; the producer is replaced
    once, as the stopped partitions give the new one nothing to fail on."""
    worker, clients = mirror(records=20)
    for p in range(PARTITIONS):
        worker.sender.send(batch(p, range(10)))
    clients.producer.deliver(5)  # the first five records of partition 0
    worker._serve_reports(0)
    clients.producer.failed, clients.producer.fatal = True, fatal(1, DENIED)
    mirror_on(worker, clients, rounds=10)

    assert {p: stop.offset for p, stop in stops(worker).items()} == {0: 5, 1: 0, 2: 0}
    assert replaced(worker) == 1
    assert clients.consumer.paused == set(range(PARTITIONS))
    for offset in commit_offsets(worker.partitions.flows.values()):
        assert offset.metadata == (
            f"stopped at {TOPIC}[{offset.partition}] offset {offset.offset}: the target refuses "
            f"every record of {REMOTE} (Broker: Topic authorization failed): allow the mirror's "
            f"principal to Write (and Describe) {REMOTE} on the target to go on"
        )


def test_the_fatal_error_raised_after_the_callback_named_the_partition_keeps_its_name() -> None:
    """librdkafka hands the refused partition to the error callback once (served by a flush,
    say); produce() and flush() then raise a bare "Fatal error". That must not take the named
    reason's place, or the topic is re-sent through a new producer that fails again."""
    worker, clients = mirror(records=20)
    for p in range(PARTITIONS):
        worker.sender.send(batch(p, range(10)))
    clients.producer.failed = True
    clients.producer.queue.clear()  # lost with the producer
    worker._client_failed("target", fatal(1, DENIED))  # the error callback
    worker.sender.send(batch(0, range(10, 20)))  # produce() raises "Fatal error"
    mirror_on(worker, clients, rounds=10)

    assert set(stops(worker)) == set(range(PARTITIONS)) and replaced(worker) == 1


def test_a_record_the_target_refuses_stops_its_partition_alone() -> None:
    worker, clients = mirror(records=20)
    for p in range(PARTITIONS):
        worker.sender.send(batch(p, range(10)))
    clients.producer.failed, clients.producer.fatal = True, fatal(1, INVALID)
    mirror_on(worker, clients)

    assert list(stops(worker)) == [1] and stops(worker)[1].offset == 0
    assert clients.consumer.source.committed == {0: 20, 1: 0, 2: 20}
    assert replaced(worker) == 1


def test_a_report_of_denied_write_stops_the_whole_topic() -> None:
    worker, clients = mirror(records=10)
    for p in range(PARTITIONS):
        worker.sender.send(batch(p, range(10)))
    clients.producer.fail_held({2}, DENIED)
    worker._serve_reports(0)
    assert set(stops(worker)) == set(range(PARTITIONS)) and replaced(worker) == 0


def test_a_topic_its_metadata_denies_stops_at_the_first_unacknowledged_record() -> None:
    """librdkafka fails the records it held of a topic its metadata denies, unreported ones
    silently, and then refuses new ones in produce(): the partition must stop where the target
    stopped acknowledging, not at the refused record, or the records before it would be lost
    once the topic is allowed again."""
    worker, clients = mirror(records=15)
    worker.sender.send(batch(0, range(5)))
    clients.producer.deliver(5)
    worker._serve_reports(0)
    clients.producer.capacity = 3
    worker.sender.send(batch(0, range(5, 15)))  # 5-7 queued, none reported yet; the rest waits
    assert (
        worker.partitions.flows[(TOPIC, 0)].acknowledged == 5
        and len(worker.partitions.backlog) == 7
    )
    clients.target.denied = True
    clients.producer.fail_held({0}, DENIED)
    loop_once(worker)  # produce() refuses record 8

    assert {p: stop.offset for p, stop in stops(worker).items()} == {0: 5}
    clients.target.denied = False
    for stop in stops(worker).values():
        stop.retry_at = 0
    worker.partitions.resume_due()
    mirror_on(worker, clients)
    assert clients.consumer.source.committed == {0: 15, 1: 15, 2: 15}
    assert not unacknowledged_below_commits(clients.consumer.source, clients.target)


def test_a_held_partition_that_stops_stays_paused_until_its_retry() -> None:
    worker, clients = mirror(records=10)
    worker.sender.send(batch(0, range(10)))
    worker.partitions.publish_figures()  # records wait for an acknowledgement …
    worker.partitions.flows[(TOPIC, 0)].waiting_since = 0.0  # … for long
    worker.partitions.hold_unacknowledged()
    assert worker.partitions.flows[(TOPIC, 0)].held and clients.consumer.paused == {0}
    clients.producer.failed, clients.producer.fatal = True, fatal(0, INVALID)
    loop_once(worker)
    loop_once(worker)
    assert 0 in stops(worker)
    worker._commit()  # no acknowledgement is waited for any more: the hold is over, the stop not
    assert clients.consumer.paused == {0}


def test_records_a_failed_transaction_refuses_stop_no_partition() -> None:
    """Exactly once, once a transaction failed, its producer refuses every record (`_STATE`)
    until it is aborted: no fault of their partitions, whose records wait for after the abort."""
    worker, clients = mirror(records=10)
    clients.producer.refuse_next = KafkaError._STATE
    worker.sender.send(batch(0, range(10)) + batch(2, range(10)))
    assert not stops(worker)
    assert [(m.partition(), m.offset()) for m in worker.partitions.backlog] == [
        *((0, o) for o in range(10)),
        *((2, o) for o in range(10)),
    ]


def test_records_purged_with_an_aborted_transaction_count_no_refusal_of_their_partition() -> None:
    """Exactly once, a record the target refuses fails its transaction, and librdkafka purges
    what it held of the other partitions. Again and again, only the partition refused stops:
    the purged ones are consumed again with no failure counted against them."""
    worker, clients = mirror(records=10, worker_class=ExactlyOnceWorker)
    for attempt in range(REFUSALS_BEFORE_STOP + 2):
        for p in range(PARTITIONS):
            worker.sender.send(batch(p, range(10)))
        clients.producer.fail_held({1}, KafkaError.NOT_ENOUGH_REPLICAS)  # not permanent
        clients.producer.fail_held({0, 2}, KafkaError._PURGE_QUEUE)
        worker._serve_reports(0)  # the reports, then the abort and every partition rewound
        stopped = stops(worker)
        assert 0 not in stopped and 2 not in stopped, (attempt, stopped)
    assert list(stops(worker)) == [1], stops(worker)
