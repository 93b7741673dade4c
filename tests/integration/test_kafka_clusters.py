"""The real Kafka clusters A and B of the dev stack (and the three-broker B3): produce, consume
and admin work on each, over every listener a mirror may use (plain, SCRAM, mutual TLS, SCRAM
over TLS)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from kafka_mirror_dev.kafka import SCRAM_MECHANISM, SCRAM_PASSWORD, SCRAM_USER, LocalKafka
from tests.helpers.kafka import Record, consume, create_topics, produce
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import wait_for

pytestmark = pytest.mark.kafka


# B3's cases join its group (tests/conftest.py `ONE_WORKER`), which its fixture gives the tests
# that name it: here it is asked for by name at run time.
@pytest.fixture(params=["A", "B", pytest.param("B3", marks=pytest.mark.xdist_group("b3"))])
def cluster(request: pytest.FixtureRequest) -> LocalKafka:
    """Each cluster: A and B of one node, and the three-broker B3 (whose partitions on nodes 2
    and 3 are reached over their own listeners)."""
    return request.getfixturevalue(f"kafka_{request.param.lower()}")  # type: ignore[no-any-return]


def test_clusters_are_distinct(stack: MirrorStack) -> None:
    # Keep each admin client referenced until its future resolves.
    admins = [
        AdminClient({"bootstrap.servers": c.bootstrap_servers})
        for c in (stack.kafka_a, stack.kafka_b)
    ]
    ids = {admin.describe_cluster().result(timeout=10).cluster_id for admin in admins}
    assert len(ids) == 2


def test_produce_then_consume_keeps_every_record_field(cluster: LocalKafka) -> None:
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    create_topics(cluster.bootstrap_servers, [topic], partitions=3)
    now_ms = int(time.time() * 1000)
    sent = [
        Record(
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=(("h", f"{i}".encode()),),
            timestamp=now_ms - 1000 + i,  # recent: older records fall to retention
            partition=i % 3,
        )
        for i in range(30)
    ]
    produce(cluster.bootstrap_servers, topic, sent)
    received = consume(cluster.bootstrap_servers, topic, len(sent))
    strip = {(r.key, r.value, r.headers, r.timestamp, r.partition) for r in received}
    assert strip == {(r.key, r.value, r.headers, r.timestamp, r.partition) for r in sent}


def test_admin_creates_and_describes_topics_and_configs(cluster: LocalKafka) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = f"admin-{uuid.uuid4().hex[:8]}"
    create_topics(
        cluster.bootstrap_servers,
        [topic],
        partitions=4,
        config={"cleanup.policy": "compact", "retention.ms": "3600000"},
    )
    # Any broker may answer; one of B3's may apply the creation a moment after another.
    wait_for(
        lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 4,
        timeout=30,
        what=f"{topic}'s 4 partitions in the metadata",
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "3600000"


# --- the TLS listeners ------------------------------------------------------------------------


def mutual_tls(cluster: LocalKafka) -> dict[str, str]:
    """A client of the SSL listener: trusts the cluster's CA and shows the client certificate."""
    return {
        "security.protocol": "SSL",
        "ssl.ca.pem": cluster.ca_certificate_pem,
        "ssl.certificate.pem": cluster.client_certificate_pem,
        "ssl.key.pem": cluster.client_key_pem,
    }


def scram_over_tls(cluster: LocalKafka) -> dict[str, str]:
    """A client of the SASL_SSL listener: trusts the cluster's CA and logs in with SCRAM."""
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.pem": cluster.ca_certificate_pem,
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": SCRAM_USER,
        "sasl.password": SCRAM_PASSWORD,
    }


@pytest.mark.parametrize("listener", ["ssl", "sasl_ssl"])
def test_tls_listeners_carry_records_for_an_authenticated_client(
    cluster: LocalKafka, listener: str
) -> None:
    # librdkafka checks the broker's certificate and its name (127.0.0.1) by default.
    bootstrap, security = {
        "ssl": (cluster.ssl_bootstrap_servers, mutual_tls(cluster)),
        "sasl_ssl": (cluster.sasl_ssl_bootstrap_servers, scram_over_tls(cluster)),
    }[listener]
    topic = f"{listener}-{uuid.uuid4().hex[:8]}"
    create_topics(cluster.bootstrap_servers, [topic], partitions=2)
    sent = [
        Record(key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2) for i in range(20)
    ]
    produce(bootstrap, topic, sent, security)
    received = consume(bootstrap, topic, len(sent), security=security)
    assert {(r.key, r.value, r.partition) for r in received} == {
        (r.key, r.value, r.partition) for r in sent
    }


def refusal(bootstrap: str, security: dict[str, str]) -> str:
    """Why the cluster refuses this client: the first error librdkafka reports."""
    errors: list[KafkaError] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, **security, "error_cb": errors.append, "log_level": 0}
    )
    wait_for(lambda: producer.poll(0.1) == 0 and bool(errors), 10, "the connection to fail")
    return str(errors[0].str())


def test_tls_listeners_refuse_a_client_without_a_certificate_or_the_right_ca(
    stack: MirrorStack,
) -> None:
    without_certificate = {
        "security.protocol": "SSL",
        "ssl.ca.pem": stack.kafka_a.ca_certificate_pem,
    }
    assert "bad certificate" in refusal(stack.kafka_a.ssl_bootstrap_servers, without_certificate)
    # Each cluster has its own CA: B's does not vouch for A's broker.
    trusting_b = {**scram_over_tls(stack.kafka_a), "ssl.ca.pem": stack.kafka_b.ca_certificate_pem}
    assert "certificate verify failed" in refusal(
        stack.kafka_a.sasl_ssl_bootstrap_servers, trusting_b
    )
