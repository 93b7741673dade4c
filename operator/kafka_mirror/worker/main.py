"""`kafka-mirror worker --config FILE`: the process inside each worker pod."""

from __future__ import annotations

import faulthandler
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from confluent_kafka import KafkaException

from kafka_mirror.worker.config import MissingCredential
from kafka_mirror.worker.metrics import WorkerMetrics, serve
from kafka_mirror.worker.mirror import MirrorWorker, WorkerFailed

log = logging.getLogger("kafka_mirror.worker")

GC_YOUNG_THRESHOLD = 100_000  # allocations between two collections (Python's default: 700)


def run(config_path: Path) -> int:
    """Run until SIGTERM/SIGINT (exit 0, after the final commit) or a permanent failure (1)."""
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1` prints every thread's stack
    metrics = WorkerMetrics()
    try:
        worker = MirrorWorker(config_path, metrics)
    except (MissingCredential, OSError, ValueError, KafkaException) as error:
        # KafkaException: librdkafka refused a client setting of the mirror's `config`.
        log.error("cannot start with %s: %s", config_path, error)
        return 1
    # Several replicas on one host (tests standing in for the kubelet) need their own ports.
    port = int(os.environ.get("KAFKA_MIRROR_METRICS_PORT", worker.config.metrics_port))
    server = serve(metrics, port, worker.watchdog.alive, worker.ready)

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
        server.shutdown()
    return 0


def main(config_path: Path) -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    sys.exit(run(config_path))
