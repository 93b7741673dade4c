"""The producer's linger follows the backlog (`worker/linger.py`): the policy, and the switch
to a new producer only once the old one holds nothing unvouched for."""

from __future__ import annotations

import random
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.worker.linger import (
    CAUGHT_UP_AFTER_SECONDS,
    DRAINING_AFTER_SECONDS,
    DRAINING_LINGER_MS,
    LingerPolicy,
    LingerSwitch,
)
from kafka_mirror.worker.mirror import MirrorWorker
from tests.helpers.worker_fakes import FakeClients, Source, Target, fake_worker, loop_once

# (seconds since the previous batch, whether the batch was full)
batches = st.lists(st.tuples(st.floats(0, 3), st.booleans()), max_size=40)


def last_decision(policy: LingerPolicy, events: list[tuple[float, bool]], now: float) -> bool:
    draining = False
    for gap, full in events:
        now += gap
        draining = policy.wants_draining(full, now)
    return draining


@given(before=batches, gaps=st.lists(st.floats(0, 0.3), min_size=1, max_size=40))
def test_full_batches_for_a_second_mean_draining(
    before: list[tuple[float, bool]], gaps: list[float]
) -> None:
    policy = LingerPolicy()
    last_decision(policy, before, 0.0)
    # A pause longer than the caught-up window first: the run of full batches starts anew.
    start = 1000.0 + sum(g for g, _ in before)
    policy.wants_draining(False, start)
    policy.wants_draining(False, start + CAUGHT_UP_AFTER_SECONDS)
    now = start + CAUGHT_UP_AFTER_SECONDS + 1
    first = now
    for gap in gaps:
        now += gap
        wanted = policy.wants_draining(True, now)
        assert wanted == (now - (first + gaps[0]) >= DRAINING_AFTER_SECONDS)


@given(before=batches, gaps=st.lists(st.floats(0, 0.3), min_size=1, max_size=40))
def test_short_batches_for_the_caught_up_window_mean_caught_up(
    before: list[tuple[float, bool]], gaps: list[float]
) -> None:
    policy = LingerPolicy()
    now = 1000.0
    last_decision(policy, before, now)
    now += sum(g for g, _ in before) + 1
    started = now
    for gap in gaps:
        now += gap
        if not policy.wants_draining(False, now):
            break
    else:
        assert now - (started + gaps[0]) < CAUGHT_UP_AFTER_SECONDS  # from the first short one


def test_a_burst_shorter_than_a_second_keeps_the_short_linger() -> None:
    policy = LingerPolicy()
    assert not any(policy.wants_draining(True, t / 10) for t in range(10))
    assert policy.wants_draining(True, 1.0)
    policy.draining = True  # the switch was made
    # A short batch or a pause (no batch while the queue is full) does not end the drain.
    assert policy.wants_draining(False, 1.5)
    assert policy.wants_draining(True, 10.0)
    assert policy.wants_draining(False, 11.0)
    assert not policy.wants_draining(False, 11.0 + CAUGHT_UP_AFTER_SECONDS)


def test_a_full_batch_now_and_then_at_a_steady_rate_is_no_backlog() -> None:
    """As after a pause (a rebalance) at a steady rate: full batches seconds apart."""
    policy = LingerPolicy()
    for second in range(20):
        assert not policy.wants_draining(True, second * 1.5)
        assert not policy.wants_draining(False, second * 1.5 + 0.6)


def worker_with_records(**settings: Any) -> tuple[FakeClients, MirrorWorker, LingerSwitch]:
    source, target = Source(), Target()
    for log in source.logs:
        log += [True] * 20
    clients = FakeClients(source, target, random.Random(7), capacity=1000)
    worker = fake_worker(clients, **settings)
    for _ in range(30):
        loop_once(worker)
    assert worker.linger is not None or "target" in settings
    return clients, worker, cast(LingerSwitch, worker.linger)


def test_the_switch_renews_the_producer_once_everything_is_vouched_for() -> None:
    clients, worker, switch = worker_with_records()
    old = clients.producer
    assert old.queue, "records wait for the target"
    assert switch.switch(True) is None
    assert clients.producer is not old and not old.queue  # flushed first, then renewed
    assert switch.draining and clients.syncs_producer is clients.producer
    assert all(f.settled() for f in worker.partitions.flows.values())


def test_no_switch_while_a_record_waits_for_a_later_report() -> None:
    clients, worker, switch = worker_with_records()
    old = clients.producer
    flow = next(iter(worker.partitions.flows.values()))
    flow.unreported_records += 1  # queued after its partition's last report
    assert switch.switch(True) == "a record without a report to come"
    assert clients.producer is old and old.queue and not switch.draining


def test_no_switch_while_the_target_has_not_acknowledged_everything() -> None:
    clients, _worker, switch = worker_with_records()
    old = clients.producer
    old.flush = lambda timeout=0: len(old.queue)  # the target answers nothing
    assert switch.switch(True).endswith("records unacknowledged after 10s")
    assert clients.producer is old and not switch.draining


def test_a_failed_producer_is_left_to_the_loop() -> None:
    clients, worker, switch = worker_with_records()
    clients.producer.failed = True
    assert switch.switch(True) == "the producer failed"
    assert worker.producer_failure is not None


def test_a_mirror_that_sets_its_linger_keeps_it() -> None:
    target = {"alias": "B", "bootstrapServers": "b:9092", "config": {"linger.ms": "50"}}
    _clients, worker, _switch = worker_with_records(target=target)
    assert worker.linger is None
    assert DRAINING_LINGER_MS != 50
