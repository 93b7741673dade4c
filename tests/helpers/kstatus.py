"""kstatus' reading of a custom resource, as Flux's `wait` and health checks apply it.

Reproduced from cli-utils' `pkg/kstatus/status` (`status.go`, `generic.go`; the rules in its
README and in kpt's "CRD Status Convention"): a resource being deleted is Terminating; one whose
`status.observedGeneration` differs from `metadata.generation` is InProgress; then the
condition `Reconciling` True means InProgress and `Stalled` True means Failed; otherwise the
resource is Current. `Ready` is not read.
"""

from __future__ import annotations

from typing import Any


def kstatus(resource: dict[str, Any]) -> str:
    metadata, status = resource.get("metadata", {}), resource.get("status") or {}
    if metadata.get("deletionTimestamp"):
        return "Terminating"
    observed = status.get("observedGeneration")
    if observed is not None and observed != metadata.get("generation"):
        return "InProgress"
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
    if conditions.get("Reconciling") == "True":
        return "InProgress"
    if conditions.get("Stalled") == "True":
        return "Failed"
    return "Current"
