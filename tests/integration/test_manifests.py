"""The kubectl and GitOps install paths, and the examples, against a real API server."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.builds import REPO_ROOT, keda_scaledobject_crd
from kafka_mirror_dev.manifests import INSTALL_MANIFEST, render_install_manifest
from tests.helpers.kubectl import kubectl as run_kubectl
from tests.helpers.kubectl import wait_established

pytestmark = pytest.mark.kube

EXAMPLES = sorted((REPO_ROOT / "examples").rglob("*.yaml"))


@pytest.mark.helm
def test_the_install_manifest_is_what_the_chart_renders(helm: Path, tmp_path: Path) -> None:
    expected = render_install_manifest(helm, tmp_path)
    assert INSTALL_MANIFEST.read_text() == expected, "run `kafka-mirror dev manifests`"


def test_kubectl_apply_installs_and_the_kustomize_base_matches_it(
    kubectl: Path, bare_apiserver: KubeApiServer
) -> None:
    def run(*args: str) -> str:
        return run_kubectl(kubectl, bare_apiserver.kubeconfig, *args).stdout

    # The README's kubectl path.
    crds = REPO_ROOT / "crds"
    run("apply", "--server-side", "-f", str(crds))
    wait_established(kubectl, bare_apiserver.kubeconfig)
    run("apply", "-f", str(INSTALL_MANIFEST))
    deployment = run(
        "get", "deployment", "-n", "kafka-mirror", "kafka-mirror-operator", "-o", "name"
    )
    assert deployment.strip() == "deployment.apps/kafka-mirror-operator"
    # The GitOps base holds the same objects: applying it on top changes nothing.
    diff = run_kubectl(
        kubectl,
        bare_apiserver.kubeconfig,
        "diff",
        "-k",
        str(REPO_ROOT / "deploy" / "base"),
        check=False,
    )
    assert diff.returncode == 0, f"the kustomize base differs from the kubectl path:\n{diff.stdout}"
    run("apply", "--server-side", "-k", str(REPO_ROOT / "deploy" / "base"))
    # The example overlay renders and the API server accepts it.
    run(
        "apply",
        "--server-side",
        "--dry-run=server",
        "-k",
        str(REPO_ROOT / "deploy" / "overlays" / "example"),
    )


@pytest.mark.parametrize(
    "example", EXAMPLES, ids=lambda p: str(p.relative_to(REPO_ROOT / "examples"))
)
def test_every_example_is_accepted_by_the_api_server(
    kubectl: Path, bare_apiserver: KubeApiServer, example: Path
) -> None:
    kubeconfig = bare_apiserver.kubeconfig
    # KEDA's own ScaledObject CRD, for the example that scales a mirror with KEDA.
    for crds in (REPO_ROOT / "crds", keda_scaledobject_crd()):
        run_kubectl(kubectl, kubeconfig, "apply", "--server-side", "-f", str(crds))
    wait_established(kubectl, kubeconfig)
    run_kubectl(
        kubectl, kubeconfig, "apply", "-n", "default", "--dry-run=server", "-f", str(example)
    )
