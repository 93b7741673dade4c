"""kubectl, built from its Go module, talks to the real kube-apiserver and knows the CRDs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client

from kafka_mirror.devstack.kube import KubeApiServer
from tests.helpers.kubectl import kubectl as run_kubectl

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
