"""The shared status loop's own logic: which statuses it patches, which objects it refreshes,
and which mirrors it forgets (the refreshes themselves are the handlers' and are tested against
the real API server and Kafka in tests/integration/test_status_loop.py)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.api.autoscaling import AutoscalingStatus
from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.controller.reconcile import MIRRORS, SELECTIONS
from kafka_mirror.controller.refresh import StatusLoop, changes, live, merged, status_patch

Raw = dict[str, Any]


def obj(name: str, deleting: bool = False, namespace: str = "ns", uid: str | None = None) -> Raw:
    metadata: Raw = {"namespace": namespace, "name": name, "uid": uid or f"uid-{name}"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata}


def top_level_merged(stored: Raw, patch: Raw) -> Raw:
    """What the API server stores after a merge patch of flat objects."""
    result = {**stored, **patch}
    return {field: value for field, value in result.items() if value is not None}


values = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.lists(st.integers()))
statuses = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), values)
nested = st.recursive(
    values, lambda inner: st.dictionaries(st.sampled_from(["a", "b", "c"]), inner), max_leaves=8
)
nested_statuses = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), nested)


@given(nested_statuses, nested_statuses)
def test_a_status_once_patched_needs_no_patch_again(stored: Raw, patch: Raw) -> None:
    assert not changes(merged(stored, patch), patch)


@given(statuses, statuses)
def test_a_patch_is_skipped_only_when_the_stored_status_stays_the_same(
    stored: Raw, patch: Raw
) -> None:
    stored = {field: value for field, value in stored.items() if value is not None}
    assert merged(stored, patch) == top_level_merged(stored, patch)
    assert changes(stored, patch) == (top_level_merged(stored, patch) != stored)


def test_the_status_patch_removes_fields_that_became_empty_and_leaves_last_audit_alone() -> None:
    patch = status_patch(KafkaMirrorStatus(total_lag=5))
    assert patch["totalLag"] == 5
    assert "operation" in patch and patch["operation"] is None  # null: removed by the merge
    assert "lastAudit" not in patch


def test_a_nested_field_that_became_empty_is_removed_too() -> None:
    """The autoscaler's window memory goes once a scale-down ends it (found on the node: kept,
    it made every later reading end the window again at its highest count)."""
    window = AutoscalingStatus(
        replicas=4, low_since=datetime(2026, 11, 26, tzinfo=UTC), highest_since_low=3
    )
    stored = status_patch(KafkaMirrorStatus(autoscaling=window))
    patch = status_patch(KafkaMirrorStatus(autoscaling=AutoscalingStatus(replicas=3)))
    assert patch["autoscaling"]["lowSince"] is None
    after = merged(merged({}, stored), patch)
    assert after["autoscaling"] == {"replicas": 3, "reason": ""}
    assert changes(merged({}, stored), patch) and not changes(after, patch)


def test_objects_being_deleted_are_not_refreshed() -> None:
    assert live([obj("a"), obj("b", deleting=True)]) == [obj("a")]


class Recorder:
    def __init__(self, listed: dict[str, list[Raw]]) -> None:
        self.listed = listed
        self.mirrors: list[str] = []
        self.selections: list[tuple[str, set[str]]] = []
        self.forgotten: list[tuple[str, str]] = []
        self.ticks = 0
        self.lock = threading.Lock()

    def loop(self) -> StatusLoop:
        return StatusLoop(
            lambda plural: self.listed[plural],
            10.0,
            self.mirror,
            self.selection,
            lambda mirror, uid: self.forgotten.append((mirror, uid)),
            self.refreshed,
            workers=4,
        )

    def refreshed(self) -> None:
        self.ticks += 1

    def mirror(self, raw: Raw) -> None:
        if raw["metadata"]["name"] == "broken":
            raise RuntimeError("a refresh that fails")
        with self.lock:
            self.mirrors.append(raw["metadata"]["name"])

    def selection(self, raw: Raw, mirrors: set[str]) -> None:
        with self.lock:
            self.selections.append((raw["metadata"]["name"], mirrors))


def test_a_tick_refreshes_every_live_mirror_then_every_selection_with_the_mirrors_present() -> None:
    recorder = Recorder(
        {
            MIRRORS: [obj("m1"), obj("broken"), obj("m2"), obj("going", deleting=True)],
            SELECTIONS: [obj("s1"), obj("s2", deleting=True)],
        }
    )
    recorder.loop().tick()
    assert sorted(recorder.mirrors) == ["m1", "m2"]  # one failing does not stop the others
    assert recorder.selections == [("s1", {"ns/m1", "ns/broken", "ns/m2"})]
    assert recorder.forgotten == []
    assert recorder.ticks == 1  # the stale-status alert's timestamp: one failure does not stop it


def test_a_tick_whose_listing_fails_is_not_a_refresh() -> None:
    def unreachable(plural: str) -> list[Raw]:
        raise RuntimeError("the API server did not answer")

    recorder = Recorder({})
    loop = recorder.loop()
    loop.lister = unreachable
    with pytest.raises(RuntimeError):
        loop.tick()
    assert recorder.ticks == 0  # the timestamp stays, and the alert fires in time


def test_a_mirror_no_longer_listed_is_forgotten_once() -> None:
    recorder = Recorder({MIRRORS: [obj("m1"), obj("m2")], SELECTIONS: []})
    loop = recorder.loop()
    loop.tick()
    recorder.listed[MIRRORS] = [obj("m2"), obj("m3")]
    loop.tick()
    recorder.listed[MIRRORS] = [obj("m2", deleting=True), obj("m3")]
    loop.tick()
    loop.tick()
    assert recorder.forgotten == [("ns/m1", "uid-m1"), ("ns/m2", "uid-m2")]


def test_a_mirror_deleted_and_made_again_between_ticks_is_forgotten_by_its_old_uid() -> None:
    """Its children are the old mirror's: cleaned up by that uid, the new one's left alone."""
    recorder = Recorder({MIRRORS: [obj("m1", uid="first")], SELECTIONS: []})
    loop = recorder.loop()
    loop.tick()
    recorder.listed[MIRRORS] = [obj("m1", uid="second")]
    loop.tick()
    loop.tick()
    assert recorder.forgotten == [("ns/m1", "first")]


def test_a_failed_clean_up_is_tried_again_at_the_next_tick() -> None:
    recorder = Recorder({MIRRORS: [obj("m1")], SELECTIONS: []})
    failures = [RuntimeError("the API server did not answer")]

    def gone(mirror: str, uid: str) -> None:
        if failures:
            raise failures.pop()
        recorder.forgotten.append((mirror, uid))

    loop = StatusLoop(
        lambda plural: recorder.listed[plural],
        10.0,
        recorder.mirror,
        recorder.selection,
        gone,
        workers=2,
    )
    loop.tick()
    recorder.listed[MIRRORS] = []
    loop.tick()
    loop.tick()
    loop.tick()
    assert recorder.forgotten == [("ns/m1", "uid-m1")]


def test_the_loop_starts_once_and_stops_with_no_refresh_begun_after() -> None:
    recorder = Recorder({MIRRORS: [obj("m1")], SELECTIONS: []})
    loop = recorder.loop()
    loop.start()
    loop.start()  # every resource handler asks: one loop
    loop.stop(timeout=5)
    refreshed = len(recorder.mirrors)
    assert refreshed <= 1
    loop.tick()  # a tick after the stop refreshes nothing
    assert len(recorder.mirrors) == refreshed
