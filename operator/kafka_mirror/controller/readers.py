"""Kafka readers shared by every mirror on the same cluster connection.

Each reader holds an admin client and a probe consumer, with their threads and connections:
one per mirror made 200 mirrors hold 2,433 threads. Mirrors whose client settings are the same
(bootstrap servers, security, credentials: all of it) share one; different credentials never
do. A reader closes when the last mirror using it lets go.

The mirrors of one namespace may use at most CONNECTIONS_PER_NAMESPACE connections: a team
cannot make the shared operator hold threads and connections without bound by giving each of
its mirrors other settings (its mirrors beyond say so in their status); the namespaces, which
administrators make, bound the rest.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable

from kafka_mirror.api.models import SelectionRef
from kafka_mirror.kafka.client import ClusterUnavailable
from kafka_mirror.kafka.observe import ClusterReader

CONNECTIONS_PER_NAMESPACE = 32  # a namespace's mirrors usually need two: their A and their B


def _connection_key(alias: str, settings: dict[str, str]) -> str:
    # A digest, not the settings: the registry's keys must not keep the credentials around.
    text = json.dumps([alias, settings], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class Readers:
    """Which reader each mirror uses per role (source, target), and the readers in use."""

    def __init__(self, per_namespace: int = CONNECTIONS_PER_NAMESPACE) -> None:
        self.per_namespace = per_namespace
        self._lock = threading.Lock()
        self._shared: dict[str, ClusterReader] = {}
        self._used: dict[tuple[str, str], str] = {}  # (mirror, role) -> connection key
        # The last source topic list per mirror, and what its selectionPolicy grants each
        # selection, for its selections' status.
        self.source_topics: dict[str, list[str]] = {}
        self.selection_bounds: dict[str, Callable[[SelectionRef], list[str] | None]] = {}
        self.left_out: dict[str, set[SelectionRef]] = {}  # over the ConfigMap's budget

    def get(self, mirror: str, role: str, alias: str, settings: dict[str, str]) -> ClusterReader:
        key = _connection_key(alias, settings)
        with self._lock:
            reader = self._shared.get(key)
            if reader is None:
                self._check_room(mirror, role)
                reader = self._shared[key] = ClusterReader(alias, settings)
            before = self._used.get((mirror, role))
            self._used[(mirror, role)] = key
            unused = self._release(before) if before not in (None, key) else None
        if unused is not None:
            unused.close()
        return reader

    def forget(self, mirror: str) -> None:
        with self._lock:
            keys = [self._used.pop(used) for used in list(self._used) if used[0] == mirror]
            unused = [reader for key in keys if (reader := self._release(key)) is not None]
            self.source_topics.pop(mirror, None)
            self.selection_bounds.pop(mirror, None)
            self.left_out.pop(mirror, None)
        for reader in unused:
            reader.close()

    def _check_room(self, mirror: str, role: str) -> None:
        """Refuse a new connection to a mirror whose namespace's mirrors use all theirs."""
        namespace = mirror.partition("/")[0]
        in_use = {
            key
            for (user, used_as), key in self._used.items()
            if user.partition("/")[0] == namespace and (user, used_as) != (mirror, role)
        }
        if len(in_use) >= self.per_namespace:
            raise ClusterUnavailable(
                "TooManyConnections",
                f"the mirrors of namespace {namespace} use {len(in_use)} distinct Kafka "
                f"connections (cluster, security settings and credentials), the most the "
                f"operator keeps for one namespace: give this mirror's {role} the settings "
                "and credentials of another mirror of the namespace, or delete mirrors no "
                "longer needed",
            )

    def _release(self, key: str | None) -> ClusterReader | None:
        """The reader of `key` taken out of the registry if no mirror uses it any more."""
        if key is None or key in self._used.values():
            return None
        return self._shared.pop(key, None)
