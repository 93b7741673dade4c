"""Whether the operator may act on a mirror's spec at all, and what it does when it may not.

A stored spec the models refuse (`InvalidSpec`) or one outside the installer's allow-lists
(`NotAllowed`, see `kafka_mirror.api.policy`) gets nothing rendered and no connection. What
already runs is also stopped, wherever the refusal was found (the spec, a Secret that did not
opt in, the API server refusing a child): its workers are scaled to zero and its audit CronJob
suspended, on those two fields only, the audit's runs under way are deleted, and the operator's
copy of its credentials is deleted.
A stored spec may predate a stricter schema (a bootstrap entry of an earlier grammar), so the
running children may carry what the operator would refuse now. The allow-lists are the installer's
word on who may receive the mirror's credentials, and they may have narrowed since the children
were rendered (an operator restarted with fewer patterns), so keeping the old pods would keep
credentials in an image, or an audit on a master, no longer allowed. The objects stay, with the
workers' progress in Kafka, so fixing the spec (or the allow-list) resumes the mirror at the
next converge with nothing lost.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from pydantic import ValidationError

from kafka_mirror import render
from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.policy import AllowLists, not_allowed
from kafka_mirror.controller.status import Problem
from kafka_mirror.kube import controller_uid, delete_owned, merge_patch, read

INVALID_SPEC = "InvalidSpec"
NOT_ALLOWED = "NotAllowed"
CHILD_NAME_TAKEN = "ChildNameTaken"  # a child's name is another object's
STOP_MANAGER = "kafka-mirror-stop"  # the next apply (forced) takes the fields back


class SpecUnusable(ValueError):
    """Only a change of the spec (or of the installer's allow-lists) can make it work."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def field_errors(error: ValidationError) -> str:
    """Each of pydantic's errors as `spec.field.path: message` (no input echoed, no URL)."""
    return "; ".join(
        ".".join(["spec", *(str(part) for part in e["loc"])]) + f": {e['msg']}"
        for e in error.errors(include_url=False, include_input=False)
    )


def parse_spec(spec: object, allowed: AllowLists, own_images: tuple[str, ...]) -> KafkaMirrorSpec:
    """The stored spec, parsed; SpecUnusable when the operator cannot (`InvalidSpec`) or may
    not (`NotAllowed`) use it."""
    try:
        parsed = KafkaMirrorSpec.model_validate(spec)
    except ValidationError as error:
        raise SpecUnusable(
            Problem(INVALID_SPEC, f"the spec cannot be used, fix it: {field_errors(error)}")
        ) from None
    refused = not_allowed(parsed, allowed, own_images)
    if refused:
        raise SpecUnusable(Problem(NOT_ALLOWED, "; ".join(r.message for r in refused)))
    return parsed


STOPPING = (INVALID_SPEC, NOT_ALLOWED)  # refusals that stop what runs


def stop_children(api: client.ApiClient, namespace: str, name: str, owner_uid: str) -> None:
    """Scale the mirror's workers to zero, suspend its audit, end the audit runs under way and
    delete its credentials copy, where they exist and are this mirror's (an object of the same
    name someone else made is left alone)."""
    for api_version, kind, child, patch in (
        ("apps/v1", "Deployment", render.worker_name(name), {"spec": {"replicas": 0}}),
        ("batch/v1", "CronJob", render.audit_cronjob_name(name), {"spec": {"suspend": True}}),
    ):
        found = read(api, api_version, kind, namespace, child)
        if found is None or controller_uid(found) != owner_uid:
            continue  # never rendered (nothing runs), or not ours
        merge_patch(api, api_version, kind, namespace, child, patch, STOP_MANAGER)
        if kind == "CronJob":
            _end_audit_runs(api, namespace, found)
    delete_credentials(api, namespace, name, owner_uid)


def _end_audit_runs(api: client.ApiClient, namespace: str, cronjob: dict[str, Any]) -> None:
    """Delete the audit's Jobs under way (their pods and Spark executors go with them): a
    suspended CronJob starts no new run but leaves a running one with the credentials in its
    environment, talking to a cluster that may no longer be allowed."""
    for run in (cronjob.get("status") or {}).get("active") or []:
        delete_owned(api, "batch/v1", "Job", namespace, run["name"], cronjob["metadata"]["uid"])


def delete_credentials(api: client.ApiClient, namespace: str, name: str, owner_uid: str) -> None:
    """The operator's copy of the mirror's credentials, deleted if it is there and this
    mirror's: nothing of a Secret refused, or gone, is kept."""
    delete_owned(api, "v1", "Secret", namespace, render.credentials_name(name), owner_uid)
