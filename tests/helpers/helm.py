"""Run the Helm built from its Go module, its state kept under a directory of the test's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from kafka_mirror_dev.builds import REPO_ROOT

CHART = REPO_ROOT / "charts" / "kafka-mirror-operator"


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
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def executor_policy(
    helm: Path, home: Path, release: str, master: str, audit_image: str
) -> list[dict[str, Any]]:
    """The chart's admission policy for the audit's executors, where a k8s:// master is allowed."""
    rendered = run_helm(
        helm,
        home,
        *("template", release, str(CHART), "--show-only", "templates/auditpolicy.yaml"),
        *("--set", f"auditImage={audit_image}"),
        *("--set-json", f"allowed.sparkMasters={json.dumps([master])}"),
    )
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def delete_policy(api: client.ApiClient, documents: list[dict[str, Any]]) -> None:
    """Delete what `executor_policy` rendered (cluster-wide objects: they outlive a namespace)."""
    admission = client.AdmissionregistrationV1Api(api)
    for document in documents:
        name = document["metadata"]["name"]
        if document["kind"] == "ValidatingAdmissionPolicyBinding":
            admission.delete_validating_admission_policy_binding(name)
        else:
            admission.delete_validating_admission_policy(name)
