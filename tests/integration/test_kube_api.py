"""The CRDs on the real kube-apiserver: they install, serve defaults, and refuse bad objects."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import GROUP, VERSION, KafkaMirror, MirrorTopicSelection

pytestmark = pytest.mark.kube

MIRROR: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "KafkaMirror",
    "metadata": {"name": "a-to-b"},
    "spec": {
        "source": {"alias": "A", "bootstrapServers": "kafka-a:9092"},
        "target": {"alias": "B", "bootstrapServers": "kafka-b:9092"},
    },
}
SELECTION: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "MirrorTopicSelection",
    "metadata": {"name": "accounting"},
    "spec": {"mirror": "a-to-b", "includes": ["^accounting.*", "^hr.*"]},
}


def create(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    plural = "kafkamirrors" if body["kind"] == "KafkaMirror" else "mirrortopicselections"
    created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, body
    )
    return created


def with_spec(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`base` with `spec.<path>` set to `value` (a `-` value deletes the field)."""
    body = copy.deepcopy(base)
    node = body["spec"]
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    if value == "-":
        node.pop(leaf)
    else:
        node[leaf] = value
    return body


def test_crds_are_established(kube_api: client.ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(kube_api)
    for name in ("kafkamirrors.kafkamirror.io", "mirrortopicselections.kafkamirror.io"):
        crd = extensions.read_custom_resource_definition(name)
        assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True"
        assert crd.spec.names.short_names


def test_valid_mirror_is_stored_with_defaults(kube_api: client.ApiClient, namespace: str) -> None:
    stored = create(kube_api, namespace, MIRROR)
    assert stored["spec"]["topicNaming"] == {"policy": "suffix", "separator": ".", "adopt": []}
    assert stored["spec"]["replicas"] == 1
    assert stored["spec"]["offsetSyncs"] == {"maxLag": 100, "location": "source"}
    assert stored["spec"]["checkpoints"]["groups"] == {
        "includes": [".*"],
        "excludes": ["console-consumer-.*", "connect-.*", "__.*"],  # MirrorMaker 2's
    }
    assert stored["spec"]["audit"]["spark"]["master"] == "local[*]"
    # What the server stored is exactly what the operator's model reads.
    parsed = KafkaMirror.model_validate(stored)
    assert parsed.spec.model_dump(by_alias=True, exclude_none=True) == stored["spec"]


def test_valid_selection_is_stored_and_read_back(
    kube_api: client.ApiClient, namespace: str
) -> None:
    create(kube_api, namespace, SELECTION)
    stored = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "mirrortopicselections", "accounting"
    )
    parsed = MirrorTopicSelection.model_validate(stored)
    assert parsed.spec.includes == ["^accounting.*", "^hr.*"]
    assert parsed.spec.excludes == []


def test_scale_subresource_reads_spec_replicas(kube_api: client.ApiClient, namespace: str) -> None:
    create(kube_api, namespace, with_spec(MIRROR, "replicas", 3))
    scale = client.CustomObjectsApi(kube_api).get_namespaced_custom_object_scale(
        GROUP, VERSION, namespace, "kafkamirrors", "a-to-b"
    )
    assert scale["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (with_spec(MIRROR, "source.alias", "-"), "spec.source.alias: Required value"),
        (
            with_spec(MIRROR, "topicNaming.policy", "reverse"),
            'spec.topicNaming.policy: Unsupported value: "reverse"',
        ),
        (
            with_spec(MIRROR, "replicas", -1),
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or "
            "equal to 0",
        ),
        (with_spec(MIRROR, "replicas", "two"), 'spec.replicas: Invalid value: "string"'),
        (
            with_spec(MIRROR, "source.bootstrapServers", "no port here"),
            "spec.source.bootstrapServers: Invalid value",
        ),
        (with_spec(MIRROR, "target.alias", "A"), "source and target must have different aliases"),
        (
            with_spec(MIRROR, "source.config", {"sasl.password": "x"}),
            "config may set only these librdkafka tuning settings",
        ),
        (
            with_spec(
                MIRROR,
                "source.sasl",
                {
                    "mechanism": "GSSAPI",
                    "passwordSecret": {"name": "s", "key": "p"},
                    "username": "u",
                },
            ),
            'spec.source.sasl.mechanism: Unsupported value: "GSSAPI"',
        ),
        (
            with_spec(
                MIRROR,
                "source.sasl",
                {"mechanism": "PLAIN", "passwordSecret": {"name": "s", "key": "p"}},
            ),
            "sasl needs exactly one of username and usernameSecret",
        ),
        (with_spec(MIRROR, "audit.schedule", "whenever"), "spec.audit.schedule: Invalid value"),
        (
            with_spec(MIRROR, "operation", {"type": "Return", "id": "back"}),
            "resume names the mirror to start again",
        ),
        (
            with_spec(MIRROR, "operation", {"type": "Promote", "id": "p", "resume": "a-to-b"}),
            "resume names the mirror to start again",
        ),
        (
            with_spec(
                with_spec(MIRROR, "topicNaming", {"policy": "identity"}),
                "operation",
                {"type": "Return", "id": "back", "resume": "a-to-b"},
            ),
            "a Return cannot translate positions under identity naming",
        ),
        (with_spec(SELECTION, "mirror", "-"), "spec.mirror: Required value"),
        (
            with_spec(SELECTION, "includes", [1, 2]),
            'spec.includes[0]: Invalid value: "integer": spec.includes[0] in body must be of type '
            "string",
        ),
        (
            with_spec(SELECTION, "includes", "^accounting.*"),
            'spec.includes: Invalid value: "string": spec.includes in body must be of type array',
        ),
        (
            with_spec(SELECTION, "includes", [f"^t{i}$" for i in range(300)]),
            "spec.includes: Too many: 300: must have at most 256 items",
        ),
        (with_spec(SELECTION, "excludes", ["x" * 2000]), "spec.excludes[0]: Too long"),
        (
            with_spec(SELECTION, "includes", [f"t{i}" + "x" * 1000 for i in range(200)]),
            "a selection's patterns may hold 192 KiB in all",
        ),
        ({**MIRROR, "metadata": {"name": "a" * 64}}, "at most 63 lowercase letters"),
    ],
    ids=[
        "missing-alias",
        "bad-enum",
        "negative-replicas",
        "replicas-not-int",
        "bad-bootstrap",
        "same-aliases",
        "config-off-the-list",
        "unknown-sasl-mechanism",
        "sasl-without-user",
        "bad-schedule",
        "return-without-resume",
        "resume-without-return",
        "return-under-identity",
        "selection-without-mirror",
        "non-string-patterns",
        "patterns-not-a-list",
        "oversize-pattern-list",
        "oversize-pattern",
        "oversize-selection",
        "oversize-mirror-name",
    ],
)
def test_malformed_objects_are_refused_by_the_server(
    kube_api: client.ApiClient, namespace: str, body: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as excinfo:
        create(kube_api, namespace, body)
    assert excinfo.value.status == 422
    assert message in json.loads(excinfo.value.body)["message"]
