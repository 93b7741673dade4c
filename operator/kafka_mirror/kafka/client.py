"""The one thin layer between our code and confluent-kafka's clients: one timeout for admin
requests, one error for a cluster that did not answer as asked, the errors that mean "fix the
credentials or the ACLs", and one reader of a topic by assignment."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

# One admin request, and the wait for its result. Generous: librdkafka (2.16) can fail an
# assertion and abort the process when an admin group request times out (librdkafka#4605).
ADMIN_TIMEOUT = 30.0

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


class ClusterUnavailable(KafkaException):
    """A cluster could not be read; `reason` is a condition reason, the message says why. A
    KafkaException, so that who retries on one retries on this too."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def reader(settings: dict[str, Any], group: str, **tuning: Any) -> Consumer:
    """A consumer that reads partitions by assignment: `group` is never joined nor committed
    to, the end-of-partition event says when everything written was read, and a fetch at the
    end of a partition comes back at once (the broker otherwise holds it for 500 ms waiting for
    new records). `tuning` overrides any of these."""
    return Consumer(
        {
            **settings,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
            **tuning,
        }
    )
