"""The audit's children, as pure builders: its CronJob, the ServiceAccount it runs as, and the
NetworkPolicy that keeps its pods' ports to themselves.

The audit pod reads the same config file and credentials as the workers (`render.mirror_pod`);
on Spark on Kubernetes it is Spark's driver (render_spark).
"""

from __future__ import annotations

from typing import Any

from kafka_mirror import render_spark
from kafka_mirror.api.models import GROUP, KafkaMirrorSpec
from kafka_mirror.render import (
    CONFIG_DIR,
    CONFIG_FILE,
    DEFAULT_AUDIT_IMAGE,
    MIRROR_LABEL,
    CredentialEnv,
    audit_account_name,
    audit_cronjob_name,
    child_labels,
    mirror_pod,
)

AUDIT_SCRATCH = "4Gi"  # the audit pod's /tmp


def build_audit_cronjob(
    namespace: str,
    name: str,
    spec: KafkaMirrorSpec,
    envs: list[CredentialEnv],
    image: str = DEFAULT_AUDIT_IMAGE,
) -> dict[str, Any]:
    """The audit CronJob: one run at a time, reading the same configuration as the workers, and
    writing its summary into the mirror's status with its own ServiceAccount."""
    pod = _audit_pod(name, spec, envs, spec.audit.image or image)
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": audit_cronjob_name(name),
            "namespace": namespace,
            "labels": child_labels(name, "audit"),
        },
        "spec": {
            "schedule": spec.audit.schedule,
            "suspend": spec.audit.suspend,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 1,
                    "template": {"metadata": {"labels": child_labels(name, "audit")}, "spec": pod},
                }
            },
        },
    }


def _audit_pod(
    name: str, spec: KafkaMirrorSpec, envs: list[CredentialEnv], image: str
) -> dict[str, Any]:
    spark = spec.audit.spark
    conf = dict(spark.conf)
    if render_spark.on_kubernetes(spec):
        conf |= render_spark.driver_conf(spec, image, CONFIG_DIR)
    args = ["audit", "--config", f"{CONFIG_DIR}/{CONFIG_FILE}", "--master", spark.master]
    for key, value in sorted(conf.items()):
        args += ["--conf", f"{key}={value}"]
    if spec.audit.full_audit_request:
        args.append(f"--full-request={spec.audit.full_audit_request}")
    pod = mirror_pod(name, spec, envs, image, args)
    if render_spark.on_kubernetes(spec):
        pod["containers"][0]["env"] += render_spark.pod_env()
    pod["restartPolicy"] = "Never"
    pod["serviceAccountName"] = audit_account_name(name)
    pod["automountServiceAccountToken"] = True  # to write status.lastAudit
    # Spark spills shuffle blocks under /tmp (spark.local.dir): room for a large window.
    pod["volumes"] = [
        {**v, "emptyDir": {"sizeLimit": AUDIT_SCRATCH}} if v["name"] == "tmp" else v
        for v in pod["volumes"]
    ]
    return pod


def build_executor_template(name: str, spec: KafkaMirrorSpec) -> str | None:
    """The executors' pod template of the audit on Spark on Kubernetes (None: another master)."""
    if not render_spark.on_kubernetes(spec):
        return None
    labels = child_labels(name, render_spark.EXECUTOR_COMPONENT)
    return render_spark.executor_template(_audit_pod(name, spec, [], ""), labels, AUDIT_SCRATCH)


def build_audit_network_policy(namespace: str, name: str) -> dict[str, Any]:
    """Who may connect to the mirror's audit pods (its driver, and on Spark on Kubernetes its
    executors): each other, on any port, and nobody else. Egress stays open: the driver reaches
    the API server and both reach Kafka wherever the allow-lists permit."""
    mirror = child_labels(name, "audit")[MIRROR_LABEL]
    audit_pods = {
        "matchLabels": {MIRROR_LABEL: mirror},
        "matchExpressions": [
            {
                "key": "app.kubernetes.io/component",
                "operator": "In",
                "values": ["audit", render_spark.EXECUTOR_COMPONENT],
            }
        ],
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": audit_account_name(name),
            "namespace": namespace,
            "labels": child_labels(name, "audit"),
        },
        "spec": {
            "podSelector": audit_pods,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": audit_pods}]}],
        },
    }


def build_audit_rbac(namespace: str, name: str, spec: KafkaMirrorSpec) -> list[dict[str, Any]]:
    """The audit's ServiceAccount, allowed to read its mirror and patch its status, and on Spark
    on Kubernetes to manage its executor pods: nothing more."""
    metadata = {
        "name": audit_account_name(name),
        "namespace": namespace,
        "labels": child_labels(name, "audit"),
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata,
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": ["kafkamirrors/status"],
                    "resourceNames": [name],
                    "verbs": ["get", "patch"],
                },
                *([render_spark.driver_rule()] if render_spark.on_kubernetes(spec) else []),
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": audit_account_name(name),
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": audit_account_name(name), "namespace": namespace}
            ],
        },
    ]
