"""The end-to-end check a user would make after installing: traffic on A arrives on B.

Shared by the demo, the docker-free chart e2e test, the e2e test on the real node and the kind
e2e (which runs it in-cluster as `kafka-mirror smoke`), so all of them prove the same thing: the
example mirror and selection are Ready with the selected topics active and no lag, every
selected record is on B under its remote name, and the topics the selection leaves out are not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TextIO

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kubernetes import client

from kafka_mirror.api.models import GROUP, VERSION

# The example selection takes accounting.* but not *.scratch; hr.* is not selected at all.
SAMPLE_TOPICS = {
    "accounting.invoices": 3,
    "accounting.payments": 3,
    "accounting.tmp.scratch": 1,
    "hr.salaries": 1,
}
SELECTED = ("accounting.invoices", "accounting.payments")
SAMPLE_RECORDS = 2_000


@dataclass
class Clusters:
    source: str  # bootstrap servers of A
    target: str  # bootstrap servers of B
    source_alias: str = "A"


def produce_sample_traffic(kafka_a: str, out: TextIO) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_a})
    existing = admin.list_topics(timeout=10).topics
    new = [NewTopic(t, n) for t, n in SAMPLE_TOPICS.items() if t not in existing]
    for future in admin.create_topics(new).values() if new else []:
        future.result()
    producer = Producer({"bootstrap.servers": kafka_a, "linger.ms": 20})
    for topic in SAMPLE_TOPICS:
        for i in range(SAMPLE_RECORDS):
            producer.produce(topic, key=f"key-{i}", value=f"{topic} record {i}")
            producer.poll(0)
    producer.flush(30)
    print(f"produced {SAMPLE_RECORDS} records to each of {', '.join(SAMPLE_TOPICS)} on A", file=out)


def read_mirror(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "kafkamirrors", name
    )
    return dict(found)


def ready_condition(mirror: dict[str, Any]) -> dict[str, Any]:
    conditions = mirror.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), {})


def wait_until_mirrored(
    api: client.ApiClient, namespace: str, name: str, out: TextIO, timeout: float
) -> bool:
    """Wait for Ready, the selected topics active and no lag, printing what is awaited."""
    deadline, shown = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        mirror = read_mirror(api, namespace, name)
        status, ready = mirror.get("status", {}), ready_condition(mirror)
        line = (
            f"  Ready={ready.get('status', '-')} ({ready.get('reason', 'no status yet')}), "
            f"active topics {status.get('activeTopicCount', 0)}, lag {status.get('totalLag', '-')}"
        )
        if line != shown:
            print(line, file=out, flush=True)
            shown = line
        if (
            ready.get("status") == "True"
            and set(SELECTED) <= set(status.get("activeTopics", []))
            and status.get("totalLag") == 0
        ):
            return True
        time.sleep(1)
    return False


def records_on(bootstrap: str, topic: str) -> int:
    """How many records a topic holds (end minus start offsets), 0 if it does not exist."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-mirror-smoke"})
    try:
        metadata = consumer.list_topics(timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        total = 0
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def check_remote_topics(clusters: Clusters, out: TextIO) -> list[str]:
    """What is wrong on B: a selected topic short of records, or a left-out topic mirrored."""
    problems = []
    for topic in SAMPLE_TOPICS:
        remote = f"{topic}.{clusters.source_alias}"
        on_a, on_b = records_on(clusters.source, topic), records_on(clusters.target, remote)
        print(f"  {topic}: {on_a} records on A, {remote}: {on_b} on B", file=out)
        if topic in SELECTED and on_b < on_a:
            problems.append(f"{remote} has {on_b} of the {on_a} records of {topic}")
        if topic not in SELECTED and on_b:
            problems.append(f"{remote} exists on B but the selection leaves {topic} out")
    return problems


def run(
    api: client.ApiClient,
    namespace: str,
    mirror: str,
    clusters: Clusters,
    out: TextIO,
    timeout: float = 180,
) -> bool:
    """Produce the sample traffic on A; True once it is all on B and the mirror says so."""
    produce_sample_traffic(clusters.source, out)
    print(f"waiting for {namespace}/{mirror} to catch up:", file=out, flush=True)
    if not wait_until_mirrored(api, namespace, mirror, out, timeout):
        print(f"the mirror did not catch up in {timeout:.0f}s", file=out)
        return False
    problems = check_remote_topics(clusters, out)
    for problem in problems:
        print(f"FAILED: {problem}", file=out)
    return not problems
