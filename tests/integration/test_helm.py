"""Helm, built from its Go module, lints the chart and installs it into a real API server."""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from kafka_mirror import smoke
from kafka_mirror.demo import example_objects
from kafka_mirror.devstack.builds import REPO_ROOT
from kafka_mirror.devstack.kafka import KafkaCluster
from kafka_mirror.devstack.kube import KubeApiServer
from kafka_mirror.devstack.kubelet import LocalKubelet
from kafka_mirror.kube import api_client, apply
from tests.helpers.kubectl import kubectl as run_kubectl
from tests.helpers.worker import wait_for

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


# --- the chart's operator, end to end ---------------------------------------------------------

RELEASE = "kafka-mirror-operator"  # the chart's full name is then the release name


def can_i(kubectl: Path, kubeconfig: Path, account: str, *request: str) -> bool:
    result = run_kubectl(
        kubectl, kubeconfig, "auth", "can-i", *request, f"--as={account}", check=False
    )
    assert result.stdout.strip() in ("yes", "no"), result.stderr
    return result.stdout.strip() == "yes"


@pytest.mark.kafka
@pytest.mark.kube
def test_the_charts_operator_mirrors_with_only_the_rbac_the_chart_grants(
    helm: Path,
    kubectl: Path,
    kube_apiserver: KubeApiServer,
    kube_api: client.ApiClient,
    namespace: str,
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    tmp_path: Path,
) -> None:
    kubeconfig = kube_apiserver.kubeconfig
    run_helm(
        helm,
        tmp_path,
        *("install", RELEASE, str(CHART), "--namespace", namespace),
        *("--set", "statusInterval=2"),
        kubeconfig=kubeconfig,
    )
    # The chart's operator Deployment, run as the kubelet would: its command and arguments,
    # and a token for the chart's ServiceAccount (TokenRequest), so the API server checks
    # every call the operator makes against the chart's Role.
    kubelet = LocalKubelet(kube_api, namespace, tmp_path / "pods").start()
    out = io.StringIO()
    try:
        wait_for(lambda: bool(kubelet.pods_of(RELEASE)), 30, "the operator's pod")
        for body in example_objects(
            kafka_a.bootstrap_servers, kafka_b.bootstrap_servers, namespace
        ):
            apply(kube_api, body)
        clusters = smoke.Clusters(kafka_a.bootstrap_servers, kafka_b.bootstrap_servers)
        mirrored = smoke.run(kube_api, namespace, "a-to-b", clusters, out, timeout=240)
    finally:
        pods = [pod for pods in kubelet.pods.values() for pod in pods]
        kubelet.stop()
        print(out.getvalue())
        for pod in pods:
            print(f"----- pod {pod.name} (restarts {pod.restarts}) -----\n{pod.log()[-4000:]}")
    assert mirrored, out.getvalue()
    operator_log = pods[0].log()
    assert "Forbidden" not in operator_log and " 403" not in operator_log


@pytest.mark.kube
def test_the_charts_rbac_is_no_broader_than_the_operator_needs(
    helm: Path, kubectl: Path, kube_apiserver: KubeApiServer, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = kube_apiserver.kubeconfig
    run_helm(
        helm,
        tmp_path,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        kubeconfig=kubeconfig,
    )
    account = f"system:serviceaccount:{namespace}:{RELEASE}"

    def allowed(*request: str) -> bool:
        return can_i(kubectl, kubeconfig, account, *request)

    # What reconciling needs, in the watched namespace.
    for request in (
        ("watch", "kafkamirrors.kafkamirror.io"),
        ("patch", "kafkamirrors.kafkamirror.io", "--subresource=status"),
        ("patch", "mirrortopicselections.kafkamirror.io", "--subresource=status"),
        ("get", "secrets"),
        ("create", "deployments.apps"),
        ("delete", "cronjobs.batch"),
        ("create", "rolebindings.rbac.authorization.k8s.io"),
        ("create", "events"),
    ):
        assert allowed(*request, "-n", namespace), request
    # And no more: Secrets by name only, nothing outside the namespace, no pods, no cluster
    # objects, no way to grant itself more.
    for request in (
        ("list", "secrets", "-n", namespace),
        ("watch", "secrets", "-n", namespace),
        ("update", "secrets", "-n", namespace),
        ("create", "pods", "-n", namespace),
        ("create", "pods/exec", "-n", namespace),
        ("get", "secrets", "-n", "kube-system"),
        ("create", "deployments.apps", "-n", "default"),
        ("get", "kafkamirrors.kafkamirror.io", "-n", "default"),
        ("delete", "kafkamirrors.kafkamirror.io", "-n", namespace),
        ("delete", "nodes"),
        ("list", "namespaces"),
        ("create", "clusterroles.rbac.authorization.k8s.io"),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
        ("escalate", "roles.rbac.authorization.k8s.io", "-n", namespace),
        ("bind", "roles.rbac.authorization.k8s.io", "-n", namespace),
        ("create", "customresourcedefinitions.apiextensions.k8s.io"),
        ("*", "*", "-n", namespace),
    ):
        assert not allowed(*request), request
