"""The identity policy's cycle rule: a record is not mirrored back when it is a copy of a record
of the topic it would be written to (a provenance header names the target and that topic's
ID); a record an application derived from such a copy, its headers copied, is new data and is
mirrored. Then the worker with it: what it skips and what it mirrors, and that a partition
whose batches end in skipped records settles (committed to its end, nothing waiting); and the
topic refresh, which mirrors a topic once the topic IDs the rule needs are known."""

from __future__ import annotations

import logging
import random
import struct
from collections.abc import Callable
from contextlib import suppress
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_mirror.kafka.formats import PROVENANCE_HEADER, Provenance, is_copy_from
from kafka_mirror.topics import TopicPlan
from kafka_mirror.worker.clients import Clients
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror.worker.topic_sync import TopicSync
from tests.helpers.worker_fakes import TOPIC, FakeClients, Source, Target, fake_worker

# Topic IDs: of `t` on A, of `t` on B (the remote topic of A's `t`), of another topic on B.
A_T, B_T, B_U = b"\xa1" * 16, b"\xb1" * 16, b"\xb2" * 16


Raw = tuple[str, bytes]  # a header as a consumer hands it out


def hop(alias: str, topic_id: bytes | None, offset: int = 7) -> Raw:
    """A mirror's provenance header: the record came from offset `offset` of the topic
    `topic_id` on cluster `alias`."""
    return (PROVENANCE_HEADER, Provenance(alias, 0, offset, topic_id).encode())


def test_a_copy_of_the_target_topics_record_is_a_cycle() -> None:
    # B → A mirrored B's `t` into A's `t`; the A → B worker must not send it back to B's `t`.
    assert is_copy_from([("app", b"x"), hop("B", B_T)], "B", B_T)


def test_a_record_derived_from_a_copy_is_new_data() -> None:
    # An application on A read that copy from `t` and wrote an enriched record to `u`, headers
    # copied: A → B writes it to B's `u`, which never held it.
    assert not is_copy_from([hop("B", B_T), ("enriched", b"1")], "B", B_U)
    # The same record written back to A's `t` is taken for a copy (identity naming cannot
    # tell them apart): applications write derived records to topics of their own.
    assert is_copy_from([hop("B", B_T), ("enriched", b"1")], "B", B_T)


def test_every_hop_of_a_ring_is_checked() -> None:
    # A → B → C → A: a record of A's `t` reaches C's `t` with A's hop and B's.
    on_c = [hop("A", A_T), hop("B", B_T)]
    assert is_copy_from(on_c, "A", A_T)  # C → A: back into A's `t`, a cycle
    # Derived on B into `u` from the copy of A's record, then mirrored to C: new data for A.
    derived_on_c = [hop("A", A_T), hop("B", B_U)]
    assert not is_copy_from(derived_on_c, "A", b"\xa2" * 16)


def test_a_header_without_a_topic_id_falls_back_to_the_alias() -> None:
    # Written by a worker from before topic IDs: any record from B counts as a copy.
    assert is_copy_from([hop("B", None)], "B", B_U)
    # A target that gives its topics no ID: the alias alone, whatever the header holds.
    assert is_copy_from([hop("B", B_T)], "B", None)


def test_headers_that_are_not_ours_name_no_cluster() -> None:
    assert not is_copy_from([], "B", B_T)
    assert not is_copy_from([(PROVENANCE_HEADER, b"\x00\x01B")], "B", B_T)  # cut short
    assert not is_copy_from([(PROVENANCE_HEADER, "B")], "B", B_T)  # a string: an app's
    assert not is_copy_from([(PROVENANCE_HEADER, None)], "B", B_T)
    assert not is_copy_from([("src", Provenance("B", 0, 1, B_T).encode())], "B", B_T)


topic_ids = st.none() | st.binary(min_size=16, max_size=16)
hops = st.lists(st.tuples(st.sampled_from("ACD"), topic_ids).map(lambda h: hop(*h)), max_size=4)


@given(before=hops, after=hops, target_id=topic_ids)
def test_a_record_is_a_copy_when_any_hop_names_the_target_topic(
    before: list[Raw], after: list[Raw], target_id: bytes | None
) -> None:
    """Hops from other clusters never make a cycle; one naming the target's topic always does,
    wherever it is among them."""
    assert not is_copy_from(before + after, "B", target_id)
    assert is_copy_from([*before, hop("B", target_id or B_T), *after], "B", target_id)


def decoded_rule(headers: list[Raw], alias: str, topic_id: bytes | None) -> bool:
    """The rule as it reads, on decoded headers (the worker compares bytes)."""
    origins = []
    for name, value in headers:
        with suppress(struct.error, ValueError):  # not ours: names nothing
            if name == PROVENANCE_HEADER:
                origins.append(Provenance.decode(value))
    return any(
        o.alias == alias and (o.topic_id is None or topic_id is None or o.topic_id == topic_id)
        for o in origins
    )


values = (
    st.builds(
        lambda alias, partition, offset, topic_id: Provenance(
            alias, partition, offset, topic_id
        ).encode(),
        st.sampled_from(["B", "BB", "", "é"]),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**63), 2**63 - 1),
        topic_ids,
    )
    | st.binary(max_size=40)
    | st.sampled_from([b"\x00\x01B", b"\x00\x01B" + bytes(12), b"\x00\x01B" + bytes(27)])
)


@given(
    headers=st.lists(st.tuples(st.sampled_from([PROVENANCE_HEADER, "app"]), values), max_size=4),
    target_id=topic_ids,
)
def test_the_byte_comparison_is_the_rule_on_decoded_headers(
    headers: list[Raw], target_id: bytes | None
) -> None:
    assert is_copy_from(headers, "B", target_id) == decoded_rule(headers, "B", target_id)


# --- the worker ---------------------------------------------------------------------------

# What each source record of the worker's test carries, and whether it is a copy (skipped).
KINDS: dict[str, tuple[Callable[[int], list[Raw]], bool]] = {
    "application's": (lambda i: [("app", b"%d" % i)], False),
    "copy of B's t": (lambda i: [("app", b"x"), hop("B", B_T, i)], True),
    "derived": (lambda i: [hop("B", B_U, i), ("enriched", b"1")], False),
    "old copy": (lambda i: [hop("B", None, i)], True),
    "ring": (lambda i: [hop("C", b"\xc1" * 16, i), hop("B", B_T, i)], True),
    "malformed": (lambda i: [(PROVENANCE_HEADER, b"\x00")], False),
}


@settings(max_examples=200)
@given(
    kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=30),
    copies_at_the_end=st.integers(0, 5),
    seed=st.integers(0, 2**32),
)
def test_the_identity_worker_skips_copies_mirrors_the_rest_and_settles(
    kinds: list[str], copies_at_the_end: int, seed: int
) -> None:
    """Whatever the records and however the consumer cuts them into batches, the worker (A → B,
    identity naming) mirrors exactly the records that are not copies of B's `t`, each with our
    header naming A's `t` by its ID, and commits the partition to its end with nothing left
    waiting for an acknowledgement: no lag, no stalled producer to replace."""
    kinds += ["copy of B's t"] * copies_at_the_end
    source = Source()
    source.logs[0] = [True] * len(kinds)
    source.headers = {(0, i): KINDS[kind][0](i) for i, kind in enumerate(kinds)}
    clients = FakeClients(source, Target(), random.Random(seed), capacity=100, remote=TOPIC)
    worker = fake_worker(clients, topicNaming={"policy": "identity"})
    worker.topics.source_ids, worker.topics.remote_ids = {TOPIC: A_T}, {TOPIC: B_T}

    for _ in range(1000):  # rounds of the loop; the consumer hands out 0 to 12 records each
        worker.sender.send(worker._next_batch())
        clients.producer.deliver(100)
        worker._serve_reports(0)
        if clients.consumer.position[0] == len(kinds):
            break
    worker._commit()

    mirrored = {offset for (partition, offset) in clients.producer.sent if partition == 0}
    assert mirrored == {i for i, kind in enumerate(kinds) if not KINDS[kind][1]}
    for (_, offset), headers in clients.producer.sent.items():
        assert headers[:-1] == source.headers[(0, offset)]  # the record's own, unchanged
        assert Provenance.decode(headers[-1][1]) == Provenance("A", 0, offset, A_T)
    assert source.committed[0] == len(kinds)
    assert (
        worker.metrics.registry.get_sample_value(
            "kafka_mirror_lag_records", {"topic": TOPIC, "partition": "0"}
        )
        == 0
    )
    assert all(
        flow.settled() and flow.waiting_since is None for flow in worker.partitions.flows.values()
    )
    assert worker.producer_failure is None
    assert not worker.delivery_watch.stalled(None, now=10**9)


# --- the topic refresh --------------------------------------------------------------------


def test_a_topic_is_mirrored_once_the_ids_it_needs_are_known(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sync = TopicSync(
        cast(Clients, None), WorkerMetrics(), lambda *_: None, ("syncs", "checks"), "ns/m", "A"
    )
    plan = TopicPlan({"t": "t", "u": "u"}, [])
    a_u = b"\xa2" * 16
    # Identity naming needs both: `u`'s remote topic was just created, and the broker asked
    # did not know it yet.
    assert sync._keep_ids(plan, {"t": A_T, "u": a_u}, {"t": B_T}, identity=True) == {"u"}
    assert sync._keep_ids(plan, {"t": A_T, "u": a_u}, {"t": B_T, "u": B_U}, identity=True) == set()
    assert (sync.source_ids, sync.remote_ids) == ({"t": A_T, "u": a_u}, {"t": B_T, "u": B_U})
    # `t` deleted and created again on the source: new flows name the new ID.
    with caplog.at_level(logging.INFO):
        sync._keep_ids(plan, {"t": b"\xa9" * 16, "u": a_u}, {"t": B_T, "u": B_U}, identity=True)
    assert "the source topic t was deleted and created again" in caplog.text
    assert sync.source_ids["t"] == b"\xa9" * 16
    # Other namings need the source's ID alone (the header names it); a cluster that gives
    # its topics no ID has it known as None.
    assert sync._keep_ids(plan, {"t": None}, {}, identity=False) == {"u"}
