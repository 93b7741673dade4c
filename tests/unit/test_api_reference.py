"""docs/api.md is generated from the models: it must not drift, and must answer what users ask."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from kafka_mirror.api.models import KafkaMirrorSpec, MirrorTopicSelectionSpec
from kafka_mirror.api.reference import api_reference
from kafka_mirror.api.status import KafkaMirrorStatus, MirrorTopicSelectionStatus
from kafka_mirror.cli import API_REFERENCE
from kafka_mirror_dev.builds import REPO_ROOT

Table = dict[str, dict[str, str]]


def test_committed_reference_matches_the_models() -> None:
    assert (REPO_ROOT / API_REFERENCE).read_text() == api_reference(), (
        f"{API_REFERENCE} drifted from the models: run `kafka-mirror crds`"
    )


def _table(anchor: str) -> Table:
    """The table of the section at `anchor`: field name → column → cell."""
    section = api_reference().split(f'<a id="{anchor}"></a>', 1)[1]
    lines = next(part for part in section.split("\n\n") if part.startswith("| ")).splitlines()
    header = _cells(lines[0])
    return {
        row[0].strip("`"): dict(zip(header, row, strict=True)) for row in map(_cells, lines[2:])
    }


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_replicas_shows_its_default_and_bounds() -> None:
    replicas = _table("kafkamirror-spec")["replicas"]
    assert replicas["Type"] == "integer"
    assert replicas["Default"] == "`1`"
    assert replicas["Constraints"] == "0 to 1000"


def test_required_fields_and_enums_are_marked() -> None:
    source = _table("kafkamirror-spec-source")
    assert source["alias"]["Constraints"].startswith("**required**")
    assert "required" not in source["tls"].get("Constraints", "")
    mechanism = _table("kafkamirror-spec-source-sasl")["mechanism"]["Constraints"]
    assert "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`" in mechanism


def test_status_has_no_defaults() -> None:
    """The server does not default status fields, so the reference shows none."""
    assert "Default" not in _table("kafkamirror-status")["replicas"]


def _models(annotation: object) -> Iterator[type[BaseModel]]:
    """The models inside a field's type (`X | None`, `list[X]`, `Annotated[X, ...]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    elif isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for argument in typing.get_args(annotation):
            yield from _models(argument)


def _wire_names(model: type[BaseModel]) -> Iterator[str]:
    for name, info in model.model_fields.items():
        yield info.alias or name
        for nested in _models(info.annotation):
            yield from _wire_names(nested)


@pytest.mark.parametrize(
    "model",
    [KafkaMirrorSpec, KafkaMirrorStatus, MirrorTopicSelectionSpec, MirrorTopicSelectionStatus],
)
def test_every_field_of_the_models_has_a_row(model: type[BaseModel]) -> None:
    rows = set(re.findall(r"^\| `(\w+)` \|", api_reference(), re.MULTILINE))
    assert set(_wire_names(model)) <= rows


def test_every_link_has_its_anchor() -> None:
    text = api_reference()
    kinds = {line.removeprefix("## ").lower() for line in text.splitlines() if line[:3] == "## "}
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text)) | kinds
    assert set(re.findall(r"\]\(#([^)]+)\)", text)) <= anchors
