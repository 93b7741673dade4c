"""The fault matrix, continued: what the target refuses for good. While three topics stream at
10,000 records/s, the target refuses one remote topic: an ACL denies the mirror Write on it, or
someone makes it compacted while its records have no key (the broker refuses them as invalid).
That topic's partitions stop, each with a reason naming it and the error (in the commit's
metadata, which the operator shows as `partitionProblems`, and in
`kafka_mirror_partition_problem`); the other topics keep mirroring; the worker neither exits nor
replaces its producer over and over. Undoing the change on the target lets the topic resume by
itself at its retry (30 s after the stop), and the independent content check and our audit find
nothing missing. The figures are printed as a table (docs/reliability.md has a run's). The
compacted topic is tried exactly once too, where a refused record fails its whole transaction."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)
from pyspark.sql import SparkSession

from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.faults import (
    Outcome,
    committed_problems,
    ends,
    producers_replaced,
    resend_bound,
    seconds_until_committed,
    verify,
)
from tests.helpers.kafka import admin_for, create_topics, unique
from tests.helpers.stack import MirrorStack
from tests.helpers.traffic import TrafficGenerator, TrafficSpec
from tests.helpers.worker import (
    StartWorker,
    WorkerProcess,
    group_offsets,
    wait_for,
    worker_config,
    worker_group,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

RATE = 10_000
PARTITIONS = 4
# The change on the target is undone after this, before the stopped topic's first retry (30 s).
REFUSED_SECONDS = 20


def deny_write(target: LocalKafka, topic: str, describe: bool) -> None:
    """An ACL denying everyone Write on `topic`; with `describe`, one allowing them Describe, as
    a cluster whose ACLs grant the mirror that would (with no ACL allowing it, the brokers hide
    the topic too). Through the Admin API's CreateAcls, as Kafka's kafka-acls tool does."""
    acls = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:*",
            "*",
            operation,
            permission,
        )
        for operation, permission in [(AclOperation.WRITE, AclPermissionType.DENY)]
        + ([(AclOperation.DESCRIBE, AclPermissionType.ALLOW)] if describe else [])
    ]
    for future in admin_for(target.bootstrap_servers).create_acls(acls).values():
        future.result(10)


def remove_acls(target: LocalKafka, topic: str) -> None:
    """Delete everyone's ACLs of `topic` (`deny_write`'s): with none, the brokers allow
    everything on it again."""
    everyones = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:*",
        "*",
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    deleted = admin_for(target.bootstrap_servers).delete_acls([everyones])[everyones].result(10)
    assert deleted, f"no ACL of {topic} to delete"


def cleanup_policy(target: LocalKafka, topic: str, policy: str) -> None:
    """Set `topic`'s cleanup.policy on the target, as its administrators would."""
    entry = ConfigEntry("cleanup.policy", policy, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin_for(target.bootstrap_servers).incremental_alter_configs([resource])[resource].result(10)


def one_topic_refused(
    source: LocalKafka,
    target: LocalKafka,
    start_worker: StartWorker,
    tmp_path: Path,
    refuse: Callable[[str], None],
    undo: Callable[[str], None],
    reason: str,
    keyed: bool = True,
    delivery: str = "atLeastOnce",
) -> tuple[dict[str, Any], list[str], WorkerProcess, int, float]:
    """Three topics mirrored while the generator writes to them; `refuse` (given the remote
    topic) makes the target refuse the second one's records, `undo` takes that back after
    REFUSED_SECONDS. Checks that the refused topic alone stops, each partition's committed
    reason matching `reason` and naming the remote topic, while the others go on; then that it
    resumes. Returns the worker's configuration, the topics, the worker, the bound on re-sends
    and the seconds from `undo` until the refused topic had caught up."""
    prefix = unique("refused")
    topics = [f"{prefix}.{name}" for name in ("orders", "payments", "audit")]
    refused, others = topics[1], [topics[0], topics[2]]
    create_topics(source.bootstrap_servers, topics, partitions=PARTITIONS)
    config = worker_config(source, target, [rf"{re.escape(prefix)}\..*"], delivery=delivery)
    group = worker_group(config)
    worker = start_worker(config)
    spec = TrafficSpec.for_topics(
        source.bootstrap_servers, topics, rate=RATE, count=RATE * 60, keyed=keyed
    )
    generator = TrafficGenerator(spec, tmp_path, "traffic").start()
    time.sleep(8)
    stopped = {(refused, p) for p in range(PARTITIONS)}

    def fault() -> None:
        refuse(f"{refused}.A")
        started = time.monotonic()
        try:
            wait_for(
                lambda: set(committed_problems(source, group)) == stopped,
                60,
                f"{refused}'s partitions, and only those, reported stopped",
            )
            print(f"stopped after {time.monotonic() - started:.1f} s")
            problems = committed_problems(source, group)
            for (_, p), problem in problems.items():
                print(problem)
                pattern = rf"stopped at {re.escape(refused)}\[{p}\] offset \d+: {reason}"
                assert re.fullmatch(pattern, problem) and f"{refused}.A" in problem, problem
            metric = "kafka_mirror_partition_problem"
            assert worker.metric(metric, topic=refused, problem="stopped") == PARTITIONS
            before = group_offsets(source, group)
            time.sleep(max(started + REFUSED_SECONDS - time.monotonic(), 5))
            after = group_offsets(source, group)
            for key in ends(source, others):
                assert after[key] > before[key], f"{key} stopped mirroring too"
            assert set(committed_problems(source, group)) == stopped
        finally:
            undo(f"{refused}.A")

    bound = resend_bound(source, group, topics, fault)
    undone = time.monotonic()
    recovery = seconds_until_committed(source, group, [refused], undone)
    stats = generator.finish()
    assert stats.failed == 0, stats.errors
    assert not committed_problems(source, group)
    return config, topics, worker, bound, recovery


@pytest.mark.parametrize("describe", [True, False], ids=["describe-allowed", "topic-hidden"])
def test_write_denied_on_one_remote_topic_stops_that_topic_alone(
    kafka_a: LocalKafka,
    kafka_b_acl: LocalKafka,
    start_worker: StartWorker,
    spark: SparkSession,
    outcomes: list[Outcome],
    tmp_path: Path,
    describe: bool,
) -> None:
    """An ACL denies the mirror Write on one remote topic for 20 s (with Describe still allowed,
    or the topic hidden from it too): the first batch the broker refuses fails the producer,
    whose fatal error names the partition; the worker stops every partition of that topic and
    replaces the producer once. Removing the ACL lets the topic resume at its retry."""
    config, topics, worker, bound, recovery = one_topic_refused(
        kafka_a,
        kafka_b_acl,
        start_worker,
        tmp_path,
        lambda remote: deny_write(kafka_b_acl, remote, describe),
        lambda remote: remove_acls(kafka_b_acl, remote),
        r"the target refuses every record of \S+ \(Broker: Topic authorization failed\): "
        r"allow the mirror's principal to Write \(and Describe\) \S+ on the target to go on",
    )
    assert producers_replaced(worker) <= 1
    seen = "Describe allowed" if describe else "the topic hidden too"
    fault = f"Write on 1 of 3 remote topics denied by an ACL for 20 s ({seen}), 10,000 records/s"
    verify(outcomes, fault, kafka_a, kafka_b_acl, config, topics, [worker], spark, bound, recovery)


@pytest.mark.parametrize("delivery", ["atLeastOnce", "exactlyOnce"])
def test_a_remote_topic_made_compacted_refuses_records_without_keys(
    stack: MirrorStack,
    outcomes: list[Outcome],
    tmp_path: Path,
    delivery: str,
) -> None:
    """Someone sets cleanup.policy=compact on one remote topic on the target for 20 s. The
    records have no key, which a compacted topic refuses (INVALID_RECORD). The source topic
    keeps Kafka's default policy, so the worker's config sync (which copies only a topic's own
    settings) leaves the target's alone, as it would in production. Each refused batch fails the
    producer, naming its partition: that partition stops, so the producer is replaced at most
    once per partition. Setting cleanup.policy=delete back lets the topic resume at its retry.
    (The log cleaner never touches the records already there: they are in the active segment.)
    Exactly once, a refused record aborts the transaction that holds it (the other topics'
    copies with it, copied again after), and a `read_committed` reader then finds each record
    once."""
    config, topics, worker, bound, recovery = one_topic_refused(
        stack.kafka_a,
        stack.kafka_b,
        stack.start_worker,
        tmp_path,
        lambda remote: cleanup_policy(stack.kafka_b, remote, "compact"),
        lambda remote: cleanup_policy(stack.kafka_b, remote, "delete"),
        r"the target refused a record of \S+\[\d\] at or after it \(Broker: Broker failed to "
        r"validate record\): if \S+ is compacted \(a record without a key cannot go there\), "
        r"set its cleanup.policy to delete on the target to go on",
        keyed=False,
        delivery=delivery,
    )
    assert producers_replaced(worker) <= PARTITIONS
    fault = "1 of 3 remote topics made compacted for 20 s, its records without keys, 10,000/s"
    if delivery == "exactlyOnce":
        fault += ", exactly once"
    report = verify(
        outcomes,
        fault,
        stack.kafka_a,
        stack.kafka_b,
        config,
        topics,
        [worker],
        stack.spark,
        bound,
        recovery,
    )
    if delivery == "exactlyOnce":
        assert report.duplicates == 0, report
