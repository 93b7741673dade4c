"""The mirrored records' schemas, copied from the source's registry to the target's
(`spec.schemaRegistry`, api/schema_registry.py) by the workers, and looked up there by the
audit.

A record in Confluent's wire format carries the id its schema has in the source's registry. The
target's registry gives the same schema an id of its own (it may hold another schema under the
source's id), so each schema a record names is registered there, its references first, under
the subject the naming policy gives, and the record goes with the target's id in place of the
source's: `ids` maps one to the other. A record whose schema is not on the target yet waits for
it (its partition stops at it, `Partitions.wait_for_schema`); nothing is copied ahead of its
schema. Subjects keep their version order: versions are copied oldest first.

The registry calls run off the mirroring loop (`gather`, on the worker's schema thread); the
loop applies their result (`apply`). One thin client layer: confluent-kafka's
SchemaRegistryClient, one timeout, one error mapping (`_registry_call`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import httpx2
from confluent_kafka.schema_registry import (
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
)
from confluent_kafka.schema_registry.error import SchemaRegistryError

from kafka_mirror.api.worker_config import SchemaRegistryConnection
from kafka_mirror.kafka.formats import schema_wait_reason
from kafka_mirror.topics import NameFilter

log = logging.getLogger(__name__)
# The HTTP client logs every request at INFO: a line per record waiting would drown the rest.
logging.getLogger("httpx2").setLevel(logging.WARNING)

REGISTRY_TIMEOUT_SECONDS = 10
ROUND_SECONDS = 30.0  # a round's copies stop here; the rest wait for the next one
MAX_REFERENCE_DEPTH = 16  # references of references…: deeper is a cycle, or hostile
MAX_SCHEMA_ID = 2**31 - 1  # Confluent's ids are positive 32-bit integers
SUBJECT_SUFFIXES = ("-value", "-key")  # TopicNameStrategy
# MirrorMaker 2's heartbeats (binary, starting with a zero byte), under any remote name a chain
# of mirrors gave them: `heartbeats.A`, `B.heartbeats`, `heartbeats-A_B`, ...
HEARTBEATS = re.compile(r"(.*[._-])?heartbeats([._-].*)?")
T = TypeVar("T")
Wanted = tuple[str, int]  # (source topic, schema id): a record of that topic waits for it


class RegistryUnavailable(Exception):
    """A registry did not answer, or answered with a server error: try again later."""


class SchemaRefused(Exception):
    """A schema cannot be copied as things are (a person must act): the reason says why."""


def _registry_call(where: str, call: Callable[[], T]) -> T:
    """One registry request, its failures mapped: a client error (4xx) is the caller's to
    read, anything else means the registry is unavailable for now."""
    try:
        return call()
    except SchemaRegistryError as error:
        if 400 <= error.http_status_code < 500:
            raise
        raise RegistryUnavailable(f"the {where} registry answered: {error}") from None
    except (httpx2.HTTPError, OSError) as error:
        raise RegistryUnavailable(f"the {where} registry does not answer: {error}") from None


def _schema_id(value: object, where: str) -> int:
    """An id a registry answered, checked: what the wire format can carry."""
    if not isinstance(value, int) or not 0 < value <= MAX_SCHEMA_ID:
        raise SchemaRefused(f"the {where} registry answered an unusable schema id {value!r}")
    return value


def _version(value: object) -> int:
    if not isinstance(value, int) or value < 1:
        raise SchemaRefused(f"the source registry answered an unusable version {value!r}")
    return value


@dataclass
class SchemaRound:
    """What one round of registry calls found: ids copied, and why others could not be."""

    copied: dict[Wanted, int] = field(default_factory=dict)  # → the target's id
    refused: dict[Wanted, str] = field(default_factory=dict)  # → why
    unavailable: str | None = None  # a registry did not answer


class SchemaSync:
    """Per source topic, which source ids its records may carry and their target ids. A
    record's id is looked up only under its own topic's subjects (`t-value`, `t-key` with
    `keys`) and the subjects listed (`subjects`): a binary value that merely starts with a zero
    byte never takes on the schema of another topic."""

    def __init__(
        self,
        config: SchemaRegistryConnection,
        environ: Mapping[str, str],
        clients: Callable[[dict[str, object]], SchemaRegistryClient] = SchemaRegistryClient,
    ) -> None:
        def client(settings: dict[str, str]) -> SchemaRegistryClient:
            return clients({**settings, "timeout": REGISTRY_TIMEOUT_SECONDS})

        self.source = client(config.source.client_config(environ))
        self.target = client(config.target.client_config(environ))
        self.wire_topics = NameFilter(tuple(config.topics))
        self.keys = config.keys
        self.subjects = NameFilter(tuple(config.subjects)) if config.subjects else None
        # Source topic → (source id → target id): the flows read it (the loop's).
        self.ids: dict[str, dict[int, int]] = {}
        self.refused: dict[Wanted, str] = {}
        self.wanted: set[Wanted] = set()  # what records wait for (the loop's)
        self.pending: frozenset[Wanted] = frozenset()  # a copy for the thread, replaced whole
        self.unavailable: str | None = None
        # One round's registrations (subject, version, registered?) and its end (the thread's).
        self._round: dict[tuple[str, int, bool], RegisteredSchema] = {}
        self._deadline = float("inf")

    # --- on the loop ----------------------------------------------------------------------

    def wire_format(self, topic: str) -> bool:
        """Whether the topic's values are read as the wire format (never heartbeats)."""
        return HEARTBEATS.fullmatch(topic) is None and self.wire_topics.matches(topic)

    def translates(self, topic: str) -> tuple[dict[int, int] | None, dict[int, int] | None]:
        """The id maps a flow of `topic` rewrites its values and keys with (None: as they are)."""
        if not self.wire_format(topic):
            return None, None
        ids = self.ids.setdefault(topic, {})
        return ids, ids if self.keys else None

    def want(self, topic: str, schema_id: int) -> str:
        """A record of `topic` waits for this id; why, in words, for the partition's status."""
        self.wanted.add((topic, schema_id))
        self.pending = frozenset(self.wanted)
        return self.wait_reason(topic, schema_id)

    def wait_reason(self, topic: str, schema_id: int) -> str:
        """Why a record of `topic` waits for this id, as the last round left it."""
        refused = self.refused.get((topic, schema_id))
        if refused is not None:
            return schema_wait_reason(schema_id, "refused", refused)
        if self.unavailable:
            return schema_wait_reason(schema_id, "unreachable", self.unavailable)
        return schema_wait_reason(schema_id, "pending", "being copied to the target's registry")

    def apply(self, found: SchemaRound) -> set[Wanted]:
        """A round's result; returns what records may now go on with."""
        for (topic, schema_id), target_id in found.copied.items():
            self.ids.setdefault(topic, {})[schema_id] = target_id
            self.refused.pop((topic, schema_id), None)
        self.refused.update(found.refused)
        self.unavailable = found.unavailable
        ready = self.wanted & set(found.copied)
        # A refused id is asked for again when its partition retries the record.
        self.wanted -= ready | set(found.refused)
        self.pending = frozenset(self.wanted)
        return ready

    # --- off the loop ---------------------------------------------------------------------

    def gather(self, mirrored: dict[str, str]) -> SchemaRound:
        """Copy the schemas records wait for. `mirrored`: source topic → remote."""
        found = SchemaRound()
        self._round, self._deadline = {}, time.monotonic() + ROUND_SECONDS
        for topic, schema_id in sorted(self.pending):
            if time.monotonic() > self._deadline:
                break
            if topic not in mirrored or not self.wire_format(topic):
                # No longer mirrored: its subject would go to the target under its own name.
                found.refused[(topic, schema_id)] = f"{topic} is no longer mirrored"
                continue
            try:
                found.copied[(topic, schema_id)] = self._copy_id(topic, schema_id, mirrored)
            except SchemaRefused as refusal:
                found.refused[(topic, schema_id)] = str(refusal)
            except RegistryUnavailable as error:
                found.unavailable = str(error)
            except Exception as error:  # an answer of a shape no registry should give
                found.refused[(topic, schema_id)] = (
                    f"schema id {schema_id}: a registry's answer could not be read "
                    f"({type(error).__name__}: {error})"
                )
        return found

    def _candidates(self, topic: str) -> Callable[[str], int | None]:
        """A subject's rank among those a record of `topic` may find its schema under (its
        topic's own first, then those listed, by name); None when it may not."""
        own = [f"{topic}{suffix}" for suffix in SUBJECT_SUFFIXES[: 2 if self.keys else 1]]

        def rank(subject: str) -> int | None:
            if subject in own:
                return own.index(subject)
            return len(own) if self.subjects and self.subjects.matches(subject) else None

        return rank

    def _copy_id(self, topic: str, schema_id: int, mirrored: dict[str, str]) -> int:
        try:
            versions = _registry_call(
                "source", partial(self.source.get_schema_versions, schema_id, deleted=True)
            )
        except SchemaRegistryError as error:
            if error.http_status_code != 404:
                raise SchemaRefused(
                    f"the source registry refused to describe schema id {schema_id}: "
                    f"{error.error_message} (HTTP {error.http_status_code})"
                ) from None
            raise SchemaRefused(
                f"schema id {schema_id} is not in the source's registry: values of {topic} that "
                "are not in the wire format call for it out of spec.schemaRegistry.topics"
            ) from None
        rank = self._candidates(topic)
        held = sorted((str(v.subject), _version(v.version)) for v in versions)
        usable = sorted(
            ((r, subject, version) for subject, version in held if (r := rank(subject)) is not None)
        )
        if not usable:
            subjects = ", ".join(subject for subject, _ in held) or "none"
            raise SchemaRefused(
                f"schema id {schema_id} of {topic} is registered on the source under no subject "
                f"this mirror copies for it ({subjects}): add one to "
                "spec.schemaRegistry.subjects"
            )
        _, subject, version = usable[0]
        self._copy_older(subject, version, mirrored)
        registered = self._copy_version(subject, version, mirrored, expected=schema_id)
        return _schema_id(registered.schema_id, "target")

    def _copy_older(self, subject: str, version: int, mirrored: dict[str, str]) -> None:
        """The subject's versions before `version`, oldest first, so that the target numbers
        them as the source does (a version that cannot be copied is left out)."""
        # Live versions only: a version deleted on the source (to pass a compatibility check)
        # made live on the target would refuse the ones after it.
        versions = _registry_call("source", partial(self.source.get_versions, subject))
        for older in sorted(int(v) for v in versions if int(v) < version):
            try:
                self._copy_version(subject, older, mirrored)
            except SchemaRefused as refusal:
                log.warning("%s version %d not copied: %s", subject, older, refusal)

    def _copy_version(
        self,
        subject: str,
        version: int,
        mirrored: dict[str, str],
        register: bool = True,
        expected: int | None = None,
        depth: int = 0,
    ) -> RegisteredSchema:
        """Register one version on the target, its references first; its registration there
        (without `register`, only looked up: SchemaRefused when the target has none).
        `expected`: the source id the version must have."""
        if depth > MAX_REFERENCE_DEPTH:
            raise SchemaRefused(f"{subject}'s references go deeper than {MAX_REFERENCE_DEPTH}")
        if time.monotonic() > self._deadline:
            raise RegistryUnavailable(f"the round's copies took over {ROUND_SECONDS:.0f}s")
        done = self._round.get((subject, version, register))
        if done is not None:
            return done  # a schema referenced twice (or more: fanned out) is copied once
        source = _registry_call(
            "source", partial(self.source.get_version, subject, version, deleted=True)
        )
        if expected is not None and source.schema_id != expected:
            # The client's cache may hold a subject since deleted and made again: ask anew.
            self.source.clear_caches()  # type: ignore[no-untyped-call]
            source = _registry_call(
                "source", partial(self.source.get_version, subject, version, deleted=True)
            )
        if expected is not None and source.schema_id != expected:
            raise SchemaRefused(
                f"the source registry holds schema id {source.schema_id} as {subject} version "
                f"{version}, not {expected}"
            )
        references = []
        for reference in source.schema.references or []:
            ref_subject, ref_version = str(reference.subject), _version(reference.version)
            if not self._synced(ref_subject, mirrored):
                raise SchemaRefused(
                    f"{subject} version {version} references {ref_subject}, a subject this "
                    "mirror does not copy: add it to spec.schemaRegistry.subjects"
                )
            target_ref = self._copy_version(
                ref_subject, ref_version, mirrored, register, depth=depth + 1
            )
            references.append(
                SchemaReference(reference.name, target_ref.subject, target_ref.version)
            )
        schema = Schema(
            source.schema.schema_str,
            source.schema.schema_type,
            references,
            metadata=source.schema.metadata,
            rule_set=source.schema.rule_set,
        )
        name = target_subject(subject, mirrored, self.keys)
        try:
            if register:
                _registry_call("target", lambda: self.target.register_schema(name, schema))
            registered = _registry_call("target", lambda: self.target.lookup_schema(name, schema))
        except SchemaRegistryError as error:
            raise SchemaRefused(
                f"the target's registry {'refused' if register else 'has not'} {subject} "
                f"version {version} as {name}: {error.error_message} "
                f"(HTTP {error.http_status_code})"
            ) from None
        self._round[(subject, version, register)] = registered
        return registered

    def _synced(self, subject: str, mirrored: dict[str, str]) -> bool:
        """A subject of a mirrored wire-format topic (TopicNameStrategy), or one listed."""
        topic = topic_of(subject, self.keys)
        if topic is not None and topic in mirrored and self.wire_format(topic):
            return True
        return self.subjects is not None and self.subjects.matches(subject)

    def equivalents(self, mirrored: dict[str, str]) -> Equivalents:
        """Each source id the records of the mirrored wire-format topics may carry (every
        version of their subjects, deleted ones too) → the id the target has for the same
        schema under the same subject, where it has one, ranked as the workers rank them:
        what the audit expects the copies to carry. Registers nothing."""
        subjects = [
            str(s)
            for s in _registry_call("source", partial(self.source.get_subjects, deleted=True))
        ]
        topics = sorted(t for t in mirrored if self.wire_format(t))
        found = Equivalents(own={t: {} for t in topics})
        # `t-value` before `t-key` (the workers' rank), then by name; first pair wins.
        for subject in sorted(subjects, key=lambda s: (s.endswith("-key"), s)):
            topic = topic_of(subject, self.keys)
            listed = self.subjects is not None and self.subjects.matches(subject)
            if topic not in found.own and not listed:
                continue
            for source_id, target_id in self._equivalent_versions(subject, mirrored):
                if topic in found.own:  # its topic's own subjects rank first
                    found.own[topic].setdefault(source_id, target_id)
                if listed:
                    found.listed.setdefault(source_id, target_id)
        return found

    def _equivalent_versions(self, subject: str, mirrored: dict[str, str]) -> list[tuple[int, int]]:
        """(source id, target id) of each version of the subject, oldest first."""
        versions = _registry_call(
            "source", partial(self.source.get_versions, subject, deleted=True)
        )
        pairs = []
        for version in sorted(int(v) for v in versions):
            try:
                source = _registry_call(
                    "source", partial(self.source.get_version, subject, version, deleted=True)
                )
                target = self._copy_version(subject, version, mirrored, register=False)
            except SchemaRefused:
                continue  # not on the target: copies naming it cannot match
            except SchemaRegistryError:
                continue  # gone from the source since it was listed
            pairs.append(
                (_schema_id(source.schema_id, "source"), _schema_id(target.schema_id, "target"))
            )
        return pairs


@dataclass
class Equivalents:
    """The audit's view of the ids: per wire-format topic, those of its own subjects; then,
    for every such topic, those of the subjects listed."""

    own: dict[str, dict[int, int]]
    listed: dict[int, int] = field(default_factory=dict)


def topic_of(subject: str, keys: bool) -> str | None:
    """The topic a TopicNameStrategy subject is of (`t-value` → `t`; `t-key` with `keys`)."""
    for suffix in SUBJECT_SUFFIXES if keys else SUBJECT_SUFFIXES[:1]:
        if subject.endswith(suffix):
            return subject[: -len(suffix)]
    return None


def target_subject(subject: str, mirrored: dict[str, str], keys: bool) -> str:
    """The subject's name on the target: a mirrored topic's subject renamed as its topic."""
    for suffix in SUBJECT_SUFFIXES if keys else SUBJECT_SUFFIXES[:1]:
        topic = subject[: -len(suffix)]
        if subject.endswith(suffix) and topic in mirrored:
            return mirrored[topic] + suffix
    return subject
