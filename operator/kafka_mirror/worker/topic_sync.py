"""Which topics to mirror, and their remote topics on the target (MirrorMaker 2's
MirrorSourceConnector duties): the selection applied to the source's topics, remote topics
created and grown with their source, configs copied, the internal topics created, and each
remote topic's record size limit read so that the worker can refuse a record the target
cannot take before it reaches the producer.

The admin calls run off the mirroring loop (`observe`, `sync_configs`), so that no record
waits for them; what they find is taken in on the loop (`apply`).

Topic IDs are read here too, on every refresh: each source topic's (its records' provenance
headers name it, so a copy can be told from a record derived from it) and, under identity
naming, each remote topic's (the cycle test compares the headers with it). A topic is mirrored
only once the IDs it needs are known: a record read before would be named or judged wrongly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaException

from kafka_mirror.api.status import SkippedTopic
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.kafka.admin import ensure_internal_topic, partition_counts, topic_ids
from kafka_mirror.kafka.formats import HEARTBEATS_TOPIC
from kafka_mirror.kafka.owners import foreign_reason
from kafka_mirror.topics import TopicPlan, plan_topics
from kafka_mirror.worker import remote_topics
from kafka_mirror.worker.clients import Clients
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror.worker.topic_owners import TopicOwners

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicObservation:
    """One look at both clusters (`TopicSync.observe`), for the loop to take in."""

    plan: TopicPlan  # before the topics below are taken out
    failed: set[str]  # remote topics that could not be created or grown
    remote_partitions: dict[str, int]  # remote topic → its partitions (as grown)
    max_record_bytes: dict[str, int]  # size limits read for the first time
    source_ids: dict[str, bytes | None]
    remote_ids: dict[str, bytes | None]
    identity: bool
    foreign: set[str]  # identity naming: remote topics that exist and are not this mirror's


class TopicSync:
    def __init__(
        self,
        clients: Clients,
        metrics: WorkerMetrics,
        set_reachable: Callable[[str, bool], None],
        internal_topics: tuple[str, str],  # offset syncs, checkpoints
        mirror: str,
        source_alias: str,
    ) -> None:
        self.clients, self.metrics, self.set_reachable = clients, metrics, set_reachable
        self.offset_syncs_topic, self.checkpoints_topic = internal_topics
        self.plan = TopicPlan({}, [])
        self.remote_partitions: dict[str, int] = {}
        self.max_record_bytes: dict[str, int] = {}  # remote topic → its max.message.bytes
        # Topic IDs (None: the cluster gives none): source topic → its own, and (identity
        # naming only) source topic → its remote topic's on the target.
        self.source_ids: dict[str, bytes | None] = {}
        self.remote_ids: dict[str, bytes | None] = {}
        self.internal_topics_ready = False
        self.owners = TopicOwners(clients, mirror, source_alias)
        self._last_problems: list[str] = []
        self._last_unnamed: set[str] = set()

    def observe(self, config: WorkerConfig) -> TopicObservation:
        """List the source's topics, apply the selections, create or grow the remote topics.

        Runs off the mirroring loop (admin calls take milliseconds to seconds): it changes
        nothing the loop reads; `apply` takes its result in on the loop."""
        selections, problems = config.compiled_selections()
        self.metrics.invalid_patterns.set(len(problems))
        if problems != self._last_problems:
            for problem in problems:
                log.error("ignoring %s", problem)
            self._last_problems = problems
        source = self.clients.source_admin
        try:
            source_counts = partition_counts(source)
            plan = plan_topics(source_counts, selections, config.namer(), config.target.alias)
            source_ids = topic_ids(source, plan.mirrored)
            self.set_reachable("source", True)
        except KafkaException:
            self.set_reachable("source", False)
            raise
        wanted = {remote: source_counts[topic] for topic, remote in plan.mirrored.items()}
        target = self.clients.target_admin
        identity = config.topic_naming.policy == "identity"
        try:
            # The internal topics on the target are looked for each time: one deleted is made
            # again (the mirror's producer does not create topics by itself).
            internal = (self.checkpoints_topic, HEARTBEATS_TOPIC)
            counts = partition_counts(target, [*wanted, *internal])
            self.set_reachable("target", True)
            if not self.internal_topics_ready or any(t not in counts for t in internal):
                self._create_internal_topics()
            existing = {t: count for t, count in counts.items() if t in wanted}
            foreign: set[str] = set()
            if identity:
                ids = topic_ids(target, existing)
                foreign = self.owners.foreign(config, set(existing), ids)
                wanted = {r: count for r, count in wanted.items() if r not in foreign}
                self.owners.creating(sorted(r for r in wanted if r not in existing))
            new = {t for t, r in plan.mirrored.items() if r in wanted and r not in existing}
            configs = self._remote_configs(config, new, plan)
            failed = set(remote_topics.create_or_grow(target, wanted, existing, configs))
            if identity:
                self.owners.not_created({r for r in failed if r not in existing})
            unknown = [r for r in wanted if r not in failed and r not in self.max_record_bytes]
            limits = remote_topics.max_message_bytes(target, unknown)
            by_remote = topic_ids(target, wanted) if identity else {}
        except KafkaException:
            self.set_reachable("target", False)
            raise
        remote_ids = {t: by_remote[r] for t, r in plan.mirrored.items() if r in by_remote}
        partitions = {r: max(existing.get(r, 0), wanted[r]) for r in wanted}
        return TopicObservation(
            plan, failed, partitions, limits, source_ids, remote_ids, identity, foreign
        )

    def apply(self, seen: TopicObservation) -> TopicPlan:
        """Take in what `observe` found (on the loop); returns the topics to mirror now."""
        plan = seen.plan
        self.internal_topics_ready = True  # an observation made sure they exist
        self.max_record_bytes.update(seen.max_record_bytes)
        unnamed = self._keep_ids(plan, seen.source_ids, seen.remote_ids, seen.identity)
        skipped = (
            plan.skipped
            + [
                SkippedTopic(
                    name=topic, reason="the remote topic could not be created (see the worker log)"
                )
                for topic, remote in plan.mirrored.items()
                if remote in seen.failed
            ]
            + [
                SkippedTopic(name=topic, reason=foreign_reason(remote))
                for topic, remote in plan.mirrored.items()
                if remote in seen.foreign
            ]
        )
        left_out = seen.failed | seen.foreign
        mirrored = {
            t: r for t, r in plan.mirrored.items() if r not in left_out and t not in unnamed
        }
        if skipped != self.plan.skipped:
            for skip in skipped:
                log.warning("not mirroring %s: %s", skip.name, skip.reason)
        self.remote_partitions = {r: seen.remote_partitions[r] for r in mirrored.values()}
        self.plan = TopicPlan(mirrored, skipped)
        self.metrics.set_topics(mirrored, [(s.name, s.reason) for s in skipped])
        return self.plan

    def _keep_ids(
        self,
        plan: TopicPlan,
        source_ids: dict[str, bytes | None],
        remote_ids: dict[str, bytes | None],
        identity: bool,
    ) -> set[str]:
        """Keep the IDs just read; return the selected topics whose IDs are not known yet (a
        remote topic created just now is usually unknown to the broker asked: its source topic
        waits for the next refresh)."""
        for side, old, new in (
            ("source topic", self.source_ids, source_ids),
            ("remote topic of", self.remote_ids, remote_ids),
        ):
            for topic in sorted(
                t for t, topic_id in new.items() if old.get(t, topic_id) != topic_id
            ):
                log.info("the %s %s was deleted and created again: a new topic ID", side, topic)
        self.source_ids, self.remote_ids = source_ids, remote_ids
        needed = (source_ids, remote_ids) if identity else (source_ids,)
        unnamed = {t for t in plan.mirrored if any(t not in ids for ids in needed)}
        if unnamed and unnamed != self._last_unnamed:
            log.info("waiting for the topic IDs of %s to mirror them", ", ".join(sorted(unnamed)))
        self._last_unnamed = unnamed
        return unnamed

    def _remote_configs(
        self, config: WorkerConfig, topics: set[str], plan: TopicPlan
    ) -> dict[str, dict[str, str]]:
        if not config.topic_config_sync.enabled or not topics:
            return {}
        excludes = frozenset(config.topic_config_sync.excludes)
        admin = self.clients.source_admin
        by_source = remote_topics.source_topic_configs(admin, topics, excludes)
        return {plan.mirrored[topic]: settings for topic, settings in by_source.items()}

    def _create_internal_topics(self) -> None:
        ensure_internal_topic(self.clients.syncs_admin, self.offset_syncs_topic)
        ensure_internal_topic(self.clients.target_admin, self.checkpoints_topic)
        ensure_internal_topic(self.clients.target_admin, HEARTBEATS_TOPIC)

    def sync_configs(self, config: WorkerConfig) -> dict[str, int]:
        """Copy the source topics' settings to the remote topics; returns their size limits
        (off the loop, as `observe`)."""
        mirrored = self.plan.mirrored
        if not mirrored:
            return {}
        if config.topic_config_sync.enabled:
            excludes = frozenset(config.topic_config_sync.excludes)
            admin = self.clients.source_admin
            by_source = remote_topics.source_topic_configs(admin, mirrored, excludes)
            remote_topics.copy_configs(
                self.clients.target_admin, {mirrored[t]: s for t, s in by_source.items()}
            )
        return remote_topics.max_message_bytes(self.clients.target_admin, mirrored.values())
