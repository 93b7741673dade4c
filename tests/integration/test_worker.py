"""The mirroring worker against the real clusters A and B, run as the pods would run it."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import Consumer

from kafka_mirror.kafka.admin import topic_ids
from kafka_mirror.kafka.client import GROUP_REQUEST_LIMIT
from kafka_mirror.kafka.formats import PROVENANCE_HEADER, Provenance
from kafka_mirror_dev.kafka import SCRAM_MECHANISM, SCRAM_USER, LocalKafka
from kafka_mirror_dev.prerequisites import worker_env
from tests.helpers.content import check_content
from tests.helpers.derive import DerivingApp
from tests.helpers.kafka import (
    Record,
    admin_for,
    consume,
    create_topics,
    open_transaction,
    produce,
    records,
    unique,
)
from tests.helpers.kafka import end_offsets as kafka_end_offsets
from tests.helpers.mirror_client import translate_with_mirror_client
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import (
    commit_group,
    group_offsets,
    read_partition,
    start_identity_pair,
    wait_for,
    wait_until_mirrored,
    worker_config,
    worker_group,
)

pytestmark = pytest.mark.kafka


def topics_on(cluster: LocalKafka) -> set[str]:
    admin = admin_for(cluster.bootstrap_servers)
    return set(admin.list_topics(timeout=10).topics)


def end_offsets(cluster: LocalKafka, topic: str) -> dict[int, int]:
    return kafka_end_offsets(cluster.bootstrap_servers, topic)


def upstream_of(record: Record) -> Provenance:
    values = [v for k, v in record.headers if k == PROVENANCE_HEADER]
    assert len(values) == 1, record.headers
    return Provenance.decode(values[0])


def without_provenance(record: Record) -> tuple[Any, ...]:
    headers = tuple((k, v) for k, v in record.headers if k != PROVENANCE_HEADER)
    return (record.key, record.value, headers, record.timestamp, record.partition)


# --- selection and record fidelity ---------------------------------------------------------


def test_selected_topics_mirror_every_record_field_and_nothing_else(stack: MirrorStack) -> None:
    p = unique()
    selected, excluded, cyclic = f"{p}.orders", f"{p}.scratch", f"{p}.orders.B"
    internal, unselected = f"{p}.state-internal", f"other{p}"
    create_topics(stack.kafka_a.bootstrap_servers, [selected], partitions=3)
    create_topics(stack.kafka_a.bootstrap_servers, [excluded, cyclic, internal, unselected])
    sent = records(300, partitions=3)
    produce(stack.kafka_a.bootstrap_servers, selected, sent)
    for topic in (excluded, cyclic, internal, unselected):
        produce(stack.kafka_a.bootstrap_servers, topic, records(5, partitions=1))

    worker = stack.start_worker(
        worker_config(stack.kafka_a, stack.kafka_b, [f"{re.escape(p)}.*"], [".*\\.scratch"])
    )
    received = consume(stack.kafka_b.bootstrap_servers, f"{selected}.A", len(sent))

    assert sorted(map(without_provenance, received)) == sorted(map(without_provenance, sent))
    by_value = {r.value: r for r in sent}
    for record in received:
        origin = upstream_of(record)
        assert origin.alias == "A" and origin.partition == record.partition
        assert by_value[record.value].partition == origin.partition
    on_b = topics_on(stack.kafka_b)
    assert f"{selected}.A" in on_b
    assert not {f"{t}.A" for t in (excluded, cyclic, internal, unselected)} & on_b
    assert worker.metric("kafka_mirror_skipped_topic", topic=cyclic) == 1
    assert worker.metric("kafka_mirror_active_topic", topic=selected) == 1
    assert end_offsets(stack.kafka_b, f"{selected}.A") == end_offsets(stack.kafka_a, selected)


def test_remote_topics_copy_partitions_and_configs_and_grow(stack: MirrorStack) -> None:
    topic = unique("cfg")
    create_topics(
        stack.kafka_a.bootstrap_servers,
        [topic],
        partitions=2,
        config={"retention.ms": "7200000", "min.insync.replicas": "1", "cleanup.policy": "compact"},
    )
    stack.start_worker(worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)]))
    wait_for(lambda: f"{topic}.A" in topics_on(stack.kafka_b), 20, "the remote topic")
    from confluent_kafka.admin import ConfigResource, NewPartitions

    target = admin_for(stack.kafka_b.bootstrap_servers)
    resource = ConfigResource(ConfigResource.Type.TOPIC, f"{topic}.A")
    configs = target.describe_configs([resource])[resource].result(timeout=10)
    assert configs["retention.ms"].value == "7200000"
    assert configs["cleanup.policy"].value == "compact"
    assert configs["min.insync.replicas"].source != 1  # MirrorMaker 2 leaves this to the target
    source = admin_for(stack.kafka_a.bootstrap_servers)
    source.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=10)
    wait_for(lambda: len(end_offsets(stack.kafka_b, f"{topic}.A")) == 4, 30, "partitions to grow")
    produce(stack.kafka_a.bootstrap_servers, topic, records(40, partitions=4))
    received = consume(stack.kafka_b.bootstrap_servers, f"{topic}.A", 40)
    assert {r.partition for r in received} == {0, 1, 2, 3}


def test_new_topics_and_selection_changes_apply_live(stack: MirrorStack) -> None:
    p = unique()
    first, late = f"{p}.first", f"{p}.late"
    create_topics(stack.kafka_a.bootstrap_servers, [first])
    produce(stack.kafka_a.bootstrap_servers, first, records(50, partitions=1))
    config = worker_config(stack.kafka_a, stack.kafka_b, [f"{re.escape(p)}\\..*"])
    worker = stack.start_worker(config)
    consume(stack.kafka_b.bootstrap_servers, f"{first}.A", 50)

    create_topics(stack.kafka_a.bootstrap_servers, [late])
    produce(stack.kafka_a.bootstrap_servers, late, records(20, partitions=1))
    # Picked up by the next topic refresh (every 10 s) with nobody acting: a generous bound.
    consume(stack.kafka_b.bootstrap_servers, f"{late}.A", 20, timeout=30)

    # Replace the selection: only `late` now; `first` stops, without a restart.
    pid = worker.process.pid if worker.process else None
    worker.write_config({**config, "selections": [{"name": "test", "includes": [re.escape(late)]}]})
    wait_for(
        lambda: worker.metric("kafka_mirror_active_topic", topic=first) == 0,
        20,
        "the old topic to stop",
    )
    produce(stack.kafka_a.bootstrap_servers, first, records(10, partitions=1))
    produce(stack.kafka_a.bootstrap_servers, late, records(10, partitions=1))
    consume(stack.kafka_b.bootstrap_servers, f"{late}.A", 30)
    time.sleep(3)
    assert sum(end_offsets(stack.kafka_b, f"{first}.A").values()) == 50
    assert worker.process is not None and worker.process.pid == pid and worker.running()
    assert "applying the new selections live" in worker.log()

    # SIGTERM: finish in-flight records, commit, leave the group, exit 0.
    assert worker.stop() == 0
    committed = group_offsets(stack.kafka_a, worker_group(config))
    assert committed[(late, 0)] == end_offsets(stack.kafka_a, late)[0]
    assert "leaving the group" in worker.log()


# --- identity naming: both ways, and topic incarnations --------------------------------------


def topic_id(cluster: LocalKafka, topic: str) -> bytes | None:
    return topic_ids(admin_for(cluster.bootstrap_servers), [topic])[topic]


def provenances(cluster: LocalKafka, topic: str) -> list[list[Provenance]]:
    """Each record's provenance headers, oldest hop first."""
    return [
        [Provenance.decode(v) for k, v in r.headers if k == PROVENANCE_HEADER and v is not None]
        for p in end_offsets(cluster, topic)
        for r in read_partition(cluster, topic, p, 0)
    ]


def test_identity_both_ways_mirrors_derived_records_and_sends_nothing_back(
    stack: MirrorStack,
) -> None:
    """A ↔ B, `t` mirrored as `t` both ways; an application on A derives a record from each of
    B's records mirrored into A's `t` and writes it to A's `u`, headers copied. Each side's
    records reach the other once; the derived records reach B's `u`; nothing goes back."""
    pair = start_identity_pair(stack.kafka_a, stack.kafka_b, stack.start_worker, partitions=2)
    t, u = pair.topic, pair.derived
    produce(stack.kafka_a.bootstrap_servers, t, records(100, partitions=2))
    produce(stack.kafka_b.bootstrap_servers, t, records(150, partitions=2))
    app = DerivingApp(stack.kafka_a.bootstrap_servers, t, u, expected=150)
    app.start()
    assert app.finish(timeout=120) == 150
    pair.wait_until_settled(120)

    def count(cluster: LocalKafka, topic: str) -> int:
        return sum(end_offsets(cluster, topic).values())

    assert (count(stack.kafka_a, t), count(stack.kafka_b, t)) == (
        250,
        250,
    )  # each record once, no echo
    assert (count(stack.kafka_a, u), count(stack.kafka_b, u)) == (
        150,
        150,
    )  # none of B's copies came back
    a_t, b_t, a_u, b_u = (
        topic_id(c, n)
        for c, n in ((stack.kafka_a, t), (stack.kafka_b, t), (stack.kafka_a, u), (stack.kafka_b, u))
    )
    on_b = sorted((p.alias, p.topic_id) for hops in provenances(stack.kafka_b, t) for p in hops)
    assert on_b == [("A", a_t)] * 100  # B's own records carry no header
    # On B's `u`: the hop copied from the record it was derived from, then A → B's own.
    assert {
        tuple((p.alias, p.topic_id) for p in hops) for hops in provenances(stack.kafka_b, u)
    } == {(("B", b_t), ("A", a_u))}
    assert b_u is not None and b_u != b_t
    assert all(worker.running() for worker in pair.workers)


def test_a_topic_created_again_on_the_source_is_named_by_its_new_id(stack: MirrorStack) -> None:
    topic = unique("again")
    create_topics(stack.kafka_a.bootstrap_servers, [topic])
    produce(stack.kafka_a.bootstrap_servers, topic, records(10, partitions=1))
    worker = stack.start_worker(worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)]))
    first = topic_id(stack.kafka_a, topic)
    consume(stack.kafka_b.bootstrap_servers, f"{topic}.A", 10)

    admin_for(stack.kafka_a.bootstrap_servers).delete_topics([topic])[topic].result(timeout=10)
    wait_for(
        lambda: worker.metric("kafka_mirror_active_topic", topic=topic) == 0,
        30,
        "the worker to stop mirroring the deleted topic",
    )
    create_topics(stack.kafka_a.bootstrap_servers, [topic])
    produce(stack.kafka_a.bootstrap_servers, topic, records(5, partitions=1))
    second = topic_id(stack.kafka_a, topic)
    wait_for(
        lambda: sum(end_offsets(stack.kafka_b, f"{topic}.A").values()) == 15, 60, "the new records"
    )
    ids = [hops[-1].topic_id for hops in provenances(stack.kafka_b, f"{topic}.A")]
    assert first is not None and second is not None and first != second
    assert ids == [first] * 10 + [second] * 5  # a topic re-created appends to its remote topic
    assert worker.running()


# --- offsets -----------------------------------------------------------------------------

# Checkpoints and their translation work the same whichever way the copies are delivered
# (exactly once, offset syncs wait for the transaction of the copies they name).
DELIVERIES = ["atLeastOnce", "exactlyOnce"]


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_checkpoints_work_with_mirror_client_and_failover_skips_nothing(
    stack: MirrorStack, delivery: str
) -> None:
    topic, group = unique("pay"), unique("billing")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=2)
    produce(stack.kafka_a.bootstrap_servers, topic, records(1000, partitions=2))
    committed = {0: 333, 1: 250}  # where the group stands on A when A is lost
    commit_group(stack.kafka_a, group, topic, committed)
    stack.start_worker(
        worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)], delivery=delivery)
    )
    consume(stack.kafka_b.bootstrap_servers, f"{topic}.A", 1000)

    translated: dict[tuple[str, int], int] = {}

    def both_partitions() -> bool:
        translated.update(translate_with_mirror_client(stack.kafka_b, group))
        return len(translated) == 2

    wait_for(both_partitions, 60, "checkpoints for both partitions", every=2)
    assert set(translated) == {(f"{topic}.A", 0), (f"{topic}.A", 1)}

    # Fail over: the group resumes on B at the translated offsets and reads to the end.
    ends = end_offsets(stack.kafka_a, topic)
    for partition, position in committed.items():
        start = translated[(f"{topic}.A", partition)]
        seen = [
            upstream_of(r).offset
            for r in read_partition(stack.kafka_b, f"{topic}.A", partition, start)
        ]
        missing = set(range(position, ends[partition])) - set(seen)
        assert not missing, (
            f"failover from {start} would skip {sorted(missing)[:10]}…; on B: "
            f"{end_offsets(stack.kafka_b, f'{topic}.A')}, read {len(seen)} from {seen[:5]}"
        )
        reread = position - min(seen)
        assert 0 <= reread <= 100  # at most offsetSyncs.maxLag records read again


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_a_group_on_partitions_without_copies_gets_checkpoints_mirror_client_reads(
    stack: MirrorStack, delivery: str
) -> None:
    """What a Java consumer commits on a topic with an empty partition, and a position past an
    aborted transaction: neither has a mirrored record (no offset sync), and each still gets a
    checkpoint naming where the group resumes on B, or a promote would wait for ever."""
    topic, group = unique("idle"), unique("java-app")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=3)
    produce(stack.kafka_a.bootstrap_servers, topic, records(200, partitions=1))  # partition 0 only
    open_transaction(stack.kafka_a.bootstrap_servers, topic, 2, 5).abort_transaction(30)
    past_abort = 6  # past the 5 records and the abort marker, written after the abort returns
    wait_for(lambda: end_offsets(stack.kafka_a, topic)[2] == past_abort, 30, "the abort marker")
    commit_group(stack.kafka_a, group, topic, {0: 120, 1: 0, 2: past_abort})
    stack.start_worker(
        worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)], delivery=delivery)
    )
    remote = f"{topic}.A"
    copies = consume(stack.kafka_b.bootstrap_servers, remote, 200)
    # Exactly once, a commit marker before the copy of record 120 moves it up an offset on B.
    resume_on_b = next(copy.offset for copy in copies if copy.key == b"k120")

    translated: dict[tuple[str, int], int] = {}

    def all_partitions() -> bool:
        translated.update(translate_with_mirror_client(stack.kafka_b, group))
        return len(translated) == 3

    wait_for(
        all_partitions,
        60,
        lambda: f"checkpoints of 3 partitions; MirrorClient read {translated}",
        2,
    )
    # Nothing on B for partitions 1 and 2: the group starts at their (empty) beginning there.
    assert translated == {(remote, 0): resume_on_b, (remote, 1): 0, (remote, 2): 0}
    ends = end_offsets(stack.kafka_b, remote)
    assert (ends[1], ends[2]) == (0, 0), ends
    # Exactly once, each transaction's commit marker takes an offset after its copies.
    assert ends[0] == 200 if delivery == "atLeastOnce" else ends[0] > 200, ends


def test_group_offsets_sync_to_b_only_while_idle_there_and_never_backwards(
    stack: MirrorStack,
) -> None:
    topic, group = unique("sync"), unique("app")
    remote = f"{topic}.A"
    create_topics(stack.kafka_a.bootstrap_servers, [topic])
    produce(stack.kafka_a.bootstrap_servers, topic, records(1000, partitions=1))
    commit_group(stack.kafka_a, group, topic, {0: 500})
    config = worker_config(
        stack.kafka_a,
        stack.kafka_b,
        [re.escape(topic)],
        checkpoints={"intervalSeconds": 1, "syncGroupOffsets": True},
    )
    stack.start_worker(config)
    wait_for(lambda: (remote, 0) in group_offsets(stack.kafka_b, group), 60, "group offsets on B")
    first = group_offsets(stack.kafka_b, group)[(remote, 0)]
    assert 400 < first <= 500  # never past the record the group had not yet processed

    # The group becomes active on B: its own offsets must not be overwritten.
    active = Consumer(
        {
            "bootstrap.servers": stack.kafka_b.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )

    def joined() -> bool:
        active.poll(0.2)
        return bool(active.assignment())

    try:
        active.subscribe([remote])
        # librdkafka heartbeats in the background: once assigned, it stays a member.
        wait_for(joined, 30, "the B consumer to join")
        commit_group(stack.kafka_a, group, topic, {0: 900})
        time.sleep(6)
        assert group_offsets(stack.kafka_b, group)[(remote, 0)] == first
    finally:
        active.close()

    # Idle again: the newer position is synced.
    wait_for(
        lambda: group_offsets(stack.kafka_b, group)[(remote, 0)] > 800, 30, "the sync to resume"
    )
    synced = group_offsets(stack.kafka_b, group)[(remote, 0)]
    # The group rewinds on A: B does not move backwards.
    commit_group(stack.kafka_a, group, topic, {0: 100})
    time.sleep(5)
    assert group_offsets(stack.kafka_b, group)[(remote, 0)] == synced


# --- failures ------------------------------------------------------------------------------


# --- bad input ------------------------------------------------------------------------------


def test_unreachable_source_is_reported_and_the_worker_keeps_running(stack: MirrorStack) -> None:
    from kafka_mirror_dev.processes import free_port

    config = worker_config(stack.kafka_a, stack.kafka_b, [".*"])
    config["source"] = {"alias": "A", "bootstrapServers": f"127.0.0.1:{free_port()}"}
    worker = stack.start_worker(config)
    wait_for(
        lambda: worker.metric("kafka_mirror_errors_total", kind="topics") > 0,
        60,
        "the failed refresh to be counted",
    )
    assert worker.metric("kafka_mirror_cluster_reachable", cluster="source") == 0
    assert worker.get("/readyz") is None  # 503: not ready
    assert worker.get("/healthz") is not None
    assert "topics failed (will retry)" in worker.log()
    assert worker.running()


def test_a_worker_that_crashes_in_native_code_logs_every_threads_stack(
    stack: MirrorStack,
) -> None:
    """A segfault (as librdkafka gave one when a source broker came back, quiet run 41) kills the
    process; its log then holds the threads' Python stacks (`faulthandler`).

    Only the dump's start is certain: `faulthandler` reads each thread's frames without the GIL,
    so a thread running Python at that moment can cut the dump short (seen once: the probe server
    answering the test's request, the dump ended in its stack). So the test sends no request to
    the worker and checks the fatal error and the first stack's heading, which come first."""
    topic = unique("crash")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=1)
    worker = stack.start_worker(worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)]))
    wait_for(lambda: "mirroring 1 topics" in worker.log(), 60, "the worker to mirror its topic")
    assert worker.process is not None
    worker.process.send_signal(signal.SIGSEGV)
    assert worker.process.wait(30) == -signal.SIGSEGV
    log = worker.log()
    assert "Fatal Python error: Segmentation fault" in log, log[-2000:]
    assert "(most recent call first):" in log.split("Fatal Python error")[1], log[-2000:]
    # And every thread's native stack, from the core the harness has it leave (for a crash that
    # faulthandler cannot print: it printed nothing for an operator's segfault, quiet run 43).
    native = worker.native_stacks()
    assert "#0 " in native and "Thread " in native, native[-2000:] or "no core or no gdb"


def test_wrong_credentials_are_reported_and_never_logged(stack: MirrorStack) -> None:
    config = worker_config(stack.kafka_a, stack.kafka_b, [".*"])
    config["source"] = {
        "alias": "A",
        "bootstrapServers": stack.kafka_a.sasl_bootstrap_servers,
        "sasl": {
            "mechanism": SCRAM_MECHANISM,
            "username": SCRAM_USER,
            "passwordEnv": "SOURCE_SASL_PASSWORD",
        },
    }
    worker = stack.start_worker(config, env={"SOURCE_SASL_PASSWORD": "not-the-password-7f3a"})
    wait_for(
        lambda: worker.metric("kafka_mirror_errors_total", kind="authentication") > 0,
        60,
        "the authentication failure to be counted",
    )
    assert "refused our credentials" in worker.log()
    assert "not-the-password-7f3a" not in worker.log()
    assert worker.running()


def test_invalid_patterns_and_oversize_names_are_reported_and_the_rest_mirrors(
    stack: MirrorStack,
) -> None:
    p = unique()
    good, too_long = f"{p}.good", f"{p}." + "x" * (247 - len(p))
    assert len(too_long) == 248
    create_topics(stack.kafka_a.bootstrap_servers, [good, too_long])
    produce(stack.kafka_a.bootstrap_servers, good, records(10, partitions=1))
    config = worker_config(stack.kafka_a, stack.kafka_b, [f"{re.escape(p)}\\..*"])
    config["selections"].append({"name": "broken", "includes": ["[unclosed"]})
    worker = stack.start_worker(config)
    consume(stack.kafka_b.bootstrap_servers, f"{good}.A", 10)
    assert worker.metric("kafka_mirror_invalid_patterns") == 1
    assert "selection broken: invalid regular expression '[unclosed'" in worker.log()
    assert worker.metric("kafka_mirror_skipped_topic", topic=too_long) == 1
    assert "over Kafka's limit of 249" in worker.log()


# --- several mirroring processes in one pod ------------------------------------------------


def test_three_processes_in_one_pod_share_the_partitions_and_mirror_each_record_once(
    stack: MirrorStack,
) -> None:
    topic = unique("multi")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=6)
    produce(stack.kafka_a.bootstrap_servers, topic, records(30_000, partitions=6))
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)], processes=3)
    worker = stack.start_worker(config)
    wait_until_mirrored(stack.kafka_a, config, topic)

    report = check_content(
        stack.kafka_a.bootstrap_servers, stack.kafka_b.bootstrap_servers, {topic: f"{topic}.A"}
    )
    assert report.lossless and report.duplicates == 0, report
    group = worker_group(config)
    admin = admin_for(stack.kafka_a.bootstrap_servers)
    described = admin.describe_consumer_groups([group], request_timeout=GROUP_REQUEST_LIMIT)[group]
    members = described.result(timeout=10).members
    assert len(members) == 3 and all(m.assignment.topic_partitions for m in members), members
    # The pod's one endpoint speaks for the three: counts add up, health covers each.
    wait_for(lambda: worker.metric("kafka_mirror_records_total") == 30_000, 30, "the count")
    assert worker.metric("kafka_mirror_lag_records") == 0
    assert worker.get("/healthz") == "ok\n" and worker.get("/readyz") == "ok\n"
    if worker_env():  # this machine has the allocator the pods preload: each process runs on it
        assert worker.process is not None
        supervisor = psutil.Process(worker.process.pid)
        for process in [supervisor, *supervisor.children()]:
            assert "mimalloc" in Path(f"/proc/{process.pid}/maps").read_text(), process
    assert worker.stop() == 0
    assert "mirroring processes ended: exit codes [0, 0, 0]" in worker.log()


@pytest.mark.long  # a backlog
def test_a_backlog_drains_through_a_long_lingering_producer_and_every_record_arrives_once(
    stack: MirrorStack,
) -> None:
    """`linger.py`: the producer is renewed with a long linger while the worker drains a
    backlog, and with the short one once it has caught up; each renewal only after the old
    producer had every record acknowledged."""
    topic = unique("backlog")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=8)
    produce(stack.kafka_a.bootstrap_servers, topic, records(600_000, partitions=8))
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    worker = stack.start_worker(config)
    wait_until_mirrored(stack.kafka_a, config, topic, timeout=300)
    assert "draining a backlog: the producer lingers 100 ms" in worker.log()
    wait_for(lambda: "caught up: the producer lingers 5 ms" in worker.log(), 30, "caught up")

    produce(stack.kafka_a.bootstrap_servers, topic, records(100, partitions=8))
    wait_until_mirrored(stack.kafka_a, config, topic)
    report = check_content(
        stack.kafka_a.bootstrap_servers, stack.kafka_b.bootstrap_servers, {topic: f"{topic}.A"}
    )
    assert report.lossless and report.duplicates == 0, report
    assert report.source_records == report.target_records == 600_100, report
