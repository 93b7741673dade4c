"""Hundreds of malformed and hostile KafkaMirror and MirrorTopicSelection objects (the
hypothesis strategies of tests/helpers/hostile.py) sent to the real API server while the real
operator serves a good mirror: each is refused by the server with a message, or reported in a
condition (`NotAllowed`, with nothing rendered, for values off the operator's allow-lists);
what the models accept the server accepts (the CRDs do not drift from them); the operator never
crashes and keeps serving."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from kafka_mirror.api.models import (
    API_VERSION,
    GROUP,
    VERSION,
    KafkaMirrorSpec,
    MirrorTopicSelectionSpec,
)
from kafka_mirror.api.policy import AllowLists, not_allowed
from kafka_mirror.kube import apply
from kafka_mirror.render import DEFAULT_AUDIT_IMAGE, DEFAULT_IMAGE
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.hostile import base_mirror, base_selection, mutated
from tests.helpers.kafka import create_topics, unique
from tests.helpers.objects import condition, exists, get_custom, mirror, selection
from tests.helpers.stack import MirrorStack, run_operator
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube]
EXAMPLES = 150  # of each kind
SEND = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same objects on every run: CI stays reproducible
    database=None,
    suppress_health_check=list(HealthCheck),
)


class Barrage:
    """Sends objects of one kind and remembers what the server accepted and refused."""

    def __init__(
        self, api: client.ApiClient, namespace: str, kind: str, model: Any, refused_reason: str
    ) -> None:
        self.api, self.namespace, self.kind, self.model = api, namespace, kind, model
        # The Ready reason of a stored spec the model refuses: a mirror's whole spec is unusable;
        # all a selection's schema cannot check is whether its patterns compile.
        self.refused_reason = refused_reason
        self.plural = f"{kind.lower()}s"
        self.names = (f"{kind.lower()}-{n}" for n in itertools.count())
        self.accepted: dict[str, bool] = {}  # name → whether the model accepts the spec
        self.refusals: Counter[int] = Counter()
        self.specs: dict[str, Any] = {}

    def accepts(self, spec: Any) -> bool:
        try:
            self.model.model_validate(spec)
        except ValidationError:
            return False
        return True

    def send(self, spec: Any) -> None:
        model_accepts = self.accepts(spec)
        name = next(self.names)
        body = {
            "apiVersion": API_VERSION,
            "kind": self.kind,
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
        }
        try:
            stored = client.CustomObjectsApi(self.api).create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, self.plural, body
            )
        except ApiException as error:
            assert error.status in (400, 413, 422), (error.status, error.body)
            message = _message(error)
            assert message, error.body
            assert not model_accepts, f"the model accepts what the server refuses: {message}"
            self.refusals[error.status] += 1
            return
        except ValueError as error:  # the client cannot even serialise it (NaN, huge ints)
            assert not model_accepts, error
            self.refusals[0] += 1
            return
        # The server drops fields its schema does not know: what the operator reads is this.
        self.accepted[name] = self.accepts(stored["spec"])
        self.specs[name] = stored["spec"]

    def reported(self, name: str) -> bool:
        found = get_custom(self.api, self.namespace, self.plural, name)
        ready = condition(found, "Ready")
        if not ready:
            return False
        # A spec the model refuses is reported as such; a usable one with its own reason.
        return self.accepted[name] or ready.get("reason") == self.refused_reason


def send_all(specs: st.SearchStrategy[Any], barrage: Barrage) -> None:
    @SEND
    @given(specs)
    def send(spec: Any) -> None:
        barrage.send(spec)

    send()


def _message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body).get("message", ""))
    except (TypeError, ValueError):
        return str(error.body or error.reason)


# The operator lets pod placement through (its allow-lists for it set to anything), so that
# the values the schema cannot judge reach the API server, which refuses the children they make.
PLACEMENT = AllowLists(pod_annotations=("*",), toleration_keys=("*",), node_selectors=("*",))


@pytest.fixture
def placing_operator(
    kube_apiserver: KubeApiServer, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    flags = (
        "--allowed-pod-annotation=*",
        "--allowed-toleration-key=*",
        "--allowed-node-selector=*",
    )
    yield from run_operator(
        OperatorProcess(kube_apiserver.kubeconfig, namespace, tmp_path, extra_args=flags)
    )


def test_hostile_objects_are_refused_or_reported_and_the_operator_keeps_serving(
    stack: MirrorStack,
    kube_api: client.ApiClient,
    namespace: str,
    placing_operator: OperatorProcess,
) -> None:
    operator = placing_operator
    # Bait for catastrophic patterns: long names of a's on the source.
    create_topics(stack.kafka_a.bootstrap_servers, ["a" * 200, "a" * 100 + unique("-")])
    plain = {"bootstrapServers": stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": stack.kafka_b.bootstrap_servers}
    apply(kube_api, mirror("good", namespace, plain, target))
    apply(kube_api, selection("good", namespace, "good", ["a+"]))

    mirrors = Barrage(kube_api, namespace, "KafkaMirror", KafkaMirrorSpec, "InvalidSpec")
    selections = Barrage(
        kube_api, namespace, "MirrorTopicSelection", MirrorTopicSelectionSpec, "InvalidPattern"
    )
    source = base_mirror(stack.kafka_a.bootstrap_servers, stack.kafka_b.bootstrap_servers)
    # Specs the schema cannot judge but the API server refuses in the children they make.
    for worker in (
        {"annotations": {"\n---\nkind: Secret": "x"}},
        {"nodeSelector": {"disk": "ssd; rm -rf /"}},
        {"tolerations": [{"key": "bad key!", "operator": "Exists"}]},
        {"resources": {"requests": {"cpu": "1.2.3Gi"}}},
        {"image": "not an image reference!"},
    ):
        mirrors.send({**source, "worker": worker})
    send_all(mutated(source), mirrors)
    send_all(mutated(base_selection("good")), selections)
    print(
        f"mirrors: {len(mirrors.accepted)} accepted, refused {dict(mirrors.refusals)}; "
        f"selections: {len(selections.accepted)} accepted, refused {dict(selections.refusals)}"
    )
    assert sum(mirrors.refusals.values()) > EXAMPLES // 2
    assert mirrors.accepted and selections.accepted

    def unreported() -> list[str]:
        return [
            f"{b.kind} {name}: {b.specs[name]}\n  status: "
            f"{get_custom(kube_api, namespace, b.plural, name).get('status')}"
            for b in (mirrors, selections)
            for name in b.accepted
            if not b.reported(name)
        ]

    try:
        wait_for(lambda: not unreported(), 120, "every accepted object reported in a condition")
    except AssertionError:
        raise AssertionError("\n".join(unreported())) from None
    # The first of the explicit specs: its Deployment's annotation key is not a Kubernetes one.
    refused = condition(get_custom(kube_api, namespace, "kafkamirrors", "kafkamirror-0"), "Ready")
    assert refused["reason"] == "InvalidSpec"
    assert "the API server refuses Deployment kafkamirror-0-worker" in refused["message"]
    # Values off the test operator's allow-lists (its defaults: its own image, Spark in local
    # mode): the mirror says so, and no worker or CronJob exists for it.
    apps, batch = client.AppsV1Api(kube_api), client.BatchV1Api(kube_api)
    outside = [
        name
        for name, usable in mirrors.accepted.items()
        if usable
        and not_allowed(
            KafkaMirrorSpec.model_validate(mirrors.specs[name]),
            PLACEMENT,
            (DEFAULT_IMAGE, DEFAULT_AUDIT_IMAGE),
        )
    ]
    assert outside, "no spec reached the allow-lists"
    for name in outside:
        found = get_custom(kube_api, namespace, "kafkamirrors", name)
        assert condition(found, "Ready")["reason"] == "NotAllowed", name
        assert not exists(apps.read_namespaced_deployment, f"{name}-worker", namespace)
        assert not exists(batch.read_namespaced_cron_job, f"{name}-audit", namespace)
    assert operator.running()
    assert "failed with an exception" not in operator.log(), "a handler crashed on bad input"

    # Still serving: a mirror created now gets its children and its status.
    apply(kube_api, mirror("late", namespace, plain, target))
    wait_for(
        lambda: exists(
            client.AppsV1Api(kube_api).read_namespaced_deployment, "late-worker", namespace
        ),
        60,
        "the late mirror's Deployment",
    )
    wait_for(
        lambda: bool(condition(get_custom(kube_api, namespace, "kafkamirrors", "late"), "Ready")),
        60,
        "the late mirror's Ready condition",
    )
