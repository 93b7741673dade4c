"""Run the kubectl built from its Go module against a real API server."""

from __future__ import annotations

import json
import os
import subprocess
import time
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


def wait_established(binary: Path, kubeconfig: Path, timeout: float = 60) -> None:
    """Wait until every CRD on the API server is Established. Not `kubectl wait` nor a jsonpath
    filter on the conditions: both fail, rather than wait, on a CRD whose conditions are still
    null, as a CRD applied a moment before has (seen in busy runs)."""
    deadline = time.monotonic() + timeout
    while True:
        listed = json.loads(kubectl(binary, kubeconfig, "get", "crd", "-o", "json").stdout)
        waiting = [
            crd["metadata"]["name"]
            for crd in listed["items"]
            if not any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions") or []
            )
        ]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"CRDs not Established after {timeout:.0f} s: {waiting}")
        time.sleep(0.25)


class Kubectl:
    """kubectl bound to one API server and namespace: `kc("get", "kafkamirrors")`."""

    def __init__(self, binary: Path, kubeconfig: Path, namespace: str) -> None:
        self.binary, self.kubeconfig, self.namespace = binary, kubeconfig, namespace

    def __call__(self, *args: str, timeout: float = 120) -> str:
        result = kubectl(self.binary, self.kubeconfig, "-n", self.namespace, *args, timeout=timeout)
        return result.stdout
