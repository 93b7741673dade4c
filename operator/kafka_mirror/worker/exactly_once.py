"""Exactly once (`delivery: exactlyOnce`): each transaction on the target holds the copies of a
commit interval and the source positions after them, so a `read_committed` consumer of the
target sees every source record once, whatever fails (docs/reliability.md, "Exactly once").

Ownership is decided on the target, where the transactions are: the workers' group there
(`Clients.members`) subscribes to the remote topics and fetches nothing; remote partition p of
a topic is the source partition p it copies, so its assignment is the source consumer's (which
is assigned, not subscribed). Each transaction commits the positions as that group's offsets of
the remote partitions (`send_offsets_to_transaction`), and the group coordinator refuses a
commit from a member of an earlier generation (KIP-447): a worker that lost its partitions
while paused cannot commit copies of them after their new owner started. Its new owner reads
the positions stable (never under a pending transaction) and resumes there.

Any failure of a transaction aborts it, and every partition is consumed again from its last
committed position (`Partitions.rewind`, which stops a partition that fails at one record again
and again). Offset syncs wait for the transaction of the copies they name
(`HeldSyncWriter`).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from kafka_mirror.kafka.formats import OffsetSync
from kafka_mirror.worker.clients import Clients, ClientsFactory
from kafka_mirror.worker.flows import commit_offsets
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror.worker.mirror import MirrorWorker
from kafka_mirror.worker.permanent import permanent_refusal
from kafka_mirror.worker.sync_writer import OffsetSyncWriter

log = logging.getLogger(__name__)

COMMIT_SECONDS = 10.0  # for a transaction's commit or abort, its copies all acknowledged
STUCK_MARGIN_SECONDS = 5.0  # past the timeout given to librdkafka
DRAIN_WAIT_SECONDS = 0.05  # serving reports while a transaction due waits for its copies
POSITIONS_SECONDS = 30.0  # reading the committed positions at assignment
POSITIONS_RETRY_SECONDS = 5.0  # and again, as long as the target did not answer

Key = tuple[str, int]
# What librdkafka reports for the records it had queued when their transaction failed: a
# consequence of another partition's refusal, not a refusal of theirs.
FAILED_WITH_THE_TRANSACTION = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}


class OffsetsStuck(RuntimeError):
    """`send_offsets_to_transaction` did not return in time."""


def send_offsets(
    producer: Producer, positions: list[TopicPartition], group: object, timeout: float
) -> None:
    """`send_offsets_to_transaction`, given up on after its timeout: librdkafka (2.16) can wait
    forever for a group coordinator it believes down, ignoring the timeout (librdkafka#5456),
    when the target goes away at that moment. The producer is then replaced (its thread left
    waiting), so that the worker goes on and its liveness probe stays true."""
    done: list[BaseException | None] = []

    def call() -> None:
        try:
            producer.send_offsets_to_transaction(positions, group, timeout)
            done.append(None)
        except BaseException as error:  # handed to the loop's thread
            done.append(error)

    thread = threading.Thread(target=call, name="send-offsets", daemon=True)
    thread.start()
    thread.join(timeout + STUCK_MARGIN_SECONDS)
    if not done:
        raise OffsetsStuck(f"send_offsets_to_transaction did not return in {timeout:.0f}s")
    if done[0] is not None:
        raise done[0]


def renamed(point: TopicPartition, topic: str) -> TopicPartition:
    """`point` (its partition, offset, metadata and leader epoch) in another topic."""
    epoch = point.leader_epoch
    return TopicPartition(
        topic, point.partition, point.offset, point.metadata or "", -1 if epoch is None else epoch
    )


class HeldSyncWriter(OffsetSyncWriter):
    """Offset syncs held until the transaction of the copies they name commits, dropped when it
    aborts: a sync never names a copy a `read_committed` consumer cannot see."""

    def __init__(self, topic: str, metrics: WorkerMetrics) -> None:
        super().__init__(topic, metrics)
        self.held: list[tuple[OffsetSync, bool]] = []

    def queue(self, sync: OffsetSync, due: bool) -> None:
        self.held.append((sync, due))

    def committed(self) -> None:
        held, self.held = self.held, []
        for sync, due in held:
            super().queue(sync, due)

    def aborted(self) -> None:
        self.held.clear()


class ExactlyOnceWorker(MirrorWorker):
    def __init__(
        self, config_path: Path, metrics: WorkerMetrics, clients: ClientsFactory = Clients
    ) -> None:
        super().__init__(config_path, metrics, clients)
        assert self.clients.members is not None, "the clients of a transactional worker"
        self.held_syncs = HeldSyncWriter(self.sync_writer.topic, metrics)
        self.sync_writer = self.held_syncs
        self.partitions.publish_sync = self.held_syncs.queue
        # A new producer would need its own transactions: the linger stays as configured.
        self.linger = None
        # Per source partition, where its last committed transaction left it.
        self.positions: dict[Key, int] = {}
        # A commit is due: nothing more is consumed until the copies are acknowledged.
        self.commit_due = False
        self.target_lost = False  # unreachable after it had answered
        self.target_back = False  # reachable again since
        self.remotes: dict[str, str] = {}  # remote topic → source topic
        # Assigned, their committed positions not read yet (the target did not answer).
        self.unpositioned: list[TopicPartition] = []
        self.positions_asked = 0.0

    @property
    def members(self) -> Consumer:
        """The group on the target that shares the partitions out (renewed if it loses us)."""
        return self.clients.group_consumer

    # --- the loop -------------------------------------------------------------------------

    def _set_reachable(self, cluster: str, up: bool) -> None:
        if cluster == "target":
            if not up and self.reachable["target"]:
                self.target_lost = True
            elif up and self.target_lost:
                self.target_lost, self.target_back = False, True
        super()._set_reachable(cluster, up)

    def _next_batch(self) -> list[Message]:
        """Nothing while a commit is due: a transaction holds at most one interval's copies
        (and the producer's queue), so it commits within `transaction.timeout.ms` even when
        the target is slow."""
        if self.commit_due or self.producer_failure is not None:
            return []
        return super()._next_batch()

    def _serve_reports(self, timeout: float) -> None:
        producer = self.clients.producer
        try:
            producer.poll(DRAIN_WAIT_SECONDS if self.commit_due else timeout)
        except (KafkaException, SystemError) as error:
            self.producer_failure = str(error)
        if self.target_back:
            # After an outage librdkafka (2.16) can wait forever in send_offsets_to_transaction
            # for a group coordinator it still thinks is down (librdkafka#5456): a new producer
            # asks afresh.
            self.target_back = False
            self.producer_failure = "the target is back after an outage"
        if self.partitions.refused:
            self._abort("the target refused a record")
        elif self.commit_due and self._may_commit():
            self._commit_transaction(COMMIT_SECONDS)
        if self.clients.syncs_producer is not self.clients.producer:
            self.clients.syncs_producer.poll(0)
        if self.unpositioned and time.monotonic() - self.positions_asked > POSITIONS_RETRY_SECONDS:
            self._read_positions(POSITIONS_RETRY_SECONDS)
        # Serves the group's rebalance callbacks (it fetches nothing).
        self.members.poll(0)

    def _may_commit(self) -> bool:
        """Every copy acknowledged, and the target not known to be away (it is marked back
        once a refresh lists its topics, and the producer replaced first)."""
        producer_ok = self.producer_failure is None and not self.target_back
        return producer_ok and self.reachable["target"] and len(self.clients.producer) == 0

    def _consume_event(self, message: Message, error: KafkaError) -> None:
        """A partition released by hand can still have an event queued: not ours any more."""
        owned = {(tp.topic, tp.partition) for tp in self.clients.consumer.assignment()}
        if (message.topic(), message.partition()) in owned:
            super()._consume_event(message, error)

    def _replace_producer(self) -> None:
        """A failed transactional producer (fenced, or its transaction timed out): a new one
        fences it for good, and everything uncommitted is copied again."""
        reason = self.producer_failure or "the producer failed"
        log.warning("replacing the transactional producer: %s", reason)
        try:
            old = self.clients.renew_producer()
        except KafkaException as error:
            log.warning("cannot start a new transactional producer yet (will retry): %s", error)
            return
        self.metrics.errors.labels("producer replaced").inc()
        self.producer_failure = None
        old.purge()
        self._rewind_all(reason)
        self.delivery_watch.progress = None

    # --- transactions ---------------------------------------------------------------------

    def _commit(self) -> None:
        """Due every commit interval; the loop commits once the copies are acknowledged."""
        self.commit_due = True

    def _barrier(self, partitions: list[TopicPartition] | None, timeout: float) -> None:
        """A transaction commits every partition's copies together, whichever are handed on;
        what cannot be committed is aborted (the next owner copies it again)."""
        if not self._commit_transaction(max(timeout, 1.0)):
            self._abort("the target has not acknowledged every copy")

    def _commit_transaction(self, timeout: float) -> bool:
        """Commit the copies made since the last commit with their partitions' positions; a
        failure aborts them, and they are copied again. False: nothing committed."""
        self.commit_due = False
        producer = self.clients.producer
        self.sync_writer.promote_delayed()
        self.sync_writer.publish(self.clients.syncs_producer)
        if producer.flush(timeout):
            return False
        if self.partitions.refused or self.producer_failure is not None:
            return False  # the loop aborts, or replaces the producer
        flows = list(self.partitions.flows.values())
        owned = {(tp.topic, tp.partition) for tp in self.members.assignment()}
        stray = next((f for f in flows if (f.remote, f.partition) not in owned), None)
        if stray is not None:
            self._abort(f"copies of {stray.topic}[{stray.partition}], no longer ours")
            return False
        source = self.losses.annotate(commit_offsets(flows))
        remotes = {(f.topic, f.partition): f.remote for f in flows}
        positions = [renamed(tp, remotes[(tp.topic, tp.partition)]) for tp in source]
        try:
            if positions:
                send_offsets(producer, positions, self.members.consumer_group_metadata(), timeout)
            producer.commit_transaction(timeout)
        except OffsetsStuck as stuck:
            self.producer_failure = str(stuck)
            return False
        except KafkaException as error:
            failure = error.args[0]
            if failure.fatal():
                self.producer_failure = failure.str()
            else:
                self._abort(f"the transaction failed: {failure.str()}")
            return False
        producer.begin_transaction()
        self.held_syncs.committed()
        self.positions.update({(tp.topic, tp.partition): tp.offset for tp in source})
        self.partitions.publish_figures(readable_at=time.time())
        if source:
            # Into the source group too, where the operator reads the lag and the problems.
            self.clients.consumer.commit(offsets=source, asynchronous=True)
            self._update_lag(source)
        return True

    def _abort(self, reason: str) -> None:
        log.warning("aborting the transaction: %s", reason)
        self.metrics.errors.labels("transaction aborted").inc()
        try:
            self.clients.producer.abort_transaction(COMMIT_SECONDS)
            self.clients.producer.begin_transaction()
        except KafkaException as error:
            self.producer_failure = f"aborting failed: {error.args[0].str()}"
            return
        self._rewind_all(reason)

    def _rewind_all(self, reason: str) -> None:
        """Every partition again from its last committed position. A partition whose record
        the target refused is stopped if the refusal is permanent; the others count a failure
        only against the partitions that caused it (`Partitions.rewind`)."""
        self.held_syncs.aborted()
        refused = {
            (f.topic, f.partition): f
            for f in self.partitions.refused
            if f.refused_code not in FAILED_WITH_THE_TRANSACTION
        }
        self.partitions.refused = []
        for key, flow in list(self.partitions.flows.items()):
            self.partitions.rewind(flow, self.positions.get(key, flow.start), reason)
            if key not in refused:
                self.partitions.refusals.pop(key, None)
                continue
            permanent = permanent_refusal(flow.refused_code, flow.remote, flow.partition)
            if permanent is not None:
                self.partitions.stop_refused(permanent)

    # --- ownership ------------------------------------------------------------------------

    def _subscribe(self, topics: list[str]) -> None:
        if topics == self.subscribed:
            return
        mirrored = self.topics.plan.mirrored
        self.remotes = {mirrored[t]: t for t in topics}
        log.info("mirroring %d topics exactly once", len(topics))
        if topics:
            self.members.subscribe(sorted(self.remotes), **self._rebalance_callbacks())
        else:
            self._barrier(None, 0.0)
            self.members.unsubscribe()
            self._release(self.clients.consumer.assignment())
        self.subscribed = topics

    def _source(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The source partitions these remote partitions copy (with their offsets)."""
        return [
            renamed(tp, self.remotes[tp.topic]) for tp in partitions if tp.topic in self.remotes
        ]

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("assigned %d partitions", len(partitions))
        self.members.incremental_assign(partitions)
        self.members.pause(partitions)
        if self.closing:  # handed over while this process leaves: its close gives them on
            return
        self.unpositioned.extend(partitions)
        self._read_positions(POSITIONS_SECONDS)

    def _read_positions(self, timeout: float) -> None:
        """Resume the partitions assigned at their committed positions, read stable (a former
        owner's transaction still open is waited for). A target just back from an outage may
        not answer yet: nothing of theirs is copied, and the loop asks again."""
        self.positions_asked = time.monotonic()
        try:
            committed = self.members.committed(self.unpositioned, timeout=timeout)
        except KafkaException as error:
            log.warning("cannot read the committed positions yet (will retry): %s", error)
            return
        failed = [tp for tp in committed if tp.error is not None]
        if failed:
            log.warning("cannot read the committed positions yet (will retry): %s", failed[0].error)
        self.unpositioned = failed
        positions = self._source([tp for tp in committed if tp.error is None])
        self.positions.update(
            {(tp.topic, tp.partition): tp.offset for tp in positions if tp.offset >= 0}
        )
        self._assign_at(positions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Commit what was copied of every partition, then hand these over."""
        log.info("revoked %d partitions", len(partitions))
        self._drop_unpositioned(partitions)
        if not self.closing:  # closing, the loop's last barrier committed all there was
            self._barrier(None, COMMIT_SECONDS)
        self._release(self._source(partitions))
        self.members.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Another worker may own them already: nothing of theirs may commit."""
        log.warning("lost %d partitions: aborting what was not committed", len(partitions))
        self._drop_unpositioned(partitions)
        self._release(self._source(partitions))
        self._abort("partitions lost")

    def _drop_unpositioned(self, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.unpositioned = [tp for tp in self.unpositioned if (tp.topic, tp.partition) not in gone]

    def _release(self, partitions: list[TopicPartition]) -> None:
        """Stop copying these; what they copied since the last commit must then be aborted
        (`_on_lost` does, the others committed first)."""
        keys = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        assigned = {(tp.topic, tp.partition) for tp in self.clients.consumer.assignment()}
        held = [tp for tp in keys if (tp.topic, tp.partition) in assigned]
        if held:  # librdkafka refuses to unassign what is not assigned
            self.clients.consumer.incremental_unassign(held)
        self.partitions.forget(keys)
        self.losses.forget(keys)
        for tp in keys:
            self.positions.pop((tp.topic, tp.partition), None)
