"""Under identity naming a mirror writes only into target topics it created or its spec adopts,
against the real clusters, checked by content on B: an application's own `t` on B keeps exactly
its records, Schema Registry's and a Kafka Streams changelog's names are never created on B, a
topic the mirror created is still its own after the worker restarts, and adopting `t` lets the
copies in. The operator's status lists the topics the workers leave alone."""

from __future__ import annotations

import re

import pytest
from kubernetes import client

from kafka_mirror.kube import apply
from tests.helpers.kafka import admin_for, consume, create_topics, produce, records, unique
from tests.helpers.kafka import end_offsets as kafka_end_offsets
from tests.helpers.objects import get_custom, mirror, selection
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import wait_for, worker_config

pytestmark = [pytest.mark.kafka]


def test_identity_naming_writes_only_into_its_own_or_adopted_topics(stack: MirrorStack) -> None:
    a, b = stack.kafka_a.bootstrap_servers, stack.kafka_b.bootstrap_servers
    p = unique("ident")
    app, created = f"{p}.app", f"{p}.created"
    changelog, schemas = f"{p}-store-changelog", "_schemas"
    create_topics(a, [app, created, changelog, schemas])
    create_topics(b, [app])  # B's applications' own topic of the same name
    produce(a, app, records(10, 1))
    produce(a, created, records(10, 1))
    produce(a, changelog, records(3, 1))
    produce(a, schemas, records(3, 1))
    own = records(5, 1)
    produce(b, app, own)

    includes = [f"{re.escape(p)}.*", "_schemas"]
    config = worker_config(
        stack.kafka_a, stack.kafka_b, includes, topicNaming={"policy": "identity"}
    )
    worker = stack.start_worker(config)
    assert len(consume(b, created, 10)) == 10
    wait_for(
        lambda: worker.metric("kafka_mirror_skipped_topic", topic=app) == 1,
        60,
        "the application's topic on B to be skipped",
    )
    for topic in (changelog, schemas):
        assert worker.metric("kafka_mirror_skipped_topic", topic=topic) == 1
    on_b = set(admin_for(b).list_topics(timeout=10).topics)
    assert changelog not in on_b and schemas not in on_b
    assert kafka_end_offsets(b, app) == {0: 5}
    assert sorted(r.value for r in consume(b, app, 5)) == sorted(r.value for r in own)

    # Restarted, the worker finds its own topic in the records it wrote, and goes on.
    assert worker.stop() == 0
    produce(a, created, records(5, 1))
    config["topicNaming"]["adopt"] = [re.escape(app)]
    worker = stack.start_worker(config)
    assert len(consume(b, created, 15)) == 15
    # Adopted, `t` on B takes the copies beside its own records.
    wait_for(
        lambda: kafka_end_offsets(b, app) == {0: 15},
        60,
        lambda: f"the adopted topic to take the copies: {kafka_end_offsets(b, app)}",
    )
    assert worker.metric("kafka_mirror_active_topic", topic=app) == 1


@pytest.mark.kube
@pytest.mark.usefixtures("operator")
def test_the_status_lists_a_foreign_target_topic_as_skipped(
    kube_api: client.ApiClient, namespace: str, stack: MirrorStack
) -> None:
    """The operator applies the workers' rule: a Promote waits for no topic the workers never
    write, and people see why it is not mirrored."""
    a, b = stack.kafka_a.bootstrap_servers, stack.kafka_b.bootstrap_servers
    p = unique("ident")
    app = f"{p}.app"
    create_topics(a, [app])
    create_topics(b, [app])
    naming = {"policy": "identity"}
    source, target = {"bootstrapServers": a}, {"bootstrapServers": b}
    apply(kube_api, mirror("m", namespace, source, target, topicNaming=naming))
    apply(kube_api, selection("all", namespace, "m", [f"{re.escape(p)}.*"]))

    def skipped() -> list[dict[str, str]]:
        status = get_custom(kube_api, namespace, "kafkamirrors", "m").get("status") or {}
        return list(status.get("skippedTopics") or [])

    wait_for(
        lambda: [s["name"] for s in skipped()] == [app],
        60,
        lambda: f"the foreign topic among the skipped: {skipped()}",
    )
    assert "did not create it" in skipped()[0]["reason"]
    apply(kube_api, mirror("m", namespace, source, target, topicNaming={**naming, "adopt": [".*"]}))
    wait_for(lambda: skipped() == [], 60, lambda: f"adopted, no longer skipped: {skipped()}")
