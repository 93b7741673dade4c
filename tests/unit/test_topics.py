"""Topic selection and naming: the seeds' examples, MirrorMaker 2's internal topics, cycles."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.patterns import (
    InvalidPattern,
    _AnyOf,
    compile_any,
    compile_pattern,
    pattern_error,
)
from kafka_mirror.topics import NameFilter, NamingPolicy, TopicNamer, is_internal, plan_topics

TOPICS = [
    "topic1",
    "topic2",
    "topic10",
    "aaa",
    "aaa.x",
    "bbb1",
    "branch_123_abc",
    "branch_001_",
    "branch_12_abc",
    "xaaa",
]
SEED_EXAMPLES = [
    (("^topic1$",), {"topic1"}),
    (("^topic1$", "^topic2$"), {"topic1", "topic2"}),
    (("^aaa.*",), {"aaa", "aaa.x"}),
    (("^aaa.*", "^bbb.*"), {"aaa", "aaa.x", "bbb1"}),
    (("^branch_[0-9]{3}_[a-z]*$",), {"branch_123_abc", "branch_001_"}),
    ((".*",), set(TOPICS)),
]


@pytest.mark.parametrize(("patterns", "expected"), SEED_EXAMPLES)
def test_the_seeds_pattern_examples(patterns: tuple[str, ...], expected: set[str]) -> None:
    selection = NameFilter(patterns)
    assert {t for t in TOPICS if selection.matches(t)} == expected


def test_matching_is_on_the_whole_name() -> None:
    selection = NameFilter(("accounting",))
    assert selection.matches("accounting")
    assert not selection.matches("accounting.invoices")
    assert not selection.matches("old-accounting")


def test_excludes_win_over_includes() -> None:
    selection = NameFilter(("accounting\\..*",), ("accounting\\.secret.*",))
    assert selection.matches("accounting.invoices")
    assert not selection.matches("accounting.secret-salaries")


@pytest.mark.parametrize(
    "topic",
    [
        "__consumer_offsets",
        "__transaction_state",
        ".hidden",
        "A.checkpoints.internal",
        "mm2-offset-syncs.B.internal",
        "app-KSTREAM-internal",
    ],
)
def test_internal_topics(topic: str) -> None:
    assert is_internal(topic)


@pytest.mark.parametrize(
    ("policy", "separator", "remote"),
    [
        ("suffix", ".", "mytopic.A"),
        ("prefix", ".", "A.mytopic"),
        ("identity", ".", "mytopic"),
        ("suffix", "_", "mytopic_A"),
    ],
)
def test_remote_names(policy: str, separator: str, remote: str) -> None:
    namer = TopicNamer("A", policy, separator)  # type: ignore[arg-type]
    assert namer.remote_name("mytopic") == remote


@pytest.mark.parametrize(
    ("policy", "topic", "cycle"),
    [
        ("suffix", "invoices.B", True),
        ("suffix", "invoices.B.C", True),
        ("suffix", "invoices.C", False),
        ("suffix", "invoices", False),
        ("prefix", "B.invoices", True),
        ("prefix", "C.B.invoices", True),
        ("prefix", "C.invoices", False),
        ("identity", "invoices.B", False),
    ],
)
def test_cycles_by_name(policy: str, topic: str, cycle: bool) -> None:
    namer = TopicNamer("A", policy)  # type: ignore[arg-type]
    assert namer.is_cycle(topic, "B") is cycle


def test_plan_is_the_union_of_selections_and_says_why_it_skips() -> None:
    long_topic = "t" * 248
    plan = plan_topics(
        [
            "accounting.invoices",
            "hr.people",
            "sales.orders",
            "accounting.invoices.B",
            "__consumer_offsets",
            long_topic,
        ],
        [NameFilter(("accounting\\..*",)), NameFilter(("hr\\..*", "t+"))],
        TopicNamer("A"),
        target_alias="B",
    )
    assert plan.mirrored == {
        "accounting.invoices": "accounting.invoices.A",
        "hr.people": "hr.people.A",
    }
    reasons = {s.name: s.reason for s in plan.skipped}
    assert "cycle" in reasons["accounting.invoices.B"]
    assert "250 characters, over Kafka's limit of 249" in reasons[long_topic]


def test_no_selection_mirrors_nothing() -> None:
    plan = plan_topics(["a", "b"], [], TopicNamer("A"), "B")
    assert plan.mirrored == {} and plan.skipped == []


# Patterns that take exponential time in a backtracking engine on a name of a's.
CATASTROPHIC = ["(a+)+b", "(a|a)*b", "(a|aa)+b", "(.*a){20}b", "((a*)*)*b"]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_patterns_match_in_linear_time(pattern: str) -> None:
    topics = ["a" * length for length in range(1, 250)]
    started = time.monotonic()
    plan = plan_topics(topics, [NameFilter((pattern,))], TopicNamer("A"), "B")
    assert plan.mirrored == {}
    # Python's re takes 3 s at 26 characters, doubling with each: at 249, longer than the universe
    # has existed. RE2 takes milliseconds; the bound leaves a busy machine room to spare.
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(?=orders)orders.*", "invalid perl operator: (?= (RE2 syntax: no lookaround"),
        ("(a)\\1", "invalid escape sequence: \\1 (RE2 syntax:"),
        ("a*+", "bad repetition operator: *+ (RE2 syntax:"),
        ("((a{100}){100}){100}", "invalid repetition size"),
        ("[unclosed", "missing ]: [unclosed"),
    ],
)
def test_patterns_a_linear_engine_cannot_run_are_refused_with_the_reason(
    pattern: str, reason: str
) -> None:
    error = pattern_error(pattern)
    assert error is not None and error.startswith(reason)
    with pytest.raises(InvalidPattern):
        NameFilter((pattern,))


@given(
    topic=st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True),
    policy=st.sampled_from(["suffix", "prefix"]),
    separator=st.sampled_from([".", "_", "-"]),
)
def test_source_name_undoes_remote_name(topic: str, policy: NamingPolicy, separator: str) -> None:
    namer = TopicNamer("A", policy, separator)
    assert namer.source_name(namer.remote_name(topic)) == topic


def test_source_name_is_none_for_local_names_and_under_identity() -> None:
    assert TopicNamer("A").source_name("orders") is None
    assert TopicNamer("A").source_name("orders.B") is None
    assert TopicNamer("A", "prefix").source_name("B.orders") is None
    assert TopicNamer("A", "identity").source_name("orders") is None


@pytest.mark.parametrize(
    "topic",
    ["_schemas", "_confluent-metrics", "connect-offsets", "app-store-changelog", "x-repartition"],
)
def test_under_identity_naming_no_topic_goes_where_another_system_keeps_state(topic: str) -> None:
    everything = [NameFilter((".*",))]
    plan = plan_topics([topic], everything, TopicNamer("A", "identity"), "B")
    assert plan.mirrored == {} and "Schema Registry, Kafka Connect or Kafka Streams" in (
        plan.skipped[0].reason
    )
    # Under prefix naming its copy is `A.<topic>`, no other system's.
    assert plan_topics([topic], everything, TopicNamer("A", "prefix"), "B").mirrored


PIECES = ["a", "b", ".", "[ab]", "a*", "(?i)A", "^a", "b$", "x|a"]


@given(
    st.lists(st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map("".join), max_size=6),
    st.lists(st.text("abAB.x", max_size=4), min_size=1, max_size=12),
)
def test_a_list_of_patterns_matches_as_its_patterns_one_by_one(
    patterns: list[str], names: list[str]
) -> None:
    """One alternation per list (patterns.compile_any) against the model: any of the patterns,
    each alone, matches the whole name; flags and anchors stay within their pattern."""
    matcher = compile_any(patterns)
    for name in names:
        alone = any(compile_pattern(p).fullmatch(name) for p in patterns)
        assert (matcher is not None and matcher.fullmatch(name) is not None) == alone, name


def test_patterns_too_large_together_are_tried_one_by_one() -> None:
    each = _AnyOf([compile_pattern("a+"), compile_pattern("b")])
    assert each.fullmatch("aaa") and each.fullmatch("b") and not each.fullmatch("ab")
