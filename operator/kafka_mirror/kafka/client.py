"""The one thin layer between our code and confluent-kafka's clients: one timeout for admin
requests, one error for a cluster that did not answer as asked, the errors that mean "fix the
credentials or the ACLs", one reader of a topic by assignment, and one way for a group
consumer to leave."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

Position = tuple[str, int]  # topic, partition

# One admin request, and the wait for its result.
ADMIN_TIMEOUT = 30.0

# librdkafka's own limit on a request that a group's coordinator answers (a group's offsets,
# description or commit). librdkafka (2.16) aborts the process when such a request reaches its
# limit while the coordinator is still being looked up and the coordinator is found afterwards
# (librdkafka#3663, #4605: the request's bookkeeping is released twice; a new client asking with
# a 1 ms limit aborts at once). So the limit is the longest librdkafka takes, an hour, which no
# wait of ours reaches: callers bound their wait on the answer and drop the client when it fails
# (destroying it with the request pending is safe).
GROUP_REQUEST_LIMIT = 3600.0

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


# How long a transactional producer may take to register with the cluster's coordinator (and
# fence its id's former producer). The exactly-once loop retries a failure, and must go round
# within its liveness watchdog's minute.
TRANSACTIONS_INIT_SECONDS = 20.0


# How long a group consumer leaving its group may serve its revocations before it closes.
LEAVE_SECONDS = 5.0


def leave_group(consumer: Consumer, timeout: float = LEAVE_SECONDS) -> None:
    """Unsubscribe, serve the revocations in `poll`, then close: what a subscribed consumer
    with rebalance callbacks must do instead of closing at once. A rebalance that hands it
    partitions as it closes otherwise leaves a stale revocation behind; the group is gone when
    that is served, and confluent-kafka then asks it for its rebalance protocol and waits
    forever, holding the GIL: the whole process hung (librdkafka#4041, #4884; busy run 45 and
    the CI run of stop 61). Unsubscribing leaves the group alive while the callbacks run. What
    `poll` returns meanwhile is dropped: it was never acknowledged, nor committed."""
    consumer.unsubscribe()
    deadline = time.monotonic() + timeout
    while consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)
    consumer.close()


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


def transactions_refusal(
    settings: dict[str, Any], alias: str, transactional_id: str
) -> ClusterUnavailable | None:
    """Why cluster `alias` cannot take transactions under `transactional_id` (as a condition
    reason and what to do), or None once it registered one: a producer that initialises and
    writes nothing, which is all a refused ACL, a broker too old or a coordinator that is never
    available shows on."""
    producer = Producer({**settings, "transactional.id": transactional_id})
    try:
        producer.init_transactions(TRANSACTIONS_INIT_SECONDS)
    except KafkaException as raised:
        error: KafkaError = raised.args[0]
        # close() raises a fatal error again and keeps the handle; the last reference destroys it.
        del producer
    else:
        producer.close()
        return None
    return transactions_refused(error, alias, transactional_id.rsplit(".", 1)[0])


def transactions_refused(error: KafkaError, alias: str, prefix: str) -> ClusterUnavailable:
    """What a failed registration of a transactional producer means for the user."""
    code = error.code()
    if code in AUTH_ERRORS or code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return ClusterUnavailable(
            "TransactionsNotGranted",
            f"cluster {alias} refuses the mirror's transactions ({error.str()}): exactlyOnce "
            f"needs Write and Describe on the transactional ids prefixed {prefix}. "
            "(docs/reliability.md lists every ACL it needs)",
        )
    if code in (
        KafkaError._UNSUPPORTED_FEATURE,
        KafkaError.UNSUPPORTED_VERSION,
        KafkaError.INVALID_TRANSACTION_TIMEOUT,
    ):
        return ClusterUnavailable(
            "TransactionsUnsupported",
            f"cluster {alias} cannot run the mirror's transactions ({error.str()}): exactlyOnce "
            "needs Kafka 2.5 or later with transaction.max.timeout.ms of at least 60000; "
            "upgrade the cluster or set spec.delivery to atLeastOnce",
        )
    return ClusterUnavailable(
        "TransactionsUnavailable",
        f"cluster {alias} did not register a transactional producer in "
        f"{TRANSACTIONS_INIT_SECONDS:.0f} s ({error.str()}): its transaction coordinator is "
        "not available; a cluster with fewer brokers than transaction.state.log.replication."
        "factor (3 unless set) or transaction.state.log.min.isr never has one",
    )
