"""The bootstrap-host allow-list judged by a real librdkafka client, not by our own parser: for
every entry the policy allows, a client given that entry never connects to a listener on an
address the allow-list does not name (issue 63: `PLAINTEXT://127.0.0.1:19093/x.allowed:9093`
passed a substring glob, and librdkafka connected to 127.0.0.1:19093)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kafka_mirror.api.clusters import KafkaCluster
from kafka_mirror.api.policy import AllowLists, bootstrap_allowed
from tests.helpers.tenant import Listener

OFF_LIST = "127.0.0.5"  # a loopback address no pattern names
ALLOWED = AllowLists(bootstrap_hosts=("127.0.0.1", "localhost", "*.kafka.svc.cluster.local"))


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    found = Listener(OFF_LIST)
    yield found
    found.close()


def connects_off_list(entry: str, listener: Listener) -> bool:
    """Give the entry to a real client and wait until it has tried its (one) broker: the
    `_ALL_BROKERS_DOWN` error (a failed resolve, a refused or reset connection) is the event."""
    before = listener.connections
    down = threading.Event()

    def on_error(error: object) -> None:
        if getattr(error, "name", lambda: "")() == "_ALL_BROKERS_DOWN":
            down.set()

    client = AdminClient({"bootstrap.servers": entry, "error_cb": on_error, "log_level": 0})
    for _ in range(200):  # 10 s at most; each entry takes milliseconds
        client.poll(0.05)
        if down.is_set():
            break
    assert down.is_set(), f"librdkafka never reported {entry!r}'s broker down"
    return listener.connections != before


def the_model_takes(entry: str) -> bool:
    try:
        KafkaCluster.model_validate({"alias": "A", "bootstrapServers": entry})
    except ValidationError:
        return False
    return True


def entries(port: int) -> st.SearchStrategy[str]:
    """Entries built from the pieces attackers and typos use around the off-list address and
    the allowed names: schemes, user-info, paths, queries, spaces, trailing dots, the
    resolvers' other spellings of 127.0.0.5, percent-encodings, IPv6 forms, other ports."""
    hosts = st.sampled_from(
        [
            OFF_LIST,
            "127.5",
            "127.0.5",
            "0x7f.0.0.5",
            "0177.0.0.5",
            "2130706437",
            "127.0.0.05",
            "127.0.0.5.",
            "[::ffff:127.0.0.5]",
            "[::ffff:7f00:5]",
            "%31%32%37.0.0.5",
            "127.0.0.1",
            "localhost",
            "localhost.",
            "b.kafka.svc.cluster.local",
            "b-0.brokers.kafka.svc.cluster.local.",
            "[::1]",
        ]
    )
    # Half the draws leave a side clean, so that allowed entries come up often.
    around = st.just("") | st.sampled_from(
        ["PLAINTEXT://", "SSL://", "sasl_ssl://", "//", "x@", "127.0.0.1@", " ", "\t"]
    )
    after = st.just("") | st.sampled_from(
        [
            "/x.kafka.svc.cluster.local:9093",
            "/",
            "?x.kafka.svc.cluster.local",
            "#.kafka.svc.cluster.local",
            " x.kafka.svc.cluster.local:9093",
            ".x.kafka.svc.cluster.local:9093",
            "@127.0.0.1:9093",
            ":9093",
        ]
    )
    ports = st.sampled_from([str(port), str(port), f"0{port}", f"{port} ", "9093"])
    return st.builds(lambda a, h, p, z: f"{a}{h}:{p}{z}", around, hosts, ports, after)


def test_the_issues_entry_is_refused_by_the_model_and_the_policy(listener: Listener) -> None:
    entry = f"PLAINTEXT://{OFF_LIST}:{listener.port}/x.kafka.svc.cluster.local:9093"
    assert not the_model_takes(entry)
    assert not bootstrap_allowed(entry, ALLOWED)
    assert connects_off_list(entry, listener), "the client no longer reads it as the issue did"


def test_an_entry_on_the_list_is_what_the_client_connects_to(listener: Listener) -> None:
    # The other direction, so the property below cannot pass by the client never connecting.
    entry = f"{OFF_LIST}:{listener.port}"
    assert bootstrap_allowed(entry, AllowLists(bootstrap_hosts=(f"{OFF_LIST}",)))
    assert connects_off_list(entry, listener)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_no_allowed_entry_reaches_an_address_off_the_list(
    listener: Listener, data: st.DataObject
) -> None:
    entry = data.draw(entries(listener.port))
    if not (the_model_takes(entry) and bootstrap_allowed(entry, ALLOWED)):
        return  # refused before any client is made
    assert not connects_off_list(entry, listener), f"{entry!r} was allowed and reached {OFF_LIST}"
