"""The real operator (`python -m kafka_mirror operator`) as a local process, for the demo, the
tests and the benchmarks."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kafka_mirror.devstack.processes import free_port


class OperatorProcess:
    def __init__(
        self, kubeconfig: Path, namespace: str, workdir: Path, status_interval: float = 2.0
    ) -> None:
        self.kubeconfig, self.namespace = kubeconfig, namespace
        self.status_interval = status_interval
        self.log_path = workdir / "operator.log"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        command = [
            *(sys.executable, "-m", "kafka_mirror", "operator"),
            *("--kubeconfig", str(self.kubeconfig), "--namespace", self.namespace),
            *("--status-interval", str(self.status_interval)),
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
