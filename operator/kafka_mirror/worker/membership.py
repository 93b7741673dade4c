"""Whether the worker's group consumer is still in its group, by the coordinator's account.

librdkafka's consumer (2.16, cooperative-sticky) was seen to lose its partitions at the session
timeout while a source broker restarted and never join the group again: subscribed, assigned
nothing, the worker alive and ready, its mirror silently stopped (2 of 9 runs of the
broker-restart test). The group's description tells that apart from a member with nothing to do
(more members than partitions) and from a join under way (a join rebalances the group): a group
that stays settled without this consumer for several session timeouts has lost it, and the
worker replaces the consumer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition

from kafka_mirror.worker.clients import Clients

# Not rebalancing: a consumer that is joining would have the group rebalance.
SETTLED = (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)
ABSENT_SESSIONS = 3  # session timeouts a settled group goes without the consumer


@dataclass(frozen=True)
class Sighting:
    """The consumer's member id and the group's state and members, read in that order."""

    member_id: str | None
    state: ConsumerGroupState
    members: frozenset[str]

    @property
    def absent(self) -> bool:
        return self.state in SETTLED and self.member_id not in self.members


RebalanceCallback = Callable[[Consumer, list[TopicPartition]], None]


def ignoring_replaced(
    clients: Clients, **callbacks: RebalanceCallback
) -> dict[str, RebalanceCallback]:
    """The group consumer's rebalance callbacks, ignored when a replaced consumer calls them
    (its close does): what it held was given up when it was replaced."""

    def current(callback: RebalanceCallback) -> RebalanceCallback:
        def call(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if consumer is clients.group_consumer:
                callback(consumer, partitions)

        return call

    return {name: current(callback) for name, callback in callbacks.items()}


def sight(clients: Clients, group: str) -> Sighting:
    """Off the loop: the consumer's member id, then the group's description."""
    member_id = clients.group_consumer.memberid()
    state, members = clients.group_coordinator.describe(group)
    return Sighting(member_id, state, frozenset(members))


class MembershipWatch:
    """Sightings in turn; `lost` says when the consumer has been absent from every one of them
    for `patience` seconds."""

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self.absent_since: float | None = None

    def lost(self, absent: bool, now: float) -> bool:
        if not absent:
            self.absent_since = None
            return False
        if self.absent_since is None:
            self.absent_since = now
        if now - self.absent_since < self.patience:
            return False
        self.absent_since = None  # the next consumer has its own patience
        return True
