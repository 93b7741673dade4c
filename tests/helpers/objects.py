"""Building the objects a user applies, and reading the objects the operator writes."""

from __future__ import annotations

import base64
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import API_VERSION, GROUP, VERSION
from kafka_mirror.api.policy import CREDENTIAL_LABEL
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import end_offsets


def get_custom(api: client.ApiClient, namespace: str, plural: str, name: str) -> dict[str, Any]:
    found: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, name
    )
    return dict(found)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    """The condition of that type, or an empty dict."""
    for item in obj.get("status", {}).get("conditions", []):
        if item["type"] == type_:
            return dict(item)
    return {}


def exists(read: Any, name: str, namespace: str) -> bool:
    try:
        read(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def mirror(
    name: str, namespace: str, source: dict[str, Any], target: dict[str, Any], **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "KafkaMirror",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {
                "alias": "A",
                # Fast rebalances between replicas in tests.
                "config": {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"},
                **source,
            },
            "target": {"alias": "B", **target},
            "refreshTopicsIntervalSeconds": 1,
            "checkpoints": {"intervalSeconds": 1},
            **spec,
        },
    }


def selection(
    name: str, namespace: str, mirror_name: str, includes: list[str], excludes: tuple[str, ...] = ()
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "MirrorTopicSelection",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"mirror": mirror_name, "includes": includes, "excludes": list(excludes)},
    }


def secret(name: str, namespace: str, opted_in: bool = True, **data: str) -> dict[str, Any]:
    """A Secret of `data`; `opted_in`: labelled for mirrors to use (policy.CREDENTIAL_LABEL)."""
    labels = {CREDENTIAL_LABEL: "true"} if opted_in else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def secret_names(pods: Any) -> set[str]:
    """Every Secret that pod specs (serialized: dicts and lists) reference: by env or envFrom,
    by a volume or a projected volume's source, as an image pull Secret or a CSI volume's."""
    if isinstance(pods, dict):
        found = {
            pods[key]["name"]
            for key in ("secretKeyRef", "secretRef", "nodePublishSecretRef")
            if isinstance(pods.get(key), dict)
        }
        if isinstance(pods.get("secret"), dict):  # a volume (secretName) or a projection (name)
            found.add(pods["secret"].get("secretName") or pods["secret"].get("name"))
        found.update(ref["name"] for ref in pods.get("imagePullSecrets") or [])
        return found.union(*(secret_names(value) for value in pods.values()))
    if isinstance(pods, list):
        return set().union(*(secret_names(value) for value in pods))
    return set()


def status_of(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_custom(api, namespace, "kafkamirrors", name).get("status", {}))


def remote_end(cluster: LocalKafka, topic: str) -> int:
    return sum(end_offsets(cluster.bootstrap_servers, topic).values())
