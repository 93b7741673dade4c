"""The topic ACL sync's rules (kafka_mirror.worker.acl_sync) against a small model of Kafka's
authorizer: the target never grants more than the source granted on the corresponding topics,
the reading rights all arrive, denies follow, and rounds of syncs leave the target holding
exactly what someone else made plus what is desired now."""

from __future__ import annotations

import json
from concurrent.futures import Future
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.kafka.acl_grants import (
    APPLICATIONS,
    CALL_BATCH,
    READING,
    Grant,
    applications_of,
    change,
    copies,
    moved,
    moved_by,
    parse_record,
)
from kafka_mirror.topics import NameFilter
from kafka_mirror.worker.acl_sync import (
    AclSync,
    SourceBinding,
    application_grants,
    plan_sync,
    remote_grants,
)

TOPICS = ["pay", "pay.cards", "payroll", "hr", "orders"]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
OPERATIONS = ["READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER", "DELETE", "CREATE", "ALL"]
WRITING = {"WRITE", "ALTER", "ALTER_CONFIGS", "DELETE", "CREATE", "ALL", "IDEMPOTENT_WRITE"}

bindings = st.builds(
    SourceBinding,
    resource=st.just("TOPIC"),
    pattern=st.sampled_from(["LITERAL", "PREFIXED"]),
    name=st.sampled_from([*TOPICS, "pay", "p", "*", "or"]),
    principal=st.sampled_from(PRINCIPALS),
    host=st.just("*"),
    operation=st.sampled_from(OPERATIONS),
    permission=st.sampled_from(["ALLOW", "DENY"]),
)
mirrored_topics = st.sets(st.sampled_from(TOPICS)).map(lambda ts: {t: f"{t}.A" for t in ts})


def allows(
    source: list[SourceBinding],
    principal: str,
    operation: str,
    topic: str,
    permission: str = "ALLOW",
) -> bool:
    """Kafka's rule for ALLOW bindings alone (or DENY ones alone): the operation itself or ALL,
    on a binding that covers the topic (literal, `*`, or a prefix)."""
    return any(
        b.permission == permission
        and b.principal == principal
        and b.operation in (operation, "ALL")
        and b.covers(topic)
        for b in source
    )


@given(st.lists(bindings, max_size=12), mirrored_topics)
def test_the_target_grants_nothing_the_source_did_not_and_no_writing_right(
    source: list[SourceBinding], mirrored: dict[str, str]
) -> None:
    remote_to_source = {remote: topic for topic, remote in mirrored.items()}
    for grant in remote_grants(source, mirrored, [], {}):
        assert grant.name in remote_to_source, grant  # only mirrored topics' copies
        if grant.permission == "ALLOW":
            assert grant.operation not in WRITING, grant
            assert allows(source, grant.principal, grant.operation, remote_to_source[grant.name])


@given(st.lists(bindings, max_size=12), mirrored_topics)
def test_every_reading_right_and_every_deny_of_one_arrives(
    source: list[SourceBinding], mirrored: dict[str, str]
) -> None:
    grants = remote_grants(source, mirrored, [], {})
    for topic, remote in mirrored.items():
        for principal in PRINCIPALS:
            for operation in ("READ", "DESCRIBE"):
                if allows(source, principal, operation, topic):
                    assert Grant("TOPIC", remote, principal, "*", operation, "ALLOW") in grants
    for binding in source:
        if binding.permission != "DENY":
            continue
        denied = READING if binding.operation == "ALL" else (binding.operation,)
        for topic in filter(binding.covers, mirrored):
            for operation in set(denied) & set(READING):
                assert (
                    Grant("TOPIC", mirrored[topic], binding.principal, "*", operation, "DENY")
                    in grants
                )


@given(st.lists(bindings, max_size=12), mirrored_topics)
def test_the_applications_listed_get_on_the_local_topics_exactly_the_rights_they_had(
    source: list[SourceBinding], mirrored: dict[str, str]
) -> None:
    """What a failover grants on the target's `t`: each principal's WRITE and reading rights
    (and their DENYs) the source gave on `t`, nothing else, no other topic; never ALTER,
    DELETE or CREATE."""
    grants = application_grants(source, mirrored, {})
    assert all(g.name in mirrored and g.operation in ("WRITE", *READING) for g in grants)
    for topic in mirrored:
        for principal in PRINCIPALS:
            for operation in ("WRITE", "READ", "DESCRIBE"):
                allow = Grant("TOPIC", topic, principal, "*", operation, "ALLOW")
                deny = Grant("TOPIC", topic, principal, "*", operation, "DENY")
                assert (allow in grants) == allows(source, principal, operation, topic)
                assert (deny in grants) == allows(source, principal, operation, topic, "DENY")


def test_the_lists_of_applications_rights_are_no_copies_of_bindings() -> None:
    """A binding listed as an application's on the other side of a pair is no copy made there:
    the source's own WRITE stays the source's (and is listed again by the sync the other way)."""
    write = Grant("TOPIC", "t", "User:p", "*", "WRITE", "ALLOW")
    read = Grant("TOPIC", "t.B", "User:c", "*", "READ", "ALLOW")
    held = {(applications_of("ns/b-to-a"), write): True, ("ns/b-to-a", read): True}
    assert copies(held, {"t": "t.A"}) == {read}
    assert applications_of("ns/m").endswith(APPLICATIONS)


def test_moved_rights_are_copied_back_to_a_topic_of_another_name_only() -> None:
    """Issue 62's failback: the consumer's READ a failover moved onto B's `t` is its right on
    `t`, which it needs on A's `t.B` after the Return; under identity naming it would go back
    onto A's `t`, where it came from, and outlive its revocation there."""
    read = Grant("TOPIC", "t", "User:c", "*", "READ", "ALLOW")
    held = {(moved_by("ns/a-to-b"), read): True}
    assert copies(held, {"t": "t.B"}) == set()
    assert copies(held, {"t": "t"}) == {read}
    # Copied, but never listed as the applications' rights to move: b-to-a's Failover would
    # move them back onto A's `t`, where they may have been revoked since (the attack review).
    assert moved(held) == {read}
    assert moved({("ns/b-to-a", read): True, (applications_of("ns/m"), read): True}) == set()


def test_principals_are_renamed_for_the_target() -> None:
    source = [SourceBinding("TOPIC", "LITERAL", "pay", "User:svc-x", "*", "READ", "ALLOW")]
    grants = remote_grants(source, {"pay": "pay.A"}, [], {"User:svc-x": "User:svc-x-dr"})
    assert grants == {Grant("TOPIC", "pay.A", "User:svc-x-dr", "*", "READ", "ALLOW")}


def test_a_prefixed_binding_becomes_literal_ones_for_the_mirrored_topics_only() -> None:
    source = [SourceBinding("TOPIC", "PREFIXED", "pay", "User:bob", "*", "ALL", "ALLOW")]
    grants = remote_grants(source, {"pay.cards": "pay.cards.A", "hr": "hr.A"}, [], {})
    assert grants == {
        Grant("TOPIC", "pay.cards.A", "User:bob", "*", "READ", "ALLOW"),
        Grant("TOPIC", "pay.cards.A", "User:bob", "*", "DESCRIBE", "ALLOW"),
    }


REMOTES = {("TOPIC", topic) for topic in ("pay.A", "hr.A", "orders.A")} | {("GROUP", "pay-app")}
grants = st.builds(
    lambda resource_name, **fields: Grant(*resource_name, **fields),
    resource_name=st.sampled_from(sorted(REMOTES)),
    principal=st.sampled_from(PRINCIPALS),
    host=st.just("*"),
    operation=st.sampled_from(["READ", "DESCRIBE"]),
    permission=st.sampled_from(["ALLOW", "DENY"]),
)


@given(st.sets(grants), st.lists(st.sets(grants), min_size=1, max_size=6))
def test_rounds_of_syncs_leave_exactly_the_foreign_bindings_and_the_desired_ones(
    foreign: set[Grant], rounds: list[set[Grant]]
) -> None:
    target, ours = set(foreign), set[Grant]()
    for desired in rounds:
        plan = plan_sync(desired, ours, target, REMOTES)
        assert not plan.delete & (foreign - ours), "a binding someone else made was deleted"
        target = (target | plan.create) - plan.delete
        ours = plan.ours
        assert target == foreign | desired
        assert ours <= target and not ours & foreign


@given(st.sets(grants), st.sets(grants), st.sets(st.sampled_from(sorted(REMOTES))))
def test_a_topic_out_of_the_plan_keeps_its_bindings(
    ours: set[Grant], desired: set[Grant], mirrored_now: set[tuple[str, str]]
) -> None:
    """A worker just started knows no topic yet; a topic unmirrored or unread for a moment:
    none of their bindings goes, its DENYs kept with its data."""
    plan = plan_sync(desired, ours, ours, mirrored_now)
    assert all((g.resource, g.name) in mirrored_now for g in plan.delete)
    assert plan_sync(desired, ours, ours, set()).delete == set()


GROUPS = ["pay-app", "pay-batch", "hr-app"]
group_bindings = st.builds(
    SourceBinding,
    resource=st.sampled_from(["GROUP", "TOPIC"]),
    pattern=st.sampled_from(["LITERAL", "PREFIXED"]),
    name=st.sampled_from([*GROUPS, "pay", "p", "*"]),
    principal=st.sampled_from(PRINCIPALS),
    host=st.just("*"),
    operation=st.sampled_from([*OPERATIONS, "DESCRIBE"]),
    permission=st.sampled_from(["ALLOW", "DENY"]),
)


@given(st.lists(group_bindings, max_size=12), st.sets(st.sampled_from(GROUPS)))
def test_a_checkpointed_group_gets_its_reading_rights_and_denies_and_nothing_more(
    source: list[SourceBinding], checkpointed: set[str]
) -> None:
    grants = {g for g in remote_grants(source, {}, checkpointed, {}) if g.resource == "GROUP"}
    groups_bound = [b for b in source if b.resource == "GROUP"]
    for grant in grants:
        assert grant.name in checkpointed, grant  # only the checkpointed groups, by their names
        assert grant.operation in ("READ", "DESCRIBE"), grant  # never DELETE on a group
        if grant.permission == "ALLOW":
            assert allows(groups_bound, grant.principal, grant.operation, grant.name), grant
    # An ALLOW on every group (`*`) is no grant of the target's groups of those names.
    named = [b for b in groups_bound if not (b.name == "*" and b.pattern == "LITERAL")]
    for group in checkpointed:
        for principal in PRINCIPALS:
            for operation in ("READ", "DESCRIBE"):
                if allows(named, principal, operation, group):
                    assert Grant("GROUP", group, principal, "*", operation, "ALLOW") in grants
    for binding in groups_bound:
        if binding.permission == "DENY" and binding.operation in ("ALL", "READ", "DESCRIBE"):
            denied = ("READ", "DESCRIBE") if binding.operation == "ALL" else (binding.operation,)
            for group in filter(binding.covers, checkpointed):
                for operation in denied:
                    assert (
                        Grant("GROUP", group, binding.principal, "*", operation, "DENY") in grants
                    )


def test_an_allow_on_every_group_is_not_copied_and_a_deny_on_every_group_is() -> None:
    source = [
        SourceBinding("GROUP", "LITERAL", "*", "User:bob", "*", "READ", "ALLOW"),
        SourceBinding("GROUP", "LITERAL", "*", "User:eve", "*", "READ", "DENY"),
    ]
    assert remote_grants(source, {}, ["payments-app"], {}) == {
        Grant("GROUP", "payments-app", "User:eve", "*", "READ", "DENY")
    }


def test_a_topic_binding_grants_nothing_on_a_group_of_the_same_name() -> None:
    source = [SourceBinding("TOPIC", "LITERAL", "pay", "User:bob", "*", "READ", "ALLOW")]
    assert remote_grants(source, {}, ["pay"], {}) == set()
    source = [SourceBinding("GROUP", "LITERAL", "pay", "User:bob", "*", "READ", "ALLOW")]
    assert remote_grants(source, {"pay": "pay.A"}, [], {}) == set()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@given(
    json_values,
    st.dictionaries(
        st.sampled_from(
            ["resource", "name", "topic", "principal", "host", "operation", "permission"]
        ),
        json_values,
    ),
)
def test_any_record_anyone_wrote_is_a_grant_of_strings_or_nothing(
    owner: object, fields: dict[str, object]
) -> None:
    """Whoever may write the grants topic cannot stop a worker with a record of odd types."""
    for key in (json.dumps([owner, fields]).encode(), json.dumps(fields).encode(), b"\xff"):
        record = parse_record(key)
        if record is not None:
            mirror, grant = record
            assert isinstance(mirror, str)
            assert all(isinstance(v, str) for v in vars(grant).values())
            hash(record)


def test_a_record_of_the_previous_version_is_read_as_a_topic_binding() -> None:
    fields = {"host": "*", "operation": "READ", "permission": "ALLOW", "principal": "User:a"}
    key = json.dumps(["ns/m", {**fields, "topic": "t.A"}]).encode()
    assert parse_record(key) == ("ns/m", Grant("TOPIC", "t.A", "User:a", "*", "READ", "ALLOW"))


class CountingAdmin:
    """An admin client in memory that records the size of each create and delete call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def create_acls(self, bindings: list[object]) -> dict[object, Future[None]]:
        self.calls.append(("create", len(bindings)))
        return {i: done() for i in range(len(bindings))}

    def delete_acls(self, filters: list[object]) -> dict[object, Future[list[object]]]:
        self.calls.append(("delete", len(filters)))
        return {i: done() for i in range(len(filters))}


def done() -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(None)
    return future


def test_a_large_change_goes_in_calls_kraft_takes_denys_first_and_last() -> None:
    """KRaft's controller refuses one request over 10,000 records: a first sync of a large
    source goes in calls of CALL_BATCH, DENYs made before ALLOWs and deleted after them."""
    allow = {Grant("TOPIC", f"t{i}.A", "User:a", "*", "READ", "ALLOW") for i in range(2500)}
    deny = {Grant("TOPIC", f"t{i}.A", "User:e", "*", "READ", "DENY") for i in range(1200)}
    admin = CountingAdmin()
    change(admin, "target", allow | deny, allow | deny)  # type: ignore[arg-type]
    assert admin.calls == [
        ("create", CALL_BATCH),
        ("create", 200),
        *[("create", CALL_BATCH)] * 2,
        ("create", 500),
        *[("delete", CALL_BATCH)] * 2,
        ("delete", 500),
        ("delete", CALL_BATCH),
        ("delete", 200),
    ]


def test_a_record_too_long_or_too_deep_to_parse_is_nobodys() -> None:
    """The attack review's: a key of 50,000 `[` exhausted json's recursion, which nothing
    caught, so every worker's sync and the operator's refresh of every mirror onto the
    cluster failed on each round."""
    assert parse_record(b"[" * 50_000) is None
    assert parse_record(b"[" * 2000 + b"]" * 2000) is None
    padded = json.dumps(["ns/m", {"name": "t" * 5000}]).encode()
    assert parse_record(padded) is None


def test_a_deny_renamed_still_denies_the_source_name_on_the_target() -> None:
    """The attack review's: bob renamed away (`User:bob` → `User:nobody`) with `ALLOW User:*`
    on the source left bob's DENY on nobody alone, and bob read the copy."""
    source = [
        SourceBinding("TOPIC", "LITERAL", "pay", "User:*", "*", "READ", "ALLOW"),
        SourceBinding("TOPIC", "LITERAL", "pay", "User:bob", "*", "READ", "DENY"),
    ]
    renamed = {"User:bob": "User:nobody"}
    grants = remote_grants(source, {"pay": "pay.A"}, [], renamed)
    for principal in ("User:bob", "User:nobody"):
        assert Grant("TOPIC", "pay.A", principal, "*", "READ", "DENY") in grants
    local = application_grants(source, {"pay": "pay.A"}, renamed)
    assert Grant("TOPIC", "pay", "User:bob", "*", "READ", "DENY") in local


class RecordsInMemory:
    """The grants topic's records as AclSync writes them."""

    def __init__(self) -> None:
        self.written: list[tuple[str, set[Grant], bool]] = []

    def record(self, owner: str, grants: set[Grant], owned: bool) -> None:
        self.written.append((owner, set(grants), owned))


def test_a_topic_out_of_the_plan_loses_its_listed_rights() -> None:
    """The attack review's: a right listed for a topic then out of the plan stayed listed
    after its revocation on the source, and a failover once the topic was back granted it."""
    sync = AclSync(None, None, "ns/m", NameFilter((".*",)), {})  # type: ignore[arg-type]
    records = RecordsInMemory()
    sync.__dict__["records"] = records
    stale = Grant("TOPIC", "hr", "User:alice", "*", "WRITE", "ALLOW")
    held = {(applications_of("ns/m"), stale): True}
    binding = SourceBinding("TOPIC", "LITERAL", "pay", "User:bob", "*", "WRITE", "ALLOW")
    sync._list_applications([binding], {"pay": "pay.A"}, held)
    assert records.written == [
        (applications_of("ns/m"), {Grant("TOPIC", "pay", "User:bob", "*", "WRITE", "ALLOW")}, True),
        (applications_of("ns/m"), {stale}, False),
    ]
