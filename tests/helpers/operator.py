"""The real operator (`python -m kafka_mirror operator`) as a local process, and helpers to read
the objects it writes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.devstack.processes import free_port

STATUS_INTERVAL = 2.0


class OperatorProcess:
    def __init__(self, kubeconfig: Path, namespace: str, workdir: Path) -> None:
        self.kubeconfig, self.namespace = kubeconfig, namespace
        self.log_path = workdir / "operator.log"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        command = [
            *(sys.executable, "-m", "kafka_mirror", "operator"),
            *("--kubeconfig", str(self.kubeconfig), "--namespace", self.namespace),
            *("--status-interval", str(STATUS_INTERVAL)),
            *("--liveness", f"http://127.0.0.1:{self.port}/healthz"),
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not self.alive():
            assert self.running(), f"the operator exited:\n{self.log()[-3000:]}"
            assert time.monotonic() < deadline, "the operator's liveness endpoint never answered"
            time.sleep(0.2)
        return self

    def alive(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                return True
        except OSError:
            return False

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 30) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def get_custom(api: client.ApiClient, namespace: str, plural: str, name: str) -> dict[str, Any]:
    found: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, name
    )
    return dict(found)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    """The condition of that type, or an empty dict."""
    for item in obj.get("status", {}).get("conditions", []):
        if item["type"] == type_:
            return dict(item)
    return {}


def exists(read: Any, name: str, namespace: str) -> bool:
    try:
        read(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
