"""The closed lists of keys a KafkaMirror's settings maps may hold: the models refuse every
other key with a message listing what is allowed, the CRDs' CEL rules carry the same lists,
librdkafka knows every listed key, and the worker lets the mirror's tuning win over its own
defaults but never over its guarantees."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import KafkaException, Producer
from pydantic import ValidationError

from kafka_mirror.api.allowed import (
    CLIENT_CONFIG,
    CLIENT_CONFIG_KEYS,
    SPARK_CONF,
    SPARK_CONF_KEYS,
    KeyAllowList,
)
from kafka_mirror.api.clusters import KafkaCluster
from kafka_mirror.api.crdgen import all_crds
from kafka_mirror.api.worker_config import ClusterConnection
from kafka_mirror.api.workloads import SparkSettings
from kafka_mirror.worker.clients import (
    MIRROR_PRODUCER_GUARANTEES,
    ONE_REQUEST_IN_FLIGHT,
    SMALL_IDEMPOTENT_PRODUCER,
    mirror_producer_settings,
)

# Each changes where the clients connect, who they are, what they read, what a delivery means,
# or loads code: the issue's examples first.
REFUSED_CLIENT_KEYS = [
    "test.mock.num.brokers",
    "isolation.level",
    "group.instance.id",
    "enable.idempotence",
    "plugin.library.paths",
    "interceptor.test.config1",
    "oauthbearer_token_refresh_cb",
    "sasl.oauthbearer.config",
    "sasl.mechanism",
    "sasl.password",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
    "security.protocol",
    "bootstrap.servers",
    "metadata.broker.list",
    "group.id",
    "client.id",
    "enable.auto.commit",
    "auto.offset.reset",
    "partition.assignment.strategy",
    "message.timeout.ms",
    "acks",
    "topic.metadata.refresh.interval.ms",
    "SASL.PASSWORD",
    " linger.ms",
    "linger.ms ",
    "no.such.property",
]
REFUSED_SPARK_KEYS = [
    "spark.jars.packages",
    "spark.jars",
    "spark.jars.repositories",
    "spark.driver.extraJavaOptions",
    "spark.driver.extraClassPath",
    "spark.executor.extraJavaOptions",
    "spark.plugins",
    "spark.extraListeners",
    "spark.sql.extensions",
    "spark.serializer",
    "spark.eventLog.dir",
    "spark.kubernetes.container.image",
    "spark.kubernetes.authenticate.driver.serviceAccountName",
    "spark.ui.enabled",
    "a",
]


def cluster(config: dict[str, str]) -> dict[str, object]:
    return {"alias": "A", "bootstrapServers": "kafka-a:9092", "config": config}


@pytest.mark.parametrize("key", REFUSED_CLIENT_KEYS)
def test_the_model_refuses_every_client_key_off_the_list_listing_what_is_allowed(
    key: str,
) -> None:
    with pytest.raises(ValidationError) as refused:
        KafkaCluster.model_validate(cluster({"fetch.wait.max.ms": "50", key: "1"}))
    (error,) = refused.value.errors()
    assert error["loc"] == ("config",)
    assert error["msg"].endswith(f"; refused: {key}")  # only the refused key is named
    assert "config may set only these librdkafka tuning settings: client.rack," in error["msg"]


def test_every_listed_client_key_is_accepted() -> None:
    settings = dict.fromkeys(CLIENT_CONFIG_KEYS[:64], "1")
    assert KafkaCluster.model_validate(cluster(settings)).config == settings


@pytest.mark.parametrize("key", REFUSED_SPARK_KEYS)
def test_the_model_refuses_every_spark_key_off_the_list(key: str) -> None:
    with pytest.raises(ValidationError) as refused:
        SparkSettings.model_validate({"conf": {key: "x"}})
    assert f"refused: {key}" in str(refused.value)
    assert "conf may set only these Spark tuning settings: spark.driver.memory" in str(
        refused.value
    )


def test_listed_spark_keys_are_accepted() -> None:
    conf = dict.fromkeys(SPARK_CONF_KEYS, "2")
    assert SparkSettings.model_validate({"conf": conf}).conf == conf


def test_spark_keys_are_spark_settings() -> None:
    assert all(key.startswith("spark.") for key in SPARK_CONF_KEYS)
    assert len(set(SPARK_CONF_KEYS)) == len(SPARK_CONF_KEYS)


def test_librdkafka_knows_every_listed_client_key() -> None:
    # An unknown key is "No such configuration property"; a known one takes or refuses the value.
    unknown = []
    for key in CLIENT_CONFIG_KEYS:
        try:
            Producer({key: "%not-a-value%", "log_level": 0})
        except KafkaException as error:
            if "No such configuration property" in error.args[0].str():
                unknown.append(key)
    assert not unknown
    assert len(set(CLIENT_CONFIG_KEYS)) == len(CLIENT_CONFIG_KEYS)


def _validations(node: object) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    if isinstance(node, dict):
        found += node.get("x-kubernetes-validations", [])
        for value in node.values():
            found += _validations(value)
    elif isinstance(node, list):
        for value in node:
            found += _validations(value)
    return found


@pytest.mark.parametrize("allowed", [CLIENT_CONFIG, SPARK_CONF], ids=lambda a: a.field)
def test_the_crds_cel_rule_lists_exactly_the_allowed_keys(allowed: KeyAllowList) -> None:
    rules = [v for v in _validations(all_crds()) if v["rule"] == allowed.rule]
    assert len(rules) == (2 if allowed is CLIENT_CONFIG else 1)  # source and target
    listed = re.findall(r"'([^']*)'", allowed.rule)
    assert listed == list(allowed.keys)
    assert all(rule["message"] == allowed.message for rule in rules)
    assert all(rule["messageExpression"] == allowed.message_expression for rule in rules)


def test_a_hand_written_worker_file_gets_no_more_than_the_list() -> None:
    connection = ClusterConnection(
        alias="A",
        bootstrap_servers="a:9092",
        config={"linger.ms": "20", "test.mock.num.brokers": "3", "security.protocol": "SSL"},
    )
    settings = connection.client_config({})
    assert settings["linger.ms"] == "20"
    assert "test.mock.num.brokers" not in settings
    assert settings["security.protocol"] == "PLAINTEXT"


def test_a_mirrors_tuning_wins_over_the_workers_defaults_never_over_its_guarantees() -> None:
    target = {"bootstrap.servers": "b:9092", "linger.ms": "50", "batch.size": "65536"}
    settings = mirror_producer_settings({**target, "acks": "1", "message.timeout.ms": "10"})
    assert (settings["linger.ms"], settings["batch.size"]) == ("50", "65536")
    assert {k: settings[k] for k in MIRROR_PRODUCER_GUARANTEES} == MIRROR_PRODUCER_GUARANTEES
    assert not set(MIRROR_PRODUCER_GUARANTEES) & set(CLIENT_CONFIG_KEYS)


def test_every_idempotent_producer_of_the_worker_sends_one_request_at_a_time() -> None:
    """With librdkafka's default of 5, its idempotent producer spins a core while the cluster is
    silent (`bench/producer_stall.py`); no mirror's `config` may bring that back."""
    for settings in (
        mirror_producer_settings({"bootstrap.servers": "b:9092"}),
        SMALL_IDEMPOTENT_PRODUCER,
    ):
        assert settings.items() >= ONE_REQUEST_IN_FLIGHT.items()
    assert not set(ONE_REQUEST_IN_FLIGHT) & set(CLIENT_CONFIG_KEYS)
