"""The worker's commit invariant, against a small model of the source, the producer and the
target (hypothesis stateful testing): under any interleaving of consumed batches, produce
refusals, a full queue, in-order delivery reports, refused records, a failed producer (with or
without a permanent refusal named in its fatal error), a topic the target denies, revocation,
lost partitions, a producer renewed for another linger, restarts and shutdown, no committed
offset ever passes a source record that the target has not acknowledged (transaction markers,
holding no record, aside), and nothing a worker queued for a partition it gave up reaches the
target after the partition's next run began (one run of a partition at a time).

The fakes (`tests/helpers/worker_fakes.py`) keep librdkafka's guarantees and no more.
"""

from __future__ import annotations

import random

from confluent_kafka import KafkaError, TopicPartition
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.helpers.worker_fakes import (
    DENIED,
    PARTITIONS,
    REMOTE,
    TOPIC,
    FakeClients,
    Source,
    Target,
    fake_worker,
    loop_once,
    unacknowledged_below_commits,
)


class CommitModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.source, self.target = Source(), Target()

    @initialize(seed=st.integers(0, 2**32), capacity=st.integers(1, 8))
    def start(self, seed: int, capacity: int) -> None:
        self.rng, self.capacity = random.Random(seed), capacity
        self.start_worker()

    def start_worker(self) -> None:
        self.clients = FakeClients(self.source, self.target, self.rng, self.capacity)
        self.worker = fake_worker(self.clients, offsetSyncs={"location": "target", "maxLag": 3})

    # --- the world ------------------------------------------------------------------------

    @rule(partition=st.integers(0, PARTITIONS - 1), records=st.lists(st.booleans(), max_size=15))
    def append_to_source(self, partition: int, records: list[bool]) -> None:
        """Records (True) and transaction markers (False) appended to a source partition."""
        self.source.logs[partition] += [r or i % 3 == 0 for i, r in enumerate(records)]

    @rule(count=st.integers(0, 20))
    def target_acknowledges(self, count: int) -> None:
        for producer in [*self.clients.replaced, self.clients.producer]:
            producer.deliver(count)

    @rule(partition=st.integers(0, PARTITIONS - 1))
    def target_refuses_a_partition(self, partition: int) -> None:
        self.clients.producer.refuse_partition(partition)

    @rule(
        culprit=st.none()
        | st.tuples(
            st.integers(0, PARTITIONS - 1),
            st.sampled_from([DENIED, KafkaError.INVALID_RECORD, KafkaError._STATE]),
        )
    )
    def producer_fails(self, culprit: tuple[int, int] | None) -> None:
        """The producer fails; librdkafka names the partition and the error of the batch the
        target refused, if that was the cause."""
        producer = self.clients.producer
        producer.failed = True
        if culprit is not None:
            partition, code = culprit
            producer.fatal = (
                f"ProduceRequest for {REMOTE} [{partition}] with 3 message(s) failed: "
                f"{KafkaError(code).str()} (broker 1 PID{{Id:0,Epoch:0}}, base seq 0): "
                "unable to satisfy gap-less guarantee"
            )

    @rule()
    def target_denies_the_topic(self) -> None:
        """What the producer's metadata says when an ACL denies the topic: every record of it
        held fails (reported ones with the error) and produce() refuses new ones."""
        self.target.denied = True
        self.clients.producer.fail_held(set(range(PARTITIONS)), DENIED)

    @rule()
    def target_allows_the_topic_again(self) -> None:
        self.target.denied = False

    @rule(
        code=st.sampled_from(
            [KafkaError._UNKNOWN_PARTITION, KafkaError.MSG_SIZE_TOO_LARGE, KafkaError._STATE]
        )
    )
    def next_produce_is_refused(self, code: int) -> None:
        self.clients.producer.refuse_next = code

    # --- the worker -----------------------------------------------------------------------

    @rule()
    def loop_once(self) -> None:
        loop_once(self.worker)

    @rule(draining=st.booleans())
    def producer_linger_changes(self, draining: bool) -> None:
        """The loop renews the producer for another linger (`linger.py`), when it may."""
        assert self.worker.linger is not None
        self.worker.linger.switch(draining)

    @rule()
    def periodic_commit(self) -> None:
        self.worker._commit()

    @rule()
    def partitions_waiting_long_are_held(self) -> None:
        """As if the target had acknowledged nothing of the waiting partitions for a while."""
        for flow in self.worker.partitions.flows.values():
            if flow.waiting_since is not None:
                flow.waiting_since -= 60
        self.worker.partitions.hold_unacknowledged()

    @rule()
    def stopped_partitions_resume(self) -> None:
        for flow in self.worker.partitions.flows.values():
            if flow.stop is not None:
                flow.stop.retry_at = 0
        self.worker.partitions.resume_due()

    @rule(partition=st.integers(0, PARTITIONS - 1), flush=st.booleans())
    def revoke_and_reassign(self, partition: int, flush: bool) -> None:
        consumer = self.clients.consumer
        if partition not in consumer.position:
            return
        tp = TopicPartition(TOPIC, partition)
        self.worker._barrier([tp], 1.0 if flush else 0.0)  # `_on_revoke`, its flush timed out
        self.worker._give_up([tp], "revoked")
        self.target.runs[partition] += 1  # another worker's, say
        del consumer.position[partition]
        consumer.paused.discard(partition)
        consumer.assign([partition])

    @rule(partition=st.integers(0, PARTITIONS - 1))
    def partition_lost_and_reassigned(self, partition: int) -> None:
        consumer = self.clients.consumer
        if partition in consumer.position:
            tp = TopicPartition(TOPIC, partition)
            self.worker._on_lost(consumer, [tp])
            self.target.runs[partition] += 1
            del consumer.position[partition]
            consumer.paused.discard(partition)
            consumer.assign([partition])

    @precondition(lambda self: hasattr(self, "worker"))
    @rule(flush=st.booleans())
    def stop_and_restart(self, flush: bool) -> None:
        """SIGTERM (the shutdown barrier and leaving the group), then a new worker."""
        if not flush:
            self.clients.producer.failed = True  # nothing more acknowledged after the stop
        self.worker.stopping.set()
        self.worker.run()  # ends at once: the barrier, then close (revocation)
        self.target.runs = [run + 1 for run in self.target.runs]
        self.start_worker()

    # --- the promise ----------------------------------------------------------------------

    @invariant()
    def no_commit_passes_an_unacknowledged_record(self) -> None:
        missing = unacknowledged_below_commits(self.source, self.target)
        assert not missing, f"committed past records the target never acknowledged: {missing}"

    @invariant()
    def one_run_of_a_partition_at_a_time(self) -> None:
        """What a worker queued for a partition it gave up never reaches the target after the
        partition's next owner began (`AtLeastOnceWorker._give_up`)."""
        assert not self.target.interleaved, f"an earlier run's records: {self.target.interleaved}"


CommitModel.TestCase.settings = settings(
    max_examples=500,
    stateful_step_count=60,
)
TestCommitModel = CommitModel.TestCase
