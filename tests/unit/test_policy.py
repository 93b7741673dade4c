"""The installer's allow-lists (kafka_mirror.api.policy) and the operator's gate on them
(kafka_mirror.controller.gate): worker images, Spark masters and bootstrap hosts, with safe
defaults, and messages that name the field, the value and the flag and chart value."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.policy import (
    AllowLists,
    bootstrap_allowed,
    image_allowed,
    master_allowed,
    not_allowed,
)
from kafka_mirror.controller.gate import INVALID_SPEC, NOT_ALLOWED, SpecUnusable, parse_spec

OWN = "ghcr.io/kafka-mirror/kafka-mirror-operator:0.1.0"
OWN_AUDIT = "ghcr.io/kafka-mirror/kafka-mirror-operator-audit:0.1.0"
OWN_IMAGES = (OWN, OWN_AUDIT)  # what the operator renders when a spec names none
DEFAULTS = AllowLists()
PLATFORM = AllowLists(
    worker_images=("registry.example.com/platform/*",),
    spark_masters=("spark://spark-master.spark.svc:7077",),
    bootstrap_hosts=("kafka-*.kafka.svc.cluster.local", "broker.example.com:9093"),
)


def spec(**overrides: Any) -> dict[str, Any]:
    return {
        "source": {"alias": "A", "bootstrapServers": "kafka-a.kafka.svc.cluster.local:9092"},
        "target": {"alias": "B", "bootstrapServers": "kafka-b.kafka.svc.cluster.local:9092"},
        **overrides,
    }


def refused(doc: dict[str, Any], allowed: AllowLists = DEFAULTS) -> list[str]:
    return [
        r.message for r in not_allowed(KafkaMirrorSpec.model_validate(doc), allowed, OWN_IMAGES)
    ]


# --- images ---------------------------------------------------------------------------------


def test_by_default_only_the_operators_own_image_runs() -> None:
    assert image_allowed(OWN, DEFAULTS, OWN_IMAGES)
    for image in (
        "evil.example/steal:1",
        "ghcr.io/kafka-mirror/kafka-mirror-operator:latest",
        OWN + "-rc1",
        "ghcr.io/kafka-mirror/kafka-mirror-operator@sha256:" + "0" * 64,
    ):
        assert not image_allowed(image, DEFAULTS, OWN_IMAGES), image


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("registry.example.com/platform/kafka-mirror-operator:0.2.0", True),
        ("registry.example.com/platform/team/x@sha256:abc", True),
        ("registry.example.com.evil.io/platform/x:1", False),
        ("evil.io/registry.example.com/platform/x:1", False),
        ("registry.example.com/other/x:1", False),
        ("REGISTRY.EXAMPLE.COM/platform/x:1", False),
    ],
)
def test_image_patterns_match_the_whole_reference(image: str, allowed: bool) -> None:
    assert image_allowed(image, PLATFORM, OWN_IMAGES) is allowed


def test_pattern_characters_other_than_the_star_match_only_themselves() -> None:
    lists = AllowLists(worker_images=("r.io/a[1]?:*",))
    assert image_allowed("r.io/a[1]?:v", lists, OWN_IMAGES)
    assert not image_allowed("r.io/a1x:v", lists, OWN_IMAGES)
    assert not image_allowed("rxio/a[1]?:v", lists, OWN_IMAGES)


def test_an_image_off_the_list_is_named_with_the_flag_and_chart_value() -> None:
    (message,) = refused(spec(worker={"image": "evil.example/steal:1"}))
    assert message.startswith("spec.worker.image 'evil.example/steal:1' is not allowed")
    assert OWN in message
    assert "--allowed-worker-image" in message and "allowed.workerImages" in message
    assert refused(spec()) == [] and refused(spec(worker={"image": OWN})) == []


def test_the_audit_image_is_bounded_by_the_same_list() -> None:
    (message,) = refused(spec(audit={"image": "evil.example/steal:1"}))
    assert message.startswith("spec.audit.image 'evil.example/steal:1' is not allowed")
    assert OWN_AUDIT in message and "--allowed-worker-image" in message
    assert refused(spec(audit={"image": OWN_AUDIT})) == []


# --- Spark masters --------------------------------------------------------------------------


@pytest.mark.parametrize("master", ["local", "local[1]", "local[4]", "local[*]", "local[1024]"])
def test_local_mode_is_always_allowed(master: str) -> None:
    assert master_allowed(master, DEFAULTS)


@pytest.mark.parametrize(
    "master",
    [
        "spark://attacker:7077",
        "k8s://https://kubernetes.default.svc",
        "yarn",
        "local[0]",
        "local[99999]",
        "local[*] ",
        "local[2,3]",
        "localhost:7077",
        "local[*],spark://attacker:7077",
    ],
)
def test_any_other_master_needs_to_be_listed(master: str) -> None:
    assert not master_allowed(master, DEFAULTS)


def test_listed_masters_are_allowed_exactly() -> None:
    assert master_allowed("spark://spark-master.spark.svc:7077", PLATFORM)
    assert not master_allowed("spark://spark-master.spark.svc:7078", PLATFORM)
    (message,) = refused(spec(audit={"spark": {"master": "spark://attacker:7077"}}), PLATFORM)
    assert "spec.audit.spark.master 'spark://attacker:7077' is not allowed" in message
    assert "spark://spark-master.spark.svc:7077" in message
    assert "--allowed-spark-master" in message and "allowed.sparkMasters" in message


# --- bootstrap hosts ------------------------------------------------------------------------


def test_without_a_host_list_any_host_may_be_named() -> None:
    assert bootstrap_allowed("anything.example:9092", DEFAULTS)


@pytest.mark.parametrize(
    ("entry", "allowed"),
    [
        ("kafka-a.kafka.svc.cluster.local:9092", True),
        ("KAFKA-A.Kafka.svc.cluster.local:9092", True),
        ("broker.example.com:9093", True),
        ("broker.example.com:9092", False),
        ("kafka-a.kafka.svc.cluster.local.evil.io:9092", False),
        ("attacker.example:9092", False),
        ("10.0.0.1:9092", False),
    ],
)
def test_hosts_match_by_name_or_by_host_and_port(entry: str, allowed: bool) -> None:
    assert bootstrap_allowed(entry, PLATFORM) is allowed


@pytest.mark.parametrize(
    "entry",
    [
        "PLAINTEXT://127.0.0.1:19093/x.kafka.svc.cluster.local:9093",  # the issue's
        "127.0.0.1:19093/kafka-a.kafka.svc.cluster.local:9092",
        "user@kafka-a.kafka.svc.cluster.local:9092",
        "kafka-a.kafka.svc.cluster.local:9092 ",
        "127.1:9092",  # resolvers read it as 127.0.0.1
        "010.0.0.1:9092",  # and this as 8.0.0.1
        "0x7f.0.0.1:9092",
        "2130706433:9092",
        "[fe80::1%eth0]:9092",
        "[::1::2]:9092",
        "kafka-a:0",
        "kafka-a:65536",
        "kafka-a:09092",
        "-kafka:9092",
        "a" * 254 + ":9092",
    ],
)
def test_an_entry_outside_the_grammar_is_refused_by_the_model(entry: str) -> None:
    with pytest.raises(ValidationError, match="bootstrapServers"):
        KafkaMirrorSpec.model_validate(spec(source={"alias": "A", "bootstrapServers": entry}))


@pytest.mark.parametrize(
    ("pattern", "entry", "allowed"),
    [
        ("*.kafka.svc.cluster.local", "b.kafka.svc.cluster.local:9092", True),
        ("*.kafka.svc.cluster.local", "b-0.brokers.kafka.svc.cluster.local:9092", True),
        ("*.kafka.svc.cluster.local", "kafka.svc.cluster.local:9092", False),
        ("*.kafka.svc.cluster.local", "b.kafka.svc.cluster.local.evil.io:9092", False),
        ("kafka-*.kafka.svc.cluster.local", "kafka-a.kafka.svc.cluster.local.:9092", True),
        ("kafka-*.kafka.svc.cluster.local", "kafka-a.x.kafka.svc.cluster.local:9092", False),
        ("10.1.0.0/16", "10.1.200.3:9092", True),
        ("10.1.0.0/16", "10.2.0.3:9092", False),
        ("127.0.0.1", "127.0.0.1:9092", True),
        ("127.0.0.1", "[::ffff:127.0.0.1]:9092", True),
        ("[::1]:9092", "[0:0::1]:9092", True),
        ("fd00::/8", "[fd12::7]:9092", True),
        ("fd00::/8", "fd00.example:9092", False),
        # The clients reach an IPv4-mapped address over IPv4: an IPv6 network never covers it.
        ("::/0", "[::ffff:127.0.0.5]:9092", False),
        ("127.0.0.5", "[::ffff:127.0.0.5]:9092", True),
    ],
)
def test_a_pattern_matches_the_host_the_clients_connect_to(
    pattern: str, entry: str, allowed: bool
) -> None:
    assert bootstrap_allowed(entry, AllowLists(bootstrap_hosts=(pattern,))) is allowed


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("10.0.*.*", "networks"),
        ("kafka:x", "port"),
        ("[::1]x", "`]`"),
        ("ka/fka", "IPv4 or IPv6 network"),
        ("ka fka", "labels"),
        ("10.1.2.3/8", "host bits set"),
    ],
)
def test_an_unusable_pattern_stops_the_operator_at_start(pattern: str, why: str) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"pattern {pattern!r} cannot be used") + ".*" + re.escape(why)
    ):
        AllowLists(bootstrap_hosts=(pattern,))


def test_every_entry_of_both_clusters_is_checked() -> None:
    doc = spec(
        source={
            "alias": "A",
            "bootstrapServers": "kafka-a.kafka.svc.cluster.local:9092,attacker.example:9092",
        },
        target={"alias": "B", "bootstrapServers": "[::1]:9092"},
    )
    messages = refused(doc, PLATFORM)
    assert [m.split(" is not")[0] for m in messages] == [
        "spec.source.bootstrapServers 'attacker.example:9092'",
        "spec.target.bootstrapServers '[::1]:9092'",
    ]
    assert all("--allowed-bootstrap-host" in m and "allowed.bootstrapHosts" in m for m in messages)


def test_every_value_off_the_lists_is_reported_at_once() -> None:
    doc = spec(
        worker={"image": "evil.example/steal:1"},
        audit={"spark": {"master": "spark://attacker:7077"}},
        source={"alias": "A", "bootstrapServers": "attacker.example:9092"},
    )
    fields = [m.split(" ")[0] for m in refused(doc, PLATFORM)]
    assert fields == [
        "spec.worker.image",
        "spec.audit.spark.master",
        "spec.source.bootstrapServers",
    ]


# --- the gate -------------------------------------------------------------------------------


def test_the_gate_tells_an_invalid_spec_from_one_not_allowed() -> None:
    assert parse_spec(spec(), DEFAULTS, OWN_IMAGES).source.bootstrap_servers
    with pytest.raises(SpecUnusable) as invalid:
        parse_spec({"source": {}}, DEFAULTS, OWN_IMAGES)
    assert invalid.value.problem.reason == INVALID_SPEC
    assert invalid.value.problem.message == (
        "the spec cannot be used, fix it: spec.source.alias: Field required; "
        "spec.source.bootstrapServers: Field required; spec.target: Field required"
    )
    with pytest.raises(SpecUnusable) as invalid:
        parse_spec(spec(replicas=-1, topics=["("]), DEFAULTS, OWN_IMAGES)
    assert "https://" not in invalid.value.problem.message
    assert "spec.replicas: Input should be greater than or equal to 0" in (
        invalid.value.problem.message
    )
    with pytest.raises(SpecUnusable) as disallowed:
        parse_spec(spec(worker={"image": "evil.example/steal:1"}), DEFAULTS, OWN_IMAGES)
    assert disallowed.value.problem.reason == NOT_ALLOWED
    assert (
        "spec.worker.image 'evil.example/steal:1' is not allowed"
        in disallowed.value.problem.message
    )


# --- PLAIN, pod placement -------------------------------------------------------------------

LOGIN = {"usernameSecret": {"name": "s", "key": "u"}, "passwordSecret": {"name": "s", "key": "p"}}


def cluster(alias: str, mechanism: str, tls: bool) -> dict[str, Any]:
    return {
        "alias": alias,
        "bootstrapServers": f"kafka-{alias.lower()}.kafka.svc.cluster.local:9093",
        "sasl": {"mechanism": mechanism, **LOGIN},
        "tls": {"enabled": tls},
    }


@pytest.mark.parametrize(
    ("mechanism", "tls", "allowed"),
    [
        ("PLAIN", False, False),  # the password as it is, on the wire
        ("PLAIN", True, True),
        ("SCRAM-SHA-512", False, True),
        ("SCRAM-SHA-256", True, True),
    ],
)
def test_plain_is_allowed_only_over_tls(mechanism: str, tls: bool, allowed: bool) -> None:
    doc = spec(source=cluster("A", mechanism, tls))
    messages = refused(doc)
    assert messages == (
        []
        if allowed
        else [
            "spec.source.sasl.mechanism 'PLAIN' is not allowed (allowed: PLAIN with "
            "spec.source.tls.enabled, SCRAM-SHA-256, SCRAM-SHA-512): change "
            "spec.source.sasl.mechanism, or have the operator's installer allow it with "
            "--allow-plain-without-tls (chart value allowed.plainWithoutTls)"
        ]
    )
    assert refused(doc, AllowLists(plain_without_tls=True)) == []


PLACEMENT = {
    "annotations": {"sidecar.istio.io/inject": "false", "prometheus.io/scrape": "true"},
    "tolerations": [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
        {"operator": "Exists"},
    ],
    "nodeSelector": {"pool": "kafka"},
}


def test_pod_annotations_tolerations_and_node_selectors_need_the_installers_word() -> None:
    values = [m.split(" is not")[0] for m in refused(spec(worker=PLACEMENT))]
    assert values == [
        "spec.worker.annotations 'prometheus.io/scrape'",
        "spec.worker.annotations 'sidecar.istio.io/inject'",
        "spec.worker.tolerations 'node-role.kubernetes.io/control-plane'",
        "spec.worker.tolerations ''",  # no key: tolerates every taint
        "spec.worker.nodeSelector 'pool=kafka'",
    ]
    platform = AllowLists(
        pod_annotations=("prometheus.io/*",),
        toleration_keys=("dedicated",),
        node_selectors=("pool=*",),
    )
    messages = refused(spec(worker=PLACEMENT), platform)
    assert [m.split(" is not")[0] for m in messages] == [
        "spec.worker.annotations 'sidecar.istio.io/inject'",
        "spec.worker.tolerations 'node-role.kubernetes.io/control-plane'",
        "spec.worker.tolerations ''",
    ]
    assert "--allowed-toleration-key (chart value allowed.tolerationKeys)" in messages[1]
    assert (
        refused(
            spec(worker=PLACEMENT),
            AllowLists(pod_annotations=("*",), toleration_keys=("*",), node_selectors=("*",)),
        )
        == []
    )


def test_schema_registry_urls_are_bounded_by_the_host_list() -> None:
    """The registries' credentials go where their URLs point: the host (and the scheme's port
    when none is written) must be on the installer's list as a bootstrap host must."""
    doc = spec(
        schemaRegistry={
            "source": {"url": "http://kafka-a.kafka.svc.cluster.local:8081/apis/ccompat/v7"},
            "target": {"url": "https://attacker.example/steal"},
        }
    )
    assert refused(doc) == []  # no list: any host
    messages = refused(doc, PLATFORM)
    assert [m.split(" is not")[0] for m in messages] == [
        "spec.schemaRegistry.target.url 'https://attacker.example/steal'"
    ]
    listed = AllowLists(bootstrap_hosts=("*.kafka.svc.cluster.local", "attacker.example:443"))
    assert refused(doc, listed) == []


@pytest.mark.parametrize(
    "url",
    [
        "http://user:password@registry:8081",  # credentials come from Secrets
        "ftp://registry:8081",
        "http://registry:99999",
        "http://registry:8081/?q=1",
        "http://",
    ],
)
def test_a_registry_url_outside_the_grammar_is_refused(url: str) -> None:
    with pytest.raises(ValidationError):
        KafkaMirrorSpec.model_validate(
            spec(schemaRegistry={"source": {"url": url}, "target": {"url": "http://b:8081"}})
        )


def test_a_registrys_credentials_go_only_over_https() -> None:
    password = {"name": "registry", "key": "password"}
    doc = spec(
        schemaRegistry={
            "source": {
                "url": "http://registry-a:8081",
                "username": "m",
                "passwordSecret": password,
            },
            "target": {"url": "https://registry-b:8081", "passwordSecret": password},
        }
    )
    messages = refused(doc)
    assert len(messages) == 1 and messages[0].startswith(
        "spec.schemaRegistry.source.url 'http://registry-a:8081' is not allowed"
    )
    assert "--allow-plain-without-tls" in messages[0]
    assert refused(doc, AllowLists(plain_without_tls=True)) == []


# --- ACL grants the spec steers ---------------------------------------------------------------


def test_renamed_principals_and_moved_rights_need_the_installers_consent() -> None:
    """The attack review's: a tenant renaming `User:app` to `User:mallory` gave mallory what
    app had on the target, and moved rights land on the target's local topics, which may be
    another team's on a shared cluster."""
    renamed = {"principals": [{"source": "User:app", "target": "User:mallory"}]}
    messages = refused(spec(aclSync={**renamed, "moveApplications": True}))
    assert [m.split(" ")[0] for m in messages] == [
        "spec.aclSync.principals",
        "spec.aclSync.moveApplications",
    ]
    assert all("--allow-spec-acl-grants" in m and "allowed.specAclGrants" in m for m in messages)
    consenting = AllowLists(spec_acl_grants=True)
    assert refused(spec(aclSync={**renamed, "moveApplications": True}), consenting) == []
    assert refused(spec(aclSync={"enabled": True})) == []


def test_a_wildcard_principal_is_never_renamed() -> None:
    with pytest.raises(ValidationError, match="principals"):
        KafkaMirrorSpec.model_validate(
            spec(aclSync={"principals": [{"source": "User:*", "target": "User:x"}]})
        )
