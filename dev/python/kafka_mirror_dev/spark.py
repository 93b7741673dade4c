"""A Spark standalone cluster, a master and one worker, started from PySpark's own distribution
(its `bin/spark-class` and jars): the audit's job runs on it unchanged, selected by its master
URL (`spec.audit.spark.master`, the job's `--master`)."""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_mirror_dev.kafka import DEV_JVM
from kafka_mirror_dev.processes import ServerProcess, free_port, port_open

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def export_dev_jvm() -> None:
    """Spark's JVMs started from this process and its children (`bin/spark-class`'s launcher,
    local drivers: a session, `kafka-mirror audit`) run with DEV_JVM, unless the environment
    gives them options: an audit of the tests' size took half the CPU time so (75 → 35 CPU-s)."""
    for variable in ("SPARK_LAUNCHER_OPTS", "SPARK_SUBMIT_OPTS"):
        os.environ.setdefault(variable, " ".join(DEV_JVM))


@dataclass
class SparkStandalone:
    workdir: Path
    cores: int = 1
    memory: str = "1g"
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    processes: list[ServerProcess] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def work_dir(self) -> Path:
        """Where the worker runs its executors: one directory per application and executor."""
        return self.workdir / "work"

    def _process(self, name: str, arguments: list[str]) -> ServerProcess:
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_JAVA_OPTS": " ".join(DEV_JVM),  # the master's and the worker's
        }
        command = [str(spark_home() / "bin" / "spark-class"), *arguments]
        process = ServerProcess(name, command, self.workdir / f"{name}.log", env)
        process.start()
        self.processes.append(process)
        return process

    def state(self) -> dict[str, Any]:
        """The master's view (its web UI's JSON): workers, running and completed applications."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return dict(json.load(response))

    def start(self, timeout: float = 60.0) -> None:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()  # a start that failed leaves no JVM behind
            raise

    def _start(self, timeout: float) -> None:
        master = self._process(
            "spark-master",
            [
                MASTER_CLASS,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
            ],
        )
        master.wait_until(lambda: port_open(self.ui_port), timeout, "listening")
        worker = self._process(
            "spark-worker",
            [
                WORKER_CLASS,
                *("--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory),
                *("--work-dir", str(self.work_dir), "--webui-port", str(free_port())),
                self.master_url,
            ],
        )
        worker.wait_until(lambda: self.alive_workers() == 1, timeout, "registered")

    def alive_workers(self) -> int:
        try:
            return int(self.state().get("aliveworkers", 0))
        except (OSError, ValueError):
            # The master's UI listens before its pages are attached (a 404 meanwhile: seen on a
            # cold start under load).
            return 0

    def executor_logs(self) -> list[Path]:
        return sorted(self.work_dir.glob("app-*/*/stderr"))

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
