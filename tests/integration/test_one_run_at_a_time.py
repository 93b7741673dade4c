"""One run of a partition at a time on the target (issue 64.6, the assumption of the proof in
docs/translation.md): a worker whose revoke flush times out behind a throttled target gives the
partitions up with their records still queued; the next owner copies them again from the
commit. Judged from B: in each remote partition the source offsets (provenance headers) go
back at most at the hand-over and at the producer's replacement, never back and forth as two
runs appending side by side would make them."""

from __future__ import annotations

import re

import pytest

from tests.helpers.failover import source_offsets
from tests.helpers.kafka import client_quota, create_topics, produce, records, unique
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import (
    StartWorker,
    group_offsets,
    wait_for,
    wait_until_mirrored,
    worker_config,
    worker_group,
)

pytestmark = [pytest.mark.kafka, pytest.mark.long]

PARTITIONS, RECORDS, SIZE = 4, 120_000, 300  # 36 MB: minutes at the quota, in the queue at once
QUOTA = "producer_byte_rate=500000"  # B's default for every client: the revoke flush times out


@pytest.mark.timeout(900)
def test_a_partition_revoked_behind_a_throttled_queue_is_copied_by_one_worker_at_a_time(
    stack: MirrorStack, start_worker: StartWorker
) -> None:
    topic = unique("handover")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=PARTITIONS)
    produce(stack.kafka_a.bootstrap_servers, topic, records(RECORDS, PARTITIONS, SIZE))
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    group = worker_group(config)
    client_quota(stack.kafka_b, QUOTA)
    try:
        first = start_worker(config, "first")
        wait_for(
            lambda: sum(group_offsets(stack.kafka_a, group).values()) > 0,
            120,
            "the first worker committing under the quota",
        )
        second = start_worker(config, "second")
        # The first gives two partitions up once its flush timed out, with records queued.
        wait_for(
            lambda: second.metric("kafka_mirror_records_total") > 0,
            180,
            "the second worker copying the partitions it was given",
        )
    finally:
        client_quota(stack.kafka_b, None)
    wait_until_mirrored(stack.kafka_a, config, topic, timeout=300)
    print(
        f"producers replaced: {first.metric('kafka_mirror_errors_total', kind='producer replaced')}"
    )
    remote = f"{topic}.A"
    for partition in range(PARTITIONS):
        order = source_offsets(stack.kafka_b, remote, partition)
        assert set(order) == set(range(RECORDS // PARTITIONS)), f"{partition}: records missing"
        backs = [i for i in range(1, len(order)) if order[i] < order[i - 1]]
        print(f"{remote}[{partition}]: {len(order):,} copies, back at {backs[:10]}")
        # Once when the partition changed hands (or the kept ones went through a new producer);
        # two interleaved runs go back at every switch between their batches.
        assert len(backs) <= 1, f"{remote}[{partition}] went back {len(backs)} times"
