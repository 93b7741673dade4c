"""Two operators, one acting: leader election over a Lease on the real API server. The one that
holds it reconciles; killed, the other takes over once the Lease expires; stopped, it gives the
Lease up and the other takes over at its next try."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from kafka_mirror.controller.leader import (
    LEASE_NAME,
    LEASE_SECONDS,
    RETRY_SECONDS,
    Lease,
    wait_until_leading,
)
from kafka_mirror.kube import apply
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.objects import exists, mirror
from tests.helpers.worker import wait_for

pytestmark = pytest.mark.kube

# What a takeover after a kill may take: the Lease's expiry, one try, and kopf's start, with
# room for a busy machine.
TAKEOVER_SECONDS = 4 * (LEASE_SECONDS + RETRY_SECONDS)


@pytest.fixture
def operators(
    kube_apiserver: KubeApiServer, namespace: str, tmp_path: Path
) -> Iterator[list[OperatorProcess]]:
    started = []
    try:
        for index in range(2):
            process = OperatorProcess(
                kube_apiserver.kubeconfig,
                namespace,
                tmp_path / f"operator-{index}",
                extra_args=("--leader-election-namespace", namespace),
            )
            (tmp_path / f"operator-{index}").mkdir()
            started.append(process.start())
        yield started
    finally:
        for index, process in enumerate(started):
            if process.running():
                process.stop()
            print(f"----- operator {index} log -----\n{process.log()[-3000:]}")


def leading(process: OperatorProcess) -> bool:
    return "leading: holding the lease" in process.log()


def identity(process: OperatorProcess) -> str:
    found = re.search(rf"waiting for the lease \S+/{LEASE_NAME} as (\S+)", process.log())
    assert found, process.log()[-2000:]
    return found.group(1)


def holder(api: client.ApiClient, namespace: str) -> str | None:
    lease = client.CoordinationV1Api(api).read_namespaced_lease(LEASE_NAME, namespace)
    return lease.spec.holder_identity if lease.spec else None


def rendered(api: client.ApiClient, namespace: str, name: str) -> bool:
    core = client.CoreV1Api(api)
    return exists(core.read_namespaced_config_map, f"{name}-worker-config", namespace)


@pytest.mark.long  # leases run out
def test_one_operator_acts_and_the_other_takes_over_when_it_is_killed_or_stopped(
    kube_api: client.ApiClient, namespace: str, operators: list[OperatorProcess]
) -> None:
    source = {"bootstrapServers": "kafka-a:9092"}
    wait_for(lambda: any(leading(p) for p in operators), 60, "one operator leading")
    first = next(p for p in operators if leading(p))
    second = next(p for p in operators if p is not first)
    assert holder(kube_api, namespace) == identity(first)

    apply(kube_api, mirror("m1", namespace, source, source))
    wait_for(lambda: rendered(kube_api, namespace, "m1"), 60, "the leader rendering m1")
    assert not leading(second) and "m1" not in second.log()  # the follower did nothing

    # Killed (a node gone, an OOM kill): the Lease stays the dead one's until it expires.
    first.kill()
    killed = time.monotonic()
    apply(kube_api, mirror("m2", namespace, source, source))
    wait_for(
        lambda: rendered(kube_api, namespace, "m2"),
        TAKEOVER_SECONDS,
        "the follower taking over and rendering m2",
    )
    print(f"taken over and m2 rendered {time.monotonic() - killed:.1f} s after the kill")
    assert leading(second) and holder(kube_api, namespace) == identity(second)

    # Stopped (a rollout, a drain): it gives the Lease up as it goes.
    second.stop()
    assert holder(kube_api, namespace) is None


def test_a_released_lease_stays_released_while_the_process_ends(
    kube_api: client.ApiClient, namespace: str
) -> None:
    """The election's thread runs until the process ends, and takes a Lease without a holder at
    its next try: a stopping operator whose exit outlasted it held the Lease again, dead, until
    it expired (busy run 54). Here the process lives on after the release."""
    lease = wait_until_leading(kube_api, namespace, "stopping-operator", None)
    assert holder(kube_api, namespace) == "stopping-operator"
    lease.give_up()
    assert holder(kube_api, namespace) is None
    # Two tries of the thread after the release: the second began after it, and found no holder.
    next_try(lease)
    next_try(lease)
    assert holder(kube_api, namespace) is None


def next_try(lease: Lease) -> None:
    """Wait for the election thread's next try: each reads the Lease afresh."""
    seen = lease.lease_reference
    wait_for(lambda: lease.lease_reference is not seen, 60, "the election thread's next try")
