"""Which target topics a mirror may write into under identity naming (worker/topic_owners.py),
with its records kept in memory instead of in Kafka."""

from __future__ import annotations

from typing import cast

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.worker.clients import Clients
from kafka_mirror.worker.topic_owners import TopicOwners

OURS, THEIRS = b"\x01" * 16, b"\x02" * 16


class InMemory(TopicOwners):
    """The records topic as a dict; `written` counts what was written to it."""

    def __init__(self, stored: dict[str, str] | None = None) -> None:
        super().__init__(cast(Clients, None), "ns/m", "A")
        self.stored = stored if stored is not None else {}
        self.written: list[dict[str, str]] = []
        self.reads = 0

    def _read(self) -> None:
        self._owned = {t: v for t, v in self.stored.items() if v != "-"}
        self.reads += 1

    def _record(self, topics: dict[str, str]) -> None:
        changed = {t: v for t, v in topics.items() if self._owned.get(t, "-") != v}
        if changed:
            self.written.append(changed)
            self.stored.update(changed)
            self._read()


def config(adopt: list[str] | None = None) -> WorkerConfig:
    return WorkerConfig.model_validate(
        {
            "mirror": "ns/m",
            "source": {"alias": "A", "bootstrapServers": "a:9092"},
            "target": {"alias": "B", "bootstrapServers": "b:9092"},
            "topicNaming": {"policy": "identity", "adopt": adopt or []},
        }
    )


def test_a_topic_it_did_not_create_is_foreign_unless_adopted_now() -> None:
    owners = InMemory()
    assert owners.foreign(config(), {"t"}, {"t": THEIRS}) == {"t"}
    assert owners.foreign(config(["t"]), {"t"}, {"t": THEIRS}) == set()
    assert owners.foreign(config(), {"t"}, {"t": THEIRS}) == {"t"}  # the adoption removed: ended
    assert owners.written == []  # an adoption is never recorded


def test_a_topic_it_created_is_its_own_by_id_across_restarts() -> None:
    owners = InMemory()
    owners.creating(["t"])
    assert owners.foreign(config(), {"t"}, {"t": OURS}) == set()
    assert owners.stored == {"t": OURS.hex()}  # the ID recorded once known
    restarted = InMemory(dict(owners.stored))
    assert restarted.foreign(config(), {"t"}, {"t": OURS}) == set()
    # Deleted and created again by someone else: a new ID, not the mirror's any more.
    assert restarted.foreign(config(), {"t"}, {"t": THEIRS}) == {"t"}


def test_a_creation_that_failed_leaves_the_name_to_whoever_creates_it() -> None:
    owners = InMemory()
    owners.creating(["t"])
    owners.not_created({"t"})
    assert InMemory(dict(owners.stored)).foreign(config(), {"t"}, {"t": THEIRS}) == {"t"}


def test_a_topic_whose_id_was_not_read_is_not_known_to_be_its_own() -> None:
    owners = InMemory()
    owners.creating(["t"])
    assert owners.foreign(config(), {"t"}, {}) == {"t"}
    assert owners.foreign(config(["t"]), {"t"}, {}) == set()  # adopted: by name


def test_the_records_are_read_again_only_when_the_unknown_topics_change() -> None:
    owners = InMemory()
    for _ in range(3):
        owners.foreign(config(), {"t"}, {"t": THEIRS})
    assert owners.reads == 1
    owners.foreign(config(), {"t", "u"}, {"t": THEIRS, "u": THEIRS})
    assert owners.reads == 2
