"""A model of exactly-once ownership (`worker/exactly_once.py`, docs/reliability.md): workers in
one group on the target, its generations, and transactions that commit copies and positions
together. Hypothesis drives random copies, commits, rebalances, pauses past the session, kills
and restarts; no source offset may ever be committed twice, nor skipped.

The rules the model holds the workers to are the worker's:

- a partition's copying starts at the position last committed for it (read at assignment);
- a revoked partition's copies are committed (or aborted) before it is handed on;
- a partition lost (the worker was out of the group) aborts everything not committed;
- a commit names the generation the worker knows, and the coordinator refuses a generation
  that is not the group's current one, or a member that is no longer in the group (KIP-447).

A paused worker does nothing at all; resumed, it may try to commit before it notices that it
was removed from the group: the case the coordinator's check exists for.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import cast

import pytest
from confluent_kafka import Producer
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafka_mirror.kafka.formats import OffsetSync
from kafka_mirror.worker.exactly_once import HeldSyncWriter, OffsetsStuck, send_offsets
from kafka_mirror.worker.metrics import WorkerMetrics

PARTITIONS = 3


@dataclass
class Worker:
    name: int
    generation: int = -1  # the group's generation as this worker last joined it
    owned: set[int] = field(default_factory=set)  # what it believes it owns
    next_offset: dict[int, int] = field(default_factory=dict)  # per owned partition
    copies: list[tuple[int, int]] = field(default_factory=list)  # the open transaction
    paused: bool = False


class ExactlyOnceModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.generation = 0
        self.members: dict[int, Worker] = {}  # in the group now
        self.workers: list[Worker] = []  # every process ever started, live or not
        self.positions = {p: 0 for p in range(PARTITIONS)}  # the group's committed offsets
        self.committed: list[tuple[int, int]] = []  # copies readable with read_committed

    # --- the group ------------------------------------------------------------------------

    def _rebalance(self) -> None:
        """A new generation: every live member's revoked partitions are committed first, then
        the partitions are spread over the members (a paused member is not there to rejoin:
        the session times out and the group goes on without it)."""
        for worker in list(self.members.values()):
            if worker.paused:
                del self.members[worker.name]
        for worker in self.members.values():
            self._commit(worker)  # on_revoke: the copies of every partition, together
        self.generation += 1
        names = sorted(self.members)
        for worker in self.members.values():
            worker.owned, worker.next_offset = set(), {}
            worker.generation = self.generation
        for partition in range(PARTITIONS):
            if names:
                owner = self.members[names[(partition + self.generation) % len(names)]]
                owner.owned.add(partition)
                owner.next_offset[partition] = self.positions[partition]  # read at assignment

    @rule()
    def start_worker(self) -> None:
        worker = Worker(len(self.workers))
        self.workers.append(worker)
        self.members[worker.name] = worker
        self._rebalance()

    # --- a worker -------------------------------------------------------------------------

    def _live(self) -> list[Worker]:
        return [w for w in self.workers if not w.paused and w.generation >= 0]

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def copy(self, data: st.DataObject) -> None:
        """A live worker copies the next record of a partition it believes it owns (a zombie
        does too: it has not noticed yet)."""
        worker = data.draw(st.sampled_from(self._live()))
        if not worker.owned:
            return
        partition = data.draw(st.sampled_from(sorted(worker.owned)))
        worker.copies.append((partition, worker.next_offset[partition]))
        worker.next_offset[partition] += 1

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        self._commit(data.draw(st.sampled_from(self._live())))

    def _commit(self, worker: Worker) -> None:
        """send_offsets_to_transaction with the worker's generation, then commit; refused:
        the transaction aborts."""
        current = self.members.get(worker.name) is worker and worker.generation == self.generation
        if not current:
            self._abort(worker)
            return
        self.committed.extend(worker.copies)
        worker.copies = []
        for partition in worker.owned:
            self.positions[partition] = worker.next_offset[partition]

    def _abort(self, worker: Worker) -> None:
        """The copies are aborted; each partition again from its committed position."""
        worker.copies = []
        for partition in worker.owned:
            worker.next_offset[partition] = self.positions[partition]

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def pause(self, data: st.DataObject) -> None:
        data.draw(st.sampled_from(self._live())).paused = True

    @precondition(lambda self: any(w.paused for w in self.workers))
    @rule(data=st.data(), notices_at_once=st.booleans())
    def resume(self, data: st.DataObject, notices_at_once: bool) -> None:
        """Resumed, it notices it left the group (on_lost: abort, release, rejoin) at once or
        only later: it may copy and commit first, as a zombie."""
        worker = data.draw(st.sampled_from([w for w in self.workers if w.paused]))
        worker.paused = False
        if notices_at_once:
            self._notice(worker)

    @precondition(lambda self: any(self._zombie(w) for w in self._live()))
    @rule(data=st.data())
    def notice_lost(self, data: st.DataObject) -> None:
        self._notice(data.draw(st.sampled_from([w for w in self._live() if self._zombie(w)])))

    def _zombie(self, worker: Worker) -> bool:
        return self.members.get(worker.name) is not worker

    def _notice(self, worker: Worker) -> None:
        if not self._zombie(worker):
            return
        self._abort(worker)
        worker.owned, worker.next_offset = set(), {}
        self.members[worker.name] = worker
        self._rebalance()

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        """SIGKILL: its transaction never commits; the group rebalances after its session."""
        worker = self.members.pop(data.draw(st.sampled_from(sorted(self.members))))
        worker.paused, worker.generation, worker.copies = True, -1, []
        self._rebalance()

    # --- what must hold -------------------------------------------------------------------

    @invariant()
    def no_offset_committed_twice(self) -> None:
        assert len(set(self.committed)) == len(self.committed), sorted(self.committed)

    @invariant()
    def nothing_skipped(self) -> None:
        for partition, position in self.positions.items():
            copied = sorted(o for p, o in self.committed if p == partition)
            assert copied == list(range(position)), (partition, copied, position)


TestExactlyOnceModel = ExactlyOnceModel.TestCase


def test_offset_syncs_wait_for_the_transaction_of_their_copies() -> None:
    """A sync names a copy: published once its transaction commits, never after an abort."""
    writer = HeldSyncWriter("mm2-offset-syncs.B.internal", WorkerMetrics())
    writer.queue(OffsetSync("t", 0, 10, 5), True)
    writer.queue(OffsetSync("t", 0, 11, 6), False)
    assert not writer.pending and not writer.delayed
    writer.aborted()
    writer.committed()
    assert not writer.pending and not writer.delayed
    writer.queue(OffsetSync("t", 0, 12, 7), True)
    writer.queue(OffsetSync("t", 0, 13, 8), False)
    writer.committed()
    assert [s.upstream_offset for s in writer.pending] == [12]
    assert [s.upstream_offset for s in writer.delayed.values()] == [13]


class HangingProducer:
    """librdkafka's send_offsets_to_transaction ignoring its timeout (librdkafka#5456)."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def send_offsets_to_transaction(self, *args: object) -> None:
        self.released.wait(30)


def test_offsets_that_never_return_are_given_up_on_after_their_timeout() -> None:
    producer = HangingProducer()
    started = time.monotonic()
    with pytest.raises(OffsetsStuck, match="did not return in 0s"):
        send_offsets(cast(Producer, producer), [], object(), 0.0)
    producer.released.set()
    assert time.monotonic() - started < 20
