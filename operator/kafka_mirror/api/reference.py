"""Render the Markdown API reference (`docs/api.md`) of the custom resources.

It reads the CRDs that `crdgen` renders, not the models, so the reference shows exactly what the
API server validates and defaults. Run `kafka-mirror crds` to rewrite it; a test fails when the
committed file drifts from the models.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from kafka_mirror.api.crdgen import Schema, all_crds

HEADER = (
    "<!-- Generated from kafka_mirror.api.models by `kafka-mirror crds`. Do not edit by hand. -->"
)

# Every schema keyword the reference shows. Another one (say `exclusiveMinimum`) makes rendering
# fail, rather than leaving a rule the API server enforces out of the reference.
_SHOWN = {
    "type",
    "format",
    "description",
    "default",
    "enum",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "maxProperties",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "x-kubernetes-validations",
}
_COLUMNS = ("Field", "Type", "Default", "Constraints", "Description")


@dataclass
class _Section:
    """One object schema and every path it appears at: repeats (`spec.target`) link here."""

    anchor: str
    schema: Schema
    paths: list[str] = field(default_factory=list)


def api_reference() -> str:
    """The whole `docs/api.md`."""
    crds = all_crds()
    kinds = [crd["spec"]["names"]["kind"] for crd in crds]
    lines = [
        HEADER,
        "",
        "# API reference",
        "",
        "The custom resources of the Kafka mirror operator. Types, defaults and constraints are "
        "those of the CRDs in `crds/`: the API server fills in the defaults and refuses an object "
        "that breaks a constraint at `kubectl apply`.",
        "",
        *(f"- [{kind}](#{_slug(kind)})" for kind in kinds),
    ]
    for crd in crds:
        lines += ["", *_kind(crd)]
    return "\n".join(lines) + "\n"


def _kind(crd: dict[str, Any]) -> list[str]:
    spec = crd["spec"]
    names = spec["names"]
    kind = names["kind"]
    (version,) = spec["versions"]  # a second version would need a reference of its own
    root = version["schema"]["openAPIV3Schema"]
    sections = _sections(kind, root)
    anchors = {_shape(s.schema): s.anchor for s in sections}
    fields = [
        f"[`{name}`](#{anchors[_shape(prop)]})"
        + (" (required)" if name in root["required"] else "")
        for name, prop in root["properties"].items()
        if "properties" in prop
    ]
    lines = [
        f"## {kind}",
        "",
        root["description"],
        "",
        f"- API version: `{spec['group']}/{version['name']}`, kind `{kind}`, "
        f"{spec['scope'].lower()}",
        f"- Names: `{names['plural']}`, short names {_codes(names['shortNames'])}; "
        f"categories {_codes(names['categories'])}",
        f"- Subresources: {_subresources(version['subresources'])}",
        *(
            f"- Validation rule: {r['message']} ({_code(r['rule'])})"
            for r in root.get("x-kubernetes-validations", [])
        ),
        f"- Fields: {', '.join(fields)}",
        "",
        f"Columns of `kubectl get {names['plural']}`:",
        "",
        *_table(
            ("Column", "Type", "JSONPath", "Shown"),
            [
                [
                    c["name"],
                    c["type"],
                    _code(c["jsonPath"]),
                    "with `-o wide`" if c.get("priority") else "always",
                ]
                for c in version["additionalPrinterColumns"]
            ],
        ),
    ]
    for section in sections:
        lines += ["", *_section(section, anchors)]
    return lines


def _subresources(subresources: dict[str, Any]) -> str:
    parts = []
    for name, settings in subresources.items():
        if name == "scale":
            parts.append(f"`scale` (`kubectl scale` sets `{settings['specReplicasPath']}`)")
        else:
            parts.append(f"`{name}`")
    return ", ".join(parts)


def _sections(kind: str, root: Schema) -> list[_Section]:
    """Every object with properties, depth first. An object met again is not repeated."""
    sections: dict[str, _Section] = {}

    def visit(path: str, node: Schema) -> None:
        unknown = node.keys() - _SHOWN
        if unknown:
            raise ValueError(f"{kind} {path}: the reference cannot show {sorted(unknown)}")
        if "properties" in node:
            section = sections.setdefault(_shape(node), _Section(_slug(f"{kind} {path}"), node))
            section.paths.append(path)
            if len(section.paths) > 1:
                return
            for name, prop in node["properties"].items():
                visit(f"{path}.{name}", prop)
        if isinstance(node.get("items"), dict):
            visit(f"{path}[]", node["items"])
        if isinstance(node.get("additionalProperties"), dict):
            visit(f"{path}.*", node["additionalProperties"])

    for name, prop in root["properties"].items():
        visit(name, prop)
    return list(sections.values())


def _shape(node: Schema) -> str:
    """What makes two object schemas the same; a field's description and default do not."""
    return json.dumps(
        {k: v for k, v in node.items() if k not in ("description", "default")}, sort_keys=True
    )


def _section(section: _Section, anchors: dict[str, str]) -> list[str]:
    schema = section.schema
    first, *others = section.paths
    lines = [f'<a id="{section.anchor}"></a>', "", f"### `{first}`", ""]
    if others:
        lines += [f"The same object is at {_codes(others)}.", ""]
    elif "description" in schema:
        lines += [schema["description"], ""]
    required = schema.get("required", [])
    rows = [
        [
            _code(name),
            _type(prop, anchors),
            _code(json.dumps(prop["default"])) if "default" in prop else "",
            "; ".join((["**required**"] if name in required else []) + _constraints(prop)),
            prop.get("description", ""),
        ]
        for name, prop in schema["properties"].items()
    ]
    lines += _table(_COLUMNS, rows)
    rules = [(None, rule) for rule in schema.get("x-kubernetes-validations", [])] + [
        (name, rule)
        for name, prop in schema["properties"].items()
        if "properties" not in prop  # an object's rules are in its own section
        for rule in prop.get("x-kubernetes-validations", [])
    ]
    if rules:
        lines += ["", "Validation rules:", ""]
        lines += [
            f"- {f'{_code(name)}: ' if name else ''}{rule['message']} ({_code(rule['rule'])})"
            for name, rule in rules
        ]
    return lines


def _type(node: Schema, anchors: dict[str, str]) -> str:
    if "properties" in node:
        return f"[object](#{anchors[_shape(node)]})"
    if node["type"] == "array":
        return "array of " + _type(node["items"], anchors)
    if isinstance(node.get("additionalProperties"), dict):
        return "map of " + _type(node["additionalProperties"], anchors)
    if "format" in node:
        return f"{node['type']} ({node['format']})"
    return str(node["type"])


def _constraints(node: Schema) -> list[str]:
    """The rules of one field, and of its items or map values, in words."""
    found = _limits(node)
    for key, label in (("items", "items"), ("additionalProperties", "values")):
        inner = _limits(node[key]) if isinstance(node.get(key), dict) else []
        if inner:
            found.append(f"{label}: {', '.join(inner)}")
    return found


def _limits(node: Schema) -> list[str]:
    found = []
    if "enum" in node:
        found.append("one of " + _codes(node["enum"]))
    if "minLength" in node or "maxLength" in node:
        found.append(_range(node.get("minLength"), node.get("maxLength"), " characters"))
    if "pattern" in node:
        found.append("matches " + _code(node["pattern"]))
    if "minimum" in node or "maximum" in node:
        found.append(_range(node.get("minimum"), node.get("maximum"), ""))
    if "minItems" in node or "maxItems" in node:
        found.append(_range(node.get("minItems"), node.get("maxItems"), " items"))
    if "maxProperties" in node:
        found.append(f"at most {node['maxProperties']} entries")
    return found


def _range(low: int | None, high: int | None, unit: str) -> str:
    if low is None:
        return f"at most {high}{unit}"
    if high is None:
        return f"at least {low}{unit}"
    return f"{low} to {high}{unit}"


def _table(header: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    """A Markdown table without the columns that are empty in every row."""
    keep = [i for i in range(len(header)) if any(row[i] for row in rows)]
    return [
        _row([header[i] for i in keep]),
        _row(["---"] * len(keep)),
        *(_row([row[i] for i in keep]) for row in rows),
    ]


def _row(cells: list[str]) -> str:
    # A `|` ends a table cell even inside a code span (patterns are full of them).
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _code(text: str) -> str:
    return f"`{text}`"


def _codes(values: list[Any]) -> str:
    return ", ".join(_code(str(v)) for v in values)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
