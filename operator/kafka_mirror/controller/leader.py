"""One operator at a time: leader election over a Lease, with the Kubernetes client's own
`LeaderElection` (client-go's algorithm: the holder renews the Lease every RETRY_SECONDS; another
candidate takes it once it went LEASE_SECONDS without renewal).

An operator that cannot renew within RENEW_SECONDS stops at once, before another can have taken
over (LEASE_SECONDS later), so that two never act on the same mirrors after a network partition;
its pod's restart makes it a candidate again. One stopping on SIGTERM gives the Lease up, so that
its successor (a rollout, a drain) need not wait for it to expire.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.leaderelection import electionconfig
from kubernetes.leaderelection.leaderelection import LeaderElection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from kafka_mirror import endpoints

log = logging.getLogger(__name__)

LEASE_NAME = "kafka-mirror-operator"
LEASE_SECONDS = 15
RENEW_SECONDS = 10
RETRY_SECONDS = 2
RELEASE_TRIES = 5

# The library logs every attempt at INFO: a follower would say so every two seconds.
logging.getLogger("leaderelection").setLevel(logging.WARNING)


class Lease(LeaseLock):
    """The Lease this process holds or waits for. Once `give_up` released it, the election's
    thread, which runs until the process ends, writes it no more: finding it without a holder,
    it would take it straight back, and a stopped operator would hold it until it expired."""

    def __init__(self, api: client.ApiClient, namespace: str, identity: str) -> None:
        super().__init__(LEASE_NAME, namespace, identity)  # type: ignore[no-untyped-call]
        self.api_instance = client.CoordinationV1Api(api)
        self.released = threading.Event()

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        if self.released.is_set():
            return False
        return bool(super().create(name, namespace, election_record))  # type: ignore[no-untyped-call]

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        if self.released.is_set():
            return False
        return bool(super().update(name, namespace, updated_record))  # type: ignore[no-untyped-call]

    def give_up(self) -> None:
        """Release the Lease if this process still holds it (its successor takes it at once).
        A renewal between our read and our write makes the write a conflict: read it again."""
        self.released.set()
        for _ in range(RELEASE_TRIES):
            try:
                lease = self.api_instance.read_namespaced_lease(self.name, self.namespace)
                if lease.spec is None or lease.spec.holder_identity != self.identity:
                    return
                lease.spec.holder_identity = None
                # resourceVersion-checked: a renewal since our read is a conflict
                self.api_instance.replace_namespaced_lease(self.name, self.namespace, lease)
                return
            except ApiException as error:
                if error.status != HTTPStatus.CONFLICT:
                    log.warning("could not give the lease up (it expires): %s", error.reason)
                    return
        log.warning("could not give the lease up (it expires): renewed under each try")


def wait_until_leading(
    api: client.ApiClient, namespace: str, identity: str, health_port: int | None
) -> Lease:
    """Block until this process holds the Lease; from then on a thread renews it, and ends the
    process if it cannot. Meanwhile `/healthz` on `health_port` says the follower is alive
    (the kubelet would restart it otherwise); kopf's liveness endpoint takes the port after."""
    following = None if health_port is None else endpoints.serve(_follower, health_port, "follower")
    lease = Lease(api, namespace, identity)
    elected = threading.Event()
    config = electionconfig.Config(
        lease,
        lease_duration=LEASE_SECONDS,
        renew_deadline=RENEW_SECONDS,
        retry_period=RETRY_SECONDS,
        onstarted_leading=elected.set,
        onstopped_leading=lambda: None if lease.released.is_set() else _lost(),
    )
    log.info("waiting for the lease %s/%s as %s", namespace, LEASE_NAME, identity)
    threading.Thread(target=LeaderElection(config).run, name="leader", daemon=True).start()
    elected.wait()
    log.info("leading: holding the lease %s/%s", namespace, LEASE_NAME)
    if following is not None:
        following.shutdown()
        following.server_close()
    return lease


def _follower(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"following: waiting for the lease\n"]


def _lost() -> None:
    log.error("could not renew the lease in %d s: stopping, so that two never act", RENEW_SECONDS)
    logging.shutdown()
    os._exit(1)
