"""The operator's work, as plain functions the kopf handlers call: converge a mirror's children,
delete them, and observe the mirror (Kafka and its Deployment) for its status."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import kopf
from kubernetes import client
from kubernetes.dynamic.exceptions import DynamicApiError

from kafka_mirror import render, render_audit, render_spark
from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.controller import autoscaler, operations
from kafka_mirror.controller.gate import (
    CHILD_NAME_TAKEN,
    INVALID_SPEC,
    SpecUnusable,
    delete_credentials,
)
from kafka_mirror.controller.inputs import MirrorInputs, SecretProblem
from kafka_mirror.controller.operation_kafka import ConfluentCluster
from kafka_mirror.controller.readers import Readers
from kafka_mirror.controller.resume import KubeMirrors
from kafka_mirror.controller.serial import AppliedChildren
from kafka_mirror.controller.status import (
    DeploymentState,
    Event,
    KafkaState,
    MirrorObservation,
    Problem,
    mirror_events,
    mirror_status,
)
from kafka_mirror.kafka.acl_grants import ACL_GRANTS_TOPIC
from kafka_mirror.kafka.client import ClusterUnavailable
from kafka_mirror.kafka.observe import ClusterReader
from kafka_mirror.kafka.owners import without_foreign
from kafka_mirror.kube import apply, controller_uid, delete_owned, read, read_json
from kafka_mirror.render import CredentialEnv
from kafka_mirror.topics import NameFilter, plan_topics

SELECTIONS = "mirrortopicselections"
MIRRORS = "kafkamirrors"
MAX_REFUSAL_MESSAGE = 1000  # characters of the API server's reason kept in the status


# --- children -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Desired:
    config: WorkerConfig
    envs: list[CredentialEnv]
    children: list[dict[str, Any]]


def desired_children(inputs: MirrorInputs, images: render.Images) -> Desired:
    """Everything the mirror should own, rendered from its spec and its live selections. The
    pods' credentials are the operator's copy of the checked Secrets' keys; while one of those
    is missing, nothing runs (the status says which) and there is no copy."""
    namespace, name, spec = inputs.namespace, inputs.name, inputs.running_spec
    config, envs = inputs.worker
    try:
        credentials = [render.build_credentials_secret(namespace, name, inputs.credentials())]
    except SecretProblem:
        credentials = []
        audit = spec.audit.model_copy(update={"suspend": True})
        spec = spec.model_copy(update={"paused": True, "audit": audit})
    checksum = render.config_checksum(config, inputs.secrets.versions(envs))
    children = [
        render.build_config_map(
            namespace, name, config, render_audit.build_executor_template(name, spec)
        ),
        *credentials,
        render.build_deployment(namespace, name, spec, envs, checksum, images.worker),
        render.build_metrics_service(namespace, name),
        render.build_disruption_budget(namespace, name, spec),
        render_audit.build_audit_cronjob(namespace, name, spec, envs, images.audit),
        *render_audit.build_audit_rbac(namespace, name, spec),
    ]
    if render_spark.on_kubernetes(spec):  # a spark:// master's executors connect from afar
        children.append(render_audit.build_audit_network_policy(namespace, name))
    # An owner reference only: kopf.adopt would copy the mirror's labels too, and a label can
    # steer other controllers (a backup tool's exclusion, a proxy's, a GitOps tool's tracking).
    kopf.append_owner_reference(children, owner=inputs.body)
    return Desired(config, envs, children)


def converge_children(
    api: client.ApiClient, inputs: MirrorInputs, images: render.Images, applied: AppliedChildren
) -> list[str]:
    """Apply the mirror's children (server-side apply: idempotent, so restarts never duplicate)
    unless the same were applied lately. Returns the selection names now applied when they
    changed, else an empty list."""
    desired = desired_children(inputs, images)
    mirror = inputs.key
    digest = hashlib.sha256(
        json.dumps(desired.children, sort_keys=True, default=str).encode()
    ).hexdigest()
    if applied.is_recent(mirror, digest):
        return []
    for child in desired.children:
        claim(api, child, inputs.name, inputs.body["metadata"]["uid"])
    config_map = desired.children[0]
    before = _read_config_map(
        api, config_map["metadata"]["namespace"], config_map["metadata"]["name"]
    )
    for child in desired.children:
        apply_child(api, child)
    kinds = {child["kind"] for child in desired.children}
    owner_uid = inputs.body["metadata"]["uid"]
    if "Secret" not in kinds:
        delete_credentials(api, inputs.namespace, inputs.name, owner_uid)
    if "NetworkPolicy" not in kinds:  # the audit left Kubernetes: its executors come from afar
        policy = render.audit_account_name(inputs.name)
        delete_owned(
            api, "networking.k8s.io/v1", "NetworkPolicy", inputs.namespace, policy, owner_uid
        )
    applied.record(mirror, digest)
    if before == config_map["data"]:
        return []
    return [s.label(inputs.namespace) for s in desired.config.selections] or ["(none)"]


def claim(api: client.ApiClient, child: dict[str, Any], owner: str, owner_uid: str) -> None:
    """Refuse a child whose name is taken by an object this mirror does not control: it is
    someone else's (or another mirror's), and nothing of it may be changed. Raises
    SpecUnusable; the check runs before anything is applied."""
    metadata = child["metadata"]
    kind, name = child["kind"], metadata["name"]
    found = read(api, child["apiVersion"], kind, metadata["namespace"], name)
    if found is None or controller_uid(found) == owner_uid:
        return
    raise SpecUnusable(
        Problem(
            CHILD_NAME_TAKEN,
            f"{kind} {name} exists and is not KafkaMirror {owner}'s (no controller reference "
            "to it): nothing of it was changed, and nothing of this mirror runs; give the "
            f"mirror another name, or delete that {kind} if it is left over",
        )
    )


def apply_child(api: client.ApiClient, child: dict[str, Any]) -> None:
    """Apply one child; one the API server refuses (say an annotation key Kubernetes does not
    allow) makes the spec unusable: only a change of the spec can fix it."""
    try:
        apply(api, child)
    except DynamicApiError as error:
        if error.status not in (400, 422):
            raise
        kind, name = child["kind"], child["metadata"]["name"]
        refusal = error.summary()[:MAX_REFUSAL_MESSAGE]
        raise SpecUnusable(
            Problem(
                INVALID_SPEC,
                f"the spec cannot be used, fix it: the API server refuses {kind} {name}: {refusal}",
            )
        ) from None


def _read_config_map(api: client.ApiClient, namespace: str, name: str) -> dict[str, str] | None:
    found = read_json(api, "/api/v1/namespaces/{namespace}/configmaps/{name}", namespace, name)
    return None if found is None else found.get("data")


def delete_children(api: client.ApiClient, namespace: str, name: str, owner_uid: str) -> None:
    """Remove the children now (the garbage collector would too, through the owner references,
    but not every cluster runs it promptly, and nothing should mirror after the delete): those
    the mirror of `owner_uid` controls, each by its uid, so an object of the same name someone
    else made is left alone."""
    for api_version, kind, child in (
        ("apps/v1", "Deployment", render.worker_name(name)),
        ("batch/v1", "CronJob", render.audit_cronjob_name(name)),
        ("v1", "Service", render.metrics_service_name(name)),
        ("policy/v1", "PodDisruptionBudget", render.worker_name(name)),
        ("v1", "ConfigMap", render.config_map_name(name)),
        ("v1", "Secret", render.credentials_name(name)),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", render.audit_account_name(name)),
        ("rbac.authorization.k8s.io/v1", "Role", render.audit_account_name(name)),
        ("v1", "ServiceAccount", render.audit_account_name(name)),
        ("networking.k8s.io/v1", "NetworkPolicy", render.audit_account_name(name)),
    ):
        delete_owned(api, api_version, kind, namespace, child, owner_uid)


# --- observing ------------------------------------------------------------------------------


def _deployment_state(
    api: client.ApiClient, namespace: str, name: str, desired: int
) -> DeploymentState:
    deployment = read_json(
        api,
        "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
        namespace,
        render.worker_name(name),
    )
    if deployment is None:
        return DeploymentState(desired, 0, 0)
    status = deployment.get("status") or {}
    return DeploymentState(
        desired,
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        status.get("terminatingReplicas") or 0,
        deployment_problem(status.get("conditions") or []),
    )


def deployment_problem(conditions: list[dict[str, Any]]) -> str | None:
    """Why the Deployment's pods do not come, as its own conditions say: a pod it could not
    create (a quota, Pod Security admission) or a rollout past its deadline."""
    for kind, failing in (("ReplicaFailure", "True"), ("Progressing", "False")):
        for found in conditions:
            if found.get("type") == kind and found.get("status") == failing:
                return f"{found.get('reason', kind)}: {found.get('message', '')}".rstrip(": ")
    return None


def _observe_kafka(
    inputs: MirrorInputs, readers: Readers
) -> tuple[Problem | None, Problem | None, KafkaState | None]:
    mirror, config = inputs.key, inputs.worker[0]
    readers_by_role: dict[str, ClusterReader] = {}
    problems: dict[str, Problem | None] = {"source": None, "target": None}
    topics: dict[str, dict[str, int]] = {}
    for role, connection in (("source", config.source), ("target", config.target)):
        try:
            settings = inputs.cluster_settings(role)
            reader = readers.get(mirror, role, connection.alias, settings)
            topics[role] = reader.topics()
            readers_by_role[role] = reader
        except SecretProblem as error:
            problems[role] = Problem("SecretNotFound", str(error))
        except ClusterUnavailable as error:
            problems[role] = Problem(error.reason, str(error))
    if config.delivery == "exactlyOnce" and "target" in readers_by_role:
        refusal = readers_by_role["target"].transactions_refusal(
            config.transactional_id("operator-probe")
        )
        if refusal is not None:
            problems["target"] = Problem(refusal.reason, str(refusal))
    readers.selection_bounds[mirror] = partial(
        inputs.spec.selection_bound, mirror_namespace=inputs.namespace
    )
    readers.left_out[mirror] = {selection.ref() for selection in inputs.fitting[1]}
    if "source" in topics:
        readers.source_topics[mirror] = sorted(topics["source"])
    if problems["source"] or problems["target"]:
        return problems["source"], problems["target"], None
    usable, _ = config.compiled_selections()
    plan = plan_topics(topics["source"], usable, config.namer(), config.target.alias)
    if config.topic_naming.policy == "identity":
        adopt = NameFilter(tuple(config.topic_naming.adopt))
        settings, ids = inputs.cluster_settings("target"), readers_by_role["target"].topic_ids
        try:
            target_topics, alias = set(topics["target"]), config.source.alias
            plan = without_foreign(plan, target_topics, settings, ids, mirror, alias, adopt)
        except ClusterUnavailable as error:
            return None, Problem(error.reason, str(error)), None
    source = readers_by_role["source"]
    try:
        progress = source.progress(
            config.consumer_group, {t: topics["source"][t] for t in plan.mirrored}
        )
        pending = source.oldest_pending_timestamps(progress)
    except ClusterUnavailable as error:
        return Problem(error.reason, str(error)), None, None
    read_at = datetime.now(UTC)
    acls = _acls_synced(config, readers_by_role["target"], topics["target"])
    return None, None, KafkaState(plan, set(topics["target"]), progress, pending, read_at, acls)


def _acls_synced(config: WorkerConfig, target: ClusterReader, topics: dict[str, int]) -> int | None:
    """The bindings the mirror's ACL sync holds on the target; None while it holds none (or the
    record cannot be read this time: the figure is a count to show, no check)."""
    synced = config.acl_sync.enabled and config.topic_naming.policy != "identity"
    if not synced or ACL_GRANTS_TOPIC not in topics:
        return None
    try:
        return target.acl_grants_held().get(config.mirror) or None
    except ClusterUnavailable:
        return None


def observe_mirror(
    api: client.ApiClient, inputs: MirrorInputs, readers: Readers, now: datetime
) -> tuple[KafkaMirrorStatus, list[Event]]:
    """The mirror's status from Kafka and its Deployment, and the events worth posting."""
    namespace, name = inputs.namespace, inputs.name
    requested, previous, spec = inputs.spec, inputs.previous, inputs.running_spec
    config = inputs.worker[0]
    _, selection_problems = config.compiled_selections()
    source_problem, target_problem, kafka = _observe_kafka(inputs, readers)
    deployment = _deployment_state(api, namespace, name, 0 if spec.paused else spec.replicas)
    observation = MirrorObservation(
        generation=inputs.body["metadata"].get("generation", 0),
        paused=requested.paused,
        label_selector=render.label_selector(name),
        deployment=deployment,
        selection_problems=selection_problems,
        selection_count=len(inputs.selections),
        source_problem=source_problem,
        target_problem=target_problem,
        kafka=kafka,
        audit_schedule=None if spec.audit.suspend else spec.audit.schedule,
        rpo_target_seconds=requested.rpo_target_seconds,
        acknowledged_lost_to_retention=requested.acknowledged_lost_to_retention,
        standby=inputs.standby,
        schema_registry=spec.schema_registry is not None,
    )
    status = mirror_status(observation, previous, now)
    events = mirror_events(previous, status)
    if requested.autoscaling is not None and not spec.paused:
        status.autoscaling = autoscaler.decide(
            requested.autoscaling,
            previous.autoscaling,
            spec.replicas,
            _load(kafka, status),
            autoscaler.processes_per_pod(spec),
            now,
        )
        if (scaled := autoscaler.scaling_event(spec.replicas, status.autoscaling)) is not None:
            events.append(scaled)
    elif requested.autoscaling is not None:  # stopped: the count waits for the workers' return
        status.autoscaling = previous.autoscaling
    if requested.operation is not None or previous.operation is not None:
        access = operations.Access(
            None
            if source_problem
            else ConfluentCluster(inputs.cluster_settings("source"), "source"),
            None
            if target_problem
            else ConfluentCluster(inputs.cluster_settings("target"), "target"),
            KubeMirrors(api, namespace),
            terminating_workers=deployment.terminating,
            uid=inputs.body["metadata"]["uid"],
        )
        mirrored = kafka.plan.mirrored if kafka is not None else None
        status.operation, done = operations.advance(
            requested, previous.operation, status, config, mirrored, access, now
        )
        operations.with_operation(status, requested, previous, now)
        events += done
    return status, events


def _load(kafka: KafkaState | None, status: KafkaMirrorStatus) -> autoscaler.Load | None:
    """The autoscaler's reading of this refresh (None: the source was not read)."""
    if kafka is None:
        return None
    return autoscaler.Load(len(kafka.progress), status.total_lag, status.max_latency_seconds)


def read_mirror(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{MIRRORS}/{{name}}"
    return read_json(api, path, namespace, name)
