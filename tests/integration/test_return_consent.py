"""A Return starts again only the mirror that names it, on the real API server and Kafka: team
A's `a-to-b` fails over; a tenant who may write KafkaMirror objects in the namespace and nothing
else (impersonated) creates its own mirror B→A with a Return that resumes `a-to-b`, which waits
and leaves `a-to-b` stopped; then `b-to-a`, the reverse `a-to-b` names, returns and starts it.

No worker runs here (no node): the failover and the return hand over nothing, so each phase
passes as soon as the status says the workers are stopped, which is all the consent needs."""

from __future__ import annotations

import pytest
from kubernetes import client

from kafka_mirror.kube import apply
from tests.helpers.objects import get_custom, mirror
from tests.helpers.stack import MirrorStack
from tests.helpers.tenant import create
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


def operation(api: client.ApiClient, namespace: str, name: str) -> dict[str, object]:
    return dict(
        (get_custom(api, namespace, "kafkamirrors", name).get("status") or {}).get("operation")
        or {}
    )


@pytest.mark.usefixtures("operator")
def test_a_tenants_return_does_not_start_another_teams_mirror(
    kube_api: client.ApiClient, namespace: str, stack: MirrorStack, author: client.ApiClient
) -> None:
    a = {"bootstrapServers": stack.kafka_a.bootstrap_servers}
    b = {"bootstrapServers": stack.kafka_b.bootstrap_servers}
    failover = {"type": "Failover", "id": "a-lost"}
    apply(kube_api, mirror("a-to-b", namespace, a, b, reverse="b-to-a", operation=failover))
    wait_for(
        lambda: operation(kube_api, namespace, "a-to-b").get("phase") == "Completed",
        90,
        lambda: f"a-to-b's failover to complete: {operation(kube_api, namespace, 'a-to-b')}",
    )

    back = {"type": "Return", "id": "take", "resume": "a-to-b"}
    rogue = mirror("rogue", namespace, {**b, "alias": "B"}, {**a, "alias": "A"}, operation=back)
    create(author, rogue)
    wait_for(
        lambda: "spec.reverse names b-to-a" in str(operation(kube_api, namespace, "rogue")),
        90,
        lambda: f"the tenant's Return to be refused: {operation(kube_api, namespace, 'rogue')}",
    )
    assert "resumedBy" not in operation(kube_api, namespace, "a-to-b")
    assert operation(kube_api, namespace, "rogue").get("phase") == "ResumingMirror"

    back = {"type": "Return", "id": "back", "resume": "a-to-b"}
    way_back = ({**b, "alias": "B"}, {**a, "alias": "A"})
    reverse = mirror("b-to-a", namespace, *way_back, operation=back, standbyFor="a-to-b")
    apply(kube_api, reverse)
    wait_for(
        lambda: (
            (operation(kube_api, namespace, "a-to-b").get("resumedBy") or {}).get("mirror")
            == "b-to-a"
        ),
        90,
        lambda: f"b-to-a's Return to start a-to-b: {operation(kube_api, namespace, 'a-to-b')}",
    )
    recorded = operation(kube_api, namespace, "a-to-b").get("reverseUid")
    uid = get_custom(kube_api, namespace, "kafkamirrors", "b-to-a")["metadata"]["uid"]
    assert recorded == uid
