"""The mirroring loop's own work per record, apart from Kafka (a micro-benchmark).

`BatchSender.send` is given consumer batches of real confluent-kafka `Message`s (5,000
records, runs of 500 per partition as librdkafka hands them out) and produces them with a
real librdkafka producer that has no broker to reach (its queue is emptied between batches).
The floor is the same produce calls with nothing else: the difference is the loop's own
interpreter work per record (flows, provenance header, size check, report sampling).

    .venv/bin/python bench/hot_path.py

Prints nanoseconds per record at 100 B and 1 KB (the best of 7 runs of 100,000 records, the
loop and the floor taking turns) and writes them to bench/results/hot_path.json.
"""

from __future__ import annotations

import gc
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from common import RESULTS, summary_header
from confluent_kafka import Message, Producer

sys.path.insert(0, str(Path(__file__).parents[1]))  # the tests' fake clients
from tests.helpers.worker_fakes import (
    PARTITIONS,
    REMOTE,
    TOPIC,
    FakeClients,
    Source,
    Target,
    fake_worker,
)

from kafka_mirror.kafka.formats import PROVENANCE_HEADER
from kafka_mirror.worker.main import GC_YOUNG_THRESHOLD

BATCH, RUN, BATCHES, RUNS = 5000, 500, 20, 7
KEY = b"key-000001"


def batches(size: int) -> list[list[Message]]:
    value = b"x" * (size - len(KEY))
    offsets = [0] * PARTITIONS
    out = []
    for _ in range(BATCHES):
        batch: list[Message] = []
        while len(batch) < BATCH:
            partition = len(batch) // RUN % PARTITIONS
            for _ in range(RUN):
                batch.append(
                    Message(
                        topic=TOPIC,
                        partition=partition,
                        offset=offsets[partition],
                        key=KEY,
                        value=value,
                        timestamp=(1, 1_700_000_000_000),
                    )
                )
                offsets[partition] += 1
        out.append(batch)
    return out


def main() -> None:
    producer = Producer(
        {
            "bootstrap.servers": "127.0.0.1:9",  # nothing there: records stay queued
            "enable.idempotence": True,
            "queue.buffering.max.messages": 2 * BATCH,
            "queue.buffering.max.kbytes": 2**21,
            "log_level": 0,
        }
    )

    def emptied() -> None:
        producer.purge(in_queue=True, in_flight=False, blocking=False)
        producer.poll(0)

    def loop(size: int) -> Callable[[], float]:
        def run() -> float:
            clients = FakeClients(Source(), Target(), random.Random(1), 10**9)
            worker = fake_worker(clients)  # a fresh one: every record is new to it
            clients.producer = clients.syncs_producer = producer  # type: ignore[assignment]
            started = time.perf_counter()
            for batch in data[size]:
                worker.sender.send(batch)
                emptied()
            return time.perf_counter() - started

        return run

    def floor(size: int) -> Callable[[], float]:
        header: list[tuple[str, str | bytes | None]] = [(PROVENANCE_HEADER, bytes(34))]

        def run() -> float:
            produce = producer.produce
            started = time.perf_counter()
            for batch in data[size]:
                for m in batch:
                    produce(REMOTE, m.value(), m.key(), m.partition(), None, None, 0, header)  # type: ignore[arg-type]
                emptied()
            return time.perf_counter() - started

        return run

    data = {size: batches(size) for size in (100, 1024)}
    gc.freeze()  # as the worker's process runs its loop (`worker/main.py`)
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)
    runs = {
        f"{what}_{size}B_ns": make(size)
        for size in data
        for what, make in (("loop", loop), ("produce_only", floor))
    }
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(RUNS):  # taking turns: a busy moment of the machine does not fall on one
        for name, run in runs.items():
            best[name] = min(best[name], run())
    figures = {name: round(seconds / (BATCH * BATCHES) * 1e9) for name, seconds in best.items()}
    for size in data:
        figures[f"loop_own_work_{size}B_ns"] = (
            figures[f"loop_{size}B_ns"] - figures[f"produce_only_{size}B_ns"]
        )
    what = "the loop's work per record, apart from Kafka"
    summary = {**summary_header(what, "hot_path.py"), **figures}
    for name, value in figures.items():
        print(f"{name}: {value}")
    (RESULTS / "hot_path.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
