"""A member of a group handed partitions as it leaves, `rounds` times, in a process of its own:
a consumer hung in its close holds the GIL (librdkafka#4041), which would freeze the test.

    python -m tests.helpers.leaving BOOTSTRAP TOPIC ROUNDS leave|close

Each round two consumers of a new group share TOPIC with the worker's callbacks (a sync
commit at revocation; assign and pause while leaving). The second stops polling and the first
leaves; once the group shows the second alone holding every partition (so the rebalance's
assignment is waiting in its client, unserved), it leaves too: by `leave_group`, or by closing
at once (what the worker did, which hung within a few rounds). Two, not the worker's three: a
member that does not poll cannot rejoin while an assignment waits in its client, so a second
member leaving after the first one's rebalance ended left the group rebalancing for good (busy
run 56). Prints how long each leave took; a round that has not ended after ROUND_SECONDS prints
every thread's stack and ends the process (status 1)."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, ConsumerGroupState, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_mirror.kafka.client import leave_group
from tests.helpers.kafka import group_member

PARTITIONS_SETTLED_SECONDS = 30.0
# A round takes 2 to 3 s; its two waits for the group 30 s at most, each leave 5 s (`leave_group`).
ROUND_SECONDS = 90.0


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.leaving = False
        self.owned: set[tuple[str, int]] = set()
        self.consumer = group_member(bootstrap, group)
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.polling = threading.Event()
        self.polling.set()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while self.polling.is_set():
            self.consumer.poll(0.05)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if self.leaving:
            consumer.pause(partitions)
        else:
            self.owned |= {(tp.topic, tp.partition) for tp in partitions}

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        mine = [TopicPartition(tp.topic, tp.partition, 0) for tp in partitions]
        mine = [tp for tp in mine if (tp.topic, tp.partition) in self.owned]
        if mine:
            # The group may have moved on: as for the worker, the next owner resumes.
            with contextlib.suppress(KafkaException):
                consumer.commit(offsets=mine, asynchronous=False)
        self.owned -= {(tp.topic, tp.partition) for tp in partitions}

    def stop_polling(self) -> None:
        self.polling.clear()
        self.thread.join()
        self.leaving = True

    def leave(self, mode: str) -> float:
        self.stop_polling()
        started = time.monotonic()
        if mode == "leave":
            leave_group(self.consumer)
        else:
            self.consumer.close()
        return time.monotonic() - started


def group_now(admin: AdminClient, group: str) -> tuple[ConsumerGroupState, list[int]]:
    """The group's state and how many partitions each member holds."""
    described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    return described.state, [len(m.assignment.topic_partitions) for m in described.members]


def wait(condition: Callable[[], bool], what: str, seen: Callable[[], object]) -> None:
    """Until `condition`; else say what was `seen` last, and end at once: closing consumers in
    that state can hang (librdkafka#4041), at the interpreter's exit too."""
    deadline = time.monotonic() + PARTITIONS_SETTLED_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            print(
                f"timed out after {PARTITIONS_SETTLED_SECONDS:.0f}s waiting for {what};"
                f" saw {seen()}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)
        time.sleep(0.05)


def one_round(admin: AdminClient, bootstrap: str, topic: str, mode: str) -> float:
    """How long the last member took to leave."""
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    group = f"leaving-{time.time_ns()}"
    first, last = (Member(bootstrap, group, topic) for _ in range(2))
    wait(
        lambda: bool(first.owned and last.owned),
        "each of two members holding partitions",
        lambda: (sorted(first.owned), sorted(last.owned)),
    )
    last.stop_polling()
    first.leave("leave")
    wait(
        lambda: group_now(admin, group) == (ConsumerGroupState.STABLE, [partitions]),
        f"the group stable, its last member alone with all {partitions} partitions",
        lambda: group_now(admin, group),
    )
    return last.leave(mode)


def main(bootstrap: str, topic: str, rounds: int, mode: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for round_ in range(rounds):
        faulthandler.dump_traceback_later(ROUND_SECONDS, exit=True)
        took = one_round(admin, bootstrap, topic, mode)
        faulthandler.cancel_dump_traceback_later()
        print(f"round {round_}: the last member left in {took:.2f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
