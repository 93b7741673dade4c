"""Which registry subjects the workers copy and what they are called on the target
(kafka_mirror.kafka.schemas), and how records wait for their schemas there."""

from __future__ import annotations

from typing import Any

from kafka_mirror.api.worker_config import RegistryFromEnv, SchemaRegistryConnection
from kafka_mirror.kafka.schemas import SchemaRound, SchemaSync, target_subject, topic_of

MIRRORED = {"payments": "payments.A", "orders": "orders.A"}


def sync(**settings: Any) -> SchemaSync:
    config = SchemaRegistryConnection(
        source=RegistryFromEnv(url="http://a:8081"),
        target=RegistryFromEnv(url="http://b:8081"),
        **settings,
    )
    return SchemaSync(config, {}, clients=lambda _settings: object())  # type: ignore[arg-type,return-value]


def test_topic_subjects_follow_their_topics_names() -> None:
    assert target_subject("payments-value", MIRRORED, keys=False) == "payments.A-value"
    assert target_subject("payments-key", MIRRORED, keys=False) == "payments-key"
    assert target_subject("payments-key", MIRRORED, keys=True) == "payments.A-key"
    # A record-name subject, or a topic not mirrored, keeps its name.
    assert target_subject("shop.Payment", MIRRORED, keys=True) == "shop.Payment"
    assert target_subject("secret-value", MIRRORED, keys=True) == "secret-value"
    assert topic_of("a-key-value", keys=True) == "a-key"


def test_a_record_finds_its_schema_only_under_its_own_topics_subjects_or_listed_ones() -> None:
    """A binary value of `orders` that starts with a zero byte and 4 bytes naming a schema of
    `payments` never takes that schema: ids are per topic."""
    schemas = sync(topics=["pay.*", "orders"], subjects=[r"shop\..*"])
    rank = schemas._candidates("payments")
    assert [
        rank(s) for s in ("payments-value", "shop.Payment", "orders-value", "payments-key")
    ] == [
        0,
        1,
        None,
        None,  # keys are not in the format
    ]
    assert schemas._synced("payments-value", MIRRORED)  # references may name it
    assert not schemas._synced("secret-value", MIRRORED)  # not mirrored
    payments, keys = schemas.translates("payments")
    orders, _ = schemas.translates("orders")
    assert payments is not orders and keys is None
    assert schemas.translates("other") == (None, None)
    # MirrorMaker 2's heartbeats start with a zero byte too: never read as the wire format.
    everything = sync()
    assert everything.translates("heartbeats") == (None, None)
    for name in ("A.heartbeats", "heartbeats.B.C", "heartbeats-A_B", "C_heartbeats"):
        assert everything.translates(name) == (None, None), name
    assert everything.translates("heartbeatsx") != (None, None)


def test_a_record_of_a_topic_no_longer_mirrored_gets_no_copy_of_its_schema() -> None:
    """Its subject would reach the target under its own name (maybe the target's own)."""
    schemas = sync()
    schemas.want("gone", 3)
    found = schemas.gather(MIRRORED)  # no registry call: the topic left the plan
    assert found.refused == {("gone", 3): "gone is no longer mirrored"} and not found.copied


def test_a_waiting_id_is_asked_for_until_copied_and_a_refused_one_when_retried() -> None:
    schemas = sync()
    assert schemas.want("t", 7).startswith("waits for schema id 7 (pending): ")
    schemas.want("t", 8)
    assert schemas.pending == {("t", 7), ("t", 8)}
    ready = schemas.apply(SchemaRound(copied={("t", 7): 21}, refused={("t", 8): "not listed"}))
    assert ready == {("t", 7)} and schemas.ids == {"t": {7: 21}}
    assert schemas.pending == frozenset()  # 8 is asked for again when its record is retried
    assert schemas.wait_reason("t", 8) == "waits for schema id 8 (refused): not listed"
    assert schemas.want("t", 8) == schemas.wait_reason("t", 8)
    assert schemas.pending == {("t", 8)}
    assert schemas.apply(SchemaRound(copied={("t", 8): 22})) == {("t", 8)}
    assert schemas.refused == {} and schemas.ids == {"t": {7: 21, 8: 22}}


def test_a_wait_says_the_registry_is_unreachable_until_a_round_reaches_it() -> None:
    schemas = sync()
    schemas.want("t", 7)
    schemas.apply(SchemaRound(unavailable="the target registry does not answer: refused"))
    assert schemas.wait_reason("t", 7) == (
        "waits for schema id 7 (unreachable): the target registry does not answer: refused"
    )
    schemas.apply(SchemaRound())
    assert schemas.wait_reason("t", 7).startswith("waits for schema id 7 (pending)")
