"""The real operator (`python -m kafka_mirror operator`) as a local process, for the demo, the
tests and the benchmarks."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kafka_mirror_dev.processes import ChildProcess, answers, free_port, metric_samples


class OperatorProcess(ChildProcess):
    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        workdir: Path,
        status_interval: float = 2.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.kubeconfig, self.namespace = kubeconfig, namespace
        self.status_interval = status_interval
        self.extra_args = extra_args  # the allow-list flags, say
        self.port = free_port()
        self.metrics_port = free_port()
        super().__init__(workdir / "operator.log")

    def start(self) -> OperatorProcess:
        command = [
            *(sys.executable, "-m", "kafka_mirror", "operator"),
            *("--kubeconfig", str(self.kubeconfig), "--namespace", self.namespace),
            *("--status-interval", str(self.status_interval)),
            *("--liveness", f"http://127.0.0.1:{self.port}/healthz"),
            *("--metrics-port", str(self.metrics_port)),
            *self.extra_args,
        ]
        self.spawn(command, cores=True)
        deadline = time.monotonic() + 60
        while not self.alive():
            assert self.running(), f"the operator exited:\n{self.log()[-3000:]}"
            assert time.monotonic() < deadline, "the operator's liveness endpoint never answered"
            time.sleep(0.2)
        return self

    def alive(self) -> bool:
        return answers(f"http://127.0.0.1:{self.port}/healthz")

    def status_loop_seen(self) -> str:
        """When the status loop last finished a tick, as its metric says: for a failure
        message, which then tells a loop that stood still from refreshes that failed."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        ticks = metric_samples(url, "kafka_mirror_operator_status_refreshed_timestamp_seconds")
        if ticks is None:
            if self.process is not None and self.process.poll() is not None:
                # A crash in native code: the Python stacks at the log's end (faulthandler),
                # the native ones from its core.
                ended = f"{self.log()[-3000:]}\n{self.native_stacks(6000)}"
                return f"the operator exited with {self.process.returncode}: {ended}"
            return "the operator's metrics did not answer"
        if not any(ticks):  # 0 until the first tick
            return "the operator has not finished a status tick"
        ago = time.time() - max(ticks)
        return f"the operator's status loop last finished a tick {ago:.0f} s ago"
