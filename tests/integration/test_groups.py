"""Committing translated offsets to a group on the target, against a real cluster: the workers'
continuous sync only moves a group forward; a hand-over (failover, promote, return) commits
exactly what the checkpoints say, backwards too; a group with members is left alone."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaException

from kafka_mirror.controller.operation_kafka import ConfluentCluster
from kafka_mirror.kafka import coordinator, observe
from kafka_mirror.kafka.coordinator import GroupCoordinator
from kafka_mirror.kafka.groups import commit_to_idle_group, committed_offsets
from kafka_mirror.worker.membership import sight
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import create_topics, open_transaction, produce, records, unique
from tests.helpers.worker import commit_group, wait_for

pytestmark = [pytest.mark.kafka]


def test_a_hand_over_moves_a_rewound_group_back_and_the_sync_never_does(
    kafka_b: LocalKafka,
) -> None:
    topic, group = unique("t.A"), unique("rewound")
    create_topics(kafka_b.bootstrap_servers, [topic], partitions=2)
    produce(kafka_b.bootstrap_servers, topic, records(400, partitions=2))
    commit_group(kafka_b, group, topic, {0: 150, 1: 120})  # synced before the rewind on A
    groups = GroupCoordinator({"bootstrap.servers": kafka_b.bootstrap_servers})
    rewound = {(topic, 0): 50, (topic, 1): 120}
    forward = commit_to_idle_group(groups, group, rewound)
    assert not forward.active and forward.offsets == {}
    assert committed_offsets(groups, group) == {(topic, 0): 150, (topic, 1): 120}
    exact = commit_to_idle_group(groups, group, rewound, exact=True)
    assert not exact.active and exact.offsets == {(topic, 0): 50}  # the other one held already
    assert committed_offsets(groups, group) == rewound


def test_a_group_with_members_on_the_target_gets_nothing(kafka_b: LocalKafka) -> None:
    topic, group = unique("t.A"), unique("busy")
    create_topics(kafka_b.bootstrap_servers, [topic], partitions=1)
    member = Consumer({"bootstrap.servers": kafka_b.bootstrap_servers, "group.id": group})
    member.subscribe([topic])
    groups = GroupCoordinator({"bootstrap.servers": kafka_b.bootstrap_servers})

    def joined() -> bool:
        member.poll(0.2)  # the join happens while polling
        return bool(member.assignment())

    try:
        wait_for(joined, 60, "the member to join its group")
        committed = commit_to_idle_group(groups, group, {(topic, 0): 0}, exact=True)
        assert committed.active and committed.offsets == {}
    finally:
        member.close()


class StaleLook(GroupCoordinator):
    """The group's description as it was before a member joined: the race between a hand-over's
    look at the group and its commit, made certain. The commit goes to the real coordinator."""

    def describe(self, group: str, timeout: float = 10) -> tuple[ConsumerGroupState, set[str]]:
        return ConsumerGroupState.EMPTY, set()


def test_a_commit_the_coordinator_refuses_is_reported_never_counted(kafka_b: LocalKafka) -> None:
    """A member joins between the look and the commit: what the real coordinator answers is a
    refusal the hand-over reports (the group skipped, with Kafka's reason), not a commit; a
    group the cluster never knew is idle, and committed to."""
    topic, group = unique("t.A"), unique("joined")
    create_topics(kafka_b.bootstrap_servers, [topic], partitions=2)
    groups = GroupCoordinator({"bootstrap.servers": kafka_b.bootstrap_servers})
    fresh = commit_to_idle_group(groups, unique("never-seen"), {(topic, 0): 0}, exact=True)
    assert fresh.skipped is None and fresh.offsets == {(topic, 0): 0}
    member = Consumer({"bootstrap.servers": kafka_b.bootstrap_servers, "group.id": group})
    member.subscribe([topic])

    def joined() -> bool:
        member.poll(0.2)
        return bool(member.assignment())

    try:
        wait_for(joined, 60, "the member to join its group")
        stale = StaleLook({"bootstrap.servers": kafka_b.bootstrap_servers})
        committed = commit_to_idle_group(stale, group, {(topic, 0): 5, (topic, 1): 5}, exact=True)
        assert committed.skipped is not None and committed.offsets == {}, committed
        print(f"the coordinator's answer: {committed.skipped}")
        assert committed_offsets(groups, group) == {}
    finally:
        member.close()


def test_a_member_that_stops_polling_is_sighted_absent_from_its_group_once_it_left(
    kafka_a: LocalKafka,
) -> None:
    """The worker's membership watch (`worker/membership.py`) against a real coordinator: a
    member that polls is present, under the member id the group's description lists; one that
    stops polling leaves the group at its poll interval and, subscribed still, is absent."""
    topic, group = unique("t.watched"), unique("watched")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=2)
    member = Consumer(
        {
            "bootstrap.servers": kafka_a.bootstrap_servers,
            "group.id": group,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 6000,
        }
    )
    member.subscribe([topic])
    groups = GroupCoordinator({"bootstrap.servers": kafka_a.bootstrap_servers})
    clients = SimpleNamespace(group_consumer=member, group_coordinator=groups)

    def joined() -> bool:
        member.poll(0.2)  # the join happens while polling
        return bool(member.assignment())

    try:
        wait_for(joined, 60, "the member to join its group")
        present = sight(clients, group)  # type: ignore[arg-type]
        assert present.member_id in present.members and not present.absent, present
        wait_for(
            lambda: sight(clients, group).absent,  # type: ignore[arg-type]
            60,
            lambda: f"the member that stopped polling to leave: {sight(clients, group)}",  # type: ignore[arg-type]
        )
        assert sight(clients, group).state == ConsumerGroupState.EMPTY  # type: ignore[arg-type]
    finally:
        member.close()


def test_records_in_an_open_transaction_are_counted_per_partition(kafka_a: LocalKafka) -> None:
    """What a promote's hand-over reports it leaves on the source (it does not wait for them)."""
    topic = unique("tx")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=2)
    produce(kafka_a.bootstrap_servers, topic, records(10, partitions=1))
    source = ConfluentCluster({"bootstrap.servers": kafka_a.bootstrap_servers}, "source")
    assert source.in_open_transactions([topic]) == {}
    began = datetime.now(UTC)
    open_tx = open_transaction(kafka_a.bootstrap_servers, topic, 1, 5)
    pending = source.in_open_transactions([topic, "no-such-topic"])
    assert list(pending) == [(topic, 1)] and pending[(topic, 1)].records == 5
    since = pending[(topic, 1)].since  # when the open transaction wrote its first record
    assert since is not None and began - timedelta(milliseconds=1) <= since <= datetime.now(UTC)
    open_tx.commit_transaction(30)
    wait_for(lambda: source.in_open_transactions([topic]) == {}, 30, "the commit's marker")


def test_a_group_request_given_up_before_its_coordinator_is_found_does_not_abort(
    kafka_a: LocalKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka 2.16 aborts the process when a group request reaches librdkafka's own limit
    while its coordinator is looked up and the coordinator is found afterwards (librdkafka#3663;
    the process aborted at its first read when the requests carried our wait as that limit).
    Our waits end such requests, not librdkafka: the reads fail, and the process that makes
    them (`kafka/coordinator.py`, which takes a new client after each) lives on. Every wait is
    1 ms, so that each read gives up while the coordinator is looked up; then it is found."""
    monkeypatch.setattr(observe, "ANSWER_WAIT", 0.001)
    settings = {"bootstrap.servers": kafka_a.bootstrap_servers}
    groups = GroupCoordinator(settings)
    reads: list[Callable[[], object]] = [
        lambda: groups.committed("g", 0.001),
        lambda: groups.describe("g", 0.001),
        lambda: groups.commit("g", {("t", 0): 1}, 0.001),
        lambda: observe.ClusterReader("A", settings).progress("g", {}),
    ]
    given_up, children = 0, set()
    for read in reads * 5:
        try:
            read()
        except (TimeoutError, KafkaException):  # ClusterUnavailable is one
            given_up += 1
        children.add(coordinator._CHILD._process.pid)
        time.sleep(0.3)  # the coordinator is found meanwhile
    assert given_up > 0, "no read gave up: the test did not reach the case it is about"
    assert len(children) == 1 and coordinator._CHILD._process.poll() is None, children


def test_group_reads_outlive_their_coordinators_restarts(tmp_path: Path) -> None:
    """librdkafka#5040 segfaults an admin client whose group-offsets request is answered
    NOT_COORDINATOR, as a restarting broker answers (`kafka/coordinator.py`). Four threads read
    a group's offsets and description while its cluster's only broker restarts three times:
    this process lives through it, and after each restart the offsets are read again, exact."""
    cluster = LocalKafka("A", tmp_path / "kafka")
    cluster.start()
    stop, children = threading.Event(), set()
    groups = GroupCoordinator({"bootstrap.servers": cluster.bootstrap_servers})

    def read() -> None:
        while not stop.is_set():
            try:
                groups.committed("g", 2)
                groups.describe("g", 2)
            except (TimeoutError, KafkaException):
                pass  # the broker is away
            children.add(coordinator._CHILD._process.pid)

    readers = [threading.Thread(target=read) for _ in range(4)]
    try:
        create_topics(cluster.bootstrap_servers, ["t"], partitions=2)
        commit_group(cluster, "g", "t", {0: 10, 1: 20})
        for reader in readers:
            reader.start()
        for restart in range(4):
            wait_for(
                lambda: committed_offsets(groups, "g") == {("t", 0): 10, ("t", 1): 20},
                120,
                f"the group's offsets after {restart} restarts",
            )
            if restart < 3:
                cluster.stop()
                cluster.start()
    finally:
        stop.set()
        for reader in readers:
            reader.join(30)
        cluster.remove()
    print(f"{len(children)} processes asked the coordinators (each crash starts one)")


def test_a_member_handed_partitions_as_it_leaves_still_leaves(kafka_a: LocalKafka) -> None:
    """The worker's processes stop together; one may be handed the others' partitions as it
    leaves. Closing it then hung for good in a few rounds (librdkafka#4041: the pod's process
    killed after its 25 s); `leave_group` ends each time. In a process of its own, as a hung
    close holds the GIL (`tests/helpers/leaving.py`)."""
    topic = unique("leaving")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=6)
    command = [sys.executable, "-m", "tests.helpers.leaving", kafka_a.bootstrap_servers, topic]
    # A hung round ends the helper with every thread's stack (`ROUND_SECONDS`).
    done = subprocess.run([*command, "6", "leave"], capture_output=True, text=True, timeout=580)
    assert done.returncode == 0, done.stdout + done.stderr[-8000:]
    assert done.stdout.count("left in") == 6, done.stdout
