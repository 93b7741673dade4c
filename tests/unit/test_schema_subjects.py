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


def test_only_subjects_of_mirrored_wire_topics_or_listed_ones_are_copied() -> None:
    schemas = sync(topics=["pay.*"], subjects=[r"shop\..*"])
    assert schemas._synced("payments-value", MIRRORED)
    assert not schemas._synced("orders-value", MIRRORED)  # not a wire-format topic
    assert not schemas._synced("payments-key", MIRRORED)  # keys not in the format
    assert not schemas._synced("secret-value", MIRRORED)  # not mirrored
    assert schemas._synced("shop.Payment", MIRRORED)
    assert schemas.translates("orders") == (None, None)
    values, keys = schemas.translates("payments")
    assert values is schemas.ids and keys is None


def test_a_waiting_id_is_asked_for_until_copied_and_a_refused_one_when_retried() -> None:
    schemas = sync()
    assert "waiting for schema id 7" in schemas.want(7)
    schemas.want(8)
    assert schemas.pending == {7, 8}
    ready = schemas.apply(SchemaRound(copied={7: 21}, refused={8: "not listed"}))
    assert ready == {7} and schemas.ids == {7: 21}
    assert schemas.pending == frozenset()  # 8 is asked for again when its record is retried
    assert schemas.want(8) == "not listed" and schemas.pending == {8}
    assert schemas.apply(SchemaRound(copied={8: 22})) == {8}
    assert schemas.refused == {} and schemas.ids == {7: 21, 8: 22}
