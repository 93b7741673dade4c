"""Render the CustomResourceDefinitions from the pydantic models.

Pydantic's JSON schema is close to, but not, a Kubernetes structural schema: it has `$ref`s,
`anyOf` with `null` for optional fields, titles, and `additionalProperties: false`. This module
inlines and strips those, and adds what only Kubernetes knows (subresources, printer columns).
Run `kafka-mirror crds` to rewrite `crds/`; a test fails when the files drift from the models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from kafka_mirror.api.models import GROUP, VERSION, KafkaMirrorSpec, MirrorTopicSelectionSpec
from kafka_mirror.api.status import KafkaMirrorStatus, MirrorTopicSelectionStatus

Schema = dict[str, Any]

CATEGORY = "kafka-mirroring"  # `kubectl get kafka-mirroring` lists mirrors and selections
# A mirror's name becomes its Service's, a DNS-1035 label: no dots, a letter first, at most 63
# characters (as a selection's spec.mirror), so a longer one fails here, not at its children.
DNS_LABEL_RULE = {
    "rule": "self.metadata.name.size() <= 63 && "
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    "message": "a KafkaMirror's name names its Service too: at most 63 lowercase letters, "
    "digits and '-', starting with a letter and ending with a letter or digit (no dots)",
}


class _DefaultsFromFactories(GenerateJsonSchema):
    """Puts defaults made by `default_factory` into the schema, so the API server applies them.

    A nested settings model defaults to `{}`: the server then fills in its own field defaults.
    """

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            value = factory()  # type: ignore[call-arg]
            schema = {**schema, "default": {} if isinstance(value, BaseModel) else value}
            schema.pop("default_factory")
        return super().default_schema(schema)


def structural_schema(model: type[BaseModel], defaults: bool = True) -> Schema:
    """The model's schema, as an inlined Kubernetes structural schema.

    Status schemas go without defaults: the operator writes status whole, and the server
    should not invent fields in it.
    """
    raw = model.model_json_schema(by_alias=True, schema_generator=_DefaultsFromFactories)
    definitions = raw.pop("$defs", {})
    return _structural(raw, definitions, defaults)


def _structural(node: Schema, definitions: dict[str, Schema], defaults: bool) -> Schema:
    node = dict(node)
    if "$ref" in node:
        node = {**definitions[node.pop("$ref").rsplit("/", 1)[-1]], **node}
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**_structural(node.pop("allOf")[0], definitions, defaults), **node}
    if "anyOf" in node:
        branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"only `X | None` unions map to a structural schema: {branches}")
        node = {**_structural(branches[0], definitions, defaults), **node}
        if node.get("default", ...) is None:
            del node["default"]
    if not defaults:
        node.pop("default", None)
    node.pop("title", None)
    if node.get("additionalProperties") is False:
        del node["additionalProperties"]
    if "properties" in node:
        node["properties"] = {
            name: _structural(prop, definitions, defaults)
            for name, prop in node["properties"].items()
        }
        node.setdefault("type", "object")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _structural(node[key], definitions, defaults)
    if isinstance(node.get("description"), str):
        node["description"] = " ".join(node["description"].split())
    return node


def _object_schema(
    spec: type[BaseModel], status: type[BaseModel], summary: str, rules: list[Schema]
) -> Schema:
    schema: Schema = {
        "type": "object",
        "description": summary,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": structural_schema(spec),
            "status": structural_schema(status, defaults=False),
        },
    }
    if rules:
        schema["x-kubernetes-validations"] = rules
    return schema


def _crd(
    kind: str,
    plural: str,
    short_names: list[str],
    schema: Schema,
    columns: list[dict[str, Any]],
    subresources: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "kafka-mirror-operator"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                # Our own: `kafka` is Strimzi's Kafka's singular name and a category of
                # theirs, and a category named like a singular shadows it in kubectl.
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def _ready_column() -> dict[str, Any]:
    return {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    }


_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def kafka_mirror_crd() -> dict[str, Any]:
    return _crd(
        kind="KafkaMirror",
        plural="kafkamirrors",
        short_names=["km", "kmirror"],
        schema=_object_schema(
            KafkaMirrorSpec,
            KafkaMirrorStatus,
            "Mirrors selected topics from a source Kafka cluster to a target cluster.",
            [DNS_LABEL_RULE],
        ),
        columns=[
            _ready_column(),
            {
                "name": "Reason",
                "type": "string",
                "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
            },
            {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
            {"name": "Active topics", "type": "integer", "jsonPath": ".status.activeTopicCount"},
            {"name": "Lag", "type": "integer", "jsonPath": ".status.totalLag"},
            {"name": "Latency (s)", "type": "number", "jsonPath": ".status.maxLatencySeconds"},
            {"name": "Source", "type": "string", "jsonPath": ".spec.source.alias", "priority": 1},
            {"name": "Target", "type": "string", "jsonPath": ".spec.target.alias", "priority": 1},
            _AGE_COLUMN,
        ],
        subresources={
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.labelSelector",
            },
        },
    )


def mirror_topic_selection_crd() -> dict[str, Any]:
    return _crd(
        kind="MirrorTopicSelection",
        plural="mirrortopicselections",
        short_names=["mts", "topicselection"],
        schema=_object_schema(
            MirrorTopicSelectionSpec,
            MirrorTopicSelectionStatus,
            "Selects source topics for a KafkaMirror; all selections of a mirror are a union.",
            [],
        ),
        columns=[
            _ready_column(),
            {"name": "Mirror", "type": "string", "jsonPath": ".spec.mirror"},
            {"name": "Topics", "type": "integer", "jsonPath": ".status.matchedTopicCount"},
            _AGE_COLUMN,
        ],
        subresources={"status": {}},
    )


def all_crds() -> list[dict[str, Any]]:
    return [kafka_mirror_crd(), mirror_topic_selection_crd()]


class _NoAliasDumper(yaml.SafeDumper):
    """Writes shared sub-schemas out in full: CRD readers should not need YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


HEADER = "# Generated from kafka_mirror.api.models by `kafka-mirror crds`. Do not edit.\n"


def render(crd: dict[str, Any]) -> str:
    return HEADER + yaml.dump(crd, Dumper=_NoAliasDumper, sort_keys=False, width=100)


def crd_files() -> dict[str, str]:
    """File name → content of every generated CRD."""
    return {f"{crd['metadata']['name']}.yaml": render(crd) for crd in all_crds()}


def write_crds(directories: list[Path]) -> list[Path]:
    written = []
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in crd_files().items():
            path = directory / name
            path.write_text(content)
            written.append(path)
    return written
