"""Kubernetes API plumbing shared by the operator, the demo and the tests."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config, dynamic
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

from kafka_mirror.api.crdgen import all_crds

FIELD_MANAGER = "kafka-mirror"
MERGE_PATCH = "application/merge-patch+json"


def api_client(kubeconfig: Path | None = None, connections: int = 32) -> client.ApiClient:
    """A client from a kubeconfig file, or from the pod's service account inside a cluster,
    keeping up to `connections` connections (one per thread that may call at once)."""
    configuration = client.Configuration()
    try:
        if kubeconfig is not None:
            raise config.ConfigException("a kubeconfig was given")
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(
            config_file=str(kubeconfig) if kubeconfig else None,
            client_configuration=configuration,
        )
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


_dynamic_clients: dict[int, dynamic.DynamicClient] = {}


def _resource(api: client.ApiClient, api_version: str, kind: str) -> Any:
    """The dynamic client's handle on a resource; discovery runs once per API client."""
    dynamic_client = _dynamic_clients.get(id(api))
    if dynamic_client is None:
        dynamic_client = _dynamic_clients.setdefault(id(api), dynamic.DynamicClient(api))
    return dynamic_client.resources.get(api_version=api_version, kind=kind)


def apply(api: client.ApiClient, body: dict[str, Any]) -> Any:
    """Server-side apply of one object; returns the object as the server stored it."""
    resource = _resource(api, body["apiVersion"], body["kind"])
    namespace = body["metadata"].get("namespace")
    return resource.server_side_apply(
        body=body,
        name=body["metadata"]["name"],
        namespace=namespace,
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
    )


def create(api: client.ApiClient, body: dict[str, Any]) -> None:
    """Create one object (an event, say: one of `generateName`)."""
    resource = _resource(api, body["apiVersion"], body["kind"])
    resource.create(body=body, namespace=body["metadata"].get("namespace"))


def merge_patch(
    api: client.ApiClient,
    api_version: str,
    kind: str,
    namespace: str,
    name: str,
    patch: dict[str, Any],
    field_manager: str,
) -> None:
    """A JSON merge patch of one object."""
    _resource(api, api_version, kind).patch(
        body=patch,
        name=name,
        namespace=namespace,
        content_type=MERGE_PATCH,
        field_manager=field_manager,
    )


def read(
    api: client.ApiClient, api_version: str, kind: str, namespace: str, name: str
) -> dict[str, Any] | None:
    """One object as stored, or None when there is none of that name."""
    try:
        found: dict[str, Any] = (
            _resource(api, api_version, kind).get(name=name, namespace=namespace).to_dict()
        )
    except NotFoundError:
        return None
    return found


def read_json(api: client.ApiClient, path: str, namespace: str, name: str) -> dict[str, Any] | None:
    """One object by its API path (`/api/v1/namespaces/{namespace}/secrets/{name}`, the names
    quoted), decoded from its JSON, or None when there is none of that name. Without the
    client's typed API classes (CoreV1Api's code alone holds 17 MiB) and typed objects (a
    Deployment's took 2.7 ms of CPU to make): the status loop reads these for every mirror."""
    request = api.param_serialize(
        "GET",
        path,
        path_params={"namespace": namespace, "name": name},
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    data = response.read()
    if response.status == 404:
        return None
    if not 200 <= response.status <= 299:
        api.response_deserialize(response, {})  # raises ApiException, with the server's answer
    found: dict[str, Any] = json.loads(data)
    return found


def controller_uid(body: dict[str, Any]) -> str | None:
    """The uid of the object's controller (its owner reference marked `controller`), if any."""
    for reference in body["metadata"].get("ownerReferences") or []:
        if reference.get("controller"):
            return str(reference["uid"])
    return None


def delete(
    api: client.ApiClient,
    api_version: str,
    kind: str,
    namespace: str,
    name: str,
    uid: str | None = None,
) -> bool:
    """Delete one object (its dependents in the background), only the one of `uid` if given;
    False if it was already gone (or is another object by now)."""
    body: dict[str, Any] = {"propagationPolicy": "Background"}
    if uid is not None:
        body["preconditions"] = {"uid": uid}
    try:
        _resource(api, api_version, kind).delete(name=name, namespace=namespace, body=body)
    except (NotFoundError, ConflictError):  # a failed precondition is a conflict
        return False
    return True


def delete_owned(
    api: client.ApiClient, api_version: str, kind: str, namespace: str, name: str, owner: str
) -> None:
    """Delete the object if it is there and its controller is the object of uid `owner` (one of
    the same name someone else made is left alone)."""
    found = read(api, api_version, kind, namespace, name)
    if found is not None and controller_uid(found) == owner:
        delete(api, api_version, kind, namespace, name, found["metadata"]["uid"])


def install_crds(api: client.ApiClient, timeout: float = 30.0) -> None:
    """Apply the generated CRDs and wait until the server serves them."""
    extensions = client.ApiextensionsV1Api(api)
    for crd in all_crds():
        apply(api, crd)
    deadline = time.monotonic() + timeout
    for crd in all_crds():
        name = crd["metadata"]["name"]
        while True:
            status = extensions.read_custom_resource_definition(name).status
            conditions = (status.conditions if status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.2)


def _cell(value: Any) -> str:
    return "<none>" if value is None or value == "" else str(value)


def table(api: client.ApiClient, api_version: str, kind: str, namespace: str) -> str:
    """The server-rendered table of a resource (its printer columns), as `kubectl get` shows it."""
    resource = _resource(api, api_version, kind)
    response = resource.get(
        namespace=namespace,
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    ).to_dict()
    columns = response["columnDefinitions"]
    shown = [i for i, column in enumerate(columns) if column.get("priority", 0) == 0]
    headers = [columns[i]["name"].upper() for i in shown]
    rows = [[_cell(row["cells"][i]) for i in shown] for row in response["rows"]]
    widths = [max(len(line[i]) for line in [headers, *rows]) for i in range(len(headers))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [headers, *rows]
    )
