"""The whole dev stack: Kafka clusters A and B and a kube-apiserver, started in the background.

`kafka-mirror dev up` starts it (or finds it running), `dev env` prints its addresses as shell
exports, `dev down` stops it. Its state file records the processes, so each command can be run
from any shell.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pydantic import BaseModel

from kafka_mirror.audit.spark import JARS_ENV
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.builds import HELM, KUBECTL, cache_dir, progress, spark_jars_dir
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.processes import pid_alive, stop_pid


def stack_dir() -> Path:
    return cache_dir() / "stack"


def _state_file() -> Path:
    return stack_dir() / "state.json"


class StackInfo(BaseModel):
    """What a running stack offers, as environment variables for clients and tests."""

    kafka_a: str
    kafka_b: str
    kubeconfig: Path
    helm: Path
    kubectl: Path | None = None  # stacks started before kubectl was part of it have none
    spark_jars: Path | None = None  # the same for the audit's jars
    pids: tuple[int, ...]

    def env(self) -> dict[str, str]:
        return {
            "KAFKA_A_BOOTSTRAP": self.kafka_a,
            "KAFKA_B_BOOTSTRAP": self.kafka_b,
            "KUBECONFIG": str(self.kubeconfig),
            "HELM": str(self.helm),
            **({"KUBECTL": str(self.kubectl)} if self.kubectl else {}),
            # `kafka-mirror audit` from this shell finds Spark's Kafka jars as in the image.
            **({JARS_ENV: str(self.spark_jars)} if self.spark_jars else {}),
        }

    def alive(self) -> bool:
        return all(pid_alive(pid) for pid in self.pids)


def running() -> StackInfo | None:
    """The stack that `dev up` started, if all of its processes still run."""
    if not _state_file().exists():
        return None
    info = StackInfo.model_validate_json(_state_file().read_text())
    return info if info.alive() else None


def up() -> StackInfo:
    """Start the stack unless it already runs; idempotent."""
    existing = running()
    if existing is not None:
        return existing
    down()
    root = stack_dir()
    helm, kubectl, spark_jars = HELM.ensure(), KUBECTL.ensure(), spark_jars_dir()
    kafka_a = LocalKafka("A", root / "kafka-A")
    kafka_b = LocalKafka("B", root / "kafka-B")
    kube = KubeApiServer(root / "kube")
    started: list[int] = []
    try:
        for name, part in (("Kafka A", kafka_a), ("Kafka B", kafka_b), ("kube-apiserver", kube)):
            progress(f"starting {name}")
            part.start()
        for process in (kafka_a.process, kafka_b.process, kube.etcd, kube.apiserver):
            assert process is not None and process.pid is not None
            started.append(process.pid)
    except BaseException:
        for part in (kafka_a, kafka_b, kube):
            part.stop()
        raise
    info = StackInfo(
        kafka_a=kafka_a.bootstrap_servers,
        kafka_b=kafka_b.bootstrap_servers,
        kubeconfig=kube.kubeconfig,
        helm=helm,
        kubectl=kubectl,
        spark_jars=spark_jars,
        pids=tuple(started),
    )
    _state_file().write_text(info.model_dump_json(indent=2))
    return info


def down() -> None:
    """Stop whatever `dev up` started and forget its data."""
    if _state_file().exists():
        for pid in StackInfo.model_validate_json(_state_file().read_text()).pids:
            stop_pid(pid)
    shutil.rmtree(stack_dir(), ignore_errors=True)
