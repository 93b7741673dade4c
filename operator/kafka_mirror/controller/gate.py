"""Whether the operator may act on a mirror's spec at all, and what it does when it may not.

A stored spec the models refuse (`InvalidSpec`) or one outside the installer's allow-lists
(`NotAllowed`, see `kafka_mirror.api.policy`) gets nothing rendered and no connection. For a
mirror that is not allowed, what already runs is also stopped: its workers are scaled to zero
and its audit CronJob suspended, on those two fields only. The allow-lists are the installer's
word on who may receive the mirror's credentials, and they may have narrowed since the children
were rendered (an operator restarted with fewer patterns), so keeping the old pods would keep
credentials in an image, or an audit on a master, no longer allowed. The objects stay, with the
workers' progress in Kafka, so fixing the spec (or the allow-list) resumes the mirror at the
next converge with nothing lost.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from kafka_mirror import render
from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.policy import AllowLists, not_allowed
from kafka_mirror.controller.status import Problem

INVALID_SPEC = "InvalidSpec"
NOT_ALLOWED = "NotAllowed"
MERGE_PATCH = "application/merge-patch+json"
STOP_MANAGER = "kafka-mirror-stop"  # the next apply (forced) takes the fields back


class SpecUnusable(ValueError):
    """Only a change of the spec (or of the installer's allow-lists) can make it work."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def parse_spec(spec: object, allowed: AllowLists, own_image: str) -> KafkaMirrorSpec:
    """The stored spec, parsed; SpecUnusable when the operator cannot (`InvalidSpec`) or may
    not (`NotAllowed`) use it."""
    try:
        parsed = KafkaMirrorSpec.model_validate(spec)
    except ValidationError as error:
        raise SpecUnusable(
            Problem(INVALID_SPEC, f"the spec cannot be used, fix it: {error}")
        ) from None
    refused = not_allowed(parsed, allowed, own_image)
    if refused:
        raise SpecUnusable(Problem(NOT_ALLOWED, "; ".join(r.message for r in refused)))
    return parsed


def stop_children(api: client.ApiClient, namespace: str, name: str) -> None:
    """Scale the mirror's workers to zero and suspend its audit, where they exist."""
    for patch in (
        lambda: client.AppsV1Api(api).patch_namespaced_deployment(
            render.worker_name(name),
            namespace,
            {"spec": {"replicas": 0}},
            field_manager=STOP_MANAGER,
            _content_type=MERGE_PATCH,
        ),
        lambda: client.BatchV1Api(api).patch_namespaced_cron_job(
            render.audit_cronjob_name(name),
            namespace,
            {"spec": {"suspend": True}},
            field_manager=STOP_MANAGER,
            _content_type=MERGE_PATCH,
        ),
    ):
        try:
            patch()
        except ApiException as error:
            if error.status != 404:  # never rendered: nothing runs
                raise
