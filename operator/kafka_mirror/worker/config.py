"""The worker's configuration file, as the operator renders it into a ConfigMap.

It holds no secret: credentials are files (mounted Secrets) named here and read at connect time,
so a rotated Secret is picked up on the next connection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field

from kafka_mirror.api.models import (
    ApiModel,
    Checkpoints,
    Heartbeats,
    OffsetSyncs,
    StringMap,
    TopicConfigSync,
    TopicNaming,
    is_forbidden_config_key,
    section,
    validate_patterns,
)
from kafka_mirror.topics import Selection, TopicNamer


class TlsFiles(ApiModel):
    enabled: bool = False
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    verify_hostname: bool = True


class SaslFiles(ApiModel):
    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    username: str | None = None
    username_file: Path | None = None
    password_file: Path


class ClusterConnection(ApiModel):
    """How the worker reaches one cluster."""

    alias: str
    bootstrap_servers: str
    tls: TlsFiles = section(TlsFiles, "TLS files.")
    sasl: SaslFiles | None = None
    config: StringMap = Field(default_factory=dict)

    def client_config(self) -> dict[str, str]:
        """librdkafka settings for this cluster, credentials read from their files now."""
        settings = {k: v for k, v in self.config.items() if not is_forbidden_config_key(k)}
        settings["bootstrap.servers"] = self.bootstrap_servers
        protocol = ("SASL_" if self.sasl else "") + ("SSL" if self.tls.enabled else "PLAINTEXT")
        settings["security.protocol"] = protocol
        if self.tls.enabled:
            if self.tls.ca_file:
                settings["ssl.ca.location"] = str(self.tls.ca_file)
            if self.tls.cert_file and self.tls.key_file:
                settings["ssl.certificate.location"] = str(self.tls.cert_file)
                settings["ssl.key.location"] = str(self.tls.key_file)
            if not self.tls.verify_hostname:
                settings["ssl.endpoint.identification.algorithm"] = "none"
        if self.sasl:
            username = self.sasl.username
            if self.sasl.username_file is not None:
                username = self.sasl.username_file.read_text().strip()
            settings["sasl.mechanism"] = self.sasl.mechanism
            settings["sasl.username"] = username or ""
            settings["sasl.password"] = self.sasl.password_file.read_text().strip()
        return settings


class SelectionPatterns(ApiModel):
    """One MirrorTopicSelection's patterns (the worker mirrors the union of all of them)."""

    name: str = ""
    includes: list[str] = Field(default_factory=list)
    excludes: list[str] = Field(default_factory=list)


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
    metrics_port: int = 9400
    commit_interval_seconds: float = 1.0

    @property
    def consumer_group(self) -> str:
        """The workers' own group on the source: never checkpointed."""
        return "kafka-mirror." + self.mirror.replace("/", ".")

    def namer(self) -> TopicNamer:
        return TopicNamer(self.source.alias, self.topic_naming.policy, self.topic_naming.separator)

    def compiled_selections(self) -> tuple[list[Selection], list[str]]:
        """The selections that compile, and a message per pattern that does not."""
        usable, problems = [], []
        for selection in self.selections:
            try:
                validate_patterns([*selection.includes, *selection.excludes])
            except ValueError as error:
                problems.append(f"selection {selection.name or '?'}: {error}")
                continue
            usable.append(Selection(tuple(selection.includes), tuple(selection.excludes)))
        return usable, problems


def load(path: Path) -> WorkerConfig:
    data: Any = yaml.safe_load(path.read_text())
    return WorkerConfig.model_validate(data)
