"""Which source topics a mirror copies, and what they are called on the target.

Shared by the worker (what it mirrors) and the operator (what it reports). Mirrors MirrorMaker
2's ReplicationPolicy and TopicFilter: remote names by policy, internal topics never mirrored,
and no topic mirrored back to the cluster it came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from kafka_mirror.api.models import MAX_TOPIC_NAME_LENGTH
from kafka_mirror.api.status import SkippedTopic
from kafka_mirror.patterns import Pattern, compile_any

NamingPolicy = Literal["suffix", "prefix", "identity"]

# As MirrorMaker 2's DefaultReplicationPolicy.isInternalTopic: Kafka's own (`__*`, `.*`),
# MirrorMaker 2's and ours (`*.internal`), and Connect's/Streams' (`*-internal`).
_INTERNAL = re.compile(r"__.*|\..*|.*\.internal|.*-internal")


def is_internal(topic: str) -> bool:
    return bool(_INTERNAL.fullmatch(topic))


# Where other systems keep their own state, by their default names: Schema Registry's schemas,
# Confluent's components, Kafka Connect's configs, offsets and status, Kafka Streams' state
# store changelogs and repartition topics. Copies written there would corrupt that state.
_OTHERS_STATE = re.compile(
    r"_schemas|_confluent-.*|connect-(configs|offsets|status)|.*-changelog|.*-repartition"
)


def holds_others_state(topic: str) -> bool:
    return bool(_OTHERS_STATE.fullmatch(topic))


@dataclass(frozen=True)
class TopicNamer:
    """Remote topic names for one source alias under one policy."""

    source_alias: str
    policy: NamingPolicy = "suffix"
    separator: str = "."

    def remote_name(self, topic: str) -> str:
        if self.policy == "suffix":
            return f"{topic}{self.separator}{self.source_alias}"
        if self.policy == "prefix":
            return f"{self.source_alias}{self.separator}{topic}"
        return topic

    def source_name(self, remote: str) -> str | None:
        """The topic a remote name was made from, or None if `remote` is not one of this
        alias's remote names (under identity every name could be: None too)."""
        mark = f"{self.source_alias}{self.separator}"
        if self.policy == "suffix" and remote.endswith(f"{self.separator}{self.source_alias}"):
            return remote[: -len(mark)] or None
        if self.policy == "prefix" and remote.startswith(mark):
            return remote[len(mark) :] or None
        return None

    def origins(self, topic: str) -> list[str]:
        """The aliases a topic has already passed through, nearest first (empty if local).

        Under suffix `t.B.C` came from C, which had it from B; under prefix `C.B.t` the same.
        Identity names say nothing: records carry a provenance header instead.
        """
        if self.policy == "identity":
            return []
        parts = topic.split(self.separator)
        if self.policy == "suffix":
            return list(reversed(parts[1:]))
        return parts[:-1]

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """Would mirroring `topic` to `target_alias` send it back where it came from?"""
        return target_alias in self.origins(topic)


@dataclass(frozen=True)
class NameFilter:
    """Whole-name patterns (a selection's topics, the checkpointed groups): a name passes when
    it matches any include and no exclude, and, where `within` is given (what the mirror's
    owner granted a selection), one of those too."""

    includes: tuple[str, ...]
    excludes: tuple[str, ...] = ()
    within: tuple[str, ...] | None = None
    _includes: Pattern | None = field(init=False, repr=False, compare=False)
    _excludes: Pattern | None = field(init=False, repr=False, compare=False)
    _within: Pattern | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_includes", compile_any(self.includes))
        object.__setattr__(self, "_excludes", compile_any(self.excludes))
        object.__setattr__(self, "_within", compile_any(self.within or ()))

    def matches(self, topic: str) -> bool:
        included, excluded, within = self._includes, self._excludes, self._within
        return (
            included is not None
            and included.fullmatch(topic) is not None
            and (excluded is None or excluded.fullmatch(topic) is None)
            # granted nothing (`within` empty): nothing
            and (
                self.within is None or (within is not None and within.fullmatch(topic) is not None)
            )
        )


@dataclass(frozen=True)
class TopicPlan:
    """The outcome of selecting: source topic → remote name, and what was left out and why."""

    mirrored: dict[str, str]
    skipped: list[SkippedTopic]


def plan_topics(
    source_topics: Iterable[str],
    selections: Sequence[NameFilter],
    namer: TopicNamer,
    target_alias: str,
) -> TopicPlan:
    """Select topics (the union of all selections) and name them on the target.

    Internal topics are never selected. A selected topic is skipped, with the reason, when it
    came from the target (a cycle), when its remote name would be too long for Kafka, or when,
    under identity naming, its name is where another system keeps its state on the target.
    """
    mirrored: dict[str, str] = {}
    skipped: list[SkippedTopic] = []
    for topic in sorted(source_topics):
        if is_internal(topic) or not any(s.matches(topic) for s in selections):
            continue
        remote = namer.remote_name(topic)
        if namer.is_cycle(topic, target_alias):
            skipped.append(
                SkippedTopic(
                    name=topic,
                    reason=f"came from {target_alias}: mirroring it back would be a cycle",
                )
            )
        elif namer.policy == "identity" and holds_others_state(remote):
            skipped.append(
                SkippedTopic(
                    name=topic,
                    reason="under identity naming its copy would go to a topic where Schema "
                    "Registry, Kafka Connect or Kafka Streams keeps its state on the target: "
                    "never written (mirror it under prefix or suffix naming)",
                )
            )
        elif len(remote) > MAX_TOPIC_NAME_LENGTH:
            skipped.append(
                SkippedTopic(
                    name=topic,
                    reason=f"remote name {remote[:40]}… is {len(remote)} "
                    f"characters, over Kafka's limit of "
                    f"{MAX_TOPIC_NAME_LENGTH}",
                )
            )
        else:
            mirrored[topic] = remote
    return TopicPlan(mirrored, skipped)
