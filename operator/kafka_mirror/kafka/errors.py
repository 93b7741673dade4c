"""Kafka client errors, as the worker and the operator classify them."""

from __future__ import annotations

from confluent_kafka import KafkaError

# The cluster refused who we are or what we may do: fix credentials or ACLs, retrying won't.
AUTH_ERRORS = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
    }
)
