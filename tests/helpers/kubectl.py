"""Run the kubectl built from its Go module against a real API server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def kubectl(
    binary: Path, kubeconfig: Path, *args: str, timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`kubectl --kubeconfig <kubeconfig> <args>`, its output captured; an AssertionError with
    its stderr if it fails, unless `check=False`. The user's kuberc preferences are ignored and
    the discovery cache sits next to the kubeconfig, not in ~/.kube."""
    command = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--cache-dir={kubeconfig.parent / 'kubectl-cache'}",
        *args,
    ]
    env = {**os.environ, "KUBERC": "off"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(
            f"`kubectl {' '.join(args)}` exited {result.returncode}:\n{result.stderr}"
        )
    return result


class Kubectl:
    """kubectl bound to one API server and namespace: `kc("get", "kafkamirrors")`."""

    def __init__(self, binary: Path, kubeconfig: Path, namespace: str) -> None:
        self.binary, self.kubeconfig, self.namespace = binary, kubeconfig, namespace

    def __call__(self, *args: str, timeout: float = 120) -> str:
        result = kubectl(self.binary, self.kubeconfig, "-n", self.namespace, *args, timeout=timeout)
        return result.stdout
