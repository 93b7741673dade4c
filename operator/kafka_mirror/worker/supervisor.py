"""Several mirroring processes in one pod.

Python runs one thread of bytecode at a time, so a pod that should use N cores runs N mirroring
processes. Each is a whole `MirrorWorker` and a member of the workers' consumer group, exactly
like N replicas: the group shares the partitions out, and each process commits only what the
target acknowledged of its own. The supervisor starts them, serves their combined metrics
(prometheus_client's multiprocess mode) and health on the pod's port, passes SIGTERM on, and
ends when any of them ends, stopping the others first: the pod's restart brings them all back
together, as it brings back a single worker.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
STALE_BEAT_SECONDS = 60.0  # as `LoopWatchdog`: a loop that has not gone round this long is dead
STOP_SECONDS = 25.0  # each commits within 20 s of SIGTERM, then leaves (the pod's grace is 60 s)
STACKS_SECONDS = 1.0  # for a hung process to print its stacks before it is killed
CGROUP_V2_CPU = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")


def cpu_limit() -> float | None:
    """The container's CPU limit in cores (its cgroup's CFS quota), None when unlimited."""
    try:
        if CGROUP_V2_CPU.exists():
            quota, period = CGROUP_V2_CPU.read_text().split()
            return None if quota == "max" else int(quota) / int(period)
        quota_us = int((CGROUP_V1_CPU / "cpu.cfs_quota_us").read_text())
        period_us = int((CGROUP_V1_CPU / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def process_count(configured: int | None) -> int:
    """As configured; else one per core of the CPU limit, rounded up (one without a limit),
    never more than the cores this process may run on."""
    if configured is not None:
        return configured
    limit = cpu_limit()
    wanted = 1 if limit is None else math.ceil(limit)
    return max(1, min(wanted, len(os.sched_getaffinity(0))))


@dataclass
class Health:
    """Where one mirroring process reports to the supervisor (shared memory)."""

    index: int
    beats: Any  # multiprocessing Array('d'): each loop's last beat, monotonic seconds
    ready: Any  # multiprocessing Array('b')

    def report(self, beat: float, ready: bool) -> None:
        self.beats[self.index] = beat
        self.ready[self.index] = 1 if ready else 0


Entry = Callable[[Path, int | None, Health | None], int]  # main.mirror


def _child(entry: Entry, config_path: Path, health: Health) -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
    )
    sys.exit(entry(config_path, None, health))


class Supervisor:
    def __init__(self, config_path: Path, count: int, port: int) -> None:
        self.config_path, self.count, self.port = config_path, count, port
        self.context = multiprocessing.get_context("spawn")  # no fork of a threaded parent
        # Shared memory the processes write their health into (`Health`).
        self.beats: Any = self.context.Array("d", count, lock=False)
        self.ready: Any = self.context.Array("b", count, lock=False)
        self.processes: list[multiprocessing.process.BaseProcess] = []
        # Each process is sent SIGTERM once: a second one could reach it while its interpreter
        # finalizes, when Python has put the default handler back, and kill it (exit -15).
        self.terminated: set[int] = set()

    def alive(self) -> bool:
        now = time.monotonic()
        return all(
            p.is_alive() and now - self.beats[i] < STALE_BEAT_SECONDS
            for i, p in enumerate(self.processes)
        )

    def all_ready(self) -> bool:
        return all(self.ready[i] for i in range(self.count))

    def run(self, entry: Entry) -> int:
        """Until a process ends (or SIGTERM ends them all); the highest exit code."""
        # Imported here: prometheus_client reads the directory's variable when first imported.
        directory = tempfile.mkdtemp(prefix="kafka-mirror-metrics-")
        os.environ[MULTIPROC_DIR_ENV] = directory
        from prometheus_client import CollectorRegistry, multiprocess

        from kafka_mirror.worker.metrics import serve

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        started = time.monotonic()
        for index in range(self.count):
            self.beats[index] = started
            health = Health(index, self.beats, self.ready)
            process = self.context.Process(
                target=_child,
                args=(entry, self.config_path, health),
                name=f"mirror-{index}",
            )
            process.start()
            self.processes.append(process)
        server = serve(registry, self.port, self.alive, self.all_ready)
        signal.signal(signal.SIGTERM, self._pass_on)
        signal.signal(signal.SIGINT, self._pass_on)
        try:
            wait([p.sentinel for p in self.processes])
            self._stop_all()
        finally:
            server.shutdown()
            shutil.rmtree(directory, ignore_errors=True)
        codes = [p.exitcode or 0 for p in self.processes]
        log.info("mirroring processes ended: exit codes %s", codes)
        return max(abs(code) for code in codes)

    def _pass_on(self, signum: int, _frame: FrameType | None) -> None:
        for process in self.processes:
            pid = process.pid
            if pid is None or not process.is_alive() or pid in self.terminated:
                continue
            if signum == signal.SIGTERM:
                self.terminated.add(pid)
            os.kill(pid, signum)

    def _stop_all(self) -> None:
        """One process ended: the others commit what the target acknowledged and leave."""
        self._pass_on(signal.SIGTERM, None)
        deadline = time.monotonic() + STOP_SECONDS
        for process in self.processes:
            process.join(max(deadline - time.monotonic(), 0))
            if process.is_alive() and process.pid is not None:
                log.error("%s did not stop in %.0f s: killing it", process.name, STOP_SECONDS)
                # Its threads' stacks into the log first (faulthandler, `mirror`): where it hung.
                os.kill(process.pid, signal.SIGUSR1)
                process.join(STACKS_SECONDS)
                process.kill()
                process.join()
