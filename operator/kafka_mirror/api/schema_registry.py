"""`spec.schemaRegistry`: the mirrored records' schemas follow them to the target's registry.

Records in Confluent's wire format (a zero byte, then the 4-byte id of their schema in the
source's registry) mean nothing on the target unless its registry holds the same schema under
the id they carry. The workers copy each schema a mirrored record names, its references first,
to the target's registry under the subject the naming policy gives (`t-value` → `t.A-value`),
and rewrite the id in each copied record to the target's id for the same schema
(docs/runbook-dr.md). Both registries speak Confluent's REST API (Confluent's, Apicurio's
`/apis/ccompat/v7`, Karapace, Redpanda).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator

from kafka_mirror.api.base import ApiModel, cel
from kafka_mirror.api.clusters import SecretKeyRef
from kafka_mirror.patterns import validate_patterns

MAX_SUBJECT_PATTERNS = 256
MAX_SUBJECT_PATTERN_LENGTH = 1024

# http(s)://host[:port][/path]: no user info (credentials come from Secrets), query or fragment.
REGISTRY_URL = r"^https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~\-/]*)?$"


class RegistryEndpoint(ApiModel):
    """One schema registry, reached over HTTP(S) with optional basic authentication."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "!(has(self.username) && has(self.usernameSecret))",
            "set at most one of username and usernameSecret",
        )
    )

    url: Annotated[str, Field(min_length=1, max_length=2048, pattern=REGISTRY_URL)] = Field(
        description="Base URL of Confluent's REST API (Apicurio: `…/apis/ccompat/v7`); its "
        "host must be on the installer's allow-list when it has one "
        "(`--allowed-bootstrap-host`)."
    )
    username: Annotated[str, Field(min_length=1, max_length=253)] | None = Field(
        default=None, description="Basic-authentication user name, when it is not secret."
    )
    username_secret: SecretKeyRef | None = Field(
        default=None, description="Basic-authentication user name from a Secret."
    )
    password_secret: SecretKeyRef | None = Field(
        default=None, description="Basic-authentication password from a Secret."
    )

    @field_validator("url")
    @classmethod
    def _port(cls, url: str) -> str:
        host_port(url)  # a port out of range
        return url

    @property
    def address(self) -> str:
        """`host:port`, as the allow-list and a Secret's host annotation read it."""
        return host_port(self.url)


def host_port(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port  # ValueError when out of range
    if parts.hostname is None:
        raise ValueError(f"{url!r} names no host")
    return f"{parts.hostname}:{port or (443 if parts.scheme == 'https' else 80)}"


class SchemaRegistrySync(ApiModel):
    """The schemas of the mirrored records, copied from the source's registry to the target's,
    and the ids in the records rewritten to the target's."""

    source: RegistryEndpoint = Field(description="The source cluster's schema registry.")
    target: RegistryEndpoint = Field(description="The target cluster's schema registry.")
    topics: Annotated[
        list[Annotated[str, Field(max_length=MAX_SUBJECT_PATTERN_LENGTH)]],
        Field(max_length=MAX_SUBJECT_PATTERNS),
    ] = Field(
        default_factory=lambda: [".*"],
        description="Mirrored topics (whole-name regular expressions) whose record values are "
        "in Confluent's wire format: a value starting with the zero byte has the schema id "
        "after it translated, and waits until its schema is on the target. Values of other "
        "topics are copied as they are.",
    )
    keys: bool = Field(
        default=False,
        description="The keys of those topics are in the wire format too (a binary key that "
        "merely starts with a zero byte would otherwise be read as one).",
    )
    subjects: Annotated[
        list[Annotated[str, Field(max_length=MAX_SUBJECT_PATTERN_LENGTH)]],
        Field(max_length=MAX_SUBJECT_PATTERNS),
    ] = Field(
        default_factory=list,
        description="Subjects besides the mirrored topics' own (`<topic>-value`, "
        "`<topic>-key`, renamed as their topics) that a record's schema may be copied under, "
        "with their names: those of RecordNameStrategy, for example. A schema registered "
        "under none of these waits, and says so.",
    )

    @field_validator("topics", "subjects")
    @classmethod
    def _compile(cls, patterns: list[str]) -> list[str]:
        return validate_patterns(patterns)
