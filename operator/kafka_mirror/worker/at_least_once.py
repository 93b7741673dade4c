"""At least once (the default delivery): nothing is committed on the source past a record the
target has not acknowledged (`flows.PartitionFlow`), on every path: the periodic commit, giving
partitions up, stopping, a failed producer. A producer that failed (its gapless guarantee, or no
acknowledgement for a minute while the target answers) is replaced and every partition with
records waiting is consumed again from its first unacknowledged record.

Ownership is the source group's: the workers subscribe to the source topics there, and each
resumes a partition at its commit (or after its last copy on the target, `resume_points.py`).
"""

from __future__ import annotations

import logging
from contextlib import suppress

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kafka_mirror.worker.flows import commit_offsets
from kafka_mirror.worker.mirror import FAILED_PARTITION, MirrorWorker
from kafka_mirror.worker.permanent import refusal_in_fatal

log = logging.getLogger(__name__)

REVOKE_FLUSH_SECONDS = 30.0
COMMITTED_SECONDS = 10.0  # reading the committed offsets at assignment


class AtLeastOnceWorker(MirrorWorker):
    def _replace_producer(self) -> None:
        """Give up on the producer: each partition with records waiting is consumed again from
        its first unacknowledged record, through a new producer."""
        self._serve_reports(0)  # the error callback's reason may wait in its queue still
        reason = self.producer_failure or "the producer failed"
        log.warning("replacing the producer and re-sending what it held: %s", reason)
        self.metrics.errors.labels("producer replaced").inc()
        self.producer_failure = None
        failed = FAILED_PARTITION.search(reason)
        culprit = (failed.group(1), int(failed.group(2))) if failed else None
        old = self.clients.renew_producer()
        # A refusal known to be permanent stops what it concerns below, not after three tries.
        permanent = refusal_in_fatal(reason)
        self.partitions.rewind_waiting(reason, None if permanent else culprit)
        if permanent is not None:
            self.partitions.stop_refused(permanent)
        old.purge()
        with suppress(KafkaException, SystemError):
            old.poll(0)  # its purged records' reports, to abandoned flows
        self.delivery_watch.progress = None

    def _commit(self) -> None:
        """Commit what the target has acknowledged so far, without waiting for the rest."""
        self.sync_writer.promote_delayed()
        self.sync_writer.publish(self.clients.syncs_producer)
        self.partitions.publish_figures()
        self.partitions.hold_unacknowledged()
        offsets = self.losses.annotate(commit_offsets(self.partitions.flows.values()))
        if offsets:
            self.clients.consumer.commit(offsets=offsets, asynchronous=True)
            self._update_lag(offsets)

    def _barrier(self, partitions: list[TopicPartition] | None, timeout: float) -> None:
        """Wait (up to `timeout`) for the target to acknowledge what is queued, then commit what
        it acknowledged of `partitions` (all when None)."""
        self.sync_writer.promote_delayed()
        self.sync_writer.publish(self.clients.syncs_producer)
        # The flush serves the reports; records queued after the last reported one of their
        # partition stay unconfirmed (one failing unreported, its remote partition deleted,
        # would go unseen): the next owner sends them again.
        try:
            remaining = self.clients.producer.flush(timeout)
        except (KafkaException, SystemError) as error:
            self.producer_failure, remaining = str(error), -1
        if remaining and timeout:
            log.warning("the target has not acknowledged everything: committing what it has")
        if self.clients.syncs_producer is not self.clients.producer:
            self.clients.syncs_producer.flush(min(timeout, 5.0))
        self.partitions.publish_figures()
        keys = None if partitions is None else {(tp.topic, tp.partition) for tp in partitions}
        flows = self.partitions.flows.items()
        offsets = self.losses.annotate(
            commit_offsets(f for k, f in flows if keys is None or k in keys)
        )
        if not offsets:
            return
        try:
            self.clients.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            # Rebalancing, or the group is gone: the next owner resumes from the last commit.
            log.info("commit before giving partitions up failed: %s", error.args[0].str())
            return
        self._update_lag(offsets)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("assigned %d partitions", len(partitions))
        if self.closing:
            # Handed over while this process leaves the group: librdkafka answers every offset
            # fetch "waiting for the coordinator" then, and committed() would retry until its
            # timeout, the group's close stalled behind it (seen to end in librdkafka's abort,
            # "rd_kafka_cgrp_terminated: assert: !rd_kafka_assignment_in_progress"). Nothing of
            # them is copied: leaving the group gives them on with the rest.
            self.clients.consumer.incremental_assign(partitions)
            self.clients.consumer.pause(partitions)
            return
        try:
            committed = self.clients.consumer.committed(partitions, timeout=COMMITTED_SECONDS)
        except KafkaException as error:
            log.warning("cannot read the committed offsets at assignment: %s", error)
            return  # the consumer reads them itself; the losses counted before are not known
        self._assign_at(committed)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Before giving partitions to another replica, commit what the target holds of them."""
        log.info("revoked %d partitions", len(partitions))
        self._barrier(partitions, 0.0 if self.closing else REVOKE_FLUSH_SECONDS)
        self._give_up(partitions, "revoked")

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("lost %d partitions (no commit: another worker may own them)", len(partitions))
        self._give_up(partitions, "lost")

    def _give_up(self, partitions: list[TopicPartition], why: str) -> None:
        """Forget `partitions`. Records of theirs the target has not acknowledged are purged
        with the producer: sent on, they would land on the target after the next owner began
        copying the partition again from its commit, two runs of it interleaved there (the
        proof in docs/translation.md assumes one at a time). The partitions kept are sent
        again from their first unacknowledged record, through a new producer."""
        keys = {(tp.topic, tp.partition) for tp in partitions}
        queued = sum(
            1 for key, flow in self.partitions.flows.items() if key in keys and not flow.settled()
        )
        self.partitions.forget(partitions)
        self.losses.forget(partitions)
        if not queued:
            return
        if self.closing:
            self.clients.producer.purge()  # leaving: nothing more of this process is sent
            return
        self.producer_failure = (
            f"{queued} partitions {why} with records the target has not acknowledged"
        )
        self._replace_producer()

    def _subscribe(self, topics: list[str]) -> None:
        if topics == self.subscribed:
            return
        added = sorted(set(topics) - set(self.subscribed))
        removed = sorted(set(self.subscribed) - set(topics))
        log.info(
            "mirroring %d topics (started: %s; stopped: %s)",
            len(topics),
            ", ".join(added) or "-",
            ", ".join(removed) or "-",
        )
        if topics:
            self.clients.consumer.subscribe(topics, **self._rebalance_callbacks())
        else:
            self._barrier(None, REVOKE_FLUSH_SECONDS)
            self.clients.consumer.unsubscribe()
            self._give_up(
                [TopicPartition(t, p) for t, p in list(self.partitions.flows)], "unselected"
            )
        self.subscribed = topics
