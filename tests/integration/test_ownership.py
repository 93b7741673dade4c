"""A mirror touches only the children it controls: an author who may only create and delete
KafkaMirror objects (impersonated, on the real API server) names a mirror so that one of its
children's names is an object of someone else's (a Deployment `ledger-worker`, the chart's own
metrics Service, a ServiceAccount `X-audit`, a PodDisruptionBudget `payments-worker`), and
creates, disallows and deletes it. The mirror reports the name taken; the object keeps its
resourceVersion and content throughout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.kube import apply, read
from tests.helpers.objects import condition, exists, get_custom, mirror
from tests.helpers.tenant import Listener, create, team_login
from tests.helpers.worker import wait_for

pytestmark = pytest.mark.kube


def deployment(name: str, namespace: str) -> dict[str, Any]:
    labels = {"app": "ledger"}
    pod = {"containers": [{"name": "ledger", "image": "registry.example.com/ledger:7"}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def service(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": "operator"}, "ports": [{"name": "metrics", "port": 9400}]},
    }


def service_account(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace},
    }


def disruption_budget(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "payments"}}},
    }


BYSTANDERS: list[tuple[str, str, Callable[[str, str], dict[str, Any]]]] = [
    ("ledger", "ledger-worker", deployment),
    ("kafka-mirror-operator", "kafka-mirror-operator-metrics", service),  # the chart's Service
    ("x", "x-audit", service_account),
    ("payments", "payments-worker", disruption_budget),  # no Deployment of that name
]


def snapshot(api: client.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    metadata = body["metadata"]
    found = read(api, body["apiVersion"], body["kind"], metadata["namespace"], metadata["name"])
    assert found is not None, f"{body['kind']} {metadata['name']} is gone"
    return found


def wait_for_reason(api: client.ApiClient, namespace: str, name: str, reason: str) -> str:
    def said() -> dict[str, Any]:
        return condition(get_custom(api, namespace, "kafkamirrors", name), "Ready")

    wait_for(lambda: said().get("reason") == reason, 60, lambda: f"{name} {reason}: {said()}")
    return str(said()["message"])


@pytest.mark.parametrize(("name", "taken", "make"), BYSTANDERS, ids=[b[1] for b in BYSTANDERS])
@pytest.mark.usefixtures("guarded_operator")
def test_a_mirror_whose_child_name_is_taken_leaves_the_object_alone(
    kube_api: client.ApiClient,
    namespace: str,
    author: client.ApiClient,
    listener: Listener,
    name: str,
    taken: str,
    make: Callable[[str, str], dict[str, Any]],
) -> None:
    bystander = make(taken, namespace)
    apply(kube_api, bystander)
    before = snapshot(kube_api, bystander)
    cluster = team_login(f"localhost:{listener.port}")

    create(author, mirror(name, namespace, cluster, cluster))
    message = wait_for_reason(author, namespace, name, "ChildNameTaken")
    assert message.startswith(f"{bystander['kind']} {taken} exists and is not KafkaMirror {name}'s")
    # Nothing of the mirror was applied either: the check comes first.
    core = client.CoreV1Api(kube_api)
    assert not exists(core.read_namespaced_config_map, f"{name}-worker-config", namespace)

    # Disallowed, a mirror stops its workers and audit: not someone else's.
    objects = client.CustomObjectsApi(author)
    disallowed = {"spec": {"worker": {"image": "evil.example/steal:1"}}}
    objects.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "kafkamirrors", name, disallowed
    )
    wait_for_reason(author, namespace, name, "NotAllowed")
    assert snapshot(kube_api, bystander) == before

    # Deleted: the operator removes what the mirror controls, nothing else. A second mirror's
    # status at a generation set after the delete comes from a status tick that saw it gone.
    objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, "kafkamirrors", name)
    create(author, mirror("after", namespace, cluster, cluster))
    objects.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "kafkamirrors", "after", {"spec": {"replicas": 2}}
    )
    generation = get_custom(author, namespace, "kafkamirrors", "after")["metadata"]["generation"]

    def observed() -> bool:
        status = get_custom(author, namespace, "kafkamirrors", "after").get("status") or {}
        return status.get("observedGeneration") == generation

    wait_for(observed, 60, "a status tick after the delete")
    assert snapshot(kube_api, bystander) == before


@pytest.mark.usefixtures("guarded_operator")
def test_a_mirrors_labels_stay_on_the_mirror(
    kube_api: client.ApiClient, namespace: str, author: client.ApiClient, listener: Listener
) -> None:
    """Labels steer other controllers (a backup tool's exclusion, a proxy's, a GitOps tool's
    tracking): the children get the operator's labels and an owner reference, not the mirror's
    labels."""
    cluster = team_login(f"localhost:{listener.port}")
    body = mirror("m", namespace, cluster, cluster)
    body["metadata"]["labels"] = {"velero.io/exclude-from-backup": "true"}
    create(author, body)
    apps = client.AppsV1Api(kube_api)
    wait_for(lambda: exists(apps.read_namespaced_deployment, "m-worker", namespace), 60, "m-worker")
    worker = apps.read_namespaced_deployment("m-worker", namespace)
    assert "velero.io/exclude-from-backup" not in (worker.metadata.labels or {})
    (owner,) = worker.metadata.owner_references
    assert (owner.kind, owner.name, owner.controller) == ("KafkaMirror", "m", True)
