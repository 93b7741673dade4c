"""The events users meet, each while records stream in at 10,000 records/s or more, each ending
with an independent content check (every source record looked up on the target by key, value,
headers and timestamp, read straight from Kafka: `tests/helpers/content.py`) and then our
audit: partitions added to a busy topic, twice; records at every size limit, and one over the
target's; the remote topic deleted on the target; the target down past every timeout it meets
(`OUTAGE_SECONDS`); a target partition stalled (short of in-sync replicas) while the others
flow. Each loses nothing, needs no worker restart, and re-sends at most what was in flight.
The figures are printed as a table (docs/reliability.md has a run's)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions
from pyspark.sql import SparkSession

from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.content import check_content
from tests.helpers.failover import newest_checkpoints, source_offsets
from tests.helpers.faults import (
    Outcome,
    audited,
    committed_problems,
    committed_through,
    ends,
    producers_replaced,
    resend_bound,
    settle,
)
from tests.helpers.kafka import (
    admin_for,
    client_quota,
    create_topics,
    end_offsets,
    incarnation_on_disk,
    topic_id,
    unique,
)
from tests.helpers.matrix import OUTAGE_SECONDS, RATE, Case, mirror_topic, target_down, traffic
from tests.helpers.stack import MirrorStack
from tests.helpers.traffic import NEAR_LIMIT_VALUE_SIZE
from tests.helpers.worker import (
    StartWorker,
    commit_group,
    group_offsets,
    wait_for,
    worker_config,
    worker_group,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_partitions_added_twice_to_a_busy_topic(
    stack: MirrorStack,
    outcomes: list[Outcome],
    tmp_path: Path,
) -> None:
    case = mirror_topic(stack.kafka_a, stack.kafka_b, stack.start_worker, "grow", 4)
    topic = case.topic
    bound = 0
    started = time.monotonic()
    running = traffic(stack.kafka_a, topic, tmp_path, "traffic-4", rate=RATE)
    for count in (8, 12):
        time.sleep(4)

        def grow(count: int = count) -> None:
            admin = admin_for(stack.kafka_a.bootstrap_servers)
            admin.create_partitions([NewPartitions(topic, count)])[topic].result(10)
            source = stack.kafka_a.bootstrap_servers
            wait_for(lambda: len(end_offsets(source, topic)) == count, 30, "new leaders")

        bound += resend_bound(stack.kafka_a, case.group, [topic], grow)
        # The stream goes on over every partition the topic has now.
        following = traffic(stack.kafka_a, topic, tmp_path, f"traffic-{count}", rate=RATE)
        stats = running.finish()
        assert stats.failed == 0, stats.errors
        running = following
    time.sleep(4)
    fault = "partitions added to a busy topic twice (4 → 8 → 12), 10,000 records/s"
    case.finish(outcomes, fault, stack.spark, started, running, bound)
    assert producers_replaced(case.worker) == 0


def test_records_at_every_size_limit_and_one_over_the_targets(
    stack: MirrorStack,
    outcomes: list[Outcome],
    tmp_path: Path,
) -> None:
    """Records just under librdkafka's default message.max.bytes (1,000,000) and just under the
    brokers' default limit (1,048,588) mirror; one over the remote topic's limit (the source
    topic allows 3 MB; the target keeps its default) stops its partition with a reason naming
    topic, partition, offset and size, while the other partitions keep mirroring; raising the
    limit on the target lets it and everything behind it through."""
    topic = unique("sizes")
    create_topics(
        stack.kafka_a.bootstrap_servers,
        [topic],
        partitions=4,
        config={"max.message.bytes": "3000000"},
    )
    config = worker_config(
        stack.kafka_a,
        stack.kafka_b,
        [re.escape(topic)],
        topicConfigSync={"excludes": ["max.message.bytes"]},
    )
    case = Case(stack.kafka_a, stack.kafka_b, topic, config, stack.start_worker(config))
    group, worker = case.group, case.worker
    for phase, size in enumerate((999_000, NEAR_LIMIT_VALUE_SIZE, 1_500_000)):
        options = {"rate": RATE, "count": 40_000, "large_every": 4_001, "large_size": size}
        stats = traffic(stack.kafka_a, topic, tmp_path, f"traffic-{phase}", **options).finish()
        assert stats.failed == 0, stats.errors

    wait_for(lambda: committed_problems(stack.kafka_a, group), 60, "the oversize record reported")
    problems = committed_problems(stack.kafka_a, group)
    print(f"stopped: {problems}")
    assert all(
        re.match(rf"stopped at {topic}\[\d\] offset \d+: the record is 1500\d+ bytes", p)
        for p in problems.values()
    ), problems
    assert worker.metric("kafka_mirror_partition_problem", problem="stopped") == len(problems)
    flowing = {key: end for key, end in ends(stack.kafka_a, [topic]).items() if key not in problems}
    wait_for(
        committed_through(stack.kafka_a, group, flowing), 60, "the others mirrored to their end"
    )

    raised = time.monotonic()
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        f"{topic}.A",
        incremental_configs=[
            ConfigEntry("max.message.bytes", "3000000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin_for(stack.kafka_b.bootstrap_servers).incremental_alter_configs([resource])[
        resource
    ].result(10)
    fault = "records of 0.999 MB, 1.047 MB and 1.5 MB (over the target's limit, then raised)"
    case.finish(outcomes, fault, stack.spark, raised)
    assert not committed_problems(stack.kafka_a, group)


def keys_on(cluster: LocalKafka, topic: str) -> set[bytes]:
    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "fault-matrix-reader",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    partitions = end_offsets(cluster.bootstrap_servers, topic)
    reader.assign([TopicPartition(topic, p, 0) for p in partitions])
    keys: set[bytes] = set()
    ended: set[int] = set()
    deadline = time.monotonic() + 120
    while len(ended) < len(partitions) and time.monotonic() < deadline:
        for message in reader.consume(10_000, timeout=1):
            if message.error() is None:
                keys.add(message.key() or b"")
            else:
                ended.add(message.partition() or 0)
    reader.close()
    return keys


def test_the_remote_topic_deleted_on_the_target_mid_stream(
    stack: MirrorStack,
    outcomes: list[Outcome],
    tmp_path: Path,
) -> None:
    """Deleting the remote topic deletes what it held (a user's choice); the worker re-creates
    it and every record the source got from then on is on the target. A group checkpointed
    before the deletion, which has not moved since, gets checkpoints in the new remote topic
    that skip none of its copies (the old ones named copies that are gone). (Our audit is not
    run: it cannot yet tell records a user deleted from lost ones.)"""
    case = mirror_topic(stack.kafka_a, stack.kafka_b, stack.start_worker, "deleted", 4)
    topic, config, worker = case.topic, case.config, case.worker
    remote = f"{topic}.A"
    generator = traffic(stack.kafka_a, topic, tmp_path, "traffic", rate=RATE, count=RATE * 30)
    time.sleep(8)
    group = f"{topic}.reader"
    positions = end_offsets(stack.kafka_a.bootstrap_servers, topic)
    commit_group(stack.kafka_a, group, topic, positions)
    wait_for(
        lambda: (
            {
                p: c.upstream_offset
                for (g, p), c in newest_checkpoints(stack.kafka_b, remote).items()
                if g == group
            }
            == positions
        ),
        120,
        f"checkpoints of {group} at {positions} before the deletion",
    )
    incarnation = topic_id(stack.kafka_b.bootstrap_servers, remote)
    admin_for(stack.kafka_b.bootstrap_servers).delete_topics([remote])[remote].result(10)
    # The brokers finish deleting after they answered (a busy one, seconds after): records
    # copied until then went into the deleted topic. Counted from figures written once no
    # broker holds it, every record was produced after the deletion.
    wait_for(
        lambda: not incarnation_on_disk(stack.kafka_b, remote, incarnation),
        60,
        f"B's brokers to drop the partitions of {remote} (ID {incarnation}) from their disks",
    )
    deleted_at = generator.stats_from_now().produced
    stats = generator.finish()
    assert stats.failed == 0, stats.errors
    total = settle(stack.kafka_a, config, [topic])
    on_target = keys_on(stack.kafka_b, f"{topic}.A")
    spec = generator.spec
    after = {spec.key(i) for i in range(deleted_at, total)}
    missing = sorted(after - on_target)
    print(f"remote topic deleted after {deleted_at:,} records; {len(after):,} produced since")
    assert len(after) >= RATE, f"the deletion took most of the traffic's time: {len(after)} after"
    assert not missing, f"{len(missing)} records produced after the deletion are missing"
    assert worker.running()

    # The copies' origins, read once: the mirror has settled, the new topic holds no more.
    origins = {p: source_offsets(stack.kafka_b, remote, p) for p in positions}

    def skipped_by_checkpoints() -> dict[int, str]:
        """Per partition, what is wrong with the group's newest checkpoint in the new topic:
        past its end, or past a copy of a record at or after the group's position."""
        wrong = {}
        checkpoints = newest_checkpoints(stack.kafka_b, remote)
        for p, position in positions.items():
            copies = origins[p]
            downstream = checkpoints[(group, p)].downstream_offset
            if downstream > len(copies) or any(o >= position for o in copies[:downstream]):
                wrong[p] = f"at {downstream} of {len(copies)} copies, the group at {position}"
        return wrong

    wait_for(
        lambda: not skipped_by_checkpoints(),
        120,
        lambda: f"checkpoints of {group} that skip nothing: {skipped_by_checkpoints()}",
    )
    fault = "remote topic deleted on the target mid-stream (records produced after it)"
    outcomes.append(Outcome(fault, len(after), len(missing), 0, 0, 0.0))


@pytest.mark.timeout(1800)  # minutes of waiting by design; slower on a busy machine
def test_the_target_down_past_the_workers_timeouts_at_20000_records_a_second(
    stack: MirrorStack,
    outcomes: list[Outcome],
    tmp_path: Path,
) -> None:
    case = mirror_topic(stack.kafka_a, stack.kafka_b, stack.start_worker, "target-down", 8)
    topic, worker = case.topic, case.worker
    rate, down = 20_000, OUTAGE_SECONDS
    generator = traffic(
        stack.kafka_a, topic, tmp_path, "traffic", rate=rate, count=int(rate * (down + 20))
    )
    time.sleep(8)

    bound = resend_bound(
        stack.kafka_a, case.group, [topic], lambda: target_down(stack.kafka_b, worker, down)
    )
    fault = f"target down for {down:.0f} s at {rate:,} records/s"
    case.finish(outcomes, fault, stack.spark, time.monotonic(), generator, bound)


@pytest.mark.timeout(1800)  # stalled past a minute by design, a million records; slower when busy
def test_a_target_partition_stalled_while_the_others_flow(
    kafka_a: LocalKafka,
    kafka_b3: LocalKafka,
    start_worker: StartWorker,
    spark: SparkSession,
    outcomes: list[Outcome],
    tmp_path: Path,
) -> None:
    """Partitions 0 and 1 of the remote topic need broker 3 (two replicas, two in sync);
    stopping it stalls them past a minute while 2 and 3 keep mirroring. The stall is reported
    (metric, the commit's reason), nothing times out, and it all arrives once broker 3 is back."""
    topic = unique("stall")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=4)
    create_topics(
        kafka_b3.bootstrap_servers,
        [f"{topic}.A"],
        config={"min.insync.replicas": "2"},
        replica_assignment=[[3, 1], [1, 3], [1, 2], [2, 1]],
    )
    config = worker_config(kafka_a, kafka_b3, [re.escape(topic)])
    case = Case(kafka_a, kafka_b3, topic, config, start_worker(config))
    group, worker = case.group, case.worker
    generator = traffic(kafka_a, topic, tmp_path, "traffic", rate=RATE, count=RATE * 100)
    time.sleep(8)

    def stall() -> None:
        kafka_b3.stop_broker(3)
        flowing_before = group_offsets(kafka_a, group)
        try:
            wait_for(
                lambda: worker.metric("kafka_mirror_partition_problem", problem="stalled") == 2,
                120,
                "the two partitions reported stalled",
            )
            problems = committed_problems(kafka_a, group)
            print(f"stalled: {problems}")
            assert set(problems) == {(topic, 0), (topic, 1)}
            assert all(re.match(rf"stalled at {topic}\[[01]\]", p) for p in problems.values())
            flowing_now = group_offsets(kafka_a, group)
            for p in (2, 3):
                assert flowing_now[(topic, p)] > flowing_before[(topic, p)], "2 and 3 stopped too"
        finally:
            kafka_b3.start_broker(3)

    bound = resend_bound(kafka_a, group, [topic], stall)
    fault = "2 of 4 target partitions short of in-sync replicas for over a minute"
    case.finish(outcomes, fault, spark, time.monotonic(), generator, bound)


# The backlog outlasts the quota's window (2 MB/s for 40 s is about 470,000 records of ~170 bytes
# on the wire): the worker's queue stays full and throttled throughout.
QUOTA_BACKLOG = 1_000_000


@pytest.mark.timeout(1800)  # minutes of waiting by design; slower on a busy machine
def test_the_target_throttled_by_a_quota_behind_a_backlog(
    stack: MirrorStack,
    outcomes: list[Outcome],
    tmp_path: Path,
) -> None:
    """1,000,000 records wait on the source; the target takes 2 MB/s from the mirror for 40 s
    while 10,000 records/s more stream in; then the quota is lifted."""
    topic = unique("quota")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=8)
    backlog = traffic(stack.kafka_a, topic, tmp_path, "backlog", rate=150_000, count=QUOTA_BACKLOG)
    assert backlog.finish().failed == 0
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    group = worker_group(config)
    client_quota(stack.kafka_b, "producer_byte_rate=2000000")
    try:
        case = Case(stack.kafka_a, stack.kafka_b, topic, config, stack.start_worker(config))
        worker = case.worker
        generator = traffic(stack.kafka_a, topic, tmp_path, "traffic", rate=RATE, count=RATE * 40)

        def throttled() -> None:
            time.sleep(40)
            assert worker.running() and worker.get("/healthz") is not None
            committed = sum(group_offsets(stack.kafka_a, group).values())
            print(f"committed under the quota in 40 s: {committed:,}")
            assert 0 < committed < QUOTA_BACKLOG, "the quota did not slow the mirror"

        bound = resend_bound(stack.kafka_a, group, [topic], throttled)
    finally:
        client_quota(stack.kafka_b, None)
    fault = f"target throttled to 2 MB/s for 40 s behind {QUOTA_BACKLOG:,} records"
    case.finish(outcomes, fault, stack.spark, time.monotonic(), generator, bound)


def test_fan_in_of_two_sources_with_offset_syncs_on_the_target(
    stack: MirrorStack,
    kafka_b3: LocalKafka,
    outcomes: list[Outcome],
    tmp_path: Path,
) -> None:
    """A → B and C → B (C: the three-broker cluster) at once, offset syncs on B: each source
    has its own offset-syncs topic there (MirrorMaker 2's names), and both mirror whole."""
    topic = unique("fan-in")
    sources = {"A": stack.kafka_a, "C": kafka_b3}
    configs: dict[str, dict[str, Any]] = {}
    workers, generators = [], []
    for alias, source in sources.items():
        create_topics(source.bootstrap_servers, [topic], partitions=4)
        config = worker_config(
            stack.kafka_a, stack.kafka_b, [re.escape(topic)], offsetSyncs={"location": "target"}
        )
        config["source"] |= {"alias": alias, "bootstrapServers": source.bootstrap_servers}
        configs[alias] = config
        workers.append(stack.start_worker(config, f"worker-{alias}"))
        generators.append(
            traffic(source, topic, tmp_path, f"traffic-{alias}", rate=RATE // 2, count=RATE * 10)
        )
    started = time.monotonic()
    for generator in generators:
        assert generator.finish().failed == 0
    for alias, source in sources.items():
        settle(source, configs[alias], [topic])
    recovery = time.monotonic() - started
    listed = admin_for(stack.kafka_b.bootstrap_servers).list_topics(timeout=10).topics
    assert {"mm2-offset-syncs.A.internal", "mm2-offset-syncs.C.internal"} <= set(listed)
    for alias, source in sources.items():
        report = check_content(
            source.bootstrap_servers, stack.kafka_b.bootstrap_servers, {topic: f"{topic}.{alias}"}
        )
        print(f"fan-in from {alias}: {report}")
        assert report.lossless, report
        audited(configs[alias], stack.spark, report.source_records)
    assert all(worker.running() for worker in workers)
    fault = "fan-in A → B and C → B at 5,000 records/s each, offset syncs on B"
    outcomes.append(Outcome(fault, RATE * 20, 0, 0, 0, recovery))
