"""The CRDs in crds/ (and in the Helm chart) are generated from the models; they must not drift."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafka_mirror.api.crdgen import all_crds, crd_files
from kafka_mirror.api.models import KafkaMirrorSpec, MirrorTopicSelectionSpec
from kafka_mirror.cli import CRD_DIRS
from kafka_mirror_dev.builds import REPO_ROOT


@pytest.mark.parametrize("relative", CRD_DIRS, ids=str)
def test_committed_crds_match_the_models(relative: Path) -> None:
    directory = REPO_ROOT / relative
    expected = crd_files()
    on_disk = {p.name: p.read_text() for p in directory.glob("*.yaml")}
    assert on_disk.keys() == expected.keys(), f"run `kafka-mirror crds` to regenerate {directory}"
    for name, content in expected.items():
        assert on_disk[name] == content, f"{directory / name} drifted: run `kafka-mirror crds`"


def _walk(node: object, path: str = "") -> list[tuple[str, dict[str, object]]]:
    found: list[tuple[str, dict[str, object]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found.extend(_walk(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_walk(value, f"{path}[{index}]"))
    return found


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["metadata"]["name"])
def test_schemas_are_structural(crd: dict[str, object]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[index]
    for path, node in _walk(schema):
        for forbidden in ("$ref", "anyOf", "allOf", "oneOf", "title", "$defs"):
            assert forbidden not in node, f"{forbidden} at {path}"
        if "properties" in node:
            assert node.get("type") == "object", f"untyped object at {path}"


def test_kafkamirror_has_scale_subresource_and_printer_columns() -> None:
    version = all_crds()[0]["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.labelSelector",
    }
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names[:6] == ["Ready", "Reason", "Replicas", "Active topics", "Lag", "Latency (s)"]
    assert "Age" in names


def test_the_charts_artifact_hub_metadata_names_the_crds_as_they_are() -> None:
    chart = yaml.safe_load((REPO_ROOT / "charts/kafka-mirror-operator/Chart.yaml").read_text())
    listed = yaml.safe_load(chart["annotations"]["artifacthub.io/crds"])
    crds = all_crds()
    assert [(c["kind"], c["version"], c["name"], c["description"]) for c in listed] == [
        (
            crd["spec"]["names"]["kind"],
            crd["spec"]["versions"][0]["name"],
            crd["metadata"]["name"],
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"],
        )
        for crd in crds
    ]
    for example in yaml.safe_load(chart["annotations"]["artifacthub.io/crdsExamples"]):
        model = {"KafkaMirror": KafkaMirrorSpec, "MirrorTopicSelection": MirrorTopicSelectionSpec}
        model[example["kind"]].model_validate(example["spec"])
