"""The worker's configuration: credentials from files, client settings, selections."""

from __future__ import annotations

from pathlib import Path

from kafka_mirror.worker.config import WorkerConfig


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


def test_sasl_over_tls_reads_the_password_file_at_connect_time(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("first\n")
    worker = config(
        source={
            "alias": "A",
            "bootstrapServers": "a:9093",
            "tls": {"enabled": True, "caFile": "/secrets/ca.crt"},
            "sasl": {
                "mechanism": "SCRAM-SHA-512",
                "username": "mirror",
                "passwordFile": str(password),
            },
        }
    )
    settings = worker.source.client_config()
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["ssl.ca.location"] == "/secrets/ca.crt"
    assert (settings["sasl.username"], settings["sasl.password"]) == ("mirror", "first")
    password.write_text("rotated")
    assert worker.source.client_config()["sasl.password"] == "rotated"


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
        "selection broken: invalid regular expression '(unclosed': "
        "missing ), unterminated subpattern at position 0"
    ]


def test_the_worker_group_is_named_after_the_mirror() -> None:
    assert config().consumer_group == "kafka-mirror.ns.a-to-b"
