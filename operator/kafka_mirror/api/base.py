"""The base classes of the API models (spec objects strict, status objects tolerant) and the
field types and helpers the spec models share."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kafka_mirror.api.allowed import CLIENT_CONFIG, SPARK_CONF, KeyAllowList


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


VALIDATIONS = "x-kubernetes-validations"


def cel(rule: str, message: str, message_expression: str | None = None) -> dict[str, Any]:
    """A CEL validation rule for the generated CRD schema; the message expression, when given,
    is what the API server says (the message is its fallback)."""
    validation = {"rule": rule, "message": message}
    if message_expression is not None:
        validation["messageExpression"] = message_expression
    return {VALIDATIONS: [validation]}


def section(model: type[BaseModel], description: str) -> Any:
    """A nested settings object that is optional and defaults to its own defaults.

    The CRD says `default: {}` so the API server fills in the nested defaults too.
    """
    return Field(default_factory=model, description=description)


ShortString = Annotated[str, Field(min_length=1, max_length=253)]
StringMap = Annotated[dict[str, Annotated[str, Field(max_length=4096)]], Field(max_length=64)]


def keys_rule(allowed: KeyAllowList) -> Any:
    """The API server's side of a closed list of keys: the same list as a CEL rule, naming the
    first refused key (the models check it with `allowed.check`)."""
    return Field(json_schema_extra=cel(allowed.rule, allowed.message, allowed.message_expression))


ClientSettings = Annotated[StringMap, AfterValidator(CLIENT_CONFIG.check), keys_rule(CLIENT_CONFIG)]
SparkSettingsMap = Annotated[StringMap, AfterValidator(SPARK_CONF.check), keys_rule(SPARK_CONF)]
