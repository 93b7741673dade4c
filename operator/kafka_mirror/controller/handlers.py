"""The kopf handlers: thin, level-based. Create, update and resume converge the children to the
desired state; one shared status loop (`kafka_mirror.controller.refresh`), started and stopped
with the operator, refreshes every status from Kafka and the Deployments and converges again.
The work itself is in `kafka_mirror.controller.reconcile`."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

import aiohttp
import kopf
from kubernetes import client

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.api.policy import AllowLists
from kafka_mirror.api.status import KafkaMirrorStatus, MirrorTopicSelectionStatus
from kafka_mirror.api.worker_config import SelectionPatterns
from kafka_mirror.controller import gate, reconcile, refresh
from kafka_mirror.controller.inputs import MirrorInputs, selection_mirror, selection_patterns
from kafka_mirror.controller.metrics import OperatorMetrics
from kafka_mirror.controller.readers import Readers
from kafka_mirror.controller.reconcile import MIRRORS, SELECTIONS
from kafka_mirror.controller.selections import observe_selection
from kafka_mirror.controller.serial import AppliedChildren, OnePerKey
from kafka_mirror.controller.status import Event, mirror_events, unusable_spec_status
from kafka_mirror.render import Images

# No handler needs a finalizer any more (the delete handlers are optional); kopf removes this
# one, which operators before the status loop put on every object, when it next sees them.
FINALIZER = f"{GROUP}/finalizer"


@dataclass
class OperatorOptions:
    api: client.ApiClient
    images: Images
    status_interval: float
    metrics: OperatorMetrics
    allowed: AllowLists


# kopf's requests to the API server open at most this many connections besides its watches.
# Its own session has no bound: at start-up it patched its annotations onto a thousand objects
# at once, over a thousand TLS connections, each with asyncio's 256 KiB read buffer (240 MiB
# of the operator's 310 at 1,000 mirrors, memray).
API_CONNECTIONS = 16


def api_session(info: kopf.ConnectionInfo, namespaces: int) -> kopf.AiohttpSession:
    """kopf's session as kopf builds it, with its connections bounded: two watches (mirrors
    and selections) per namespace served, or two cluster-wide, never wait for a connection."""
    watches = 2 * max(namespaces, 1)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=watches + API_CONNECTIONS, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
    return kopf.AiohttpSession(
        aiohttp_session=session,
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
    )


def build_registry(options: OperatorOptions, namespaces: list[str]) -> kopf.OperatorRegistry:
    """All handlers, bound to one API client and the operator's options, serving `namespaces`
    (all when empty)."""
    registry = kopf.OperatorRegistry()
    api, images, readers = options.api, options.images, Readers()
    converging, applied = OnePerKey(), AppliedChildren()

    # The last credentials and the session built with them.
    last_session: list[tuple[kopf.ConnectionInfo, kopf.AiohttpSession]] = []

    @kopf.on.login(registry=registry)
    async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
        # In-cluster service account, else $KUBECONFIG (a custom registry has no default login).
        info = kopf.login_with_service_account(**kwargs)
        if info is not None:
            # kopf names the API server https://kubernetes.default.svc, which needs the cluster's
            # DNS; our API client found it at $KUBERNETES_SERVICE_HOST, as client-go does.
            info = replace(info, server=api.configuration.host)
        else:
            info = kopf.login_with_kubeconfig(**kwargs)
        if info is None:
            return None
        # The same credentials again give the same session: kopf refuses credentials equal to
        # ones that failed (and exits, to be restarted), where a new session would hide them
        # and have it log in again and again with a token that was revoked.
        if not last_session or last_session[0][0] != info:
            last_session[:] = [(info, api_session(info, len(namespaces)))]
        return last_session[0][1]

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Progress and the diff base in annotations: the status schema has no room for kopf's.
        settings.persistence.finalizer = FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=GROUP, key="last-handled-configuration"
        )
        # Serve the namespaces given and the CRDs present at start-up: watching namespaces and
        # CRDs for changes would need cluster-wide read access the operator has no other use for.
        settings.scanning.disabled = True
        settings.posting.level = logging.WARNING  # events for problems, not every handler run
        # Kafka reads block a thread each; bounded, so that a thousand mirrors resumed at
        # start-up do not all render and apply at once.
        settings.execution.max_workers = 16
        settings.networking.request_timeout = 60

    # The status loop starts with the first resource handler: kopf calls those only once its
    # indices hold every object listed at start-up, and a tick before that would converge
    # mirrors without their selections. Its refreshes read the indices kopf passed that call
    # (live objects, updated from the watches).
    indices_seen: dict[str, Any] = {}

    def start_status_loop(indices: dict[str, Any]) -> None:
        if not indices_seen:
            indices_seen.update(indices)
            status_loop.start()

    def stop_unusable(mirror: kopf.Body, unusable: gate.SpecUnusable) -> None:
        """What runs of a mirror the operator cannot or may not use, stopped (gate.STOPPING),
        however the refusal was found."""
        namespace, name = mirror.metadata.namespace or "", mirror.metadata.name or ""
        applied.forget(f"{namespace}/{name}")  # a usable spec again applies all at once
        if unusable.problem.reason in gate.STOPPING:
            gate.stop_children(api, namespace, name, mirror.metadata.uid or "")

    def stop_refused(mirror: kopf.Body, unusable: gate.SpecUnusable) -> None:
        """stop_unusable, as a converge of the mirror: one already running with the spec as it
        was (allowed then) ends first, and cannot render the workers again after the stop."""

        def stop() -> list[str]:
            stop_unusable(mirror, unusable)
            return []  # no selections applied

        converging.run(f"{mirror.metadata.namespace}/{mirror.metadata.name}", stop)

    def read_inputs(
        mirror: kopf.Body, previous: KafkaMirrorStatus, indices: dict[str, Any]
    ) -> MirrorInputs:
        """The mirror read once for this call. Raises SpecUnusable for a spec the operator
        cannot or may not use, having stopped what runs for one that is not allowed."""
        try:
            own = (images.worker, images.audit)
            spec = gate.parse_spec(mirror.get("spec"), options.allowed, own)
        except gate.SpecUnusable as unusable:
            stop_refused(mirror, unusable)
            raise
        return MirrorInputs(
            api,
            mirror,
            spec,
            previous,
            selections_of(mirror, indices),
            any_secret=options.allowed.unlabelled_secrets,
        )

    def previous_of(mirror: kopf.Body) -> KafkaMirrorStatus:
        return KafkaMirrorStatus.model_validate(dict(mirror.get("status") or {}))

    # An in-memory index kopf keeps from its watch: every converge reads a mirror's selections
    # there instead of listing them from the API server.
    def live(meta: kopf.Meta, **_: Any) -> bool:
        return not meta.get("deletionTimestamp")  # one being deleted no longer counts

    # Named: kopf passes an index to handlers as a keyword argument by its id.
    @kopf.index(GROUP, VERSION, SELECTIONS, id="selections_by_mirror", when=live, registry=registry)
    def selections_by_mirror(
        namespace: str | None, name: str, spec: kopf.Spec, meta: kopf.Meta, **_: Any
    ) -> dict[tuple[str, str], tuple[str, SelectionPatterns]]:
        assert namespace is not None  # the CRD is namespaced
        patterns = selection_patterns(namespace, name, spec)
        return {selection_mirror(namespace, spec): (meta.get("creationTimestamp", ""), patterns)}

    def selections_of(mirror: kopf.Body, indices: dict[str, Any]) -> list[SelectionPatterns]:
        """The mirror's selections, oldest first, from the index kopf passes to every handler."""
        index: kopf.Index[Any, tuple[str, SelectionPatterns]] = indices["selections_by_mirror"]
        found: list[tuple[str, SelectionPatterns]] = list(
            index.get((mirror.metadata.namespace, mirror.metadata.name), [])
        )
        ordered = sorted(found, key=lambda s: (s[0], s[1].namespace, s[1].name))
        return [patterns for _, patterns in ordered]

    def converge(inputs: MirrorInputs) -> None:
        # The spec was checked in read_inputs, in every caller's thread: a converge already
        # running for this mirror may take over the call, and the caller must not go on to read
        # Kafka for a spec that names a host it may not contact.
        def children() -> list[str]:
            try:
                return reconcile.converge_children(api, inputs, images, applied)
            except gate.SpecUnusable as unusable:  # a Secret, or the API server, refused it
                stop_unusable(inputs.body, unusable)
                raise

        with options.metrics.converge_seconds.time():
            changed = converging.run(inputs.key, children)
        if changed:
            # Posted by our own poster: kopf's serves its handlers only, not the status loop.
            message = "workers mirror the union of selections: " + ", ".join(changed)
            refresh.post_event(api, inputs.body, Event("Normal", "SelectionsApplied", message))

    @kopf.on.resume(GROUP, VERSION, MIRRORS, registry=registry)
    @kopf.on.create(GROUP, VERSION, MIRRORS, registry=registry)
    @kopf.on.update(GROUP, VERSION, MIRRORS, registry=registry)
    def mirror_changed(body: kopf.Body, **indices: Any) -> None:
        start_status_loop(indices)
        try:
            converge(read_inputs(body, previous_of(body), indices))
        except gate.SpecUnusable as unusable:
            raise kopf.PermanentError(str(unusable)) from None  # the status loop reports it

    def refresh_mirror(raw: dict[str, Any], indices: dict[str, Any]) -> None:
        """One status tick of a mirror: converge it again, observe it, patch what changed."""
        body = kopf.Body(cast(kopf.RawBody, raw))
        previous = previous_of(body)
        try:
            inputs = read_inputs(body, previous, indices)
            converge(inputs)
        except gate.SpecUnusable as unusable:
            generation = body.metadata.get("generation", 0)
            current = unusable_spec_status(
                previous, generation, unusable.problem, datetime.now(UTC)
            )
            events = mirror_events(previous, current)
        else:
            current, events = reconcile.observe_mirror(api, inputs, readers, datetime.now(UTC))
        # Events before the status: an operator killed between the two posts an event twice
        # (the next tick sees the old status again) rather than never.
        for event in events:
            refresh.post_event(api, raw, event)
        patch = refresh.status_patch(current)
        if refresh.changes(raw.get("status"), patch):
            refresh.patch_status(api, MIRRORS, raw, patch)
        options.metrics.observe(
            body.metadata.namespace or "",
            body.metadata.name or "",
            current,
            body.get("spec", {}).get("rpoTargetSeconds"),
        )

    def mirror_gone(mirror: str, uid: str) -> None:
        """A mirror deleted: its children (those it controls) removed now (the garbage collector
        would too, through the owner references, but not every cluster runs it promptly, and
        nothing should mirror after the delete) and nothing of it kept."""
        namespace, name = mirror.split("/", 1)
        reconcile.delete_children(api, namespace, name, uid)
        readers.forget(mirror)
        applied.forget(mirror)
        options.metrics.forget(namespace, name)

    # Optional: kopf adds no finalizer for it, so a mirror (and its namespace) is never held
    # once the operator is gone. Without a finalizer kopf sees a deletion in progress only when
    # something else holds the object (a foreground deletion, say); otherwise the status loop
    # finds the mirror gone at its next tick.
    @kopf.on.delete(GROUP, VERSION, MIRRORS, optional=True, registry=registry)
    def mirror_deleted(name: str, namespace: str | None, meta: kopf.Meta, **_: Any) -> None:
        assert namespace is not None  # the CRD is namespaced
        mirror_gone(f"{namespace}/{name}", str(meta["uid"]))

    def converge_mirror_of(namespace: str, mirror_name: str, indices: dict[str, Any]) -> None:
        if not mirror_name or (namespaces and namespace not in namespaces):
            return  # a mirror this operator does not watch
        mirror = reconcile.read_mirror(api, namespace, mirror_name)
        if mirror is not None and not mirror["metadata"].get("deletionTimestamp"):
            body = kopf.Body(cast(kopf.RawBody, mirror))
            with contextlib.suppress(gate.SpecUnusable):  # the mirror's status says so
                converge(read_inputs(body, previous_of(body), indices))

    # No resume handler: at start-up each mirror's own resume converges it, with every
    # selection already in the index; a thousand selections would only repeat it. The delete
    # handler is optional (no finalizer): a selection deleted while the operator is not looking
    # leaves its mirror at the next status tick, which converges every mirror again.
    @kopf.on.create(GROUP, VERSION, SELECTIONS, registry=registry)
    @kopf.on.update(GROUP, VERSION, SELECTIONS, registry=registry)
    @kopf.on.delete(GROUP, VERSION, SELECTIONS, optional=True, registry=registry)
    def selection_changed(
        namespace: str | None,
        spec: kopf.Spec,
        old: Any,
        **indices: Any,
    ) -> None:
        assert namespace is not None
        start_status_loop(indices)
        mirror = selection_mirror(namespace, spec)
        converge_mirror_of(*mirror, indices)
        previous_mirror = selection_mirror(namespace, (old or {}).get("spec") or {})
        if previous_mirror != mirror:  # it lost this selection
            converge_mirror_of(*previous_mirror, indices)

    def refresh_selection(raw: dict[str, Any], mirrors: set[str]) -> None:
        body = kopf.Body(cast(kopf.RawBody, raw))
        previous = MirrorTopicSelectionStatus.model_validate(dict(body.status))
        assert body.metadata.namespace is not None
        mirror_namespace, mirror = selection_mirror(body.metadata.namespace, body.spec)
        exists = f"{mirror_namespace}/{mirror}" in mirrors
        current = observe_selection(body, previous, exists, readers, datetime.now(UTC))
        patch = refresh.status_patch(current)
        if refresh.changes(raw.get("status"), patch):  # mostly the same: no request then
            refresh.patch_status(api, SELECTIONS, raw, patch)

    status_loop = refresh.StatusLoop(
        refresh.namespaced_lister(api, namespaces),
        options.status_interval,
        lambda raw: refresh_mirror(raw, indices_seen),
        refresh_selection,
        mirror_gone,
        options.metrics.status_refreshed.set_to_current_time,
    )

    @kopf.on.cleanup(registry=registry)
    def stop_status_loop(**_: Any) -> None:
        status_loop.stop()

    return registry


def run(
    options: OperatorOptions,
    namespaces: list[str],
    liveness_endpoint: str | None,
) -> None:
    """Run the operator until SIGTERM/SIGINT (kopf finishes the handlers in flight)."""
    kopf.run(
        registry=build_registry(options, namespaces),
        namespaces=namespaces,
        clusterwide=not namespaces,
        liveness_endpoint=liveness_endpoint,
        standalone=True,
    )
