"""Exactly once (`delivery: exactlyOnce`), tried where it is hardest: workers killed every few
seconds under load, a worker paused past its session while its partitions move, source
transactions both committed and aborted, the target down longer than the transaction timeout,
partitions added under load, a leader change on the target, a pod of three processes one of
which is killed. Each ends with the independent content check, read with
`isolation.level=read_committed` straight from Kafka (0 missing, 0 duplicates), the long ones
with the audit too (which fails a duplicate in this mode). And a target that refuses the
transactions keeps the mirror not Ready, with the reason, on the real API server."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewPartitions,
    ResourcePatternType,
    ResourceType,
)
from kubernetes import client
from pyspark.sql import SparkSession

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.audit.main import audit
from kafka_mirror.kube import apply
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.audit import mirror_everything
from tests.helpers.content import check_content, open_transactions
from tests.helpers.faults import audited, settle
from tests.helpers.kafka import (
    admin_for,
    create_topics,
    end_offsets,
    produce,
    records,
    transactions_seen,
    unique,
)
from tests.helpers.matrix import OUTAGE_SECONDS, target_down, traffic
from tests.helpers.objects import condition, get_custom, mirror
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import (
    StartWorker,
    WorkerProcess,
    group_offsets,
    wait_for,
    worker_config,
    worker_group,
)

pytestmark = pytest.mark.kafka

KILLS = 5  # workers killed in the kill loop at the least
# The members' group on the target notices a killed or paused worker within seconds.
FAST_GROUP = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}
# A killed worker's open transaction holds back every `read_committed` reader of its partitions
# until the coordinator aborts it: after 20 s here rather than the worker's 60 s, which only the
# outage past it waits for.
QUICK_TRANSACTIONS = {"transaction.timeout.ms": "20000"}


def exactly_once_config(
    source: LocalKafka, target: LocalKafka, topic: str, quick_transactions: bool = True
) -> dict[str, Any]:
    """A worker's configuration for `topic`, exactly once, with a quick group on the target."""
    config = worker_config(source, target, [re.escape(topic)], delivery="exactlyOnce")
    config["target"]["config"] = FAST_GROUP | (QUICK_TRANSACTIONS if quick_transactions else {})
    return config


def settled(source: LocalKafka, target: LocalKafka, config: dict[str, Any], topic: str) -> int:
    """`settle`; its failure adds what a client of its own reads of the workers' group on the
    target (stable positions there say the worker's client is stuck, none say that the target
    holds a transaction open) and the target's transactions as Kafka's own tool lists them."""
    try:
        return settle(source, config, [topic])
    except AssertionError as failure:
        found = f"{stable_positions(target, config, topic)}; {transactions_seen(target)}"
        raise AssertionError(f"{failure}; {found}") from None


def stable_positions(target: LocalKafka, config: dict[str, Any], topic: str) -> str:
    remote = f"{topic}.A"
    reader = Consumer(
        {
            "bootstrap.servers": target.bootstrap_servers,
            "group.id": worker_group(config),
            "isolation.level": "read_committed",  # as the workers read them
        }
    )
    try:
        count = len(reader.list_topics(remote, timeout=10).topics[remote].partitions)
        asked = [TopicPartition(remote, p) for p in range(count)]
        found = {tp.partition: tp.error or tp.offset for tp in reader.committed(asked, 20)}
        return f"a client of its own reads the group's stable positions on B: {found}"
    except KafkaException as error:
        return f"a client of its own cannot read the group's stable positions on B: {error}"
    finally:
        reader.close()


def assert_each_record_once(source: LocalKafka, target: LocalKafka, topic: str) -> None:
    """Once no transaction is open on the remote topic (a killed writer's times out), each
    source record is there once for a `read_committed` reader."""
    remote = f"{topic}.A"
    wait_for(
        lambda: not open_transactions(target.bootstrap_servers, remote),
        120,
        lambda: (
            f"the transactions open on {remote} to end: "
            f"{open_transactions(target.bootstrap_servers, remote)}"
        ),
    )
    report = check_content(source.bootstrap_servers, target.bootstrap_servers, {topic: remote})
    assert report.source_records > 0
    assert (report.missing, report.duplicates, report.unexpected) == (0, 0, 0), str(report)


@pytest.mark.spark
def test_workers_killed_every_three_seconds_copy_each_record_once(
    stack: MirrorStack, tmp_path: Path
) -> None:
    topic = unique("eos-kill")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=8)
    config = exactly_once_config(stack.kafka_a, stack.kafka_b, topic)
    workers = [stack.start_worker(config, name=f"worker-{n}") for n in range(2)]
    rate, total = 20_000, 600_000
    generator = traffic(stack.kafka_a, topic, tmp_path, "traffic", rate=rate, count=total)
    kills = 0
    # As long as records stream in, and at least KILLS times: on a busy machine a restart takes
    # longer, and the last kills then fall on the backlog the traffic left.
    while generator.running() or kills < KILLS:
        time.sleep(3)
        victim = workers[kills % 2]
        victim.kill()
        kills += 1
        victim.start()
    stats = generator.finish(timeout=600)
    assert stats.failed == 0, stats.errors
    settled(stack.kafka_a, stack.kafka_b, config, topic)
    assert_each_record_once(stack.kafka_a, stack.kafka_b, topic)
    assert audited(config, stack.spark, total).duplicates == 0


@pytest.mark.long  # 200,000 records, a transaction timed out
def test_three_processes_in_one_pod_one_killed_under_load_copy_each_record_once(
    stack: MirrorStack, tmp_path: Path
) -> None:
    """A pod of three mirroring processes (each its own transactional producer and member of
    the group on the target) while records stream; one process is killed, so the supervisor
    stops the other two and the pod restarts, as the kubelet would restart it."""
    topic = unique("eos-pod")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=6)
    config = {**exactly_once_config(stack.kafka_a, stack.kafka_b, topic), "processes": 3}
    pod = stack.start_worker(config, name="pod")
    generator = traffic(stack.kafka_a, topic, tmp_path, "traffic", rate=10_000, count=200_000)
    wait_for(lambda: assignments(pod) >= 3, 60, "each of the three processes' partitions")
    wait_for(lambda: len(committed(stack.kafka_a, config)) == 6, 60, "every partition committed")
    assert pod.process is not None
    mirroring = [  # the supervisor's spawned processes, not multiprocessing's resource tracker
        child
        for child in psutil.Process(pod.process.pid).children()
        if "spawn_main" in " ".join(child.cmdline())
    ]
    assert len(mirroring) == 3, mirroring
    mirroring[0].kill()
    wait_for(lambda: not pod.running(), 60, "the supervisor to end with its process")
    assert "mirroring processes ended: exit codes [-9, " in pod.log()
    pod.start()
    stats = generator.finish(timeout=600)
    assert stats.failed == 0, stats.errors
    settled(stack.kafka_a, stack.kafka_b, config, topic)
    assert_each_record_once(stack.kafka_a, stack.kafka_b, topic)
    assert pod.stop() == 0
    assert "mirroring processes ended: exit codes [0, 0, 0]" in pod.log()


def committed(source: LocalKafka, config: dict[str, Any]) -> dict[int, int]:
    """Per partition, what the workers committed (to the source group, after each
    transaction)."""
    return {p: offset for (_, p), offset in group_offsets(source, worker_group(config)).items()}


def assignments(worker: WorkerProcess) -> int:
    """How many times the worker was given partitions."""
    return len(re.findall(r"assigned [1-9]\d* partitions", worker.log()))


@pytest.mark.long  # paused past its session while 150,000 records stream
def test_a_worker_paused_past_its_session_cannot_commit_what_it_copied(
    stack: MirrorStack, tmp_path: Path
) -> None:
    """SIGSTOP while records stream: its partitions move to the other worker, which copies
    them; resumed, its open transaction is refused, never committed."""
    topic = unique("eos-stop")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=4)
    config = exactly_once_config(stack.kafka_a, stack.kafka_b, topic)
    generator = traffic(stack.kafka_a, topic, tmp_path, "traffic", rate=5_000, count=150_000)
    paused = stack.start_worker(config, name="paused")
    wait_for(lambda: assignments(paused) > 0, 60, "the first worker's partitions")
    other = stack.start_worker(config, name="other")
    wait_for(lambda: assignments(other) > 0, 60, "the partitions shared with a second worker")
    before = assignments(other)
    assert paused.process is not None
    os.kill(paused.process.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: assignments(other) > before,
            60,
            "the other worker to take the paused one's partitions",
        )
        time.sleep(3)  # it copies them, and commits
    finally:
        os.kill(paused.process.pid, signal.SIGCONT)
    wait_for(
        lambda: "lost" in paused.log() or "aborting the transaction" in paused.log(),
        60,
        "the resumed worker to find its partitions gone",
    )
    stats = generator.finish(timeout=600)
    assert stats.failed == 0, stats.errors
    settled(stack.kafka_a, stack.kafka_b, config, topic)
    assert_each_record_once(stack.kafka_a, stack.kafka_b, topic)


@pytest.mark.long  # a killed worker's transaction times out (20 s)
def test_committed_source_transactions_are_copied_once_and_aborted_ones_never(
    stack: MirrorStack, tmp_path: Path
) -> None:
    """The source holds transactions committed and aborted, interleaved with plain records,
    while a worker copies and is killed and restarted: a `read_committed` reader of the
    target sees exactly the committed source records (the content check reads the source
    `read_committed` too)."""
    topic = unique("eos-txn")
    source = stack.kafka_a.bootstrap_servers
    create_topics(source, [topic], partitions=2)
    config = exactly_once_config(stack.kafka_a, stack.kafka_b, topic)
    worker = stack.start_worker(config)
    writer = Producer({"bootstrap.servers": source, "transactional.id": unique("app")})
    writer.init_transactions(30)
    for round_ in range(20):
        writer.begin_transaction()
        for record in records(50, partitions=2):
            writer.produce(topic, record.value, record.key, record.partition or 0)
        if round_ % 3 == 2:
            writer.abort_transaction(30)
        else:
            writer.commit_transaction(30)
        produce(source, topic, records(20, partitions=2))
        if round_ == 10:
            worker.kill()
            worker.start()
    settled(stack.kafka_a, stack.kafka_b, config, topic)
    assert_each_record_once(stack.kafka_a, stack.kafka_b, topic)


@pytest.mark.spark
def test_the_audit_fails_a_duplicate_and_never_counts_an_aborted_copy(
    stack: MirrorStack, tmp_path: Path
) -> None:
    topic = unique("eos-audit")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=1)
    produce(stack.kafka_a.bootstrap_servers, topic, records(100, partitions=1))
    config = exactly_once_config(stack.kafka_a, stack.kafka_b, topic)
    mirror_everything(config, topic, tmp_path, stack.kafka_b)
    remote, target = f"{topic}.A", stack.kafka_b.bootstrap_servers
    reader = Consumer({"bootstrap.servers": target, "group.id": unique("reader")})
    reader.assign([TopicPartition(remote, 0, 10)])
    (copy,) = reader.consume(1, timeout=30)
    reader.close()

    def write_again(producer: Producer) -> None:
        producer.produce(
            remote,
            copy.value(),
            copy.key(),
            0,
            timestamp=copy.timestamp()[1],
            headers=copy.headers(),
        )

    # A copy written again in a transaction that aborts: no reader of the target sees it.
    aborted = Producer({"bootstrap.servers": target, "transactional.id": unique("aborted")})
    aborted.init_transactions(30)
    aborted.begin_transaction()
    write_again(aborted)
    aborted.abort_transaction(30)
    parsed = WorkerConfig.model_validate(config)
    report = audit(parsed, stack.spark)
    assert (report.result, report.records_checked, report.duplicates) == ("Passed", 100, 0)

    # The same copy written again for good: at least once, a re-send; exactly once, a failure.
    plain = Producer({"bootstrap.servers": target})
    write_again(plain)
    assert plain.flush(10) == 0
    report = audit(parsed, stack.spark, full=True)  # not from the first run's watermark
    assert (report.result, report.duplicates) == ("Failed", 1), report.summary().message
    assert "1 duplicates (exactly-once delivery allows none)" in report.summary().message


@pytest.mark.spark
@pytest.mark.timeout(1800)  # minutes of waiting by design; slower on a busy machine
def test_the_target_down_past_the_transaction_timeout_at_5000_records_a_second(
    stack: MirrorStack, tmp_path: Path
) -> None:
    """Longer than the transaction timeout: the transaction open when the target went away is
    aborted by its coordinator when it is back, the worker's producer is fenced, replaced,
    and every partition copied again from its last commit."""
    topic = unique("eos-down")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=8)
    config = exactly_once_config(stack.kafka_a, stack.kafka_b, topic, quick_transactions=False)
    worker = stack.start_worker(config)
    rate, down = 5_000, OUTAGE_SECONDS
    generator = traffic(
        stack.kafka_a, topic, tmp_path, "traffic", rate=rate, count=int(rate * (down + 20))
    )
    wait_for(lambda: committed(stack.kafka_a, config), 60, "the first transaction")
    target_down(stack.kafka_b, worker, down)
    stats = generator.finish(timeout=600)
    assert stats.failed == 0, stats.errors
    total = settled(stack.kafka_a, stack.kafka_b, config, topic)
    assert_each_record_once(stack.kafka_a, stack.kafka_b, topic)
    assert audited(config, stack.spark, total).duplicates == 0


@pytest.mark.long  # three streams of 10,000 records a second
def test_partitions_added_twice_to_a_busy_topic(stack: MirrorStack, tmp_path: Path) -> None:
    """The remote topic grows, the group on the target rebalances onto the new partitions."""
    topic = unique("eos-grow")
    source = stack.kafka_a.bootstrap_servers
    create_topics(source, [topic], partitions=4)
    config = exactly_once_config(stack.kafka_a, stack.kafka_b, topic)
    workers = [stack.start_worker(config, name=f"worker-{n}") for n in range(2)]
    running = traffic(stack.kafka_a, topic, tmp_path, "traffic-4", rate=10_000)
    for count in (8, 12):
        wait_for(lambda: committed(stack.kafka_a, config), 60, "copies committed")
        admin_for(source).create_partitions([NewPartitions(topic, count)])[topic].result(10)
        wait_for(lambda count=count: len(end_offsets(source, topic)) == count, 30, "new leaders")
        following = traffic(stack.kafka_a, topic, tmp_path, f"traffic-{count}", rate=10_000)
        stats = running.finish()
        assert stats.failed == 0, stats.errors
        running = following
    wait_for(
        lambda: len([o for o in committed(stack.kafka_a, config).values() if o > 0]) == 12,
        120,
        lambda: f"copies of all 12 partitions committed: {committed(stack.kafka_a, config)}",
    )
    stats = running.finish()
    assert stats.failed == 0, stats.errors
    settled(stack.kafka_a, stack.kafka_b, config, topic)
    assert all(w.running() for w in workers)
    assert_each_record_once(stack.kafka_a, stack.kafka_b, topic)


@pytest.mark.spark
def test_a_leader_change_on_a_three_broker_target(
    kafka_a: LocalKafka,
    kafka_b3: LocalKafka,
    start_worker: StartWorker,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    """A broker of the target stopped and started again while records stream: its partitions'
    leaders move (the transaction coordinator's too, when it led its partition)."""
    topic = unique("eos-leader")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=6)
    config = exactly_once_config(kafka_a, kafka_b3, topic)
    start_worker(config)
    generator = traffic(kafka_a, topic, tmp_path, "traffic", rate=10_000, count=300_000)
    wait_for(lambda: committed(kafka_a, config), 60, "the first transaction")
    kafka_b3.stop_broker(2)
    before = sum(committed(kafka_a, config).values())
    wait_for(
        lambda: sum(committed(kafka_a, config).values()) > before + 10_000,
        120,
        "transactions committed with the broker away",
    )
    kafka_b3.start_broker(2)
    stats = generator.finish(timeout=600)
    assert stats.failed == 0, stats.errors
    total = settled(kafka_a, kafka_b3, config, topic)
    assert_each_record_once(kafka_a, kafka_b3, topic)
    assert audited(config, spark, total).duplicates == 0


@pytest.mark.kube
def test_a_target_that_refuses_the_transactions_keeps_the_mirror_not_ready_with_the_reason(
    kube_api: client.ApiClient,
    namespace: str,
    kafka_a: LocalKafka,
    kafka_b_acl: LocalKafka,
    operator: OperatorProcess,
) -> None:
    """An ACL on the target denies the mirror's transactional ids: the mirror is Ready=False
    (and Stalled) with a reason and the prefix to allow; once the ACL goes, it is not."""
    prefix = f"kafka-mirror.{namespace}.eos."
    acl = (ResourceType.TRANSACTIONAL_ID, prefix, ResourcePatternType.PREFIXED, "User:*", "*")
    denied = AclBinding(*acl, AclOperation.WRITE, AclPermissionType.DENY)
    admin = admin_for(kafka_b_acl.bootstrap_servers)
    admin.create_acls([denied])[denied].result(10)
    source = {"bootstrapServers": kafka_a.bootstrap_servers}
    target = {"bootstrapServers": kafka_b_acl.bootstrap_servers}
    apply(kube_api, mirror("eos", namespace, source, target, delivery="exactlyOnce"))

    def conditions() -> dict[str, dict[str, Any]]:
        found = get_custom(kube_api, namespace, "kafkamirrors", "eos")
        return {kind: condition(found, kind) for kind in ("Ready", "Stalled")}

    wait_for(
        lambda: conditions()["Ready"].get("reason") == "TargetTransactionsNotGranted",
        60,
        lambda: f"Ready to name the refused transactions: {conditions()}",
    )
    refused = conditions()
    assert refused["Ready"]["status"] == "False" and refused["Stalled"]["status"] == "True"
    assert f"transactional ids prefixed {prefix}" in refused["Ready"]["message"]

    admin.delete_acls([AclBindingFilter(*acl, AclOperation.ANY, AclPermissionType.ANY)])
    wait_for(
        lambda: conditions()["Ready"].get("reason") == "WorkersNotReady",  # no kubelet here
        60,
        lambda: f"the refusal to clear once the ACL is gone: {conditions()}",
    )
    assert "failed with an exception" not in operator.log()
