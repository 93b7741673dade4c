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
from kafka_mirror.topics import NameFilter

log = logging.getLogger(__name__)
# The HTTP client logs every request at INFO: a line per record waiting would drown the rest.
logging.getLogger("httpx2").setLevel(logging.WARNING)

REGISTRY_TIMEOUT_SECONDS = 10
SUBJECT_SUFFIXES = ("-value", "-key")  # TopicNameStrategy
T = TypeVar("T")


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


@dataclass
class SchemaRound:
    """What one round of registry calls found: ids copied, and why others could not be."""

    copied: dict[int, int] = field(default_factory=dict)  # source id → target id
    refused: dict[int, str] = field(default_factory=dict)  # source id → why
    unavailable: str | None = None  # a registry did not answer


class SchemaSync:
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
        self.ids: dict[int, int] = {}  # source id → target id: the flows read it (the loop's)
        self.refused: dict[int, str] = {}
        self.wanted: set[int] = set()  # ids records wait for (the loop's)
        self.pending: frozenset[int] = frozenset()  # a copy of it for the thread, replaced whole
        self.unavailable: str | None = None
        # (subject, version) on the source → its registration on the target (the thread's).
        self._copied: dict[tuple[str, int], RegisteredSchema] = {}

    # --- on the loop ----------------------------------------------------------------------

    def translates(self, topic: str) -> tuple[dict[int, int] | None, dict[int, int] | None]:
        """The id maps a flow of `topic` rewrites its values and keys with (None: as they are)."""
        if not self.wire_topics.matches(topic):
            return None, None
        return self.ids, self.ids if self.keys else None

    def want(self, schema_id: int) -> str:
        """A record waits for this id; why, in words, for the partition's status."""
        self.wanted.add(schema_id)
        self.pending = frozenset(self.wanted)
        if schema_id in self.refused:
            return self.refused[schema_id]
        where = f" ({self.unavailable})" if self.unavailable else ""
        return f"waiting for schema id {schema_id} to be copied to the target's registry{where}"

    def apply(self, found: SchemaRound) -> set[int]:
        """A round's result; returns the ids records may now go on with."""
        self.ids.update(found.copied)
        self.refused.update(found.refused)
        for schema_id in found.copied:
            self.refused.pop(schema_id, None)
        self.unavailable = found.unavailable
        ready = self.wanted & set(found.copied)
        # A refused id is asked for again when its partition retries the record.
        self.wanted -= ready | set(found.refused)
        self.pending = frozenset(self.wanted)
        return ready

    # --- off the loop ---------------------------------------------------------------------

    def gather(self, mirrored: dict[str, str]) -> SchemaRound:
        """Copy the schemas of the ids records wait for. `mirrored`: source topic → remote."""
        found = SchemaRound()
        for schema_id in sorted(self.pending):
            try:
                found.copied[schema_id] = self._copy_id(schema_id, mirrored)
            except SchemaRefused as refusal:
                found.refused[schema_id] = str(refusal)
            except RegistryUnavailable as error:
                found.unavailable = str(error)
                break
        return found

    def _copy_id(self, schema_id: int, mirrored: dict[str, str]) -> int:
        try:
            versions = _registry_call("source", lambda: self.source.get_schema_versions(schema_id))
        except SchemaRegistryError as error:
            raise SchemaRefused(
                f"schema id {schema_id} is not in the source's registry ({error.error_message}): "
                "records of topics that are not in the wire format belong out of "
                "spec.schemaRegistry.topics"
            ) from None
        held = [(str(v.subject), int(v.version or 0)) for v in versions]
        synced = [
            (subject, version) for subject, version in held if self._synced(subject, mirrored)
        ]
        if not synced:
            subjects = ", ".join(sorted({subject for subject, _ in held})) or "none"
            raise SchemaRefused(
                f"schema id {schema_id} is registered on the source under subjects this mirror "
                f"does not copy ({subjects}): add one to spec.schemaRegistry.subjects"
            )
        target_id = -1
        for subject, version in synced:
            target_id = int(self._copy_subject(subject, version, mirrored).schema_id or -1)
        return target_id

    def equivalents(self, mirrored: dict[str, str]) -> dict[int, int]:
        """Each id of a schema the mirror copies (every version of its subjects on the source)
        → the id the target's registry has for the same schema under the same subject, where it
        has one: what the audit expects the copies to carry. Registers nothing."""
        found = {}
        subjects = _registry_call("source", self.source.get_subjects)
        for subject in sorted(s for s in subjects if self._synced(s, mirrored)):
            versions = _registry_call("source", partial(self.source.get_versions, subject))
            for version in versions:
                source = _registry_call(
                    "source", partial(self.source.get_version, subject, version)
                )
                try:
                    target = self._copy_version(subject, version, mirrored, register=False)
                except SchemaRefused:
                    continue  # not on the target: copies naming it cannot match
                found[int(source.schema_id or -1)] = int(target.schema_id or -1)
        return found

    def _synced(self, subject: str, mirrored: dict[str, str]) -> bool:
        """A subject of a mirrored wire-format topic (TopicNameStrategy), or one listed."""
        topic = topic_of(subject, self.keys)
        if topic is not None and topic in mirrored and self.wire_topics.matches(topic):
            return True
        return self.subjects is not None and self.subjects.matches(subject)

    def _copy_subject(self, subject: str, upto: int, mirrored: dict[str, str]) -> RegisteredSchema:
        """Copy the subject's versions up to `upto`, oldest first (so that the target numbers
        them as the source does); the target's registration of `upto`."""
        versions = _registry_call("source", lambda: self.source.get_versions(subject))
        registered = None
        for version in sorted(v for v in versions if v <= upto):
            registered = self._copy_version(subject, version, mirrored)
        if registered is None:
            raise SchemaRefused(f"subject {subject} has no version {upto} on the source")
        return registered

    def _copy_version(
        self, subject: str, version: int, mirrored: dict[str, str], register: bool = True
    ) -> RegisteredSchema:
        """Register one version on the target, its references first; its registration there
        (without `register`, only looked up: SchemaRefused when the target has none)."""
        if (subject, version) in self._copied:
            return self._copied[(subject, version)]
        source = _registry_call("source", lambda: self.source.get_version(subject, version))
        references = []
        for reference in source.schema.references or []:
            ref_subject, ref_version = str(reference.subject), int(reference.version or 0)
            target_ref = self._copy_version(ref_subject, ref_version, mirrored, register)
            references.append(
                SchemaReference(reference.name, target_ref.subject, target_ref.version)
            )
        schema = Schema(source.schema.schema_str, source.schema.schema_type, references)
        name = target_subject(subject, mirrored, self.keys)
        try:
            if register:
                _registry_call("target", lambda: self.target.register_schema(name, schema))
            registered = _registry_call("target", lambda: self.target.lookup_schema(name, schema))
        except SchemaRegistryError as error:
            raise SchemaRefused(
                f"the target's registry {'refused' if register else 'has not'} {subject} "
                f"version {version} as {name}: "
                f"{error.error_message} (HTTP {error.http_status_code})"
            ) from None
        self._copied[(subject, version)] = registered
        return registered


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
