"""A mirror's owner bounds what its selections select (`spec.selectionPolicy`): a team's
selection of `.*` copies only the topics granted to it, and a selection no grant names copies
nothing and says so."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.status import MirrorTopicSelectionStatus
from kafka_mirror.api.worker_config import SelectionPatterns
from kafka_mirror.controller.status import Problem, selection_status
from kafka_mirror.render import build_worker_config
from kafka_mirror.topics import NameFilter
from tests.helpers.operations import spec as mirror_spec

SOURCE_TOPICS = ["team-a.orders", "team-a.invoices", "team-b.orders", "payroll"]
GRANTS = [
    {"selections": ["team-a-*"], "topics": ["team-a\\..*"]},
    {"selections": ["team-b", "shared"], "topics": ["team-b\\..*"]},
]


def spec(policy: Any = None) -> KafkaMirrorSpec:
    return mirror_spec() if policy is None else mirror_spec(selectionPolicy=policy)


def selected(spec: KafkaMirrorSpec, selection: str) -> list[str]:
    """What a selection of every topic (`.*`) selects under the mirror's policy, as the
    workers' configuration compiles it."""
    config, _ = build_worker_config(
        "ns", "m", spec, [SelectionPatterns(name=selection, includes=[".*"])]
    )
    (usable,), problems = config.compiled_selections()
    assert problems == []
    return [t for t in SOURCE_TOPICS if usable.matches(t)]


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
    assert spec().selection_bound("anything") is None


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
