"""The base classes of the API models: spec objects strict, status objects tolerant."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of spec models: camelCase on the wire, unknown fields refused, no coercion (the API
    server refuses `replicas: false`, so the model must too)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
    )


class StatusModel(BaseModel):
    """Base of status models: camelCase on the wire; tolerant of fields it does not know."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
