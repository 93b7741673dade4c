"""The base classes of the API models: spec objects strict, status objects tolerant."""

from __future__ import annotations

from typing import Any

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


def cel(rule: str, message: str, message_expression: str | None = None) -> dict[str, Any]:
    """A CEL validation rule for the generated CRD schema; the message expression, when given,
    is what the API server says (the message is its fallback)."""
    validation = {"rule": rule, "message": message}
    if message_expression is not None:
        validation["messageExpression"] = message_expression
    return {"x-kubernetes-validations": [validation]}
