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
