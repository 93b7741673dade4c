"""The API models: defaults, and validation errors a person can act on."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kafka_mirror.api.models import (
    KafkaMirror,
    KafkaMirrorSpec,
    MirrorTopicSelectionSpec,
)


def mirror_spec(**overrides: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "source": {"alias": "A", "bootstrapServers": "kafka-a:9092"},
        "target": {"alias": "B", "bootstrapServers": "kafka-b:9092,kafka-b2:9092"},
    }
    spec.update(overrides)
    return spec


def errors(excinfo: pytest.ExceptionInfo[ValidationError]) -> str:
    return str(excinfo.value)


def test_defaults_follow_the_seeds_and_mirrormaker2() -> None:
    spec = KafkaMirrorSpec.model_validate(mirror_spec())
    assert spec.topic_naming.policy == "suffix"
    assert spec.topic_naming.separator == "."
    assert spec.replicas == 1
    assert spec.paused is False
    assert spec.offset_syncs.max_lag == 100
    assert spec.offset_syncs.location == "source"
    assert spec.checkpoints.enabled is True
    assert spec.checkpoints.groups.includes == [".*"]
    assert spec.checkpoints.sync_group_offsets is False
    assert spec.heartbeats.interval_seconds == 1
    assert spec.refresh_topics_interval_seconds <= 10
    assert spec.audit.spark.master == "local[*]"
    assert spec.audit.suspend is False
    assert spec.source.tls.enabled is False
    assert spec.source.sasl is None


def test_selection_defaults_to_mirroring_nothing() -> None:
    selection = MirrorTopicSelectionSpec.model_validate({"mirror": "a-to-b"})
    assert selection.includes == []
    assert selection.excludes == []


def test_wire_names_are_camel_case() -> None:
    spec = KafkaMirrorSpec.model_validate(mirror_spec(topicNaming={"policy": "prefix"}))
    dumped = spec.model_dump(by_alias=True)
    assert dumped["topicNaming"] == {"policy": "prefix", "separator": ".", "adopt": []}
    assert dumped["source"]["bootstrapServers"] == "kafka-a:9092"
    assert "offsetSyncs" in dumped and "maxLag" in dumped["offsetSyncs"]


def test_a_whole_object_parses_as_the_api_server_returns_it() -> None:
    mirror = KafkaMirror.model_validate(
        {
            "apiVersion": "kafkamirror.io/v1alpha1",
            "kind": "KafkaMirror",
            "metadata": {"name": "a-to-b", "namespace": "ns", "generation": 3},
            "spec": mirror_spec(),
            "status": {"observedGeneration": 2, "totalLag": 5, "somethingNewer": True},
        }
    )
    assert mirror.status.observed_generation == 2
    assert mirror.status.total_lag == 5


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"target": {"alias": "B", "bootstrapServers": "b:9092"}}, "source\n  Field required"),
        (mirror_spec(source={"bootstrapServers": "a:9092"}), "source.alias\n  Field required"),
        (mirror_spec(replicas=-1), "replicas\n  Input should be greater than or equal to 0"),
        (
            mirror_spec(topicNaming={"policy": "reverse"}),
            "Input should be 'suffix', 'prefix' or 'identity'",
        ),
        (
            mirror_spec(source={"alias": "a.b", "bootstrapServers": "a:9092"}),
            "String should match pattern",
        ),
        (
            mirror_spec(source={"alias": "A", "bootstrapServers": "no-port"}),
            "source.bootstrapServers",
        ),
        (
            mirror_spec(target={"alias": "A", "bootstrapServers": "b:9092"}),
            "source and target must have different aliases",
        ),
        (mirror_spec(replica=2), "Extra inputs are not permitted"),
        (mirror_spec(audit={"schedule": "every hour"}), "audit.schedule"),
        (mirror_spec(offsetSyncs={"maxLag": 0}), "offsetSyncs.maxLag"),
        (
            mirror_spec(checkpoints={"groups": {"includes": ["("]}}),
            "invalid regular expression '(': missing ): (",
        ),
        (
            mirror_spec(
                topicNaming={"policy": "identity"},
                operation={"type": "Return", "id": "r", "resume": "a-to-b"},
            ),
            "a Return cannot translate positions under identity naming",
        ),
    ],
)
def test_invalid_mirrors_are_refused_with_a_readable_message(
    spec: dict[str, object], expected: str
) -> None:
    with pytest.raises(ValidationError) as excinfo:
        KafkaMirrorSpec.model_validate(spec)
    assert expected in errors(excinfo)


def test_sasl_needs_a_password_secret() -> None:
    spec = mirror_spec(
        source={
            "alias": "A",
            "bootstrapServers": "a:9092",
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "mirror"},
        }
    )
    with pytest.raises(ValidationError) as excinfo:
        KafkaMirrorSpec.model_validate(spec)
    assert "sasl.passwordSecret\n  Field required" in errors(excinfo)


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        ({"includes": ["^accounting.*"]}, "mirror\n  Field required"),
        ({"mirror": "A_B", "includes": []}, "String should match pattern"),
        ({"mirror": "m", "includes": ["[unclosed"]}, "invalid regular expression '[unclosed'"),
        ({"mirror": "m", "includes": [42]}, "Input should be a valid string"),
        ({"mirror": "m", "includes": ["t"] * 257}, "List should have at most 256 items"),
        ({"mirror": "m", "excludes": ["x" * 1025]}, "String should have at most 1024 characters"),
    ],
)
def test_invalid_selections_are_refused_with_a_readable_message(
    selection: dict[str, object], expected: str
) -> None:
    with pytest.raises(ValidationError) as excinfo:
        MirrorTopicSelectionSpec.model_validate(selection)
    assert expected in errors(excinfo)


def test_a_selection_over_its_pattern_budget_is_refused_as_the_api_server_does() -> None:
    fits = {"mirror": "m", "includes": ["x" * 1000] * 196}
    assert MirrorTopicSelectionSpec.model_validate(fits)
    with pytest.raises(ValueError, match="may hold 192 KiB in all"):
        MirrorTopicSelectionSpec.model_validate({**fits, "excludes": ["y" * 1000] * 10})
