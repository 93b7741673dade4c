"""kubectl, built from its Go module, talks to the real kube-apiserver and knows the CRDs; the
install guide's command frees objects held by the finalizer of an operator that is gone."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.controller.handlers import FINALIZER
from kafka_mirror.kube import apply
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.builds import REPO_ROOT
from tests.helpers.kubectl import kubectl as run_kubectl
from tests.helpers.objects import mirror, selection
from tests.helpers.worker import wait_for

pytestmark = pytest.mark.kube


def test_lists_no_mirrors_in_an_empty_namespace(
    kubectl: Path, kube_apiserver: KubeApiServer, kube_api: client.ApiClient, namespace: str
) -> None:
    result = run_kubectl(kubectl, kube_apiserver.kubeconfig, "get", "kafkamirrors", "-n", namespace)
    assert result.stdout == ""
    assert f"No resources found in {namespace} namespace." in result.stderr


def test_client_and_server_are_the_same_release(
    kubectl: Path, kube_apiserver: KubeApiServer
) -> None:
    result = run_kubectl(kubectl, kube_apiserver.kubeconfig, "version", "--output=json")
    versions = json.loads(result.stdout)
    assert versions["clientVersion"]["gitVersion"] == "v1.35.4"
    assert versions["serverVersion"]["gitVersion"] == "v1.35.4"


def documented_finalizer_removal() -> str:
    """The command docs/install.md gives for a namespace held by the operator's finalizers."""
    blocks = re.findall(r"```sh\n(.*?)```", (REPO_ROOT / "docs" / "install.md").read_text(), re.S)
    (block,) = [b for b in blocks if '"finalizers":null' in b]
    return block


def test_the_documented_command_frees_objects_held_by_a_gone_operators_finalizer(
    kubectl: Path, kube_apiserver: KubeApiServer, kube_api: client.ApiClient, namespace: str
) -> None:
    # What an operator before the status loop left behind when it was gone: its finalizer on
    # every object.
    source = {"bootstrapServers": "kafka-a:9092"}
    for body in (mirror("m", namespace, source, source), selection("s", namespace, "m", [".*"])):
        body["metadata"]["finalizers"] = [FINALIZER]
        apply(kube_api, body)
    run_kubectl(
        kubectl,
        kube_apiserver.kubeconfig,
        "-n",
        namespace,
        "delete",
        "--wait=false",
        "kafkamirrors/m",
        "mirrortopicselections/s",
    )
    custom = client.CustomObjectsApi(kube_api)
    still = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "kafkamirrors", "m")
    assert still["metadata"]["deletionTimestamp"]  # held, as a namespace's deletion would be

    command = documented_finalizer_removal().replace("NS=team-a", f"NS={namespace}", 1)
    env = {
        **os.environ,
        "PATH": f"{kubectl.parent}:{os.environ['PATH']}",
        "KUBECONFIG": str(kube_apiserver.kubeconfig),
        "KUBERC": "off",
    }
    subprocess.run(["bash", "-euo", "pipefail", "-c", command], env=env, check=True, timeout=60)
    for plural in ("kafkamirrors", "mirrortopicselections"):
        listed = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
        assert listed["items"] == [], plural


def strimzi_kafka_crd() -> dict[str, object]:
    """Strimzi's Kafka CRD as far as kubectl's names go: its group, names and category."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "kafkas.kafka.strimzi.io"},
        "spec": {
            "group": "kafka.strimzi.io",
            "scope": "Namespaced",
            "names": {
                "kind": "Kafka",
                "listKind": "KafkaList",
                "plural": "kafkas",
                "singular": "kafka",
                "shortNames": ["k"],
                "categories": ["strimzi"],
            },
            "versions": [
                {
                    "name": "v1beta2",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def test_our_names_and_category_leave_strimzis_kafka_to_strimzi(
    kubectl: Path, kube_apiserver: KubeApiServer, kube_api: client.ApiClient, namespace: str
) -> None:
    """With Strimzi's CRDs installed beside ours, `kubectl get kafka` lists Strimzi's Kafka
    clusters; our singular names (the command `make demo` prints) and our own category work."""
    extensions = client.ApiextensionsV1Api(kube_api)
    extensions.create_custom_resource_definition(strimzi_kafka_crd())
    try:

        def established() -> bool:
            crd = extensions.read_custom_resource_definition("kafkas.kafka.strimzi.io")
            conditions = (crd.status and crd.status.conditions) or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        wait_for(established, 60, "Strimzi's Kafka CRD established")
        custom = client.CustomObjectsApi(kube_api)
        custom.create_namespaced_custom_object(
            "kafka.strimzi.io",
            "v1beta2",
            namespace,
            "kafkas",
            {
                "apiVersion": "kafka.strimzi.io/v1beta2",
                "kind": "Kafka",
                "metadata": {"name": "prod"},
            },
        )
        source = {"bootstrapServers": "kafka-a:9092"}
        apply(kube_api, mirror("a-to-b", namespace, source, source))
        apply(kube_api, selection("payments", namespace, "a-to-b", ["payments"]))

        def get(*args: str) -> str:
            config = kube_apiserver.kubeconfig
            return run_kubectl(kubectl, config, "-n", namespace, "get", *args).stdout

        assert get("kafka", "-o", "name") == "kafka.kafka.strimzi.io/prod\n"
        assert "name: a-to-b" in get("kafkamirror", "a-to-b", "-o", "yaml")
        assert "name: payments" in get("mirrortopicselection", "payments", "-o", "yaml")
        assert get("kafka-mirroring", "-o", "name").split() == [
            "kafkamirror.kafkamirror.io/a-to-b",
            "mirrortopicselection.kafkamirror.io/payments",
        ]
    finally:
        extensions.delete_custom_resource_definition("kafkas.kafka.strimzi.io")


def test_a_mirror_name_that_cannot_name_a_service_is_refused_by_the_api_server(
    kubectl: Path, kube_apiserver: KubeApiServer, namespace: str, tmp_path: Path
) -> None:
    source = {"bootstrapServers": "kafka-a:9092"}
    manifest = tmp_path / "mirror.json"
    manifest.write_text(json.dumps(mirror("team.a", namespace, source, source)))
    result = run_kubectl(
        kubectl, kube_apiserver.kubeconfig, "apply", "-f", str(manifest), check=False
    )
    assert result.returncode != 0
    assert "a KafkaMirror's name names its Service too" in result.stderr, result.stderr
