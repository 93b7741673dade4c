"""`kafka-mirror worker --config FILE`: the process inside each worker pod.

It mirrors itself, or, when the pod should use several cores, starts that many mirroring
processes (`supervisor.py`) and serves their metrics and health.
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from confluent_kafka import KafkaException
from pydantic import ValidationError

from kafka_mirror.api.worker_config import MissingCredential, load
from kafka_mirror.worker import batches
from kafka_mirror.worker.at_least_once import AtLeastOnceWorker
from kafka_mirror.worker.exactly_once import ExactlyOnceWorker
from kafka_mirror.worker.metrics import WorkerMetrics, serve
from kafka_mirror.worker.mirror import MirrorWorker, WorkerFailed
from kafka_mirror.worker.supervisor import Health, Supervisor, process_count

log = logging.getLogger("kafka_mirror.worker")

GC_YOUNG_THRESHOLD = 100_000  # allocations between two collections (Python's default: 700)
HEALTH_REPORT_SECONDS = 1.0


def run(config_path: Path) -> int:
    """Run until SIGTERM/SIGINT (exit 0, after the final commit) or a permanent failure (1)."""
    try:
        config = load(config_path)
    except (OSError, ValueError, ValidationError) as error:
        log.error("cannot start with %s: %s", config_path, error)
        return 1
    # Several replicas on one host (tests, benchmarks) need their own ports.
    port = int(os.environ.get("KAFKA_MIRROR_METRICS_PORT", config.metrics_port))
    compiled = batches.__file__.endswith(".so")
    log.info("hot path %s", "compiled" if compiled else "interpreted (slower; setup.py compiles)")
    count = process_count(config.processes)
    if count == 1:
        return mirror(config_path, port, None)
    log.info("starting %d mirroring processes", count)
    return Supervisor(config_path, count, port).run(mirror)


def mirror(config_path: Path, port: int | None, health: Health | None) -> int:
    """One mirroring process: serving its own endpoints on `port`, or reporting its health to
    the supervisor that serves them."""
    # A crash in librdkafka (a segfault, an abort) prints every thread's Python stack before
    # the process dies: the log then names the call; `kill -USR1` prints them on demand. Here as
    # well as in `cli.main`: the supervisor's mirroring processes are spawned, not forked.
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1)
    metrics = WorkerMetrics()
    try:
        exactly_once = load(config_path).delivery == "exactlyOnce"
        worker = (ExactlyOnceWorker if exactly_once else AtLeastOnceWorker)(config_path, metrics)
    except (MissingCredential, OSError, ValueError, KafkaException) as error:
        # KafkaException: librdkafka refused a client setting of the mirror's `config`.
        log.error("cannot start with %s: %s", config_path, error)
        return 1
    stop_serving: Callable[[], None]
    if health is None:
        assert port is not None
        server = serve(metrics.registry, port, worker.watchdog.alive, worker.ready)
        stop_serving = server.shutdown
    else:
        stop_serving = report_health(worker, health)

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info(
            "received %s: finishing in-flight records and leaving the group",
            signal.Signals(signum).name,
        )
        worker.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The loop allocates a few objects per record, none of them in reference cycles: keep the
    # start-up heap out of collections and collect the youngest generation far less often.
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)
    try:
        worker.run()
    except WorkerFailed as failure:
        log.error("worker failed: %s", failure)
        return 1
    finally:
        stop_serving()
    return 0


def report_health(worker: MirrorWorker, health: Health) -> Callable[[], None]:
    """Copy the loop's last beat and readiness to the supervisor every second; returns stop."""
    stopped = threading.Event()

    def report() -> None:
        while not stopped.wait(HEALTH_REPORT_SECONDS):
            health.report(worker.watchdog.last, worker.ready())

    threading.Thread(target=report, name="health", daemon=True).start()
    return stopped.set


def main(config_path: Path) -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
    )
    sys.exit(run(config_path))
