"""The last phase of a `Return`: start the forward mirror (A→B) again, once the reverse mirror
(B→A) that runs the Return has caught up, committed the groups' offsets on A and stopped.

The forward mirror was stopped by its own promote or failover, which its spec may go on naming
(a GitOps repository keeps it). So the Return does not touch that spec: it writes `resumedBy`
into the forward mirror's `status.operation`, and an operation so marked stops no worker. The
mark belongs to that operation's record: a new operation of the forward mirror stops it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import GROUP, VERSION, KafkaMirrorSpec
from kafka_mirror.api.operations import OperationStatus, ResumedBy, record_of
from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.api.worker_config import WorkerConfig

MIRRORS = "kafkamirrors"


@dataclass(frozen=True)
class Forward:
    """What a Return reads of the mirror it starts again."""

    spec: KafkaMirrorSpec
    status: KafkaMirrorStatus
    uid: str = ""


class Mirrors(Protocol):
    """The mirrors of the Return's namespace."""

    def read(self, name: str) -> Forward | None: ...

    def mark_resumed(self, name: str, operation_id: str, resumed: ResumedBy) -> bool:
        """Mark the record of operation `operation_id` resumed; False if it is not there."""
        ...


class KubeMirrors:
    """The mirrors of one namespace, on the API server."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._objects = client.CustomObjectsApi(api)
        self._namespace = namespace

    def read(self, name: str) -> Forward | None:
        try:
            found: Any = self._objects.get_namespaced_custom_object(
                GROUP, VERSION, self._namespace, MIRRORS, name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        spec = KafkaMirrorSpec.model_validate(found["spec"])
        status = KafkaMirrorStatus.model_validate(found.get("status") or {})
        return Forward(spec, status, str(found["metadata"]["uid"]))

    def mark_resumed(self, name: str, operation_id: str, resumed: ResumedBy) -> bool:
        # A JSON patch whose test fails when the record is another operation's by now.
        patch: list[dict[str, Any]] = [
            {"op": "test", "path": "/status/operation/id", "value": operation_id},
            {
                "op": "add",
                "path": "/status/operation/resumedBy",
                "value": resumed.model_dump(mode="json", by_alias=True, exclude_none=True),
            },
        ]
        try:
            self._objects.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                self._namespace,
                MIRRORS,
                name,
                patch,
                _content_type="application/json-patch+json",
            )
        except ApiException as error:
            if error.status in (404, 422):
                return False
            raise
        return True


def resume_forward(
    op: OperationStatus,
    own_name: str,
    own_uid: str,
    config: WorkerConfig,
    forward_name: str,
    mirrors: Mirrors,
    now: datetime,
) -> bool:
    """Move the forward mirror towards mirroring again; True once it does. `op.message` says
    what it waits for."""
    try:
        forward = mirrors.read(forward_name)
    except (ValueError, ApiException) as error:  # its spec unusable, or the API server failing
        op.message = f"{forward_name} cannot be read, trying again: {str(error)[:200]}"
        return False
    if forward is None:
        op.message = f"no KafkaMirror {forward_name} here to start again: fix spec.operation.resume"
        return False
    way = f"{forward.spec.source.alias}→{forward.spec.target.alias}"
    reverse = f"{config.target.alias}→{config.source.alias}"
    if way != reverse:
        op.message = f"{forward_name} mirrors {way}, not {reverse}: resume names the mirror back"
        return False
    requested = forward.spec.operation
    if requested is not None:
        record = record_of(requested, forward.status.operation)
        if record is None or record.phase != "Completed":
            op.message = f"waiting for {forward_name}'s {requested.type} {requested.id} to complete"
            return False
        if record.resumed_by is None:
            if refused := _not_its_reverse(forward_name, forward.spec, record, own_name, own_uid):
                op.message = refused
                return False
            mark = ResumedBy(mirror=own_name, id=op.id, at=now)
            mirrors.mark_resumed(forward_name, record.id, mark)
            op.message = f"starting {forward_name} again (its {requested.type} {requested.id})"
            return False
    # Its status shows workers only once a refresh that saw the mark has rendered them.
    if not forward.status.replicas:
        paused = ": it is paused (spec.paused)" if forward.spec.paused else ""
        op.message = f"waiting for the workers of {forward_name} to start{paused}"
        return False
    op.message = f"{forward_name} mirrors {way} again ({forward.status.replicas} workers)"
    return True


def _not_its_reverse(
    forward_name: str,
    forward: KafkaMirrorSpec,
    record: OperationStatus,
    own_name: str,
    own_uid: str,
) -> str | None:
    """Why this mirror may not start the forward one again, or None: only the forward mirror's
    owner says which mirror may (its `spec.reverse`), and only that mirror as it was when the
    forward's operation first saw it, not one re-created under its name."""
    if forward.reverse != own_name:
        named = f"names {forward.reverse}" if forward.reverse else "names none"
        return (
            f"{forward_name}'s spec.reverse {named}: only the mirror it names may start it again "
            f"(its owner sets spec.reverse: {own_name}, or removes its operation)"
        )
    if record.reverse_uid is None:
        return f"waiting for {forward_name} to record its reverse mirror {own_name}"
    if record.reverse_uid != own_uid:
        return (
            f"{forward_name}'s {record.type} {record.id} names another {own_name} (uid "
            f"{record.reverse_uid}): a mirror re-created under that name may not start it again"
        )
    return None
