"""Run the Helm built from its Go module, its state kept under a directory of the test's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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
