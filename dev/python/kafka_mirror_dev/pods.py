"""What the demo and the tests do with a namespace's pods on a real cluster: run a CronJob's
job now (they cannot wait for its schedule), and show what the pods did."""

from __future__ import annotations

import time
import uuid
from typing import Any

from kubernetes import client


def start_now(api: client.ApiClient, namespace: str, cronjob: str) -> str:
    """Start the CronJob's job now, as `kubectl create job --from=cronjob/NAME` does (a Job from
    its jobTemplate, owned by it so that deleting the CronJob collects it): the Job's name."""
    batch = client.BatchV1Api(api)
    found: Any = batch.read_namespaced_cron_job(cronjob, namespace)
    template = api.sanitize_for_serialization(found.spec.job_template)
    metadata = template.get("metadata", {})
    name = f"{cronjob}-manual-{uuid.uuid4().hex[:5]}"
    owner = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "name": cronjob,
        "uid": found.metadata.uid,
        "controller": True,
    }
    annotations = {**metadata.get("annotations", {}), "cronjob.kubernetes.io/instantiate": "manual"}
    job: Any = {
        "metadata": {**metadata, "name": name, "annotations": annotations},
        "spec": template["spec"],
    }
    job["metadata"]["ownerReferences"] = [owner]
    batch.create_namespaced_job(namespace, job)
    return name


def run_now(
    api: client.ApiClient, namespace: str, cronjob: str, timeout: float = 600
) -> tuple[bool, str]:
    """Run the CronJob's job now (`start_now`) to its end: whether it succeeded, and its pods'
    logs."""
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    name = start_now(api, namespace, cronjob)
    deadline = time.monotonic() + timeout
    while True:
        status: Any = batch.read_namespaced_job(name, namespace).status
        if status.succeeded or status.failed:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {name} did not finish within {timeout:.0f}s")
        time.sleep(1)
    pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
    logs = "\n".join(log_of(core, namespace, _name(pod)) for pod in pods)
    return bool(status.succeeded), logs


def _name(item: Any) -> str:
    return str(item.metadata.name)


def log_of(core: client.CoreV1Api, namespace: str, pod: str, previous: bool = False) -> str:
    """The pod's log (of its container's previous run), or why there is none."""
    try:
        return str(core.read_namespaced_pod_log(pod, namespace, previous=previous))
    except client.ApiException as error:
        return f"(no log: {error.reason})"


def diagnostics(api: client.ApiClient, namespace: str) -> str:
    """Every pod's state and log tail, and the namespace's events."""
    core = client.CoreV1Api(api)
    lines = []
    for pod in core.list_namespaced_pod(namespace).items:
        found: Any = pod
        lines.append(f"----- pod {_name(found)}: {found.status.phase}")
        for status in found.status.container_statuses or []:
            lines.append(f"  restarts {status.restart_count}, state {status.state}")
        lines.append(log_of(core, namespace, _name(found))[-3000:])
    events: list[Any] = core.list_namespaced_event(namespace).items
    lines += [f"event {e.involved_object.name}: {e.reason}: {e.message}" for e in events]
    return "\n".join(lines)
