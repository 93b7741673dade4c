"""The worker's configuration, as the operator renders it into a ConfigMap: the contract between
the operator, the worker and the audit.

It holds no secret: it names the environment variables that carry each credential, which the
pod fills from Secrets (`valueFrom.secretKeyRef`). The operator rolls the pods when a referenced
Secret changes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field

from kafka_mirror.api.allowed import CLIENT_CONFIG
from kafka_mirror.api.base import ApiModel, StringMap, section
from kafka_mirror.api.models import (
    AclSync,
    Checkpoints,
    Delivery,
    Heartbeats,
    OffsetSyncs,
    SelectionRef,
    TopicConfigSync,
    TopicNaming,
)
from kafka_mirror.patterns import validate_patterns
from kafka_mirror.topics import NameFilter, TopicNamer

# Every mirror's workers' group on its source starts so: never a group to checkpoint.
WORKER_GROUP_PREFIX = "kafka-mirror."


class TlsFromEnv(ApiModel):
    """TLS material as PEM text in environment variables (librdkafka's `ssl.*.pem`)."""

    enabled: bool = False
    ca_env: str | None = None
    cert_env: str | None = None
    key_env: str | None = None
    verify_hostname: bool = True


class SaslFromEnv(ApiModel):
    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    username: str | None = None
    username_env: str | None = None
    password_env: str


class ClusterConnection(ApiModel):
    """How the worker reaches one cluster."""

    alias: str
    bootstrap_servers: str
    tls: TlsFromEnv = section(TlsFromEnv, "TLS material.")
    sasl: SaslFromEnv | None = None
    config: StringMap = Field(default_factory=dict)

    def credential_envs(self) -> list[str]:
        """The environment variables this connection reads its credentials from."""
        names = [self.tls.ca_env, self.tls.cert_env, self.tls.key_env]
        if self.sasl:
            names += [self.sasl.username_env, self.sasl.password_env]
        return [name for name in names if name]

    def client_config(
        self, environ: Mapping[str, str] = os.environ, tuning: bool = True
    ) -> dict[str, str]:
        """librdkafka settings for this cluster, credentials taken from `environ`; without
        `tuning`, the connection and security settings alone (not the mirror's `config`)."""

        def secret(name: str) -> str:
            return credential(environ, name)

        # The operator renders only allowed keys; a hand-written file gets no more.
        settings = {k: v for k, v in self.config.items() if tuning and CLIENT_CONFIG.allows(k)}
        settings["bootstrap.servers"] = self.bootstrap_servers
        protocol = ("SASL_" if self.sasl else "") + ("SSL" if self.tls.enabled else "PLAINTEXT")
        settings["security.protocol"] = protocol
        if self.tls.enabled:
            if self.tls.ca_env:
                settings["ssl.ca.pem"] = secret(self.tls.ca_env)
            if self.tls.cert_env and self.tls.key_env:
                settings["ssl.certificate.pem"] = secret(self.tls.cert_env)
                settings["ssl.key.pem"] = secret(self.tls.key_env)
            if not self.tls.verify_hostname:
                settings["ssl.endpoint.identification.algorithm"] = "none"
        if self.sasl:
            username = self.sasl.username
            if self.sasl.username_env is not None:
                username = secret(self.sasl.username_env)
            settings["sasl.mechanism"] = self.sasl.mechanism
            settings["sasl.username"] = username or ""
            settings["sasl.password"] = secret(self.sasl.password_env)
        return settings


class MissingCredential(RuntimeError):
    """A credential the configuration names is not in the environment."""


def credential(environ: Mapping[str, str], name: str) -> str:
    if name not in environ:
        raise MissingCredential(f"environment variable {name} is not set")
    return environ[name].strip()


class RegistryFromEnv(ApiModel):
    """How the worker reaches one schema registry."""

    url: str
    username: str | None = None
    username_env: str | None = None
    password_env: str | None = None

    def client_config(self, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
        """confluent-kafka's SchemaRegistryClient settings, credentials from `environ`."""
        settings = {"url": self.url}
        if self.password_env is not None:
            username = self.username
            if self.username_env is not None:
                username = credential(environ, self.username_env)
            password = credential(environ, self.password_env)
            settings["basic.auth.user.info"] = f"{username or ''}:{password}"
        return settings


class SchemaRegistryConnection(ApiModel):
    """The worker's view of `spec.schemaRegistry` (`api.schema_registry`)."""

    source: RegistryFromEnv
    target: RegistryFromEnv
    topics: list[str] = Field(default_factory=lambda: [".*"])
    keys: bool = False
    subjects: list[str] = Field(default_factory=list)


class SelectionPatterns(ApiModel):
    """One MirrorTopicSelection's patterns (the worker mirrors the union of all of them)."""

    name: str = ""
    namespace: str = ""
    includes: list[str] = Field(default_factory=list)
    excludes: list[str] = Field(default_factory=list)
    # The mirror's spec.selectionPolicy for this selection: it selects only topics matching
    # one of these (none if empty); None: no bound.
    within: list[str] | None = None

    def ref(self) -> SelectionRef:
        return SelectionRef(self.namespace, self.name)

    def label(self, mirror_namespace: str) -> str:
        """Its name as people read it beside the mirror: `namespace/name` from another one."""
        return self.name if self.namespace == mirror_namespace else f"{self.namespace}/{self.name}"


class WorkerConfig(ApiModel):
    """Everything one worker needs to mirror a source cluster to a target cluster."""

    mirror: Annotated[str, Field(min_length=1)] = Field(
        description="namespace/name of the KafkaMirror; names the worker group and metrics."
    )
    source: ClusterConnection
    target: ClusterConnection
    topic_naming: TopicNaming = section(TopicNaming, "Remote topic naming.")
    selections: list[SelectionPatterns] = Field(default_factory=list)
    refresh_topics_interval_seconds: float = 10
    offset_syncs: OffsetSyncs = section(OffsetSyncs, "Offset syncs.")
    checkpoints: Checkpoints = section(Checkpoints, "Checkpoints.")
    heartbeats: Heartbeats = section(Heartbeats, "Heartbeats.")
    topic_config_sync: TopicConfigSync = section(TopicConfigSync, "Topic config sync.")
    acl_sync: AclSync = section(AclSync, "Topic ACL sync.")
    schema_registry: SchemaRegistryConnection | None = None
    metrics_port: int = 9400
    commit_interval_seconds: float = 1.0
    delivery: Delivery = "atLeastOnce"
    processes: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None,
        description="Mirroring processes in each pod; from the pod's CPU limit when unset.",
    )

    @property
    def consumer_group(self) -> str:
        """The workers' own group on the source: never checkpointed."""
        return WORKER_GROUP_PREFIX + self.mirror.replace("/", ".")

    def transactional_id(self, member: str) -> str:
        """An exactly-once producer's id: one prefix per mirror, which its ACLs name."""
        return f"{self.consumer_group}.{member}"

    def groups_checkpointed(self) -> NameFilter:
        """The source's groups whose offsets are checkpointed: the selection, never a mirror's
        own workers' group (this mirror's or another's)."""
        groups = self.checkpoints.groups
        return NameFilter(
            tuple(groups.includes), (*groups.excludes, f"{re.escape(WORKER_GROUP_PREFIX)}.*")
        )

    @property
    def mirror_name(self) -> str:
        """The KafkaMirror's name, without its namespace."""
        return self.mirror.rsplit("/", 1)[-1]

    def namer(self) -> TopicNamer:
        return TopicNamer(self.source.alias, self.topic_naming.policy, self.topic_naming.separator)

    def compiled_selections(self) -> tuple[list[NameFilter], list[str]]:
        """The selections that compile, and a message per pattern that does not."""
        usable, problems = [], []
        for selection in self.selections:
            try:
                validate_patterns([*selection.includes, *selection.excludes])
            except ValueError as error:
                problems.append(f"selection {selection.name or '?'}: {error}")
                continue
            within = None if selection.within is None else tuple(selection.within)
            usable.append(NameFilter(tuple(selection.includes), tuple(selection.excludes), within))
        return usable, problems


# libyaml's emitter and parser where PyYAML has them: the operator renders every mirror's
# configuration each status tick (to compare it with what was applied), and the pure-Python
# emitter held the GIL 41 % of the operator's time at 1,000 mirrors (py-spy --gil).
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_text(data: Any, sort_keys: bool = False) -> str:
    """`data` as YAML, as yaml.safe_dump writes it."""
    text: str = yaml.dump(data, Dumper=_DUMPER, sort_keys=sort_keys)
    return text


def load(path: Path) -> WorkerConfig:
    data: Any = yaml.load(path.read_text(), Loader=_LOADER)
    return WorkerConfig.model_validate(data)
