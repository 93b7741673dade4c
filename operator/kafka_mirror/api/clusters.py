"""How a mirror reaches its two Kafka clusters: bootstrap servers, TLS and SASL, with every
credential taken from a Secret, and the alias a cluster has in remote topic names."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from kafka_mirror.api.base import ApiModel, ClientSettings, cel, section
from kafka_mirror.api.bootstrap import BOOTSTRAP_SERVERS, parse_bootstrap

# An alias is part of remote topic names, so it must be a legal topic-name fragment without the
# separator characters that would make `t.A` ambiguous.
CLUSTER_ALIAS = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"


class SecretKeyRef(ApiModel):
    """One key of a Secret in the mirror's namespace."""

    name: Annotated[
        str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    ]
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]


class TlsSettings(ApiModel):
    """TLS towards the cluster. Certificates come from Secrets, mounted into the worker."""

    enabled: bool = Field(default=False, description="Connect with TLS.")
    ca_certificate: SecretKeyRef | None = Field(
        default=None,
        description="PEM CA bundle that signed the brokers' certificates; the system CAs if unset.",
    )
    client_certificate: SecretKeyRef | None = Field(
        default=None, description="PEM client certificate, for mutual TLS."
    )
    client_key: SecretKeyRef | None = Field(
        default=None, description="PEM private key of the client certificate."
    )
    verify_hostname: bool = Field(default=True, description="Check the brokers' host names.")


class SaslSettings(ApiModel):
    """SASL authentication. The password (and optionally the user name) come from Secrets."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        description="SASL mechanism."
    )
    username: Annotated[str, Field(min_length=1, max_length=253)] | None = Field(
        default=None, description="User name, when it is not secret."
    )
    username_secret: SecretKeyRef | None = Field(
        default=None, description="User name from a Secret (instead of `username`)."
    )
    password_secret: SecretKeyRef = Field(description="Password from a Secret.")


class KafkaCluster(ApiModel):
    """How to reach one Kafka cluster, and the alias it has in topic names."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "has(self.sasl) ? (has(self.sasl.username) != has(self.sasl.usernameSecret)) : true",
            "sasl needs exactly one of username and usernameSecret",
        )
    )

    alias: Annotated[str, Field(min_length=1, max_length=64, pattern=CLUSTER_ALIAS)] = Field(
        description="Cluster alias used in remote topic names (for example `A`, `us-south`)."
    )
    bootstrap_servers: Annotated[
        str, Field(min_length=1, max_length=2048, pattern=BOOTSTRAP_SERVERS)
    ] = Field(
        description="Comma-separated host:port list of brokers, each a DNS name, an IPv4 "
        "address or a bracketed IPv6 address (no scheme, path or spaces); each host must be on "
        "the installer's allow-list when it has one (`--allowed-bootstrap-host`)."
    )
    tls: TlsSettings = section(TlsSettings, "TLS settings.")
    sasl: SaslSettings | None = Field(default=None, description="SASL authentication.")
    config: ClientSettings = Field(
        default_factory=dict,
        description=(
            "librdkafka tuning settings for both consumer and producer, from a closed list "
            "(socket, fetch, batching and compression settings); connection, security and "
            "delivery settings are refused."
        ),
    )

    @field_validator("bootstrap_servers")
    @classmethod
    def _addresses(cls, servers: str) -> str:
        parse_bootstrap(servers)  # what the pattern cannot say: an IPv6 address's digits
        return servers
