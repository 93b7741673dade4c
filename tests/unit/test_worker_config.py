"""The worker's configuration: credentials from the environment, client settings, selections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kafka_mirror.api.models import GroupSelection
from kafka_mirror.api.worker_config import MissingCredential, WorkerConfig
from kafka_mirror.worker.config_file import ConfigFile


def config(**overrides: object) -> WorkerConfig:
    data: dict[str, object] = {
        "mirror": "ns/a-to-b",
        "source": {"alias": "A", "bootstrapServers": "a:9092"},
        "target": {"alias": "B", "bootstrapServers": "b:9092"},
    }
    data.update(overrides)
    return WorkerConfig.model_validate(data)


def test_plaintext_defaults() -> None:
    settings = config().source.client_config()
    assert settings == {"bootstrap.servers": "a:9092", "security.protocol": "PLAINTEXT"}


def test_sasl_over_tls_takes_credentials_from_the_named_environment_variables() -> None:
    worker = config(
        source={
            "alias": "A",
            "bootstrapServers": "a:9093",
            "tls": {"enabled": True, "caEnv": "SOURCE_CA"},
            "sasl": {
                "mechanism": "SCRAM-SHA-512",
                "username": "mirror",
                "passwordEnv": "SOURCE_PASSWORD",
            },
        }
    )
    environ = {"SOURCE_CA": "-----BEGIN CERTIFICATE-----", "SOURCE_PASSWORD": "first\n"}
    settings = worker.source.client_config(environ)
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["ssl.ca.pem"] == "-----BEGIN CERTIFICATE-----"
    assert (settings["sasl.username"], settings["sasl.password"]) == ("mirror", "first")
    assert worker.source.credential_envs() == ["SOURCE_CA", "SOURCE_PASSWORD"]


def test_a_missing_credential_names_its_variable() -> None:
    worker = config(
        source={
            "alias": "A",
            "bootstrapServers": "a:9093",
            "sasl": {"mechanism": "PLAIN", "username": "u", "passwordEnv": "SOURCE_PASSWORD"},
        }
    )
    with pytest.raises(MissingCredential, match="SOURCE_PASSWORD is not set"):
        worker.source.client_config({})


def test_extra_settings_pass_through_but_never_override_security() -> None:
    worker = config(
        source={
            "alias": "A",
            "bootstrapServers": "a:9092",
            "config": {"fetch.max.bytes": "1000", "security.protocol": "SSL"},
        }
    )
    settings = worker.source.client_config()
    assert settings["fetch.max.bytes"] == "1000"
    assert settings["security.protocol"] == "PLAINTEXT"


def test_broken_selections_are_reported_and_the_others_kept() -> None:
    worker = config(
        selections=[
            {"name": "good", "includes": ["accounting\\..*"]},
            {"name": "broken", "includes": ["(unclosed"]},
        ]
    )
    selections, problems = worker.compiled_selections()
    assert len(selections) == 1 and selections[0].matches("accounting.invoices")
    assert problems == [
        "selection broken: invalid regular expression '(unclosed': missing ): (unclosed"
    ]


def test_the_worker_group_is_named_after_the_mirror() -> None:
    assert config().consumer_group == "kafka-mirror.ns.a-to-b"


def test_no_mirrors_workers_connect_or_console_groups_are_checkpointed_by_default() -> None:
    config = WorkerConfig.model_validate(
        {
            "mirror": "ns/m",
            "source": {"alias": "A", "bootstrapServers": "a:9092"},
            "target": {"alias": "B", "bootstrapServers": "b:9092"},
        }
    )
    groups = config.groups_checkpointed()
    assert groups.matches("billing") and groups.matches("kafka-mirror-app")
    for left_out in (
        config.consumer_group,
        "kafka-mirror.other-ns.other-mirror",  # another mirror's workers
        "connect-mm2",
        "console-consumer-4711",
        "__internal",
    ):
        assert not groups.matches(left_out), left_out
    # Excludes of one's own replace MirrorMaker 2's, never the rule for workers' groups.
    mine = config.model_copy(
        update={
            "checkpoints": config.checkpoints.model_copy(
                update={"groups": GroupSelection(excludes=["x"])}
            )
        }
    )
    assert mine.groups_checkpointed().matches("connect-mm2")
    assert not mine.groups_checkpointed().matches(config.consumer_group)


def test_the_file_reread_applies_new_selections_live_and_asks_a_restart_for_new_clients(
    tmp_path: Path,
) -> None:
    path = tmp_path / "worker.yaml"
    data: dict[str, Any] = {
        "mirror": "ns/a-to-b",
        "source": {"alias": "A", "bootstrapServers": "a:9092"},
        "target": {"alias": "B", "bootstrapServers": "b:9092"},
        "selections": [{"includes": ["orders"]}],
    }
    path.write_text(yaml.safe_dump(data))
    file = ConfigFile(path)
    assert not file.reread()  # unchanged

    data["selections"] = [{"includes": ["orders", "payments"]}]
    path.write_text(yaml.safe_dump(data))
    assert not file.reread()
    assert [s.includes for s in file.config.selections] == [["orders", "payments"]]

    data["source"] = {"alias": "A", "bootstrapServers": "a2:9092"}
    path.write_text(yaml.safe_dump(data))
    assert file.reread()
    assert file.config.source.bootstrap_servers == "a:9092"  # the old clients' until the restart
