"""Helm, built from its Go module, lints the chart and installs it into a real API server."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from kafka_mirror.devstack.builds import REPO_ROOT
from kafka_mirror.devstack.kube import KubeApiServer
from kafka_mirror.kube import api_client

pytestmark = pytest.mark.helm

CHART = REPO_ROOT / "charts" / "kafka-mirror-operator"


@pytest.fixture(scope="module")
def bare_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    """An API server without the CRDs, so that Helm is the one installing them."""
    server = KubeApiServer(tmp_path_factory.mktemp("kube-bare"))
    server.start()
    yield server
    server.remove()


def run_helm(helm: Path, home: Path, *args: str, kubeconfig: Path | None = None) -> str:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_chart_lints_clean(helm: Path, tmp_path: Path) -> None:
    output = run_helm(helm, tmp_path, "lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in output


def test_chart_installs_the_crds(helm: Path, bare_apiserver: KubeApiServer, tmp_path: Path) -> None:
    kubeconfig = bare_apiserver.kubeconfig
    run_helm(
        helm,
        tmp_path,
        "install",
        "kafka-mirror",
        str(CHART),
        "--namespace",
        "default",
        kubeconfig=kubeconfig,
    )
    status = run_helm(
        helm, tmp_path, "status", "kafka-mirror", "--namespace", "default", kubeconfig=kubeconfig
    )
    assert "STATUS: deployed" in status
    with api_client(kubeconfig) as api:
        crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
    names = {crd.metadata.name for crd in crds}
    assert {"kafkamirrors.kafkamirror.io", "mirrortopicselections.kafkamirror.io"} <= names
