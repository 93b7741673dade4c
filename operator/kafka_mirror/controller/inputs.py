"""A KafkaMirror's inputs, read once per handler call: the object parsed into its typed spec
and status, its selections (from kopf's index), and the Secrets it names, each read from the
API server at most once however many times the call needs it."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import kopf
from kubernetes import client

from kafka_mirror import render
from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.policy import (
    CREDENTIAL_LABEL,
    HOSTS_ANNOTATION,
    AllowLists,
    NotAllowed,
    bootstrap_allowed,
)
from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.api.worker_config import SelectionPatterns, WorkerConfig
from kafka_mirror.controller import autoscaler, operations
from kafka_mirror.controller.gate import NOT_ALLOWED, SpecUnusable
from kafka_mirror.controller.resume import KubeMirrors
from kafka_mirror.controller.standby import standing_by
from kafka_mirror.controller.status import Problem
from kafka_mirror.kube import read_json
from kafka_mirror.render import CredentialEnv

Secret = dict[str, Any]  # as the API server returns it


class SecretProblem(Exception):
    """A Secret (or key) the mirror names cannot be read."""


def selection_patterns(namespace: str, name: str, spec: Any) -> SelectionPatterns:
    """A selection's patterns as stored: the schema checked their shape, but a pattern that does
    not compile must reach the status (and be skipped by the workers), not fail parsing."""
    return SelectionPatterns(
        name=name,
        namespace=namespace,
        includes=list(spec.get("includes", [])),
        excludes=list(spec.get("excludes", [])),
    )


def selection_mirror(namespace: str, spec: Any) -> tuple[str, str]:
    """The namespace and name of the KafkaMirror a selection (in `namespace`) names."""
    return spec.get("mirrorNamespace") or namespace, spec.get("mirror", "")


class Secrets:
    """The Secrets of one namespace, each read at most once (None when it does not exist).

    A mirror may use a Secret only if the Secret opts in (`CREDENTIAL_LABEL`), unless the
    installer allows any: writing a mirror must not send a Secret its author cannot read to a
    cluster of their choosing, and a label is something only who may write the Secret can set.
    """

    def __init__(self, api: client.ApiClient, namespace: str, any_secret: bool = False) -> None:
        self.api, self.namespace, self.any_secret = api, namespace, any_secret
        self._read: dict[str, Secret | None] = {}

    def get(self, name: str) -> Secret | None:
        """The Secret, or None; SpecUnusable (NotAllowed) when it has not opted in."""
        if name not in self._read:
            path = "/api/v1/namespaces/{namespace}/secrets/{name}"
            self._read[name] = read_json(self.api, path, self.namespace, name)
        secret = self._read[name]
        labels = (secret["metadata"].get("labels") if secret else None) or {}
        if secret is not None and render.is_credentials_copy(labels):
            # The copy carries no host binding of its source: naming it would send another
            # mirror's credentials wherever this one points, whatever the installer allows.
            message = (
                f"Secret {name} is the copy the operator made of mirror "
                f"{labels.get(render.MIRROR_LABEL)}'s credentials: name the Secret it was made from"
            )
            raise SpecUnusable(Problem(NOT_ALLOWED, message))
        if secret is not None and not self.any_secret and labels.get(CREDENTIAL_LABEL) != "true":
            refused = NotAllowed(
                "a Secret",
                name,
                f"Secrets labelled {CREDENTIAL_LABEL}=true",
                "--allow-unlabelled-secrets",
                "allowed.unlabelledSecrets",
            )
            raise SpecUnusable(Problem(NOT_ALLOWED, refused.message))
        return secret

    def versions(self, envs: list[CredentialEnv]) -> dict[str, str]:
        """Each referenced Secret's resourceVersion, so a rotation rolls the workers."""
        versions = {}
        for name in sorted({env.secret.name for env in envs}):
            secret = self.get(name)
            version = secret["metadata"].get("resourceVersion") if secret else None
            versions[name] = version or "missing"
        return versions

    def values(self, envs: list[CredentialEnv]) -> dict[str, str]:
        """The credential values, keyed by the worker's variable names, as the kubelet fills
        them. Every Secret is checked (opted in, and bound to the cluster's hosts if it says
        so: SpecUnusable) before any value is read (SecretProblem), so that no value of one
        Secret can keep the check of another from running."""
        secrets = {env.name: self.get(env.secret.name) for env in envs}
        for env in envs:
            secret = secrets[env.name]
            if secret is not None:
                _check_hosts(env, secret)
        values = {}
        for env in envs:
            secret = secrets[env.name]
            if secret is None:
                raise SecretProblem(
                    f"Secret {env.secret.name} is not in namespace {self.namespace}: create it "
                    f"with key {env.secret.key}"
                )
            data = secret.get("data") or {}
            if env.secret.key not in data:
                raise SecretProblem(f"Secret {env.secret.name} has no key {env.secret.key}")
            try:
                values[env.name] = base64.b64decode(data[env.secret.key]).decode()
            except ValueError:  # not base64, or not UTF-8
                raise SecretProblem(
                    f"Secret {env.secret.name}'s key {env.secret.key} is not text (PEM, a user "
                    "name or a password): name a key that holds one"
                ) from None
        return values


def _check_hosts(env: CredentialEnv, secret: Secret) -> None:
    """A Secret annotated with HOSTS_ANNOTATION goes only to the hosts its patterns match
    (the allow-list's syntax): who labels a Secret also says where it may be sent."""
    bound = (secret["metadata"].get("annotations") or {}).get(HOSTS_ANNOTATION)
    if bound is None:
        return
    name = env.secret.name
    patterns = tuple(p.strip() for p in bound.split(",") if p.strip())
    try:
        allowed = AllowLists(bootstrap_hosts=patterns)
    except ValueError as error:
        raise SpecUnusable(
            Problem(NOT_ALLOWED, f"Secret {name}'s annotation {HOSTS_ANNOTATION}: {error}")
        ) from None
    for entry in env.destination.split(","):
        if not patterns or not bootstrap_allowed(entry, allowed):
            message = (
                f"Secret {name} may not be sent to {entry!r} (its annotation {HOSTS_ANNOTATION} "
                f"allows {', '.join(patterns) or 'no host'}): name those hosts in the mirror, or "
                "have whoever manages the Secret add this one to the annotation"
            )
            raise SpecUnusable(Problem(NOT_ALLOWED, message))


@dataclass
class MirrorInputs:
    """One handler call's view of a KafkaMirror whose spec the gate accepted."""

    api: client.ApiClient
    body: kopf.Body
    spec: KafkaMirrorSpec  # as requested
    previous: KafkaMirrorStatus
    selections: list[SelectionPatterns]
    any_secret: bool = False  # the installer allows Secrets without the opt-in label
    secrets: Secrets = field(init=False)

    def __post_init__(self) -> None:
        self.secrets = Secrets(self.api, self.namespace, self.any_secret)

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @cached_property
    def standby(self) -> str | None:
        """Why the mirror stands by for the one that goes the other way, if it does."""
        return standing_by(
            self.name, self.spec, self.previous.operation, KubeMirrors(self.api, self.namespace)
        )

    @cached_property
    def running_spec(self) -> KafkaMirrorSpec:
        """The spec the workers run with: an operation in progress may have stopped them, or
        the mirror stands by."""
        if self.standby is not None:
            return self.spec.model_copy(update={"paused": True})
        spec = operations.running_spec(self.spec, self.previous.operation)
        if spec.autoscaling is None:
            return spec
        replicas = autoscaler.starting_replicas(
            spec.autoscaling, spec.replicas, self.previous.autoscaling
        )
        return spec.model_copy(update={"replicas": replicas})

    @cached_property
    def fitting(self) -> tuple[list[SelectionPatterns], list[SelectionPatterns]]:
        """The selections (oldest first) the workers' ConfigMap holds, and those left out."""
        return render.fitting_selections(self.namespace, self.spec, self.selections)

    @cached_property
    def worker(self) -> tuple[WorkerConfig, list[CredentialEnv]]:
        """The workers' configuration and the Secret keys their credentials come from."""
        return render.build_worker_config(
            self.namespace, self.name, self.running_spec, self.fitting[0]
        )

    def credentials(self) -> dict[str, str]:
        """Every credential the pods need, by variable name, from Secrets that opted in;
        SecretProblem while one is missing."""
        return self.secrets.values(self.worker[1])

    def cluster_settings(self, role: str) -> dict[str, str]:
        """The operator's librdkafka settings for the source or the target: connection and
        security, with the credentials from the Secrets, and none of the mirror's tuning (its
        fetch and queue sizes are its workers'; and mirrors that differ only there, in
        `client.rack` say, share one reader)."""
        config, envs = self.worker
        connection = config.source if role == "source" else config.target
        mine = [env for env in envs if env.name.startswith(f"KAFKA_MIRROR_{role.upper()}_")]
        return connection.client_config(self.secrets.values(mine), tuning=False)
