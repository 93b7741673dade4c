"""A MirrorTopicSelection's status: whether its patterns compile, whether its mirror uses it and
grants it topics, and which topics of the mirror's source it matches now."""

from __future__ import annotations

from datetime import datetime

import kopf

from kafka_mirror.api.status import MirrorTopicSelectionStatus
from kafka_mirror.api.worker_config import SelectionPatterns
from kafka_mirror.controller.conditions import condition, progress_conditions
from kafka_mirror.controller.inputs import selection_mirror, selection_patterns
from kafka_mirror.controller.readers import Readers
from kafka_mirror.controller.status import MAX_TOPIC_NAMES, Problem
from kafka_mirror.patterns import pattern_error
from kafka_mirror.render import SELECTIONS_BUDGET_BYTES
from kafka_mirror.topics import NameFilter, is_internal


def invalid_patterns(selection: SelectionPatterns) -> list[str]:
    found = []
    for field, patterns in (("includes", selection.includes), ("excludes", selection.excludes)):
        for index, pattern in enumerate(patterns):
            error = pattern_error(pattern)
            if error is not None:
                found.append(f"{field}[{index}] {pattern!r}: {error}")
    return found


def observe_selection(
    body: kopf.Body,
    previous: MirrorTopicSelectionStatus,
    mirror_exists: bool,
    readers: Readers,
    now: datetime,
) -> MirrorTopicSelectionStatus:
    namespace = body["metadata"]["namespace"]
    mirror_namespace, mirror = selection_mirror(namespace, body["spec"])
    key = f"{mirror_namespace}/{mirror}"
    patterns = selection_patterns(namespace, body["metadata"]["name"], body["spec"])
    invalid = invalid_patterns(patterns)
    bound_of = readers.selection_bounds.get(key)
    bound = None if bound_of is None else bound_of(patterns.ref())
    mirror_problem = not_granted = None
    if mirror_namespace != namespace and (not mirror_exists or bound is None or bound == []):
        # One answer whether the mirror is missing or grants nothing: a selection must not
        # tell another namespace's tenant which mirrors exist there, nor their topics.
        mirror_problem = Problem(
            "NotGranted",
            f"no KafkaMirror {key} grants selections of namespace {namespace} any topics: it "
            "selects nothing until that mirror's spec.selectionPolicy names this namespace "
            "(ask the mirror's owner)",
        )
        bound = []
    elif not mirror_exists:
        mirror_problem = Problem(
            "MirrorNotFound",
            f"no KafkaMirror {mirror} in namespace {namespace}: create it, or set "
            "spec.mirror to an existing mirror",
        )
    elif patterns.ref() in readers.left_out.get(key, set()):
        mirror_problem = Problem(
            "TooLarge",
            f"KafkaMirror {mirror}'s selections, this one with them, are over the "
            f"{SELECTIONS_BUDGET_BYTES // 1024} KiB its workers' configuration holds: this one "
            "is left out (older ones keep their place); make it smaller (fewer or broader "
            "patterns) or move some of its patterns to another mirror",
        )
    elif bound == []:
        not_granted = Problem(
            "NotGranted",
            f"KafkaMirror {mirror}'s spec.selectionPolicy grants this selection no topics: it "
            "selects nothing until a grant names it (ask the mirror's owner)",
        )
    within = None if bound is None else tuple(bound)
    selection = (
        None if invalid else NameFilter(tuple(patterns.includes), tuple(patterns.excludes), within)
    )
    topics = None if mirror_problem else readers.source_topics.get(key)
    return selection_status(
        body["metadata"].get("generation", 0),
        previous,
        invalid,
        mirror_problem,
        selection,
        topics,
        now,
        not_granted,
    )


def selection_status(
    generation: int,
    previous: MirrorTopicSelectionStatus,
    invalid_patterns: list[str],
    mirror_problem: Problem | None,
    selection: NameFilter | None,
    source_topics: list[str] | None,
    now: datetime,
    not_granted: Problem | None = None,
) -> MirrorTopicSelectionStatus:
    """A selection's status: what it matches now, and whether it can take effect (not when the
    mirror's selectionPolicy grants it nothing: `not_granted`)."""
    matched: list[str] = []
    if selection is not None and source_topics is not None:
        matched = sorted(t for t in source_topics if not is_internal(t) and selection.matches(t))
    before = previous.conditions
    valid_message = (
        "invalid patterns (the selection is ignored until they compile): "
        + "; ".join(invalid_patterns)
        if invalid_patterns
        else "all patterns compile"
    )
    conditions = [
        condition(
            before,
            "PatternsValid",
            not invalid_patterns,
            "InvalidPattern" if invalid_patterns else "Valid",
            valid_message,
            generation,
            now,
        ),
        condition(
            before,
            "MirrorFound",
            mirror_problem is None,
            mirror_problem.reason if mirror_problem else "Found",
            mirror_problem.message if mirror_problem else "the mirror applies this selection",
            generation,
            now,
        ),
    ]
    problem = next((c for c in conditions if c.status == "False"), None) or not_granted
    if problem is not None:
        ready = condition(before, "Ready", False, problem.reason, problem.message, generation, now)
    elif source_topics is None:
        ready = condition(
            before,
            "Ready",
            True,
            "Applied",
            "applied to the mirror; the source cluster's topics are not known yet",
            generation,
            now,
        )
    else:
        message = f"matches {len(matched)} topics on the source now"
        ready = condition(before, "Ready", True, "Applied", message, generation, now)
    return MirrorTopicSelectionStatus(
        observed_generation=generation,
        conditions=[ready, *progress_conditions(ready, before, generation, now), *conditions],
        matched_topic_count=len(matched),
        matched_topics=matched[:MAX_TOPIC_NAMES],
        invalid_patterns=invalid_patterns,
    )
