"""The applications' rights move with a failover and back with the Return (issue 62,
`aclSync.moveApplications`), judged by a real Kafka authorizer (KRaft's StandardAuthorizer) and by
a producer logged in as its principal: the real operator on the real API server carries out the
Failover and the Return; a worker process lists the source's WRITE bindings as its pods would.

One cluster with an authorizer is both sides (`t` → `t.A`), so the producer's principal is
renamed for the target (`carol` on A is `carol-dr` on B): what `carol-dr` may write on `t` is
what the operation granted, and nothing A's own binding gives. No worker pod runs (no node):
the failover stops none, so each phase passes once the status says the workers are stopped."""

from __future__ import annotations

import re
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AclOperation
from kubernetes import client

from kafka_mirror.kafka.acl_grants import Grant
from kafka_mirror.kube import apply
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import create_topics, produce, records, unique
from tests.helpers.objects import get_custom, mirror, selection
from tests.helpers.worker import StartWorker, wait_for, worker_config
from tests.integration.test_acl_sync import DENY, bind, grants_on
from tests.integration.test_security import fresh_scram_user, scram_login

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


def writes(cluster: LocalKafka, user: str, password: str, topic: str) -> str:
    """What the broker answers `user` producing one record to `topic`: "written" or the error."""
    answers: list[str] = []

    def delivered(error: KafkaError | None, _: object) -> None:
        answers.append("written" if error is None else str(error.name()))

    producer = Producer(
        {**scram_login(cluster, user, password), "message.timeout.ms": 15_000, "retries": 0}
    )
    producer.produce(topic, b"from " + user.encode(), on_delivery=delivered)
    producer.flush(30)
    return answers[0] if answers else "not answered in 30 s"


def mirror_status(api: client.ApiClient, namespace: str, name: str = "a-to-b") -> dict[str, Any]:
    return dict(get_custom(api, namespace, "kafkamirrors", name).get("status") or {})


def operation(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(mirror_status(api, namespace, name).get("operation") or {})


@pytest.mark.long  # sync rounds of 10 s, a failover and a return through the operator
@pytest.mark.usefixtures("granting_operator")
def test_a_failover_moves_the_applications_rights_to_b_and_the_return_takes_them_back(
    kafka_b_acl: LocalKafka,
    kube_api: client.ApiClient,
    namespace: str,
    start_worker: StartWorker,
) -> None:
    cluster, topic = kafka_b_acl, unique("moved-")
    create_topics(cluster.bootstrap_servers, [topic], partitions=1)
    produce(cluster.bootstrap_servers, topic, records(5, partitions=1))
    (carol, _), (carol_dr, carol_dr_pw) = fresh_scram_user(cluster), fresh_scram_user(cluster)
    (mallory, _), (mallory_dr, mallory_dr_pw) = fresh_scram_user(cluster), fresh_scram_user(cluster)
    eve, eve_pw = fresh_scram_user(cluster)  # no binding anywhere
    for name in (topic, f"{topic}.A"):  # the mirror's own (User:ANONYMOUS over PLAINTEXT)
        bind(cluster, name, "User:ANONYMOUS", AclOperation.ALL)
    bind(cluster, topic, f"User:{carol}", AclOperation.WRITE)
    bind(cluster, topic, f"User:{mallory}", AclOperation.ALL)
    bind(cluster, topic, f"User:{mallory}", AclOperation.WRITE, DENY)
    dave = bind(cluster, topic, "User:dave", AclOperation.WRITE)  # someone else's on B's t
    renamed = [
        {"source": f"User:{carol}", "target": f"User:{carol_dr}"},
        {"source": f"User:{mallory}", "target": f"User:{mallory_dr}"},
    ]
    acl_sync = {"intervalSeconds": 10, "principals": renamed, "moveApplications": True}
    assert writes(cluster, carol_dr, carol_dr_pw, topic) == "TOPIC_AUTHORIZATION_FAILED"

    # A's workers list the applications' rights on B while A can be read; then A is lost.
    config = worker_config(
        cluster, cluster, [re.escape(topic)], mirror=f"{namespace}/a-to-b", aclSync=acl_sync
    )
    worker = start_worker(config, "worker-moving")
    read_copy = Grant("TOPIC", f"{topic}.A", f"User:{mallory_dr}", "*", "DESCRIBE", "ALLOW")
    wait_for(lambda: read_copy in grants_on(cluster, f"{topic}.A"), 60, "a sync round")

    # The mirror's status counts what the sync holds on B: the copies on t.A, not the binding
    # made there by hand.
    a = {"bootstrapServers": cluster.bootstrap_servers}
    forward = mirror("a-to-b", namespace, a, a, reverse="b-to-a", aclSync=acl_sync)
    apply(kube_api, selection("orders", namespace, "a-to-b", [re.escape(topic)]))
    apply(kube_api, forward)
    copies = grants_on(cluster, f"{topic}.A") - {
        Grant("TOPIC", f"{topic}.A", "User:ANONYMOUS", "*", "ALL", "ALLOW")
    }
    wait_for(
        lambda: mirror_status(kube_api, namespace).get("aclsSynced") == len(copies) == 4,
        90,
        lambda: f"aclsSynced {len(copies)}: {mirror_status(kube_api, namespace)}",
    )
    worker.stop()

    # A is lost: fail over.
    forward["spec"]["operation"] = {"type": "Failover", "id": "a-lost"}
    apply(kube_api, forward)
    wait_for(
        lambda: operation(kube_api, namespace, "a-to-b").get("phase") == "Completed",
        90,
        lambda: f"the failover to complete: {operation(kube_api, namespace, 'a-to-b')}",
    )
    moved = operation(kube_api, namespace, "a-to-b")["movedRights"]
    assert {(g["principal"], g["operation"], g["permission"]) for g in moved["grants"]} == {
        (f"User:{carol_dr}", "WRITE", "ALLOW"),
        # mallory's ALL as WRITE, READ and DESCRIBE, with its DENY of WRITE, which denies
        # mallory under either name (the source name's DENY is there already: A's own).
        *((f"User:{mallory_dr}", op, "ALLOW") for op in ("WRITE", "READ", "DESCRIBE")),
        (f"User:{mallory_dr}", "WRITE", "DENY"),
        # The mirror's own ALL on t on A, as any principal's.
        *(("User:ANONYMOUS", op, "ALLOW") for op in ("WRITE", "READ", "DESCRIBE")),
    }
    assert moved["count"] == 8, moved
    # Kafka's authorizer judges: carol writes t on B as she did on A; mallory's ALL was denied
    # WRITE on A and is on B; eve had nothing on A and has nothing on B.
    assert writes(cluster, carol_dr, carol_dr_pw, topic) == "written"
    assert writes(cluster, mallory_dr, mallory_dr_pw, topic) == "TOPIC_AUTHORIZATION_FAILED"
    assert writes(cluster, eve, eve_pw, topic) == "TOPIC_AUTHORIZATION_FAILED"

    # The failback's Return starts a-to-b again: the producers write A again, and what the
    # failover granted goes from B; dave's binding, which it did not make, stays.
    back = {"type": "Return", "id": "back", "resume": "a-to-b"}
    b = {**a, "alias": "B"}
    apply(
        kube_api,
        mirror("b-to-a", namespace, b, {**a, "alias": "A"}, operation=back, standbyFor="a-to-b"),
    )
    wait_for(
        lambda: bool(
            (operation(kube_api, namespace, "a-to-b").get("movedRights") or {}).get("returnedAt")
        ),
        120,
        lambda: f"the moved rights taken back: {operation(kube_api, namespace, 'a-to-b')}",
    )
    assert writes(cluster, carol_dr, carol_dr_pw, topic) == "TOPIC_AUTHORIZATION_FAILED"
    left = {g for g in grants_on(cluster, topic) if g.operation == "WRITE"}
    assert left == {
        Grant("TOPIC", topic, f"User:{carol}", "*", "WRITE", "ALLOW"),
        Grant("TOPIC", topic, f"User:{mallory}", "*", "WRITE", "DENY"),
        Grant("TOPIC", topic, dave.principal, "*", "WRITE", "ALLOW"),
    }
