"""Group coordinators of a dev cluster: whether they answer, and leaders put back after a broker
was stopped and started.

A broker that comes back leads nothing. Kafka's controller hands each partition back to its
preferred replica (the first) on its own, up to `leader.imbalance.check.interval.seconds` (five
minutes) later, in whatever test runs then: the group coordinators on those partitions move and
load their groups under that test. Stop 48's CI lost a test at such a time (a fan-in started
just after a test that restarted a broker: its source group was told `Not coordinator`, then
its commits stood still for two minutes, their reads answered COORDINATOR_LOAD_IN_PROGRESS).
`restore_preferred_leaders` does the hand-back at once and waits until every group coordinator
answers, so that the next test starts on a settled cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, TopicPartition

from kafka_mirror_dev.clients import DetachedAdmin, destroy_in_background

GROUP_PARTITIONS = 8  # the dev clusters' `offsets.topic.num.partitions`
PROBE = "dev-stack-probe"


def coordinator_answers(bootstrap_servers: str, group: str = PROBE) -> bool:
    """Whether `group`'s offsets can be read (its coordinator is up), asked by a consumer: the
    admin client's group requests can abort the process when they time out, as they do while a
    broker starts on a busy machine (librdkafka#4605, `eonce->refcnt > 0`; a busy run lost a
    test process so)."""
    consumer = [
        Consumer(
            {"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False}
        )
    ]
    try:
        consumer[0].committed([TopicPartition(PROBE, 0)], timeout=5)
    except KafkaException:
        return False
    finally:
        destroy_in_background(consumer)
    return True


def _java_hash(text: str) -> int:
    """Java's `String.hashCode` (for text of one UTF-16 unit per character)."""
    value = 0
    for character in text:
        value = (31 * value + ord(character)) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(group: str) -> int:
    """The `__consumer_offsets` partition whose leader coordinates `group` (Kafka's
    `Utils.abs(group.hashCode()) % partitions`; that `abs` takes Integer.MIN_VALUE to 0)."""
    return abs(_java_hash(group)) % GROUP_PARTITIONS


def probe_groups() -> list[str]:
    """One group name per `__consumer_offsets` partition, in partition order."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < GROUP_PARTITIONS:
        group = f"{PROBE}-{n}"
        found.setdefault(coordinator_partition(group), group)
        n += 1
    return [found[p] for p in range(GROUP_PARTITIONS)]


def _preferred_everywhere(bootstrap_servers: str) -> bool:
    """Ask for a preferred-leader election of every partition; whether each now has its
    preferred leader (a replica not yet back in sync refuses until it is)."""
    try:
        with DetachedAdmin(bootstrap_servers) as admin:
            results = admin.client.elect_leaders(ElectionType.PREFERRED, None).result(30)
    except KafkaException:
        return False
    return all(e is None or e.code() == KafkaError.ELECTION_NOT_NEEDED for e in results.values())


def restore_preferred_leaders(
    bootstrap_servers: str, wait_until: Callable[[Callable[[], bool], float, str], None]
) -> None:
    """Every partition back on its preferred leader, then every group coordinator answering
    (`wait_until(ready, timeout, what)` waits, and says what for)."""
    elected = partial(_preferred_everywhere, bootstrap_servers)
    wait_until(elected, 180, "back on its preferred leaders")
    for group in probe_groups():
        wait_until(
            partial(coordinator_answers, bootstrap_servers, group),
            120,
            f"answering for group {group} (partition {coordinator_partition(group)})",
        )
