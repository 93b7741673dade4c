"""TLS and SASL/SCRAM end to end: a mirror reading cluster A over SCRAM-over-TLS and writing to
cluster B over mutual TLS, every credential from a Secret, against the real API server, the
real operator and real Kafka. Credentials never show up outside their Secrets, a rotated
password reaches the workers, and client settings that would override security are refused.
The audit CronJob's test runs plain too, as its other parameter.
The mirrors run on the real node (kafka_mirror_dev.node): workers and audits are pods of the node's
image, Kafka listens on the node's bridge address."""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from kafka_mirror.api.clusters import KafkaCluster
from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.kube import apply
from kafka_mirror.render import CONFIG_CHECKSUM_ANNOTATION, WORKER_ENV
from kafka_mirror_dev.kafka import SCRAM_MECHANISM, LocalKafka
from kafka_mirror_dev.processes import metric_samples
from tests.helpers.kafka import admin_for, consume, create_topics, produce, records, unique
from tests.helpers.kubectl import Kubectl
from tests.helpers.node import NodeStack
from tests.helpers.objects import (
    condition,
    get_custom,
    mirror,
    remote_end,
    secret,
    selection,
    status_of,
)
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube]

SOURCE_SECRET, TARGET_SECRET = "kafka-a-login", "kafka-b-tls"


# --- credentials on the brokers and in Secrets ------------------------------------------------


def scram_login(cluster: LocalKafka, user: str, password: str) -> dict[str, Any]:
    """A client's settings to log in as `user` on the SASL_SSL listener."""
    return {
        "bootstrap.servers": cluster.sasl_ssl_bootstrap_servers,
        "security.protocol": "SASL_SSL",
        "ssl.ca.pem": cluster.ca_certificate_pem,
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
        "log_level": 0,
    }


def scram_login_works(cluster: LocalKafka, user: str, password: str) -> bool:
    """Whether the SASL_SSL listener accepts this user and password now."""
    admin = AdminClient(scram_login(cluster, user, password))
    try:
        return bool(admin.list_topics(timeout=2).brokers)
    except KafkaException:  # refused (or not yet known): no metadata
        return False


def set_scram_password(cluster: LocalKafka, user: str, password: str) -> None:
    """Create or change a SCRAM user on the broker (over PLAINTEXT, as an administrator would),
    and wait until the SASL_SSL listener takes the password."""
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
    )
    admin = admin_for(cluster.bootstrap_servers)
    admin.alter_user_scram_credentials([upsert])[user].result(timeout=30)
    wait_for(lambda: scram_login_works(cluster, user, password), 30, f"{user}'s new password")


def fresh_scram_user(cluster: LocalKafka) -> tuple[str, str]:
    """A SCRAM user of this test alone (other tests rely on the shared development user)."""
    user, password = unique("mirror-"), f"scram-{uuid.uuid4().hex}"
    set_scram_password(cluster, user, password)
    return user, password


def source_login(namespace: str, cluster: LocalKafka, user: str, password: str) -> dict[str, Any]:
    """The Secret with everything the mirror needs to log in to A: user, password, CA."""
    return secret(
        SOURCE_SECRET,
        namespace,
        username=user,
        password=password,
        **{"ca.crt": cluster.ca_certificate_pem},
    )


def target_tls(namespace: str, cluster: LocalKafka) -> dict[str, Any]:
    """The Secret with B's CA and the client certificate and key for mutual TLS."""
    return secret(
        TARGET_SECRET,
        namespace,
        **{
            "ca.crt": cluster.ca_certificate_pem,
            "tls.crt": cluster.client_certificate_pem,
            "tls.key": cluster.client_key_pem,
        },
    )


def scram_over_tls_source(cluster: LocalKafka) -> dict[str, Any]:
    return {
        "bootstrapServers": cluster.sasl_ssl_bootstrap_servers,
        "tls": {"enabled": True, "caCertificate": {"name": SOURCE_SECRET, "key": "ca.crt"}},
        "sasl": {
            "mechanism": SCRAM_MECHANISM,
            "usernameSecret": {"name": SOURCE_SECRET, "key": "username"},
            "passwordSecret": {"name": SOURCE_SECRET, "key": "password"},
        },
    }


def mutual_tls_target(cluster: LocalKafka) -> dict[str, Any]:
    return {
        "bootstrapServers": cluster.ssl_bootstrap_servers,
        "tls": {
            "enabled": True,
            "caCertificate": {"name": TARGET_SECRET, "key": "ca.crt"},
            "clientCertificate": {"name": TARGET_SECRET, "key": "tls.crt"},
            "clientKey": {"name": TARGET_SECRET, "key": "tls.key"},
        },
    }


# The worker's environment: each credential from its Secret key, never a literal value.
# Each variable from the key of its name in the operator's copy, `secure-credentials`.
CREDENTIAL_ENV = {
    name: {"name": "secure-credentials", "key": name}
    for name in (
        "KAFKA_MIRROR_SOURCE_TLS_CA",
        "KAFKA_MIRROR_SOURCE_SASL_USERNAME",
        "KAFKA_MIRROR_SOURCE_SASL_PASSWORD",
        "KAFKA_MIRROR_TARGET_TLS_CA",
        "KAFKA_MIRROR_TARGET_TLS_CERT",
        "KAFKA_MIRROR_TARGET_TLS_KEY",
    )
}


def start_secure_mirror(stack: NodeStack, user: str, password: str, topic: str) -> None:
    """Secrets, a mirror A (SCRAM over TLS) → B (mutual TLS) named `secure`, and a selection of
    `topic`."""
    api, namespace = stack.api, stack.namespace
    apply(api, source_login(namespace, stack.kafka_a, user, password))
    apply(api, target_tls(namespace, stack.kafka_b))
    source, target = scram_over_tls_source(stack.kafka_a), mutual_tls_target(stack.kafka_b)
    apply(api, mirror("secure", namespace, source, target))
    apply(api, selection("secure", namespace, "secure", [re.escape(topic)]))


def ready(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return condition(get_custom(api, namespace, "kafkamirrors", name), "Ready")


# --- mirroring over TLS and SCRAM ---------------------------------------------------------------


@pytest.mark.node
def test_a_mirror_over_scram_tls_and_mutual_tls_mirrors_and_becomes_ready(
    node_stack: NodeStack,
    node_kc: Kubectl,
) -> None:
    user, password = fresh_scram_user(node_stack.kafka_a)
    topic = unique("secure-")
    create_topics(node_stack.kafka_a.bootstrap_servers, [topic], partitions=2)
    produce(node_stack.kafka_a.bootstrap_servers, topic, records(200, partitions=2))
    start_secure_mirror(node_stack, user, password, topic)

    mirrored = consume(node_stack.kafka_b.bootstrap_servers, f"{topic}.A", 200, timeout=90)
    assert sorted(r.value for r in mirrored) == sorted(r.value for r in records(200, 2))
    node_kc("wait", "--for=condition=Ready", "kafkamirror/secure", "--timeout=60s")
    assert ready(node_stack.api, node_stack.namespace, "secure")["reason"] == "Mirroring"
    # The workers really connect to the TLS listeners: the mirror names no other address.
    config = client.CoreV1Api(node_stack.api).read_namespaced_config_map(
        "secure-worker-config", node_stack.namespace
    )
    assert node_stack.kafka_a.sasl_ssl_bootstrap_servers in config.data["worker.yaml"]
    assert node_stack.kafka_b.ssl_bootstrap_servers in config.data["worker.yaml"]


# --- no credential outside its Secret -------------------------------------------------------


def leak_needles(password: str, client_key: str) -> dict[str, str]:
    """What must never appear outside the Secrets: the password and the private key, whole, as
    a line of the key's base64 body (the middle one: the first starts with the same ASN.1
    header in every P-256 key), and base64-encoded as the Secrets hold them."""
    body = [line for line in client_key.splitlines() if line and not line.startswith("-----")]
    return {
        "SCRAM password": password,
        "SCRAM password in base64": base64.b64encode(password.encode()).decode(),
        "client key": client_key.strip(),
        "a base64 line of the client key": body[len(body) // 2],
        "client key in base64": base64.b64encode(client_key.encode()).decode(),
    }


def texts(data: Any) -> Iterator[str]:
    """Every string in an API object, keys included, as written (a PEM keeps its newlines)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield str(key)
            yield from texts(value)
    elif isinstance(data, list):
        for value in data:
            yield from texts(value)
    elif isinstance(data, str):
        yield data


def objects_text(api: client.ApiClient, kind: str, items: list[Any]) -> list[tuple[str, str]]:
    """(kind name, all its strings) of each API object."""
    found = []
    for item in items:
        data = api.sanitize_for_serialization(item)
        found.append((f"{kind} {data['metadata']['name']}", "\n".join(texts(data))))
    return found


@pytest.mark.node
def test_credentials_appear_only_in_their_secrets(
    node_stack: NodeStack,
) -> None:
    user, password = fresh_scram_user(node_stack.kafka_a)
    topic = unique("secure-")
    create_topics(node_stack.kafka_a.bootstrap_servers, [topic])
    produce(node_stack.kafka_a.bootstrap_servers, topic, records(50, partitions=1))
    start_secure_mirror(node_stack, user, password, topic)
    # The error paths too: a mirror whose Secret holds a wrong password, refused by A.
    wrong_password = f"wrong-{uuid.uuid4().hex}"
    apply(
        node_stack.api,
        secret("wrong-login", node_stack.namespace, username=user, password=wrong_password),
    )
    refused_source = scram_over_tls_source(node_stack.kafka_a)
    refused_source["sasl"]["passwordSecret"] = {"name": "wrong-login", "key": "password"}
    apply(
        node_stack.api,
        mirror(
            "refused", node_stack.namespace, refused_source, mutual_tls_target(node_stack.kafka_b)
        ),
    )
    apply(node_stack.api, selection("refused", node_stack.namespace, "refused", [re.escape(topic)]))

    consume(node_stack.kafka_b.bootstrap_servers, f"{topic}.A", 50, timeout=90)
    wait_for(
        lambda: ready(node_stack.api, node_stack.namespace, "secure").get("status") == "True",
        60,
        "the secure mirror to be Ready",
    )
    wait_for(
        lambda: (
            ready(node_stack.api, node_stack.namespace, "refused").get("reason")
            == "SourceAuthenticationFailed"
        ),
        60,
        "the refused mirror to say why",
    )
    wait_for(
        lambda: "Authentication failed" in node_stack.pods.worker_logs("refused"),
        60,
        "the refused worker to log its failed login",
    )

    core, apps, batch = (
        client.CoreV1Api(node_stack.api),
        client.AppsV1Api(node_stack.api),
        client.BatchV1Api(node_stack.api),
    )
    custom = client.CustomObjectsApi(node_stack.api)
    deployments = apps.list_namespaced_deployment(node_stack.namespace).items
    cron_jobs = batch.list_namespaced_cron_job(node_stack.namespace).items
    assert {d.metadata.name for d in deployments} == {"secure-worker", "refused-worker"}
    assert {c.metadata.name for c in cron_jobs} == {"secure-audit", "refused-audit"}

    # Every credential reaches the pods as a Secret reference.
    secure_pods = [
        d.spec.template.spec for d in deployments if d.metadata.name == "secure-worker"
    ] + [
        c.spec.job_template.spec.template.spec
        for c in cron_jobs
        if c.metadata.name == "secure-audit"
    ]
    for pod in secure_pods:
        env = node_stack.api.sanitize_for_serialization(pod.containers[0].env)
        references = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e}
        assert references == CREDENTIAL_ENV
        # The only plain values are the worker's allocator, no credential.
        assert {e["name"]: e["value"] for e in env if "value" in e}.items() <= WORKER_ENV.items()

    places = [
        *objects_text(
            node_stack.api, "ConfigMap", core.list_namespaced_config_map(node_stack.namespace).items
        ),
        *objects_text(node_stack.api, "Deployment", deployments),
        *objects_text(node_stack.api, "CronJob", cron_jobs),
        *objects_text(
            node_stack.api, "Event", core.list_namespaced_event(node_stack.namespace).items
        ),
        *objects_text(
            node_stack.api,
            "custom resource",
            [
                item
                for plural in ("kafkamirrors", "mirrortopicselections")
                for item in custom.list_namespaced_custom_object(
                    GROUP, VERSION, node_stack.namespace, plural
                )["items"]
            ],
        ),
        ("the operator's log", node_stack.operator.log()),
        *[
            (f"{name}'s worker logs", node_stack.pods.worker_logs(name))
            for name in ("secure", "refused")
        ],
    ]
    assert any(name.startswith("Event ") for name, _ in places), "no events to check"
    needles = {
        **leak_needles(password, node_stack.kafka_b.client_key_pem),
        "wrong password": wrong_password,
    }
    leaks = [
        f"{what} in {place}"
        for place, text in places
        for what, needle in needles.items()
        if needle in text
    ]
    assert not leaks


@pytest.mark.spark
@pytest.mark.node
@pytest.mark.parametrize("secure", [False, True], ids=["plaintext", "scram-tls-and-mutual-tls"])
def test_the_audit_cronjob_runs_its_job_and_the_result_reaches_the_status(
    node_stack: NodeStack, node_kc: Kubectl, secure: bool
) -> None:
    """Secure, Spark's Kafka source (Java) gets the same credentials as the workers
    (librdkafka), in its own form: a JAAS line with the password, PEM trust and key stores;
    none of them shows in the audit's log."""
    api, namespace = node_stack.api, node_stack.namespace
    topic = unique("audited-")
    create_topics(node_stack.kafka_a.bootstrap_servers, [topic], partitions=2)
    produce(node_stack.kafka_a.bootstrap_servers, topic, records(200, partitions=2))
    if secure:
        user, password = fresh_scram_user(node_stack.kafka_a)
        start_secure_mirror(node_stack, user, password, topic)
        name = "secure"
    else:
        plain = {"bootstrapServers": node_stack.kafka_a.bootstrap_servers}
        target = {"bootstrapServers": node_stack.kafka_b.bootstrap_servers}
        apply(api, mirror("m", namespace, plain, target, audit={"spark": {"master": "local[2]"}}))
        apply(api, selection("team", namespace, "m", [re.escape(topic)]))
        name = "m"
    wait_for(
        lambda: (
            status_of(api, namespace, name).get("activeTopics") == [topic]
            and status_of(api, namespace, name).get("totalLag") == 0
        ),
        90,
        "the topic mirrored with no lag",
    )

    succeeded, log = node_stack.pods.run_cronjob(f"{name}-audit")
    assert succeeded, log[-3000:]
    audit = status_of(api, namespace, name)["lastAudit"]
    assert (audit["result"], audit["recordsChecked"], audit["missing"]) == ("Passed", 200, 0)
    node_kc("wait", "--for=condition=AuditPassed", f"kafkamirror/{name}", "--timeout=30s")
    if secure:
        needles = leak_needles(password, node_stack.kafka_b.client_key_pem)
        assert not [f"{what} in the audit's log" for what, n in needles.items() if n in log]
    # The operator's status ticks (the test operator's: every 2 s) leave the audit's summary
    # alone.
    time.sleep(5)
    assert status_of(api, namespace, name)["lastAudit"] == audit


# --- rotation -------------------------------------------------------------------------------


def pods_mirrored(pods: list[Any], topic: str) -> float:
    """Records of `topic` these worker pods mirrored, from their own metrics (the host reaches
    pods on the node's bridge)."""
    total = 0.0
    for pod in pods:
        (port,) = [p.container_port for p in pod.spec.containers[0].ports if p.name == "metrics"]
        url = f"http://{pod.status.pod_ip}:{port}/metrics"
        total += sum(metric_samples(url, "kafka_mirror_records_total", topic=topic) or [])
    return total


@pytest.mark.node
def test_a_rotated_scram_password_rolls_the_workers_and_mirroring_goes_on(
    node_stack: NodeStack,
) -> None:
    user, first_password = fresh_scram_user(node_stack.kafka_a)
    topic = unique("rotated-")
    create_topics(node_stack.kafka_a.bootstrap_servers, [topic])
    produce(node_stack.kafka_a.bootstrap_servers, topic, records(50, partitions=1))
    start_secure_mirror(node_stack, user, first_password, topic)
    consume(node_stack.kafka_b.bootstrap_servers, f"{topic}.A", 50, timeout=90)
    wait_for(
        lambda: ready(node_stack.api, node_stack.namespace, "secure").get("status") == "True",
        60,
        "the mirror to be Ready",
    )
    apps = client.AppsV1Api(node_stack.api)

    def checksum() -> str:
        template = apps.read_namespaced_deployment(
            "secure-worker", node_stack.namespace
        ).spec.template
        return str(template.metadata.annotations[CONFIG_CHECKSUM_ANNOTATION])

    before = checksum()
    old_pods = {pod.metadata.name for pod in node_stack.pods.workers("secure")}

    # The password changes on the broker first (the running workers stay logged in), then in
    # the Secret; records keep coming meanwhile, as in production.
    second_password = f"scram-{uuid.uuid4().hex}"
    set_scram_password(node_stack.kafka_a, user, second_password)
    producer = Producer({"bootstrap.servers": node_stack.kafka_a.bootstrap_servers})
    produced = 0

    def produce_one() -> None:
        nonlocal produced
        producer.produce(topic, key=b"after", value=f"after-{produced}".encode())
        producer.poll(0)
        produced += 1

    apply(
        node_stack.api,
        source_login(node_stack.namespace, node_stack.kafka_a, user, second_password),
    )
    updated = time.monotonic()

    def rolled() -> bool:
        produce_one()
        return checksum() != before

    wait_for(rolled, 60, "the operator to roll the workers")
    rolled_after = time.monotonic() - updated

    def new_workers_mirror() -> bool:
        produce_one()
        new_pods = [p for p in node_stack.pods.workers("secure") if p.metadata.name not in old_pods]
        return pods_mirrored(new_pods, topic) > 0

    wait_for(new_workers_mirror, 90, "a worker with the new password to mirror a record")
    picked_up_after = time.monotonic() - updated
    print(
        f"\nrotation: the operator rolled the workers {rolled_after:.1f}s after the Secret "
        f"update; the first record mirrored with the new password {picked_up_after:.1f}s after"
    )
    assert producer.flush(30) == 0

    # Nothing produced around the rotation is lost, and the status reads A with the new password.
    wait_for(
        lambda: remote_end(node_stack.kafka_b, f"{topic}.A") >= 50 + produced,
        60,
        "every record produced around the rotation on B",
    )
    on_b = consume(node_stack.kafka_b.bootstrap_servers, f"{topic}.A", 50 + produced, timeout=60)
    expected = {f"after-{i}".encode() for i in range(produced)}
    assert expected <= {r.value for r in on_b}
    assert not {pod.metadata.name for pod in node_stack.pods.workers("secure")} & old_pods
    wait_for(
        lambda: (
            ready(node_stack.api, node_stack.namespace, "secure").get("reason") == "Mirroring"
            and status_of(node_stack.api, node_stack.namespace, "secure").get("totalLag") == 0
        ),
        60,
        "Ready again, with no lag read from A with the new password",
    )


# --- client settings that would override security --------------------------------------------

SECURITY_KEYS = (
    "security.protocol",
    "sasl.jaas.config",
    "ssl.truststore.location",
    "ssl.keystore.password",
    "sasl.password",
    "bootstrap.servers",
)


def source_setting(key: str) -> dict[str, Any]:
    return {"alias": "A", "bootstrapServers": "kafka-a:9093", "config": {key: "x"}}


@pytest.mark.parametrize("key", SECURITY_KEYS)
def test_the_api_server_refuses_client_settings_that_override_security(
    kube_api: client.ApiClient, namespace: str, key: str
) -> None:
    body = mirror("m", namespace, source_setting(key), {"bootstrapServers": "kafka-b:9093"})
    try:
        client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "kafkamirrors", body
        )
    except ApiException as refused:
        message = json.loads(refused.body)["message"]
        if refused.status != 422 or "spec.source.config: Invalid value" not in message:
            pytest.fail(f"refused for another reason: {refused.status} {message}")
        assert key in message, message
    else:
        pytest.fail(f"a mirror setting {key} was stored")


@pytest.mark.parametrize("key", SECURITY_KEYS)
def test_the_model_refuses_client_settings_that_override_security(key: str) -> None:
    with pytest.raises(ValidationError) as invalid:
        KafkaCluster.model_validate(source_setting(key))
    assert f"refused: {key}" in str(invalid.value)
