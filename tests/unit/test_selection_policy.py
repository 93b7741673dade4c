"""A mirror's owner bounds what its selections select (`spec.selectionPolicy`): a team's
selection of `.*` copies only the topics granted to it, and a selection no grant names copies
nothing and says so."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from kafka_mirror.api.models import KafkaMirrorSpec, SelectionRef
from kafka_mirror.api.status import MirrorTopicSelectionStatus
from kafka_mirror.api.worker_config import SelectionPatterns
from kafka_mirror.controller.selections import selection_status
from kafka_mirror.controller.status import Problem
from kafka_mirror.render import build_worker_config, fitting_selections
from kafka_mirror.topics import NameFilter
from tests.helpers.operations import spec as mirror_spec

SOURCE_TOPICS = ["team-a.orders", "team-a.invoices", "team-b.orders", "payroll"]
GRANTS = [
    {"selections": ["team-a-*"], "topics": ["team-a\\..*"]},
    {"selections": ["team-b", "shared"], "topics": ["team-b\\..*"]},
]


def spec(policy: Any = None) -> KafkaMirrorSpec:
    return mirror_spec() if policy is None else mirror_spec(selectionPolicy=policy)


def selected(spec: KafkaMirrorSpec, selection: str, namespace: str = "ns") -> list[str]:
    """What a selection of every topic (`.*`) in `namespace` selects under the policy of the
    mirror in namespace `ns`, as the workers' configuration compiles it."""
    patterns = SelectionPatterns(name=selection, namespace=namespace, includes=[".*"])
    config, _ = build_worker_config("ns", "m", spec, [patterns])
    usable, problems = config.compiled_selections()
    assert problems == [] and len(usable) <= 1  # none: left out, granted nothing
    return [t for t in SOURCE_TOPICS if any(u.matches(t) for u in usable)]


@pytest.mark.parametrize(
    ("selection", "topics"),
    [
        ("team-a-orders", ["team-a.orders", "team-a.invoices"]),
        ("team-b", ["team-b.orders"]),
        ("shared", ["team-b.orders"]),
        ("team-c", []),  # named by no grant: nothing
    ],
)
def test_a_selection_selects_only_what_its_grants_allow(selection: str, topics: list[str]) -> None:
    assert selected(spec(GRANTS), selection) == topics


def test_without_a_policy_a_selection_selects_any_topic() -> None:
    assert selected(spec(), "anything") == SOURCE_TOPICS
    assert spec().selection_bound(SelectionRef("ns", "anything"), "ns") is None


NAMESPACE_GRANTS = [
    {"namespaces": ["team-a"], "topics": ["team-a\\..*"]},
    {"namespaces": ["team-b"], "selections": ["orders-*"], "topics": ["team-b\\..*"]},
]


@pytest.mark.parametrize(
    ("namespace", "selection", "topics"),
    [
        ("team-a", "anything", ["team-a.orders", "team-a.invoices"]),
        ("team-b", "orders-x", ["team-b.orders"]),
        ("team-b", "other", []),  # in a granted namespace, but not by that grant's names
        ("team-c", "team-a-all", []),  # a name that fits nothing: grants go to namespaces
        ("ns", "team-a-all", []),  # the mirror's own namespace is not named either
    ],
)
def test_grants_to_namespaces_cover_only_their_selections(
    namespace: str, selection: str, topics: list[str]
) -> None:
    assert selected(spec(NAMESPACE_GRANTS), selection, namespace) == topics


def test_a_selection_of_another_namespace_granted_nothing_is_left_out_of_the_configuration() -> (
    None
):
    ungranted = SelectionPatterns(name="big", namespace="elsewhere", includes=["x" * 1000])
    for policy in (None, GRANTS):
        config, _ = build_worker_config("ns", "m", spec(policy), [ungranted])
        assert config.selections == []
    assert selected(spec(), "everything", "ns") == SOURCE_TOPICS


def test_a_name_grant_covers_only_the_mirrors_own_namespace() -> None:
    # team-b-style name grants, from a tenant of another namespace who names theirs "team-b"
    assert selected(spec(GRANTS), "team-b", "elsewhere") == []


def test_selections_of_other_namespaces_are_told_apart_in_the_configuration() -> None:
    policy = [{"namespaces": ["ns", "other"], "topics": [".*"]}]
    selections = [
        SelectionPatterns(name="orders", namespace="other", includes=["a"]),
        SelectionPatterns(name="orders", namespace="ns", includes=["b"]),
    ]
    config, _ = build_worker_config("ns", "m", spec(policy), selections)
    assert [s.label("ns") for s in config.selections] == ["orders", "other/orders"]


def test_grants_naming_a_selection_add_up() -> None:
    both = [*GRANTS, {"selections": ["team-b"], "topics": ["payroll"]}]
    assert selected(spec(both), "team-b") == ["team-b.orders", "payroll"]


@pytest.mark.parametrize(
    "grant",
    [
        {"selections": [], "topics": ["x"]},
        {"selections": ["a"], "topics": []},
        {"selections": ["a"], "topics": ["(?=lookahead)"]},  # not RE2
    ],
)
def test_a_grant_without_selections_or_topics_or_with_a_bad_pattern_is_refused(
    grant: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError):
        spec([grant])


def test_a_name_filter_within_its_bound() -> None:
    bounded = NameFilter((".*",), ("team-a\\.invoices",), ("team-a\\..*",))
    assert [t for t in SOURCE_TOPICS if bounded.matches(t)] == ["team-a.orders"]
    assert not NameFilter((".*",), (), ()).matches("team-a.orders")  # granted nothing


def test_a_selection_granted_nothing_is_not_ready_and_says_whom_to_ask() -> None:
    problem = Problem(
        "NotGranted", "KafkaMirror m's spec.selectionPolicy grants this selection no topics"
    )
    now = datetime(2026, 11, 26, tzinfo=UTC)
    status = selection_status(
        1,
        MirrorTopicSelectionStatus(),
        [],
        None,
        NameFilter((".*",), (), ()),
        SOURCE_TOPICS,
        now,
        problem,
    )
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason, ready.message) == ("False", "NotGranted", problem.message)
    assert status.matched_topic_count == 0
    found = next(c for c in status.conditions if c.type == "MirrorFound")
    assert found.status == "True"


def big(name: str, namespace: str = "ns") -> SelectionPatterns:
    """A selection of about 180 KiB: 256 patterns of 700 characters."""
    patterns = [f"{name}-{i}-" + "x" * 690 for i in range(256)]
    return SelectionPatterns(name=name, namespace=namespace, includes=patterns)


def test_selections_over_the_configmaps_budget_are_left_out_newest_first() -> None:
    oldest, middle, newest = big("oldest"), big("middle"), big("newest")
    kept, left_out = fitting_selections("ns", spec(), [oldest, middle, newest])
    assert [s.name for s in kept] == ["oldest", "middle"]
    assert [s.name for s in left_out] == ["newest"]
    # A selection of another namespace granted nothing takes no room.
    ungranted = big("ungranted", "elsewhere")
    kept, left_out = fitting_selections("ns", spec(), [ungranted, oldest, middle])
    assert ([s.name for s in kept], left_out) == (["oldest", "middle"], [])
