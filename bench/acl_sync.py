"""The ACL sync at 10,000 bindings (issue 62): how long a worker's round takes and how many Kafka
calls it makes, against a real broker with KRaft's StandardAuthorizer, beside the bare Kafka
calls any sync must make for the same bindings, measured in the same run.

One cluster is both sides (`t` → `t.A`, as tests/integration/test_acl_sync.py): 500 mirrored
topics, 20 principals with READ on each (10,000 literal bindings), and 20 prefixed bindings
that cover all of them (each one literal binding per topic on the target). The rounds:

- `first`: the target has none of the copies yet: 20,000 bindings created and recorded;
- `steady`: nothing changed on the source: nothing to create, nothing to delete;
- `revoked`: one principal's 500 READ bindings deleted on the source, their copies deleted.

The peers, `bare`: what a sync cannot do without, timed the same way: the two describes of a
steady round (the source's bindings of every pattern, the target's literal ones), and the
deletion of the 500 bindings on the source (one call of 500 exact filters), which the revoked
round repeats on their copies.

    .venv/bin/python bench/acl_sync.py

Prints seconds and calls per round, and writes them to bench/results/acl_sync.json.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from common import RESULTS, summary_header, write_summary
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kafka_mirror.kafka.acl_grants import ANY
from kafka_mirror.topics import NameFilter
from kafka_mirror.worker.acl_sync import AclSync
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror_dev.kafka import LocalKafka

TOPICS, PRINCIPALS, PREFIXES = 500, 20, 20
BATCH = 1000  # bindings per create_acls call while setting up


class CountingAdmin:
    """An admin client that counts the calls made through it."""

    def __init__(self, admin: AdminClient, calls: Counter[str]) -> None:
        self._admin, self._calls = admin, calls

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._admin, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._calls[name] += 1
            return method(*args, **kwargs)

        return counted


def create_bindings(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for first in range(0, len(bindings), BATCH):
        for future in admin.create_acls(bindings[first : first + BATCH]).values():
            future.result(60)


def described(admin: AdminClient) -> int:
    acl_filter = AclBindingFilter(
        ResourceType.ANY,
        ANY,
        ResourcePatternType.ANY,
        ANY,
        ANY,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    return len(admin.describe_acls(acl_filter, request_timeout=60).result())


def settled(admin: AdminClient, count: int) -> None:
    """Wait until the broker describes `count` bindings: a bulk change reaches its authorizer
    (KRaft's metadata log) a moment after the calls are answered."""
    deadline = time.monotonic() + 120
    while (found := described(admin)) != count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{found} bindings described, {count} expected")
        time.sleep(0.5)


def delete_bindings(admin: AdminClient, filters: list[AclBindingFilter]) -> None:
    for future in admin.delete_acls(filters).values():
        future.result(60)


def literal(topic: str, principal: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        principal,
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    workdir = Path(tempfile.mkdtemp(prefix="kafka-mirror-bench-acls-"))
    cluster = LocalKafka("B", workdir, authorizer=True)
    cluster.start()
    try:
        figures = run(cluster)
    finally:
        cluster.remove()
        shutil.rmtree(workdir, ignore_errors=True)
    summary = summary_header("the ACL sync at 10,000 bindings", "acl_sync.py")
    summary.update(figures)
    write_summary(summary, RESULTS / "acl_sync.json")


def run(cluster: LocalKafka) -> dict[str, Any]:
    settings = {"bootstrap.servers": cluster.bootstrap_servers}
    admin = AdminClient(settings)
    topics = [f"orders-{i:04d}" for i in range(TOPICS)]
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(120)
    principals = [f"User:app-{i:02d}" for i in range(PRINCIPALS)]
    source = [literal(t, p, AclOperation.READ) for t in topics for p in principals]
    source += [
        AclBinding(
            ResourceType.TOPIC,
            "orders-",
            ResourcePatternType.PREFIXED,
            f"User:reader-{i:02d}",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        )
        for i in range(PREFIXES)
    ]
    create_bindings(admin, source)
    settled(admin, len(source))
    print(f"{len(source)} bindings on the source", flush=True)

    calls: Counter[str] = Counter()
    clients = SimpleNamespace(
        source_admin=CountingAdmin(admin, calls),
        target_admin=CountingAdmin(admin, calls),
        source_settings=settings,
        target_settings=settings,
        checkpoints_producer=Producer(settings),
    )
    sync = AclSync(clients, WorkerMetrics(), "bench/m", NameFilter((".*",)), {})  # type: ignore[arg-type]
    mirrored = {t: f"{t}.A" for t in topics}

    def round_of(name: str) -> dict[str, Any]:
        calls.clear()
        started = time.perf_counter()
        sync.sync(mirrored)
        seconds = time.perf_counter() - started
        figures = {"seconds": round(seconds, 2), "calls": dict(calls)}
        figures["bindings_held"] = int(sync.metrics.acl_bindings._value.get())
        print(name, figures, flush=True)
        return figures

    rounds = {"first": round_of("first")}
    held = rounds["first"]["bindings_held"]
    settled(admin, len(source) + held)
    rounds["steady"] = round_of("steady")
    revoked = principals[0]
    deleting = time.perf_counter()
    delete_bindings(
        admin,
        [
            AclBindingFilter(
                ResourceType.TOPIC,
                topic,
                ResourcePatternType.LITERAL,
                revoked,
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            )
            for topic in topics
        ],
    )
    bare_delete = time.perf_counter() - deleting
    settled(admin, len(source) - TOPICS + held)
    rounds["revoked"] = round_of("revoked")

    def bare() -> float:
        started = time.perf_counter()
        for pattern in (ResourcePatternType.ANY, ResourcePatternType.LITERAL):
            acl_filter = AclBindingFilter(
                ResourceType.ANY, ANY, pattern, ANY, ANY, AclOperation.ANY, AclPermissionType.ANY
            )
            admin.describe_acls(acl_filter, request_timeout=60).result()
        return time.perf_counter() - started

    bare_seconds = min(bare() for _ in range(3))
    steady = min(rounds["steady"]["seconds"], round_of("steady again")["seconds"])
    return {
        "source_bindings": len(source),
        "mirrored_topics": TOPICS,
        "rounds": rounds,
        "bare_describes_seconds": round(bare_seconds, 3),
        "steady_over_bare": round(steady / bare_seconds, 2),
        # The same deletion (500 exact filters in one call) made on the source by hand.
        "bare_delete_seconds": round(bare_delete, 2),
        "revoked_over_bare_delete": round(rounds["revoked"]["seconds"] / bare_delete, 2),
    }


if __name__ == "__main__":
    main()
