"""Reading the objects the operator writes."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import GROUP, VERSION


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
