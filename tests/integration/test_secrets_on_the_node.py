"""Issue 63's must-show on a real kubelet: a Secret that did not opt in, created after the mirror
that names it, is never mounted into a running pod. The mirror is written by a tenant who may
write KafkaMirror objects and nothing else; the Secret that appears later holds the source's
real password, so any pod given it would mirror, and Kafka B would show it. Every pod and Secret of
the namespace is watched from before the mirror exists, so one that came and went during the
refused window (many of the operator's status refreshes) counts too."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.kube import apply
from kafka_mirror_dev.kafka import SCRAM_MECHANISM, SCRAM_PASSWORD, SCRAM_USER, LocalKafka
from kafka_mirror_dev.node import KubeNode
from tests.helpers.content import check_content
from tests.helpers.kafka import admin_for, create_topics, end_offsets, produce, records, unique
from tests.helpers.node import NodeStack
from tests.helpers.objects import (
    condition,
    exists,
    get_custom,
    mirror,
    secret,
    secret_names,
    selection,
)
from tests.helpers.tenant import USER, create, impersonating
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node]

MIRROR, SECRET, COPY = "later", "orders-db", "later-credentials"
RECORDS = 200
# How long the refused Secret is left in place, unlabelled: many of the node operator's 2 s
# status refreshes, and long enough for a Deployment's pod to be scheduled and started.
REFUSED_WINDOW = 20.0


class Watched:
    """Every object of one kind in the namespace the API server tells of, from the start: each
    event goes to `record`. A watch the server ends (timeout, expired resource version) or that
    breaks is listed again and resumed, so no window goes unseen; errors are kept to be shown."""

    def __init__(self, lister: Any, namespace: str, record: Any) -> None:
        self.lister, self.namespace, self.record = lister, namespace, record
        self.errors: list[BaseException] = []
        self._stopped = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._follow, args=(self._list(),), daemon=True)
        self._thread.start()

    def _list(self) -> str:
        listing = self.lister(self.namespace)
        for item in listing.items:
            self.record(item)
        return str(listing.metadata.resource_version)

    def _follow(self, resource_version: str) -> None:
        while not self._stopped.is_set():
            try:
                for event in self._watch.stream(
                    self.lister, self.namespace, resource_version=resource_version
                ):
                    self.record(event["object"])
                    resource_version = event["object"].metadata.resource_version
            except Exception as error:  # kept, and the watch listed again
                self.errors.append(error)
            if not self._stopped.is_set():
                self._watch = watch.Watch()
                resource_version = self._list()

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()


class PodWatch:
    """Every pod and Secret of the namespace from before the mirror exists: the Secrets each
    pod referenced, whether any of its containers ever ran, and every Secret name that existed."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.secrets: dict[str, set[str]] = {}
        self.ran: set[str] = set()
        self.secrets_seen: set[str] = set()
        self._watches = [
            Watched(self.core.list_namespaced_pod, namespace, self._record_pod),
            Watched(
                self.core.list_namespaced_secret,
                namespace,
                lambda found: self.secrets_seen.add(found.metadata.name),
            ),
        ]

    def _record_pod(self, pod: Any) -> None:
        name = pod.metadata.name
        spec = self.core.api_client.sanitize_for_serialization(pod.spec)
        self.secrets.setdefault(name, set()).update(secret_names(spec))
        statuses = (pod.status.container_statuses if pod.status else None) or []
        if any(s.state.running or s.state.terminated or s.restart_count for s in statuses):
            self.ran.add(name)

    def given(self, secret_name: str) -> list[str]:
        return sorted(name for name, names in self.secrets.items() if secret_name in names)

    def errors(self) -> list[BaseException]:
        return [error for watched in self._watches for error in watched.errors]

    def stop(self) -> None:
        for watched in self._watches:
            watched.stop()


@pytest.fixture
def pod_watch(node_stack: NodeStack) -> Iterator[PodWatch]:
    watcher = PodWatch(node_stack.api, node_stack.namespace)
    yield watcher
    watcher.stop()


def test_an_unlabelled_secret_created_after_the_mirror_is_never_mounted_into_a_running_pod(
    node_stack: NodeStack, kube_node: KubeNode, pod_watch: PodWatch
) -> None:
    api, namespace, a, b = (
        node_stack.api,
        node_stack.namespace,
        node_stack.kafka_a,
        node_stack.kafka_b,
    )
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    topic = unique("orders")
    create_topics(a.bootstrap_servers, [topic], partitions=2)
    produce(a.bootstrap_servers, topic, records(RECORDS, 2))
    remote = f"{topic}.A"

    author = impersonating(api, kube_node.kubeconfig, namespace, USER, "kafkamirrors")
    source = {
        "bootstrapServers": a.sasl_bootstrap_servers,
        "sasl": {
            "mechanism": SCRAM_MECHANISM,
            "username": SCRAM_USER,
            "passwordSecret": {"name": SECRET, "key": "password"},
        },
    }
    create(author, mirror(MIRROR, namespace, source, {"bootstrapServers": b.bootstrap_servers}))
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        *(GROUP, VERSION, namespace, "mirrortopicselections"),
        selection(MIRROR, namespace, MIRROR, [topic]),
    )

    def ready() -> dict[str, Any]:
        return condition(get_custom(author, namespace, "kafkamirrors", MIRROR), "Ready")

    def workers_stopped() -> bool:
        found = apps.list_namespaced_deployment(namespace).items
        return bool(found) and all(d.spec.replicas == 0 for d in found)

    wait_for(lambda: SECRET in ready().get("message", ""), 120, "the status to name the Secret")
    assert workers_stopped()

    # Another team's Secret of that name appears, unlabelled, with the source's real password.
    apply(api, secret(SECRET, namespace, opted_in=False, password=SCRAM_PASSWORD))
    wait_for(lambda: ready().get("reason") == "NotAllowed", 60, "the mirror refused the Secret")
    time.sleep(REFUSED_WINDOW)  # no event to wait for: what must not happen is watched
    assert pod_watch.given(SECRET) == [] and pod_watch.given(COPY) == []
    assert pod_watch.ran == set(), f"pods ran while the Secret was refused: {pod_watch.ran}"
    assert COPY not in pod_watch.secrets_seen, "the operator copied the refused Secret"
    assert workers_stopped() and not exists(core.read_namespaced_secret, COPY, namespace)
    assert copies(b, remote) == 0

    # Its owner labels it: the operator copies it, and the kubelet's pod logs in with the copy.
    apply(api, secret(SECRET, namespace, password=SCRAM_PASSWORD))
    wait_for(
        lambda: copies(b, remote) >= RECORDS,
        300,
        f"the {RECORDS} records on B",
    )
    report = check_content(a.bootstrap_servers, b.bootstrap_servers, {topic: remote})
    assert report.lossless, report
    assert pod_watch.given(SECRET) == [], "a pod referenced the tenant-named Secret itself"
    assert pod_watch.given(COPY) and pod_watch.ran, "no worker pod ran with the copy"

    # The label taken off again: the workers' pods go, and the copy with them.
    apply(api, secret(SECRET, namespace, opted_in=False, password=SCRAM_PASSWORD))
    wait_for(
        lambda: (
            workers_stopped()
            and not node_stack.pods.any_workers(MIRROR)
            and not exists(core.read_namespaced_secret, COPY, namespace)
        ),
        120,
        "the workers' pods gone and the copy deleted",
    )
    # Errors the watches met were survived by listing again; they are shown, not hidden.
    print("watch errors survived:", pod_watch.errors())


def copies(cluster: LocalKafka, topic: str) -> int:
    """The records on the cluster's topic; 0 where it does not exist (asked without naming it,
    which a broker may take as a request to create it)."""
    if topic not in admin_for(cluster.bootstrap_servers).list_topics(timeout=10).topics:
        return 0
    return sum(end_offsets(cluster.bootstrap_servers, topic).values())
