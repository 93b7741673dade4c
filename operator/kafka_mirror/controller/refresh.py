"""One status loop for every mirror and selection the operator serves.

Each interval it lists the mirrors and the selections (one request each per namespace served),
refreshes every status on a bounded pool of threads (the Kafka reads of concurrent refreshes
are batched per cluster connection, `kafka.batching`), and patches only the statuses that
changed. It replaced a kopf timer per object: 2,000 timers at 1,000 mirrors cost more CPU in
kopf's per-object machinery than the refreshes themselves, and kopf gives every object with a
timer a finalizer, which holds a namespace's deletion forever once the operator is gone.

Listing each interval (rather than reading kopf's watch data) gives every refresh the status as
stored, so an operation's progress is never computed from a status older than its last patch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import DynamicApiError
from pydantic import BaseModel

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.controller.reconcile import MIRRORS, SELECTIONS
from kafka_mirror.controller.status import Event
from kafka_mirror.kube import MERGE_PATCH, create

logger = logging.getLogger(__name__)

Raw = dict[str, Any]
RefreshMirror = Callable[[Raw], None]
RefreshSelection = Callable[[Raw, set[str]], None]


def status_patch(model: BaseModel, owned_elsewhere: Iterable[str] = ("last_audit",)) -> Raw:
    """The status as a JSON merge patch (RFC 7386). Fields that became None go as null, which
    removes them, in nested objects too (a merge patch keeps a nested key it does not name: the
    autoscaler's memory of a scale-down window outlived the window); lists are replaced whole,
    so nulls nested in them would be pruned by the server. The audit job owns lastAudit: the
    operator never writes it."""
    skipped = set(owned_elsewhere)
    data: Raw = model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=skipped)
    return _with_nulls(model, data, skipped)


def _with_nulls(model: BaseModel, data: Raw, skipped: set[str]) -> Raw:
    for name, field in type(model).model_fields.items():
        if name in skipped:
            continue
        key, value = field.alias or name, getattr(model, name)
        if isinstance(value, BaseModel) and isinstance(data.get(key), dict):
            _with_nulls(value, data[key], set())
        else:
            data.setdefault(key, None)
    return data


def merged(stored: Any, patch: Any) -> Any:
    """What the API server stores after a JSON merge patch (RFC 7386)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(stored) if isinstance(stored, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result


def changes(stored: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> bool:
    """Whether the merge patch would change the stored status."""
    stored = dict(stored or {})
    return bool(merged(stored, patch) != stored)


def key_of(raw: Mapping[str, Any]) -> str:
    return f"{raw['metadata']['namespace']}/{raw['metadata']['name']}"


def live(raws: Iterable[Raw]) -> list[Raw]:
    """The objects not being deleted: one being deleted no longer counts."""
    return [raw for raw in raws if not raw["metadata"].get("deletionTimestamp")]


def patch_status(api: client.ApiClient, plural: str, raw: Mapping[str, Any], patch: Raw) -> None:
    metadata = raw["metadata"]
    try:
        # The object the server returns is left unread: parsing it into the client's models
        # cost every tick CPU for an answer nothing uses.
        response: Any = client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            metadata["namespace"],
            plural,
            metadata["name"],
            {"status": patch},
            _content_type=MERGE_PATCH,
            _preload_content=False,
        )
        response.drain_conn()
    except ApiException as error:
        if error.status != 404:  # deleted since the list: nothing to report on
            raise


def post_event(api: client.ApiClient, raw: Mapping[str, Any], event: Event) -> None:
    """An event on the object, as kopf posts them (kopf's own poster serves its handlers only)."""
    metadata = raw["metadata"]
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "kafka-mirror-", "namespace": metadata["namespace"]},
        "involvedObject": {
            "apiVersion": raw["apiVersion"],
            "kind": raw["kind"],
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata.get("uid"),
        },
        "type": event.type,
        "reason": event.reason,
        "message": event.message[:1024],
        "source": {"component": "kafka-mirror-operator"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        create(api, body)
    except DynamicApiError as error:  # a notice: its loss must not hold the status back
        logger.warning(
            "event %s on %s not posted: %s", event.reason, metadata["name"], error.reason
        )


class StatusLoop:
    """Refreshes every served mirror's, then every selection's, status each `interval` seconds
    (a selection's status reports the source topics its mirror's refresh read), and tells
    `gone` the mirrors no longer listed (or being deleted, or made again: another uid), with
    the uid of the one that went; `refreshed` hears of each tick that listed them all."""

    def __init__(
        self,
        lister: Callable[[str], list[Raw]],
        interval: float,
        refresh_mirror: RefreshMirror,
        refresh_selection: RefreshSelection,
        gone: Callable[[str, str], None],
        refreshed: Callable[[], None] = lambda: None,
        workers: int = 16,
    ) -> None:
        self.lister, self.interval = lister, interval
        self.refresh_mirror, self.refresh_selection = refresh_mirror, refresh_selection
        self.gone, self.refreshed = gone, refreshed
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="status")
        self._stopping, self._starting = threading.Event(), threading.Lock()
        self._known: dict[str, str] = {}  # each mirror listed last, and its uid
        self._thread = threading.Thread(target=self._run, name="status-loop", daemon=True)

    def start(self) -> None:
        """Starts the loop, once (later calls do nothing)."""
        with self._starting:
            if not self._thread.is_alive() and not self._stopping.is_set():
                self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Ends after the refreshes in flight (those not yet begun are skipped)."""
        with self._starting:
            self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                self.tick()
            except Exception:  # the API server unreachable, say: the next tick tries again
                logger.exception("status refresh failed")
            self._stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def tick(self) -> None:
        mirrors = live(self.lister(MIRRORS))
        present = {key_of(raw): str(raw["metadata"]["uid"]) for raw in mirrors}
        for mirror, uid in sorted(self._known.items()):
            if present.get(mirror) == uid:
                continue
            try:
                self.gone(mirror, uid)
            except Exception:  # the next tick tries again
                logger.exception("mirror %s gone: clean-up failed with an exception", mirror)
                present.setdefault(mirror, uid)
        self._known = present
        self._each(self.refresh_mirror, mirrors)
        selections = live(self.lister(SELECTIONS))
        self._each(lambda raw: self.refresh_selection(raw, set(present)), selections)
        self.refreshed()

    def _each(self, refresh: Callable[[Raw], None], raws: list[Raw]) -> None:
        if self._stopping.is_set():
            return

        def one(raw: Raw) -> None:
            if self._stopping.is_set():
                return
            try:
                refresh(raw)
            except Exception:  # one object's failure must not hold back the others
                logger.exception(
                    "refreshing the status of %s failed with an exception", key_of(raw)
                )

        list(self._pool.map(one, raws))


LIST_PAGE = 200  # objects a list request returns: the tick holds one page's JSON at a time
# What a refresh never reads and a listing holds most of: who set each field, and kopf's copy
# of the whole spec it handled last.
UNREAD_METADATA = ("managedFields",)
UNREAD_ANNOTATIONS = (f"{GROUP}/last-handled-configuration",)


def namespaced_lister(api: client.ApiClient, namespaces: list[str]) -> Callable[[str], list[Raw]]:
    """Lists a kind in the namespaces served, or in all of them when none is given, a page at
    a time, each object kept without what a refresh never reads."""
    objects = client.CustomObjectsApi(api)

    def pages(plural: str, namespace: str | None) -> Iterable[list[Raw]]:
        token: str | None = None
        while True:
            if namespace is None:
                found: Any = objects.list_cluster_custom_object(
                    GROUP, VERSION, plural, limit=LIST_PAGE, _continue=token
                )
            else:
                found = objects.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, limit=LIST_PAGE, _continue=token
                )
            yield found["items"]
            token = found["metadata"].get("continue")
            if not token:
                return

    def lister(plural: str) -> list[Raw]:
        items: list[Raw] = []
        served: list[str | None] = list(namespaces) or [None]
        for namespace in served:
            for page in pages(plural, namespace):
                items += (_trimmed(raw) for raw in page)
        return items

    return lister


def _trimmed(raw: Raw) -> Raw:
    metadata = raw.get("metadata", {})
    for key in UNREAD_METADATA:
        metadata.pop(key, None)
    for key in UNREAD_ANNOTATIONS:
        (metadata.get("annotations") or {}).pop(key, None)
    return raw
