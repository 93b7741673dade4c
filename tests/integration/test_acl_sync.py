"""Topic ACLs follow the mirrored topics to their remote topics (issue 62), judged by a real
Kafka authorizer (KRaft's StandardAuthorizer) and by clients logged in as the principals: the
worker against one cluster with an authorizer that is both source and target (`t` → `t.A`),
so the bindings of both sides are real and their principals the same SCRAM users."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from kafka_mirror.kafka.acl_grants import ACL_GRANTS_TOPIC, Grant
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import admin_for, create_topics, produce, records, unique
from tests.helpers.worker import StartWorker, commit_group, wait_for, worker_config
from tests.integration.test_security import fresh_scram_user, scram_login

pytestmark = pytest.mark.kafka

LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def bind(
    cluster: LocalKafka,
    name: str,
    principal: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    pattern: ResourcePatternType = LITERAL,
    resource: ResourceType = ResourceType.TOPIC,
) -> AclBinding:
    binding = AclBinding(resource, name, pattern, principal, "*", operation, permission)
    admin_for(cluster.bootstrap_servers).create_acls([binding])[binding].result(10)
    return binding


def unbind(cluster: LocalKafka, binding: AclBinding) -> None:
    exactly = AclBindingFilter(
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )
    assert admin_for(cluster.bootstrap_servers).delete_acls([exactly])[exactly].result(10)


def grants_on(
    cluster: LocalKafka, name: str, resource: ResourceType = ResourceType.TOPIC
) -> set[Grant]:
    any_value = None
    found = AclBindingFilter(
        resource,
        name,
        LITERAL,
        any_value,  # type: ignore[arg-type]
        any_value,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    bindings = admin_for(cluster.bootstrap_servers).describe_acls(found).result(10)
    return {
        Grant(b.restype.name, b.name, b.principal, b.host, b.operation.name, b.permission_type.name)
        for b in bindings
    }


def reads(cluster: LocalKafka, user: str, password: str, topic: str) -> int | str:
    """Records `user` reads from `topic` (a partition assigned, no group offsets), or the
    error the broker answers."""
    consumer = Consumer(
        {
            **scram_login(cluster, user, password),
            "group.id": unique("reader-"),
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        if metadata.error is not None:
            return str(metadata.error.name())
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        count = 0
        for _ in range(300):
            message = consumer.poll(0.1)
            if message is None:
                continue
            error = message.error()
            if error is None:
                count += 1
            elif error.code() == KafkaError._PARTITION_EOF:
                return count
            elif not error.retriable():
                return str(error.name())
        return f"{count} read, no end in 30 s"
    finally:
        consumer.close()


def reads_in_group(
    cluster: LocalKafka, user: str, password: str, group: str, topic: str, count: int
) -> int | str:
    """Records `user` reads from `topic` as a member of `group`, committing them (READ on the
    group), or the error the broker answers."""
    consumer = Consumer(
        {
            **scram_login(cluster, user, password),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        read = 0
        for _ in range(600):
            message = consumer.poll(0.1)
            if message is None:
                continue
            error = message.error()
            if error is not None and not error.retriable():
                return str(error.name())
            read += error is None
            if read == count:
                consumer.commit(asynchronous=False)
                return read
        return f"{read} read in 60 s"
    except KafkaException as error:
        return str(error.args[0].name())
    finally:
        consumer.close()


def test_topic_acls_follow_the_mirrored_topics_and_only_the_syncs_own_go(
    kafka_b_acl: LocalKafka, start_worker: StartWorker, tmp_path: Path
) -> None:
    cluster = kafka_b_acl
    topic = unique("acl-")
    remote = f"{topic}.A"
    create_topics(cluster.bootstrap_servers, [topic], partitions=1)
    produce(cluster.bootstrap_servers, topic, records(30, partitions=1))
    (alice, alice_pw), (bob, bob_pw) = fresh_scram_user(cluster), fresh_scram_user(cluster)
    eve, eve_pw = fresh_scram_user(cluster)  # no binding anywhere
    # The mirror's own rights (the worker is User:ANONYMOUS over PLAINTEXT), made by hand on
    # both sides: on the target, someone else's binding, which the sync must leave alone.
    bind(cluster, topic, "User:ANONYMOUS", AclOperation.ALL)
    bind(cluster, remote, "User:ANONYMOUS", AclOperation.ALL)
    bind(cluster, remote, "User:dave", AclOperation.READ)
    # The applications' bindings on the source.
    alice_reads = bind(cluster, topic, f"User:{alice}", AclOperation.READ)
    bob_all = bind(cluster, topic[:8], f"User:{bob}", AclOperation.ALL, pattern=PREFIXED)
    bind(cluster, topic, "User:carol", AclOperation.WRITE)
    bind(cluster, topic, "User:mallory", AclOperation.READ, DENY)

    config = worker_config(
        cluster, cluster, [re.escape(topic)], aclSync={"enabled": True, "intervalSeconds": 10}
    )
    first = start_worker(config, "worker-acls")
    expected = {
        Grant("TOPIC", remote, f"User:{alice}", "*", "READ", "ALLOW"),
        Grant("TOPIC", remote, f"User:{bob}", "*", "READ", "ALLOW"),
        Grant("TOPIC", remote, f"User:{bob}", "*", "DESCRIBE", "ALLOW"),
        Grant("TOPIC", remote, "User:mallory", "*", "READ", "DENY"),
        Grant("TOPIC", remote, "User:ANONYMOUS", "*", "READ", "ALLOW"),
        Grant("TOPIC", remote, "User:ANONYMOUS", "*", "DESCRIBE", "ALLOW"),
    }
    by_hand = {
        Grant("TOPIC", remote, "User:ANONYMOUS", "*", "ALL", "ALLOW"),
        Grant("TOPIC", remote, "User:dave", "*", "READ", "ALLOW"),
    }
    wait_for(lambda: grants_on(cluster, remote) == expected | by_hand, 60, "the bindings synced")
    # Nobody but the mirror writes the copy: carol's WRITE did not follow, bob's ALL is READ
    # and DESCRIBE, and his prefixed binding one literal binding on the copy.
    wait_for(lambda: reads(cluster, alice, alice_pw, remote) == 30, 60, "the copies mirrored")
    assert reads(cluster, bob, bob_pw, remote) == 30
    assert reads(cluster, eve, eve_pw, remote) == "TOPIC_AUTHORIZATION_FAILED"

    # A binding deleted on the source goes from the target; someone else's stays.
    unbind(cluster, alice_reads)
    expected.discard(Grant("TOPIC", remote, f"User:{alice}", "*", "READ", "ALLOW"))
    wait_for(lambda: grants_on(cluster, remote) == expected | by_hand, 60, "alice's right gone")
    assert reads(cluster, alice, alice_pw, remote) == "TOPIC_AUTHORIZATION_FAILED"

    # The worker killed: the next one knows what the sync made (recorded in Kafka), so bob's
    # go when his does, and still only those (the mirror's rights and dave's stay).
    first.kill()
    start_worker(config, "worker-acls-again")
    unbind(cluster, bob_all)
    expected -= {g for g in expected if g.principal == f"User:{bob}"}
    wait_for(lambda: grants_on(cluster, remote) == expected | by_hand, 60, "bob's rights gone")


def test_group_acls_follow_the_checkpointed_groups_for_renamed_principals(
    kafka_b_acl: LocalKafka, start_worker: StartWorker
) -> None:
    """A consumer allowed its topic and its group on the source resumes that group on the
    target under its target principal (one cluster is both sides here, so the principal is
    renamed to tell the copy from the source's binding); a group not checkpointed gets none."""
    cluster, group, unlisted = kafka_b_acl, unique("app-"), unique("app-")
    topic = unique("acl-")
    remote = f"{topic}.A"
    create_topics(cluster.bootstrap_servers, [topic], partitions=1)
    produce(cluster.bootstrap_servers, topic, records(30, partitions=1))
    commit_group(cluster, group, topic, {0: 10})  # the application's group, before its ACLs
    (alice, _), (alice_dr, alice_dr_pw) = fresh_scram_user(cluster), fresh_scram_user(cluster)
    for name, resource in ((topic, ResourceType.TOPIC), (remote, ResourceType.TOPIC)):
        bind(cluster, name, "User:ANONYMOUS", AclOperation.ALL, resource=resource)
    bind(cluster, group, "User:ANONYMOUS", AclOperation.ALL, resource=ResourceType.GROUP)
    bind(cluster, topic, f"User:{alice}", AclOperation.READ)
    alice_group = bind(
        cluster, group, f"User:{alice}", AclOperation.READ, resource=ResourceType.GROUP
    )
    bind(cluster, unlisted, f"User:{alice}", AclOperation.READ, resource=ResourceType.GROUP)
    principals = [{"source": f"User:{alice}", "target": f"User:{alice_dr}"}]
    config = worker_config(
        cluster,
        cluster,
        [re.escape(topic)],
        aclSync={"intervalSeconds": 10, "principals": principals},  # on by default
    )
    start_worker(config, "worker-group-acls")
    copy = Grant("GROUP", group, f"User:{alice_dr}", "*", "READ", "ALLOW")
    wait_for(lambda: copy in grants_on(cluster, group, ResourceType.GROUP), 60, "the group's copy")
    wait_for(lambda: grants_on(cluster, remote) != set(), 60, "the topic's copies")
    assert reads_in_group(cluster, alice_dr, alice_dr_pw, group, remote, 30) == 30
    assert not any(
        g.principal == f"User:{alice_dr}" for g in grants_on(cluster, unlisted, ResourceType.GROUP)
    ), "a group the mirror does not checkpoint got a copy"

    # The source's binding deleted: the copy goes, and the group is closed to the principal.
    unbind(cluster, alice_group)
    wait_for(lambda: copy not in grants_on(cluster, group, ResourceType.GROUP), 60, "the copy gone")
    refused = reads_in_group(cluster, alice_dr, alice_dr_pw, group, remote, 30)
    assert refused == "GROUP_AUTHORIZATION_FAILED", refused


def test_a_target_that_refuses_the_syncs_records_is_a_refusal_the_alert_sees(
    kafka_b_acl: LocalKafka, start_worker: StartWorker
) -> None:
    """Without Write on the target's grants topic the sync makes no binding it could not
    record, says so in its metric (which KafkaMirrorAclSyncRefused reads), and mirroring goes
    on; once the right is back, the bindings follow."""
    cluster, topic = kafka_b_acl, unique("acl-")
    remote = f"{topic}.A"
    create_topics(cluster.bootstrap_servers, [topic], partitions=1)
    produce(cluster.bootstrap_servers, topic, records(10, partitions=1))
    alice, _ = fresh_scram_user(cluster)
    for name in (topic, remote):
        bind(cluster, name, "User:ANONYMOUS", AclOperation.ALL)
    bind(cluster, topic, f"User:{alice}", AclOperation.READ)
    refused = bind(cluster, ACL_GRANTS_TOPIC, "User:ANONYMOUS", AclOperation.WRITE, DENY)
    try:
        config = worker_config(
            cluster, cluster, [re.escape(topic)], aclSync={"intervalSeconds": 10}
        )
        worker = start_worker(config, "worker-acls-refused")
        wait_for(
            lambda: worker.metric("kafka_mirror_acl_sync_refused", cluster="target") == 1,
            90,
            "the refusal in the metric",
        )
        assert Grant("TOPIC", remote, f"User:{alice}", "*", "READ", "ALLOW") not in grants_on(
            cluster, remote
        )
        wait_for(
            lambda: worker.metric("kafka_mirror_records_total", topic=topic, partition="0") == 10,
            60,
            "mirroring going on",
        )
    finally:
        unbind(cluster, refused)
    wait_for(
        lambda: (
            Grant("TOPIC", remote, f"User:{alice}", "*", "READ", "ALLOW")
            in grants_on(cluster, remote)
        ),
        60,
        "the bindings once the right is back",
    )
    assert worker.metric("kafka_mirror_acl_sync_refused", cluster="target") == 0
