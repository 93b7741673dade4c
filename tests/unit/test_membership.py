"""The watch on the worker's group membership (`worker/membership.py`) and the consumer's
replacement when its group has lost it."""

from __future__ import annotations

import logging
import random
import threading

import pytest
from confluent_kafka import ConsumerGroupState

from kafka_mirror.worker.membership import MembershipWatch, Sighting
from tests.helpers.worker_fakes import FakeClients, Source, Target, fake_worker, loop_once

STABLE, REBALANCING = ConsumerGroupState.STABLE, ConsumerGroupState.PREPARING_REBALANCING


def test_a_settled_group_without_the_consumer_counts_it_absent() -> None:
    assert Sighting("m-1", STABLE, frozenset({"m-2"})).absent
    assert Sighting(None, ConsumerGroupState.EMPTY, frozenset()).absent
    assert Sighting("", ConsumerGroupState.DEAD, frozenset()).absent


def test_a_member_with_nothing_assigned_or_a_join_under_way_is_not_absent() -> None:
    assert not Sighting("m-1", STABLE, frozenset({"m-1", "m-2"})).absent
    assert not Sighting(None, REBALANCING, frozenset({"m-2"})).absent
    assert not Sighting("m-1", ConsumerGroupState.COMPLETING_REBALANCING, frozenset()).absent


def test_the_consumer_is_lost_after_its_patience_absent_from_every_sighting() -> None:
    watch = MembershipWatch(patience=18.0)
    assert [watch.lost(True, t) for t in (0, 6, 12)] == [False, False, False]
    assert watch.lost(True, 18)
    # The next consumer has a patience of its own.
    assert [watch.lost(True, t) for t in (24, 30, 36)] == [False, False, False]
    assert watch.lost(True, 42)


def test_one_sighting_as_a_member_starts_the_patience_again() -> None:
    watch = MembershipWatch(patience=18.0)
    assert not any(watch.lost(absent, t) for t, absent in [(0, True), (12, True), (16, False)])
    assert not any(watch.lost(True, t) for t in (17, 30))
    assert watch.lost(True, 35)


def test_a_consumer_the_group_lost_is_replaced_without_committing_what_it_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another worker may own its partitions: neither the replacement nor the old consumer's
    close commits what it had copied, and the callbacks its close calls reach nothing."""
    caplog.set_level(logging.INFO)
    source, target = Source(), Target()
    for log in source.logs:
        log += [True] * 20
    clients = FakeClients(source, target, random.Random(3), capacity=1000)
    worker = fake_worker(clients)
    for _ in range(30):
        loop_once(worker)
    clients.producer.flush(1.0)  # the target acknowledged everything copied so far
    assert worker.partitions.flows and not source.committed
    old, closed = clients.consumer, threading.Event()
    close = old.close
    old.close = lambda: (close(), closed.set())  # type: ignore[method-assign]

    worker.membership.absent_since = -worker.membership.patience  # absent since long ago
    worker._membership_sighted(Sighting("m-1", STABLE, frozenset({"m-2"})))

    assert closed.wait(5), "the old consumer is closed (on a thread of its own)"
    assert clients.consumer is not old and clients.consumer.on_revoke is not None  # subscribed
    assert not worker.partitions.flows and not source.committed
    assert "revoked" not in caplog.text
    assert worker.subscribed and worker.metrics.errors.labels("consumer replaced")._value.get() == 1


def test_an_unsubscribed_worker_is_never_counted_absent() -> None:
    clients = FakeClients(Source(), Target(), random.Random(3), capacity=10)
    worker = fake_worker(clients)
    worker.subscribed = []
    old = clients.consumer
    worker.membership.absent_since = -worker.membership.patience
    worker._membership_sighted(None)
    assert clients.consumer is old and worker.membership.absent_since is None
