"""Pure functions from a KafkaMirror (and its selections) to the objects that run it.

Every child is built here (the audit's in render_audit) as a plain dict, ready for server-side
apply; the controller adds the owner reference (`kopf.append_owner_reference`) and applies them.
Nothing here talks to the API server, so the rendering is tested without one.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

from kafka_mirror import render_spark
from kafka_mirror.api.clusters import KafkaCluster, SecretKeyRef
from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.schema_registry import RegistryEndpoint, SchemaRegistrySync
from kafka_mirror.api.worker_config import (
    ClusterConnection,
    RegistryFromEnv,
    SaslFromEnv,
    SchemaRegistryConnection,
    SelectionPatterns,
    TlsFromEnv,
    WorkerConfig,
    yaml_text,
)

# The operator and worker image, and the audit image with PySpark, Java and Spark (Dockerfile).
DEFAULT_IMAGE = f"ghcr.io/kafka-mirror/kafka-mirror-operator:{version('kafka-mirror-operator')}"
DEFAULT_AUDIT_IMAGE = (
    f"ghcr.io/kafka-mirror/kafka-mirror-operator-audit:{version('kafka-mirror-operator')}"
)
CONFIG_DIR = "/etc/kafka-mirror"
CONFIG_FILE = "worker.yaml"
METRICS_PORT = 9400
IMAGE_USER = 10001  # the Dockerfile's user (uid and gid)
MIRROR_LABEL = "kafkamirror.io/mirror"
MANAGED_BY = "kafka-mirror-operator"  # the children's app.kubernetes.io/managed-by
CONFIG_CHECKSUM_ANNOTATION = "kafkamirror.io/config-checksum"
# The mirroring processes' allocator: mimalloc, preloaded (the image installs Debian's
# libmimalloc2.0). Their loop thread frees what librdkafka's threads allocated, where glibc's
# malloc cost it a tenth of its CPU (docs/performance.md). An image without the library runs the
# worker on glibc's allocator, the loader saying so in one line at start.
WORKER_ENV = {"LD_PRELOAD": "libmimalloc.so.2"}
# Kubernetes' limits: label values 63 characters; CronJob names 52 (its Jobs append 11).
LABEL_VALUE_LIMIT = 63
CRONJOB_NAME_LIMIT = 52


@dataclass(frozen=True)
class Images:
    """The images of a mirror's pods where its spec names none (the operator's flags)."""

    worker: str = DEFAULT_IMAGE
    audit: str = DEFAULT_AUDIT_IMAGE


@dataclass(frozen=True)
class CredentialEnv:
    """An environment variable of the worker and audit containers, filled from the key of the
    same name in the mirror's credentials Secret, where the operator copied `secret`'s value
    once it checked that Secret (a pod never names a Secret the mirror's author chose)."""

    name: str
    secret: SecretKeyRef
    destination: str  # where the value is sent: bootstrap servers, or a registry's host:port


# The worker commits what it mirrored on SIGTERM; give it time to drain.
WORKER_GRACE_SECONDS = 60


def fit(name: str, limit: int) -> str:
    """`name`, or its shortened form with a hash suffix when it is over `limit` characters."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-.')}-{digest}"


def mirror_label(mirror: str) -> str:
    """The mirror's MIRROR_LABEL value: its name, or when over a label's 63 characters its first
    54 and a hash after `_`, which no object name holds, so no other mirror's name is the same."""
    if len(mirror) <= LABEL_VALUE_LIMIT:
        return mirror
    return f"{mirror[:54]}_{hashlib.sha256(mirror.encode()).hexdigest()[:8]}"


def worker_name(mirror: str) -> str:
    return f"{mirror}-worker"


def config_map_name(mirror: str) -> str:
    return f"{mirror}-worker-config"


def credentials_name(mirror: str) -> str:
    """The operator's own Secret with the keys the mirror's pods need, copied from the Secrets
    the spec names."""
    return f"{mirror}-credentials"


def metrics_service_name(mirror: str) -> str:
    return fit(f"{mirror}-metrics", LABEL_VALUE_LIMIT)  # Service names are DNS labels


def audit_cronjob_name(mirror: str) -> str:
    return fit(f"{mirror}-audit", CRONJOB_NAME_LIMIT)


def audit_account_name(mirror: str) -> str:
    """The audit pods' ServiceAccount, and the Role and RoleBinding of the same name."""
    return f"{mirror}-audit"


def selector_labels(mirror: str) -> dict[str, str]:
    """The labels that select a mirror's worker pods (also the scale subresource's selector)."""
    return {
        "app.kubernetes.io/name": "kafka-mirror",
        "app.kubernetes.io/component": "worker",
        MIRROR_LABEL: mirror_label(mirror),
    }


def label_selector(mirror: str) -> str:
    return ",".join(f"{key}={value}" for key, value in selector_labels(mirror).items())


def child_labels(mirror: str, component: str) -> dict[str, str]:
    """The labels of every child of a mirror: its name and what part of it the child is."""
    return {
        "app.kubernetes.io/name": "kafka-mirror",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        MIRROR_LABEL: mirror_label(mirror),
    }


def is_credentials_copy(labels: dict[str, str]) -> bool:
    """Whether labels are those of a mirror's copy of its credentials (build_credentials_secret)."""
    return (
        labels.get("app.kubernetes.io/managed-by") == MANAGED_BY
        and labels.get("app.kubernetes.io/component") == "credentials"
    )


# --- the worker's configuration ---------------------------------------------------------------


@dataclass
class _CredentialEnvs:
    """The variables one connection's credentials come in: `KAFKA_MIRROR_<prefix>_<part>`,
    each filled from a Secret key and sent only to `destination`."""

    prefix: str
    destination: str
    envs: list[CredentialEnv] = field(default_factory=list)

    def env_for(self, part: str, ref: SecretKeyRef | None) -> str | None:
        if ref is None:
            return None
        name = f"KAFKA_MIRROR_{self.prefix}_{part}"
        self.envs.append(CredentialEnv(name, ref, self.destination))
        return name


def _connection(role: str, cluster: KafkaCluster) -> tuple[ClusterConnection, list[CredentialEnv]]:
    """The worker's view of one cluster, and the Secret keys its credentials come from."""
    credentials = _CredentialEnvs(role.upper(), cluster.bootstrap_servers)
    env_for = credentials.env_for
    tls = TlsFromEnv(
        enabled=cluster.tls.enabled,
        ca_env=env_for("TLS_CA", cluster.tls.ca_certificate),
        cert_env=env_for("TLS_CERT", cluster.tls.client_certificate),
        key_env=env_for("TLS_KEY", cluster.tls.client_key),
        verify_hostname=cluster.tls.verify_hostname,
    )
    sasl = None
    if cluster.sasl is not None:
        sasl = SaslFromEnv(
            mechanism=cluster.sasl.mechanism,
            username=cluster.sasl.username,
            username_env=env_for("SASL_USERNAME", cluster.sasl.username_secret),
            password_env=env_for("SASL_PASSWORD", cluster.sasl.password_secret) or "",
        )
    connection = ClusterConnection(
        alias=cluster.alias,
        bootstrap_servers=cluster.bootstrap_servers,
        tls=tls,
        sasl=sasl,
        config=dict(cluster.config),
    )
    return connection, credentials.envs


def _registry(role: str, endpoint: RegistryEndpoint) -> tuple[RegistryFromEnv, list[CredentialEnv]]:
    """The worker's view of one schema registry, and the Secret keys its credentials come from."""
    credentials = _CredentialEnvs(f"{role.upper()}_REGISTRY", endpoint.address)
    registry = RegistryFromEnv(
        url=endpoint.url,
        username=endpoint.username,
        username_env=credentials.env_for("USERNAME", endpoint.username_secret),
        password_env=credentials.env_for("PASSWORD", endpoint.password_secret),
    )
    return registry, credentials.envs


def _schema_registry(
    sync: SchemaRegistrySync | None,
) -> tuple[SchemaRegistryConnection | None, list[CredentialEnv]]:
    if sync is None:
        return None, []
    source, source_envs = _registry("source", sync.source)
    target, target_envs = _registry("target", sync.target)
    connection = SchemaRegistryConnection(
        source=source, target=target, topics=sync.topics, keys=sync.keys, subjects=sync.subjects
    )
    return connection, source_envs + target_envs


# The selections' share of the workers' ConfigMap (a ConfigMap holds at most 1 MiB; the rest of
# the configuration is a few KiB): past it a selection is left out, and says so, rather than
# the ConfigMap refused and the mirror stopped for every team.
SELECTIONS_BUDGET_BYTES = 512 * 1024


def fitting_selections(
    namespace: str, spec: KafkaMirrorSpec, selections: list[SelectionPatterns]
) -> tuple[list[SelectionPatterns], list[SelectionPatterns]]:
    """Of the selections, oldest first, those that fit SELECTIONS_BUDGET_BYTES and those left
    out: a newer one never pushes an older one out, and one the configuration leaves out
    anyway (`configured`) takes no room."""
    kept, left_out, used = [], [], 0
    for selection in selections:
        if not configured(namespace, spec, selection):
            continue
        size = len(yaml_text(selection.model_dump(mode="json", by_alias=True), sort_keys=True))
        if used + size > SELECTIONS_BUDGET_BYTES:
            left_out.append(selection)
        else:
            kept.append(selection)
            used += size
    return kept, left_out


def configured(namespace: str, spec: KafkaMirrorSpec, selection: SelectionPatterns) -> bool:
    """Whether the selection goes into the workers' configuration: not one of another
    namespace granted nothing, whose author may not even put text into this mirror's."""
    return (
        selection.namespace == namespace or spec.selection_bound(selection.ref(), namespace) != []
    )


def build_worker_config(
    namespace: str, name: str, spec: KafkaMirrorSpec, selections: list[SelectionPatterns]
) -> tuple[WorkerConfig, list[CredentialEnv]]:
    """The workers' configuration (the union of all selections) and their credential sources."""
    source, source_envs = _connection("source", spec.source)
    target, target_envs = _connection("target", spec.target)
    registry, registry_envs = _schema_registry(spec.schema_registry)
    config = WorkerConfig(
        mirror=f"{namespace}/{name}",
        source=source,
        target=target,
        topic_naming=spec.topic_naming,
        selections=sorted(
            (
                s.model_copy(update={"within": spec.selection_bound(s.ref(), namespace)})
                for s in selections
                if configured(namespace, spec, s)
            ),
            key=lambda s: (s.namespace != namespace, s.namespace, s.name),
        ),
        refresh_topics_interval_seconds=spec.refresh_topics_interval_seconds,
        offset_syncs=spec.offset_syncs,
        checkpoints=spec.checkpoints,
        heartbeats=spec.heartbeats,
        topic_config_sync=spec.topic_config_sync,
        acl_sync=spec.acl_sync,
        schema_registry=registry,
        metrics_port=METRICS_PORT,
        commit_interval_seconds=spec.commit_interval_seconds,
        delivery=spec.delivery,
        processes=spec.worker.processes,
    )
    return config, source_envs + target_envs + registry_envs


def render_worker_config(config: WorkerConfig) -> str:
    return yaml_text(config.model_dump(mode="json", by_alias=True))


def config_checksum(config: WorkerConfig, secret_versions: dict[str, str]) -> str:
    """What the running workers cannot pick up live: everything but the selections (which they
    reload from the mounted file), and the versions of the Secrets they read at start."""
    restart_relevant = config.model_dump(mode="json", exclude={"selections"})
    payload = json.dumps([restart_relevant, sorted(secret_versions.items())], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# --- the children -----------------------------------------------------------------------------


def build_config_map(
    namespace: str, name: str, config: WorkerConfig, executor_template: str | None = None
) -> dict[str, Any]:
    """The workers' configuration (which the audit reads too), and with the audit on Spark on
    Kubernetes its executors' pod template."""
    data = {CONFIG_FILE: render_worker_config(config)}
    if executor_template is not None:
        data[render_spark.EXECUTOR_TEMPLATE] = executor_template
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(name),
            "namespace": namespace,
            "labels": child_labels(name, "worker"),
        },
        "data": data,
    }


def _container_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def mirror_pod(
    name: str, spec: KafkaMirrorSpec, envs: list[CredentialEnv], image: str, args: list[str]
) -> dict[str, Any]:
    """The pod of a worker or an audit run: the mirror's config file, and its credentials from
    the operator's copy of them."""
    worker = spec.worker
    container: dict[str, Any] = {
        "name": "worker",
        "image": image,
        "imagePullPolicy": worker.image_pull_policy,
        "command": ["kafka-mirror"],
        "args": args,
        "env": [
            {
                "name": env.name,
                "valueFrom": {"secretKeyRef": {"name": credentials_name(name), "key": env.name}},
            }
            for env in envs
        ],
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": _container_security(),
    }
    resources = worker.resources.model_dump(exclude_defaults=True)
    if resources:
        container["resources"] = resources
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,  # the workers never call the Kubernetes API
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": IMAGE_USER,  # the image's user: Java and Spark need it named
            "runAsGroup": IMAGE_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": config_map_name(name)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
    }
    if worker.node_selector:
        pod["nodeSelector"] = dict(worker.node_selector)
    if worker.tolerations:
        pod["tolerations"] = [
            t.model_dump(by_alias=True, exclude_none=True) for t in worker.tolerations
        ]
    return pod


def build_deployment(
    namespace: str,
    name: str,
    spec: KafkaMirrorSpec,
    envs: list[CredentialEnv],
    checksum: str,
    image: str = DEFAULT_IMAGE,
) -> dict[str, Any]:
    """The worker Deployment: `spec.replicas` pods (none while paused) sharing the partitions."""
    args = ["worker", "--config", f"{CONFIG_DIR}/{CONFIG_FILE}"]
    pod = mirror_pod(name, spec, envs, spec.worker.image or image, args)
    container = pod["containers"][0]
    allocator = [{"name": name, "value": value} for name, value in WORKER_ENV.items()]
    container["env"] = allocator + container["env"]
    container["ports"] = [{"name": "metrics", "containerPort": METRICS_PORT}]
    container["livenessProbe"] = {
        "httpGet": {"path": "/healthz", "port": "metrics"},
        "periodSeconds": 10,
        "failureThreshold": 3,
    }
    container["readinessProbe"] = {
        "httpGet": {"path": "/readyz", "port": "metrics"},
        "periodSeconds": 5,
    }
    pod["terminationGracePeriodSeconds"] = WORKER_GRACE_SECONDS
    annotations = {
        **spec.worker.annotations,
        CONFIG_CHECKSUM_ANNOTATION: checksum,
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(METRICS_PORT),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": worker_name(name),
            "namespace": namespace,
            "labels": child_labels(name, "worker"),
        },
        "spec": {
            "replicas": 0 if spec.paused else spec.replicas,
            "selector": {"matchLabels": selector_labels(name)},
            "template": {
                "metadata": {"labels": selector_labels(name), "annotations": annotations},
                "spec": pod,
            },
        },
    }


def build_credentials_secret(namespace: str, name: str, values: dict[str, str]) -> dict[str, Any]:
    """The mirror's credentials, keyed by the pods' variable names (`values` from the checked
    Secrets)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": credentials_name(name),
            "namespace": namespace,
            "labels": child_labels(name, "credentials"),
        },
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in values.items()},
    }


def build_metrics_service(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": metrics_service_name(name),
            "namespace": namespace,
            "labels": child_labels(name, "metrics"),
        },
        "spec": {
            "selector": selector_labels(name),
            "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}],
        },
    }


def build_disruption_budget(namespace: str, name: str, spec: KafkaMirrorSpec) -> dict[str, Any]:
    """The workers' PodDisruptionBudget: a node drain evicts at most this many at once, so a
    mirror never loses all its workers to one upgrade."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": worker_name(name),
            "namespace": namespace,
            "labels": child_labels(name, "worker"),
        },
        "spec": {
            "maxUnavailable": spec.worker.disruption_budget.max_unavailable,
            "selector": {"matchLabels": selector_labels(name)},
        },
    }
