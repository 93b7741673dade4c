"""The applications' rights moved by a promote or a failover and back by the Return that starts
the mirror again (controller/applications.py), against the clusters in memory: only what the sync
listed for the selected topics is granted, only what the operation made is removed, and the
target ends holding exactly what others made."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.api.models import AclSync
from kafka_mirror.api.operations import OperationStatus, ResumedBy
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.controller.operations import Access, advance
from kafka_mirror.kafka.acl_grants import Grant, applications_of, moved_by, parse_record
from tests.helpers.operations import NOW, FakeCluster, FakeKafka, spec, status

MOVING = WorkerConfig.model_validate(
    {
        "mirror": "ns/m",
        "source": {"alias": "A", "bootstrapServers": "a:9092"},
        "target": {"alias": "B", "bootstrapServers": "b:9092"},
        "selections": [{"name": "orders", "includes": ["orders.*"]}],
        "aclSync": {"moveApplications": True},
    }
)
FAILOVER = spec({"type": "Failover", "id": "f"}, aclSync={"moveApplications": True})


def write(topic: str, principal: str, permission: str = "ALLOW") -> Grant:
    return Grant("TOPIC", topic, principal, "*", "WRITE", permission)


def failed_over(target: FakeCluster, config: WorkerConfig = MOVING) -> OperationStatus:
    """The failover run to its end against `target` (A lost)."""
    access = Access(None, target)
    op = None
    for _ in range(4):
        op, _ = advance(FAILOVER, op, status(), config, None, access, NOW)
    assert op is not None and op.phase == "Completed", op
    return op


def test_a_failover_grants_the_listed_rights_and_the_return_takes_back_only_its_own(
    kafka: FakeKafka,
) -> None:
    target = kafka.target
    carol, dave = write("orders", "User:carol"), write("orders", "User:dave")
    mallory = write("orders", "User:mallory", "DENY")
    elsewhere = write("payroll", "User:carol")  # a topic the mirror does not select
    target.grant_records[applications_of("ns/m")] = {carol, dave, mallory, elsewhere}
    target.grant_records["ns/other"] = {write("orders", "User:zed")}  # another owner's
    target.acls = {dave}  # dave's was made by someone else: it stays theirs
    op = failed_over(target)
    assert target.acls == {carol, dave, mallory}
    assert op.moved_rights is not None and op.moved_rights.count == 2
    shown = {(g.principal, g.permission) for g in op.moved_rights.grants}
    assert shown == {("User:carol", "ALLOW"), ("User:mallory", "DENY")}
    assert "1 were there already" in op.moved_rights.message
    assert "applications' rights: 2 bindings granted" in op.message
    assert target.grant_records[moved_by("ns/m")] == {carol, mallory}

    # Completed and not started again: nothing moves back.
    later = NOW + timedelta(minutes=5)
    again, events = advance(FAILOVER, op, status(), MOVING, None, Access(None, target), later)
    assert again == op and not events and carol in target.acls

    # The reverse mirror's Return started it again: the operation's grants go, dave's stays.
    resumed = op.model_copy(update={"resumed_by": ResumedBy(mirror="b-to-a", id="r")})
    back, events = advance(FAILOVER, resumed, status(), MOVING, None, Access(None, target), later)
    assert target.acls == {dave}
    assert (
        back is not None
        and back.moved_rights is not None
        and back.moved_rights.returned_at == later
    )
    assert [e.reason for e in events] == ["ApplicationRightsReturned"] and "2 bindings" in events[
        0
    ].message
    again, events = advance(FAILOVER, back, status(), MOVING, None, Access(None, target), later)
    assert again == back and not events


def test_without_the_opt_in_no_write_moves(kafka: FakeKafka) -> None:
    kafka.target.grant_records[applications_of("ns/m")] = {write("orders", "User:carol")}
    config = MOVING.model_copy(update={"acl_sync": AclSync()})
    op = failed_over(kafka.target, config)
    assert op.moved_rights is None and kafka.target.acls == set()


@pytest.mark.parametrize(
    ("listed", "acls", "says"),
    [
        (set(), set(), "no application's rights listed"),
        ({write("orders", "User:carol")}, None, "no authorizer"),
    ],
)
def test_a_failover_that_cannot_move_the_rights_completes_and_says_why(
    kafka: FakeKafka, listed: set[Grant], acls: set[Grant] | None, says: str
) -> None:
    kafka.target.grant_records[applications_of("ns/m")] = listed
    kafka.target.acls = acls
    op = failed_over(kafka.target)
    assert op.moved_rights is not None and says in op.moved_rights.message
    assert says in op.message


def test_a_target_that_does_not_answer_holds_no_failover(kafka: FakeKafka) -> None:
    """The records and offsets are handed over: a grants topic that cannot be read completes
    the operation, saying the rights were not granted."""
    kafka.target.grant_records[applications_of("ns/m")] = {write("orders", "User:carol")}
    access = Access(None, kafka.target)
    op = None
    for _ in range(2):
        op, _ = advance(FAILOVER, op, status(), MOVING, None, access, NOW)
    assert op is not None and op.phase == "CommittingOffsets"
    kafka.target.failing = {kafka.target._calls + 2}  # the commit passes, the listing fails
    op, _ = advance(FAILOVER, op, status(), MOVING, None, access, NOW)
    assert op is not None and op.phase == "Completed", op.message
    assert op.moved_rights is not None and "did not answer" in op.moved_rights.message
    assert kafka.target.acls == set()


def test_a_target_that_fails_midway_is_asked_again(kafka: FakeKafka) -> None:
    carol = write("orders", "User:carol")
    kafka.target.grant_records[applications_of("ns/m")] = {carol}
    op = failed_over(kafka.target)
    resumed = op.model_copy(update={"resumed_by": ResumedBy(mirror="b-to-a", id="r")})
    kafka.target.down = True
    access = Access(None, kafka.target)
    still, events = advance(FAILOVER, resumed, status(), MOVING, None, access, NOW)
    assert still == resumed and not events
    kafka.target.down = False
    _, events = advance(FAILOVER, still, status(), MOVING, None, access, NOW)
    assert kafka.target.acls == set() and [e.reason for e in events] == [
        "ApplicationRightsReturned"
    ]


principals = st.sampled_from(["User:a", "User:b", "User:c"])
grants = st.builds(
    write,
    st.sampled_from(["orders", "orders.eu", "payroll"]),
    principals,
    st.sampled_from(["ALLOW", "DENY"]),
)


@given(st.sets(grants), st.sets(grants))
def test_a_move_and_its_return_leave_exactly_what_others_made(
    foreign: set[Grant], listed: set[Grant]
) -> None:
    target = FakeCluster()
    target.acls = set(foreign)
    target.grant_records[applications_of("ns/m")] = set(listed)
    op = failed_over(target)
    selected = {g for g in listed if g.name.startswith("orders")}
    assert target.acls == foreign | selected  # granted no more than listed, for selected topics
    resumed = op.model_copy(update={"resumed_by": ResumedBy(mirror="b-to-a", id="r")})
    advance(FAILOVER, resumed, status(), MOVING, None, Access(None, target), NOW)
    assert target.acls == foreign


def test_a_forged_record_of_the_operations_cannot_make_the_return_delete_anothers_binding(
    kafka: FakeKafka,
) -> None:
    """The attack review's: whoever may write the grants topic recorded B's `DENY bob WRITE` as
    the operation's, and the Return deleted it. The Return deletes what the status lists."""
    target = kafka.target
    carol, bob_denied = write("orders", "User:carol"), write("orders", "User:bob", "DENY")
    target.acls = {bob_denied}
    target.grant_records[applications_of("ns/m")] = {carol}
    target.grant_records[moved_by("ns/m")] = {bob_denied}  # forged
    op = failed_over(target)
    assert op.moved_rights is not None
    assert {g.principal for g in op.moved_rights.grants} == {"User:carol"}
    resumed = op.model_copy(update={"resumed_by": ResumedBy(mirror="b-to-a", id="r")})
    advance(FAILOVER, resumed, status(), MOVING, None, Access(None, target), NOW)
    assert target.acls == {bob_denied}


def test_a_pass_run_again_after_one_cut_short_still_lists_what_it_made(kafka: FakeKafka) -> None:
    """Killed after the bindings were made, before the status said so: the next pass finds
    them on the target, recorded as its own, and lists them, so that the Return takes them."""
    target, carol = kafka.target, write("orders", "User:carol")
    target.grant_records[applications_of("ns/m")] = {carol}
    target.grant(moved_by("ns/m"), {carol})  # the pass cut short
    op = failed_over(target)
    assert op.moved_rights is not None and op.moved_rights.count == 1
    resumed = op.model_copy(update={"resumed_by": ResumedBy(mirror="b-to-a", id="r")})
    advance(FAILOVER, resumed, status(), MOVING, None, Access(None, target), NOW)
    assert target.acls == set()


@pytest.mark.parametrize(
    "forged",
    [
        Grant("BROKER", "kafka-cluster", "User:x", "*", "ALTER", "ALLOW"),
        Grant("TOPIC", "orders", "User:x", "*", "ALL", "ALLOW"),
        Grant("TOPIC", "orders", "User:x", "*", "ALTER_CONFIGS", "ALLOW"),
        Grant("GROUP", "orders", "User:x", "*", "READ", "ALLOW"),
        Grant("TOPIC", "orders", "User:" + "x" * 300, "*", "WRITE", "ALLOW"),
    ],
)
def test_a_forged_listing_moves_nothing_but_a_topics_write_or_reading_right(
    kafka: FakeKafka, forged: Grant
) -> None:
    """The second attack review's: a forged listing of Cluster ALTER was granted on B, and the
    Return, taking every grant for a topic's, never removed it."""
    carol = write("orders", "User:carol")
    kafka.target.grant_records[applications_of("ns/m")] = {carol, forged}
    failed_over(kafka.target)
    assert kafka.target.acls == {carol}


def test_a_record_of_a_filters_any_is_no_binding() -> None:
    """A forged record naming ANY made the client refuse to build the binding (ValueError),
    which held the failover in CommittingOffsets."""
    for field, value in (("operation", "ANY"), ("permission", "ANY"), ("resource", "ANY")):
        fields = {**asdict(write("orders", "User:x")), field: value}
        assert parse_record(json.dumps(["ns/m#applications", fields]).encode()) is None
