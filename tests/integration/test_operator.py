"""The operator end to end on the real node (kafka_mirror_dev/node.py): real Kafka A and B on the
node's bridge address, the real operator process on the node's API server, and the worker and
audit pods of the node's image that the kubelet runs from the objects it wrote."""

from __future__ import annotations

import base64
import re
import urllib.request
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import yaml
from kubernetes import client

from kafka_mirror.kube import apply
from kafka_mirror.render import WORKER_ENV, WORKER_GRACE_SECONDS, label_selector
from kafka_mirror_dev.kafka import SCRAM_MECHANISM, SCRAM_PASSWORD, SCRAM_USER
from tests.helpers.kafka import consume, create_topics, produce, records, unique
from tests.helpers.kubectl import Kubectl
from tests.helpers.node import NodeStack
from tests.helpers.objects import (
    condition,
    exists,
    get_custom,
    mirror,
    remote_end,
    secret,
    selection,
    status_of,
)
from tests.helpers.worker import group_offsets, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node]
STATUS_TICKS = 5  # seconds: two of the test operator's status refreshes


# --- the main path --------------------------------------------------------------------------


def test_a_mirror_and_its_selection_run_workers_that_mirror_and_report_status(
    node_stack: NodeStack,
    node_kc: Kubectl,
) -> None:
    p = unique()
    topics = [f"{p}.orders", f"{p}.payments"]
    create_topics(node_stack.kafka_a.bootstrap_servers, topics, partitions=3)
    create_topics(node_stack.kafka_a.bootstrap_servers, [f"{p}.scratch"])
    apply(node_stack.api, secret("source-login", node_stack.namespace, password=SCRAM_PASSWORD))
    source = {
        "bootstrapServers": node_stack.kafka_a.sasl_bootstrap_servers,
        "sasl": {
            "mechanism": SCRAM_MECHANISM,
            "username": SCRAM_USER,
            "passwordSecret": {"name": "source-login", "key": "password"},
        },
    }
    target = {"bootstrapServers": node_stack.kafka_b.bootstrap_servers}
    apply(node_stack.api, mirror("a-to-b", node_stack.namespace, source, target, replicas=2))
    apply(
        node_stack.api,
        selection(
            "orders", node_stack.namespace, "a-to-b", [f"{re.escape(p)}\\..*"], (".*\\.scratch",)
        ),
    )

    apps, core = client.AppsV1Api(node_stack.api), client.CoreV1Api(node_stack.api)
    wait_for(
        lambda: exists(apps.read_namespaced_deployment, "a-to-b-worker", node_stack.namespace),
        30,
        "the worker Deployment",
    )
    for topic in topics:
        produce(node_stack.kafka_a.bootstrap_servers, topic, records(300, partitions=3))
    produce(node_stack.kafka_a.bootstrap_servers, f"{p}.scratch", records(5, partitions=1))
    for topic in topics:
        assert (
            len(consume(node_stack.kafka_b.bootstrap_servers, f"{topic}.A", 300, timeout=90)) == 300
        )

    node_kc("wait", "--for=condition=Ready", "kafkamirror/a-to-b", "--timeout=60s")
    wait_for(
        lambda: (
            status_of(node_stack.api, node_stack.namespace, "a-to-b").get("activeTopics") == topics
            and status_of(node_stack.api, node_stack.namespace, "a-to-b").get("totalLag") == 0
        ),
        30,
        "status to list the active topics with no lag",
    )
    status = status_of(node_stack.api, node_stack.namespace, "a-to-b")
    assert {t["name"]: t["lag"] for t in status["topics"]} == dict.fromkeys(topics, 0)
    assert all(t["latencySeconds"] == 0 for t in status["topics"])
    assert (status["replicas"], status["readyReplicas"]) == (2, 2)
    assert len(node_stack.pods.workers("a-to-b")) == 2
    assert (
        condition(
            get_custom(node_stack.api, node_stack.namespace, "kafkamirrors", "a-to-b"), "Ready"
        )["reason"]
        == "Mirroring"
    )

    table = node_kc("get", "kafkamirrors")
    header, row = table.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "READY", "REASON", "REPLICAS", "ACTIVE"]
    assert row.split()[:7] == ["a-to-b", "True", "Mirroring", "2", "2", "0", "0"]  # lag, latency

    chosen = get_custom(node_stack.api, node_stack.namespace, "mirrortopicselections", "orders")
    assert chosen["status"]["matchedTopics"] == topics
    assert condition(chosen, "Ready")["status"] == "True"

    # Credentials stay in Secrets: the pods reference the operator's copy (not the Secret the
    # spec names), nothing else holds the value.
    config_map = core.read_namespaced_config_map("a-to-b-worker-config", node_stack.namespace)
    assert SCRAM_PASSWORD not in yaml.safe_dump(config_map.data)
    deployment = apps.read_namespaced_deployment("a-to-b-worker", node_stack.namespace)
    env = deployment.spec.template.spec.containers[0].env
    assert [e.value_from.secret_key_ref.name for e in env if e.value_from] == ["a-to-b-credentials"]
    copy = core.read_namespaced_secret("a-to-b-credentials", node_stack.namespace)
    assert copy.metadata.owner_references[0].name == "a-to-b"
    assert base64.b64decode(copy.data["KAFKA_MIRROR_SOURCE_SASL_PASSWORD"]).decode() == (
        SCRAM_PASSWORD
    )
    assert {e.name: e.value for e in env if not e.value_from} == WORKER_ENV
    assert SCRAM_PASSWORD not in str(status) and SCRAM_PASSWORD not in node_stack.operator.log()
    for child in ("a-to-b-metrics",):
        assert exists(core.read_namespaced_service, child, node_stack.namespace)
    assert exists(
        client.BatchV1Api(node_stack.api).read_namespaced_cron_job,
        "a-to-b-audit",
        node_stack.namespace,
    )

    # What Prometheus scrapes from the operator says the same as the status.
    with urllib.request.urlopen(
        f"http://127.0.0.1:{node_stack.operator.metrics_port}/metrics"
    ) as response:
        scraped = response.read().decode()
    labels = f'mirror="a-to-b",namespace="{node_stack.namespace}"'
    assert f"kafka_mirror_ready{{{labels}}} 1.0" in scraped
    assert f"kafka_mirror_workers_ready{{{labels}}} 2.0" in scraped
    assert f"kafka_mirror_active_topics{{{labels}}} 2.0" in scraped

    # The workers' disruption budget, as the disruption controller and the eviction API (what
    # `kubectl drain` calls) apply it: one worker may go, the second is refused while the
    # first is away, and the mirror comes back to two ready workers.
    policy = client.PolicyV1Api(node_stack.api)

    def budget() -> Any:
        return policy.read_namespaced_pod_disruption_budget("a-to-b-worker", node_stack.namespace)

    wait_for(
        lambda: (budget().status.expected_pods, budget().status.disruptions_allowed) == (2, 1),
        30,
        lambda: f"the budget to count 2 workers and allow 1 disruption: {budget().status}",
    )
    first, second = (pod.metadata.name for pod in node_stack.pods.workers("a-to-b"))
    evict(core, first, node_stack.namespace)
    with pytest.raises(client.ApiException) as refused:
        evict(core, second, node_stack.namespace)
    assert refused.value.status == 429, refused.value.body

    def replaced() -> list[str]:
        return [
            pod.metadata.name
            for pod in node_stack.pods.workers("a-to-b")
            if pod.metadata.name != first and ready(pod)
        ]

    wait_for(
        lambda: len(replaced()) == 2,
        120,
        lambda: f"two ready workers besides the evicted {first}: {replaced()}",
    )
    produce(node_stack.kafka_a.bootstrap_servers, topics[0], records(300, partitions=3))
    assert len(consume(node_stack.kafka_b.bootstrap_servers, f"{topics[0]}.A", 600, 90)) == 600


def ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def evict(core: client.CoreV1Api, pod: str, namespace: str) -> None:
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    core.create_namespaced_pod_eviction(pod, namespace, eviction)


# --- changing, scaling, pausing, deleting ------------------------------------------------------


def deployment_replicas(api: client.ApiClient, namespace: str, name: str) -> int | None:
    return client.AppsV1Api(api).read_namespaced_deployment(name, namespace).spec.replicas


# A worker pod has its grace period to stop (in-flight records finished, the group left), after
# the ReplicaSet or the garbage collector deletes it.
WORKERS_STOP = WORKER_GRACE_SECONDS + 120


def workers_left(node_stack: NodeStack) -> Callable[[], str]:
    def said() -> str:
        pods = node_stack.pods.core.list_namespaced_pod(
            node_stack.namespace, label_selector=label_selector("m")
        ).items
        left = {p.metadata.name: p.status.phase for p in pods}
        return f"the workers to stop: {left} left"

    return said


def test_selection_changes_scaling_pausing_and_deleting_take_effect(
    node_stack: NodeStack,
    node_kc: Kubectl,
) -> None:
    p = unique()
    first, second = f"{p}.first", f"{p}.second"
    create_topics(node_stack.kafka_a.bootstrap_servers, [first, second])
    for topic in (first, second):
        produce(node_stack.kafka_a.bootstrap_servers, topic, records(50, partitions=1))
    plain = {"bootstrapServers": node_stack.kafka_a.bootstrap_servers}
    apply(
        node_stack.api,
        mirror(
            "m",
            node_stack.namespace,
            plain,
            {"bootstrapServers": node_stack.kafka_b.bootstrap_servers},
        ),
    )
    apply(node_stack.api, selection("team", node_stack.namespace, "m", [re.escape(first)]))
    consume(node_stack.kafka_b.bootstrap_servers, f"{first}.A", 50, timeout=90)
    wait_for(
        lambda: status_of(node_stack.api, node_stack.namespace, "m").get("activeTopics") == [first],
        30,
        "the first topic to be active",
    )

    # Updating a selection replaces it: the second topic is mirrored, the first no longer. The
    # workers read the new selection from their ConfigMap volume, which the kubelet updates on
    # its own schedule (its sync period, a minute by default, plus its cache's).
    apply(node_stack.api, selection("team", node_stack.namespace, "m", [re.escape(second)]))
    consume(node_stack.kafka_b.bootstrap_servers, f"{second}.A", 50, timeout=180)
    wait_for(
        lambda: (
            status_of(node_stack.api, node_stack.namespace, "m").get("activeTopics") == [second]
        ),
        30,
        "only the second topic to be active",
    )
    produce(node_stack.kafka_a.bootstrap_servers, first, records(20, partitions=1))
    assert "SelectionsApplied" in node_kc("get", "events", "--field-selector=involvedObject.name=m")

    # kubectl scale goes through the scale subresource to the workers.
    node_kc("scale", "kafkamirror/m", "--replicas=3")
    wait_for(
        lambda: deployment_replicas(node_stack.api, node_stack.namespace, "m-worker") == 3,
        30,
        "3 replicas",
    )
    wait_for(
        lambda: status_of(node_stack.api, node_stack.namespace, "m").get("readyReplicas") == 3,
        60,
        "3 ready workers in status",
    )
    assert len(node_stack.pods.workers("m")) == 3

    # Pausing stops every worker and says so.
    node_kc("patch", "kafkamirror/m", "--type=merge", "-p", '{"spec":{"paused":true}}')
    wait_for(
        lambda: deployment_replicas(node_stack.api, node_stack.namespace, "m-worker") == 0,
        30,
        "0 replicas",
    )
    wait_for(
        lambda: (
            condition(
                get_custom(node_stack.api, node_stack.namespace, "kafkamirrors", "m"), "Paused"
            ).get("status")
            == "True"
        ),
        30,
        "the Paused condition",
    )
    ready = condition(
        get_custom(node_stack.api, node_stack.namespace, "kafkamirrors", "m"), "Ready"
    )
    assert (ready["status"], ready["reason"]) == ("False", "Paused")
    wait_for(lambda: not node_stack.pods.any_workers("m"), WORKERS_STOP, workers_left(node_stack))
    produce(node_stack.kafka_a.bootstrap_servers, second, records(10, partitions=1))
    node_kc("patch", "kafkamirror/m", "--type=merge", "-p", '{"spec":{"paused":false}}')
    # At least once: a rebalance may send a record twice, so the check is the workers' own
    # (everything committed, which they do once B acknowledged it) and B's count, not equality.
    group = f"kafka-mirror.{node_stack.namespace}.m"

    def paused_records_arrived() -> bool:
        committed = group_offsets(node_stack.kafka_a, group).get((second, 0), 0)
        return committed == 60 and remote_end(node_stack.kafka_b, f"{second}.A") >= 60

    try:
        wait_for(paused_records_arrived, 90, "the paused records to arrive")
    except AssertionError as timeout:
        committed = group_offsets(node_stack.kafka_a, group).get((second, 0))
        end = remote_end(node_stack.kafka_b, f"{second}.A")
        raise AssertionError(f"{timeout} (committed {committed}, on B {end})") from None
    # The deselected topic got nothing after its selection changed.
    assert remote_end(node_stack.kafka_b, f"{first}.A") == 50

    # Deleting the mirror removes its children (no finalizer: the mirror goes at once, its
    # children soon after, by the garbage collector or the status loop); the remote topics stay.
    node_kc("delete", "kafkamirror/m", "--timeout=60s")
    apps, core = client.AppsV1Api(node_stack.api), client.CoreV1Api(node_stack.api)
    batch, policy = client.BatchV1Api(node_stack.api), client.PolicyV1Api(node_stack.api)
    wait_for(
        lambda: (
            not any(
                exists(read, child, node_stack.namespace)
                for read, child in (
                    (apps.read_namespaced_deployment, "m-worker"),
                    (core.read_namespaced_config_map, "m-worker-config"),
                    (core.read_namespaced_service, "m-metrics"),
                    (policy.read_namespaced_pod_disruption_budget, "m-worker"),
                    (batch.read_namespaced_cron_job, "m-audit"),
                )
            )
        ),
        60,
        "the deleted mirror's children to go",
    )
    wait_for(lambda: not node_stack.pods.any_workers("m"), WORKERS_STOP, workers_left(node_stack))
    assert (
        remote_end(node_stack.kafka_b, f"{first}.A") == 50
        and remote_end(node_stack.kafka_b, f"{second}.A") >= 60
    )
    wait_for(
        lambda: (
            condition(
                get_custom(node_stack.api, node_stack.namespace, "mirrortopicselections", "team"),
                "MirrorFound",
            ).get("reason")
            == "MirrorNotFound"
        ),
        30,
        "the selection to report its missing mirror",
    )


# --- bad input ------------------------------------------------------------------------------


def test_bad_input_shows_as_conditions_and_other_mirrors_keep_working(
    node_stack: NodeStack,
) -> None:
    p = unique()
    good, too_long = f"{p}.good", f"{p}." + "x" * (247 - len(p))
    create_topics(node_stack.kafka_a.bootstrap_servers, [good, too_long])
    produce(node_stack.kafka_a.bootstrap_servers, good, records(20, partitions=1))
    target = {"bootstrapServers": node_stack.kafka_b.bootstrap_servers}
    plain = {"bootstrapServers": node_stack.kafka_a.bootstrap_servers}

    def scram(secret_name: str) -> dict[str, Any]:
        return {
            "bootstrapServers": node_stack.kafka_a.sasl_bootstrap_servers,
            "sasl": {
                "mechanism": SCRAM_MECHANISM,
                "username": SCRAM_USER,
                "passwordSecret": {"name": secret_name, "key": "password"},
            },
        }

    apply(
        node_stack.api, secret("wrong-login", node_stack.namespace, password="not-the-password-51c")
    )
    apply(node_stack.api, mirror("good", node_stack.namespace, plain, target))
    apply(node_stack.api, selection("good", node_stack.namespace, "good", [f"{re.escape(p)}\\..*"]))
    apply(node_stack.api, selection("broken", node_stack.namespace, "good", ["[unclosed"]))
    apply(node_stack.api, selection("orphan", node_stack.namespace, "missing", [".*"]))
    closed = {"bootstrapServers": "127.0.0.1:1"}
    apply(node_stack.api, mirror("unreachable", node_stack.namespace, closed, target))
    apply(
        node_stack.api, mirror("wrong-password", node_stack.namespace, scram("wrong-login"), target)
    )
    apply(node_stack.api, mirror("no-secret", node_stack.namespace, scram("absent"), target))

    def ready(name: str) -> dict[str, Any]:
        return condition(
            get_custom(node_stack.api, node_stack.namespace, "kafkamirrors", name), "Ready"
        )

    def has_ready_reason(name: str, reason: str) -> bool:
        return ready(name).get("reason") == reason

    expected = {
        "unreachable": ("SourceUnreachable", "cannot reach cluster A at 127.0.0.1:1"),
        "wrong-password": ("SourceAuthenticationFailed", "refused the credentials"),
        "no-secret": ("SourceSecretNotFound", "Secret absent is not in namespace"),
    }
    for name, (reason, message) in expected.items():
        try:
            wait_for(partial(has_ready_reason, name, reason), 60, f"{name}: Ready/{reason}")
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}; Ready is {ready(name)}") from None
        assert ready(name)["status"] == "False"
        assert message in ready(name)["message"]
    assert "not-the-password-51c" not in str(
        get_custom(node_stack.api, node_stack.namespace, "kafkamirrors", "wrong-password")
    )

    consume(node_stack.kafka_b.bootstrap_servers, f"{good}.A", 20, timeout=90)
    wait_for(lambda: ready("good").get("status") == "True", 60, "the good mirror to be Ready")
    wait_for(
        lambda: (
            status_of(node_stack.api, node_stack.namespace, "good").get("activeTopics") == [good]
        ),
        30,
        "the good topic to be listed active",
    )
    good_mirror = get_custom(node_stack.api, node_stack.namespace, "kafkamirrors", "good")
    assert [s["name"] for s in good_mirror["status"]["skippedTopics"]] == [too_long]
    assert "over Kafka's limit of 249" in good_mirror["status"]["skippedTopics"][0]["reason"]
    degraded = condition(good_mirror, "Degraded")
    assert degraded["status"] == "True"
    assert "selection broken" in degraded["message"] and too_long[:20] in degraded["message"]

    broken = get_custom(node_stack.api, node_stack.namespace, "mirrortopicselections", "broken")
    assert condition(broken, "Ready")["reason"] == "InvalidPattern"
    assert broken["status"]["invalidPatterns"] == ["includes[0] '[unclosed': missing ]: [unclosed"]
    wait_for(
        lambda: (
            condition(
                get_custom(node_stack.api, node_stack.namespace, "mirrortopicselections", "orphan"),
                "Ready",
            ).get("reason")
            == "MirrorNotFound"
        ),
        30,
        "the orphan selection's condition",
    )
    assert node_stack.operator.running()
    assert "not-the-password-51c" not in node_stack.operator.log()


# --- operator restarts --------------------------------------------------------------------------


def test_an_operator_restarted_mid_way_converges_without_duplicates(
    node_stack: NodeStack,
) -> None:
    names = [f"m{i}" for i in range(5)]
    plain = {"bootstrapServers": node_stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": node_stack.kafka_b.bootstrap_servers}
    for name in names:
        apply(node_stack.api, mirror(name, node_stack.namespace, plain, target))
        apply(
            node_stack.api, selection(name, node_stack.namespace, name, [f"{name}-never-created"])
        )
    node_stack.operator.kill()  # SIGKILL while it is creating the children
    node_stack.operator.start()

    def ready(name: str) -> bool:
        found = get_custom(node_stack.api, node_stack.namespace, "kafkamirrors", name)
        return condition(found, "Ready").get("status") == "True"

    for name in names:
        wait_for(partial(ready, name), 90, f"{name} to be Ready after the restart")
    apps, core = client.AppsV1Api(node_stack.api), client.CoreV1Api(node_stack.api)
    batch = client.BatchV1Api(node_stack.api)
    for listing in (
        apps.list_namespaced_deployment,
        core.list_namespaced_config_map,
        core.list_namespaced_service,
        batch.list_namespaced_cron_job,
    ):
        owners = [
            ref.name
            for item in listing(node_stack.namespace, label_selector="kafkamirror.io/mirror").items
            for ref in item.metadata.owner_references or []
        ]
        assert sorted(owners) == names, listing.__name__
    for name in names:
        found = get_custom(node_stack.api, node_stack.namespace, "kafkamirrors", name)
        assert not found["metadata"].get("finalizers")  # nothing holds a mirror or its namespace
