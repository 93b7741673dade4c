"""What a target's refusal of an exactly-once mirror's transactional producer tells the user:
the ACL to add, the upgrade to make, or the coordinator to fix. (The refusal by an ACL is
tried on a real cluster in tests/integration/test_exactly_once.py.)"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from kafka_mirror.kafka.client import transactions_refused

PREFIX = "kafka-mirror.team-a.orders"


@pytest.mark.parametrize(
    ("code", "reason", "says"),
    [
        (
            KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "TransactionsNotGranted",
            f"transactional ids prefixed {PREFIX}.",
        ),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "TransactionsNotGranted", "Write and Describe"),
        (KafkaError._UNSUPPORTED_FEATURE, "TransactionsUnsupported", "Kafka 2.5 or later"),
        (KafkaError.UNSUPPORTED_VERSION, "TransactionsUnsupported", "spec.delivery"),
        (KafkaError.INVALID_TRANSACTION_TIMEOUT, "TransactionsUnsupported", "60000"),
        (KafkaError._TIMED_OUT, "TransactionsUnavailable", "transaction.state.log"),
        (KafkaError.COORDINATOR_NOT_AVAILABLE, "TransactionsUnavailable", "coordinator"),
    ],
)
def test_each_refusal_names_what_to_do(code: int, reason: str, says: str) -> None:
    refusal = transactions_refused(KafkaError(code), "B", PREFIX)
    assert refusal.reason == reason
    assert says in str(refusal) and "cluster B" in str(refusal)
