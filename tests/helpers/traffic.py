"""A steady producer of checkable records into topics of cluster A, in a process of its own.

Record `i` (0, 1, 2, …) is a pure function of the `TrafficSpec` and `i`: its topic (round robin
over the topics), partition (round robin over the topic's partitions), key (`<run>-<i>`, or
none), value (`size` bytes, or `large_size` for every `large_every`-th record), headers and
timestamp (the moment the schedule has it due, so timestamps follow the clock and stay within
the brokers' limits). So any record can be regenerated from the spec and `i`, and every record's
content is unique (the value and a header hold `i`, the key and a header the run): a copy on the
target can be told from a duplicate.

The generator is a child process (`python -m tests.helpers.traffic SPEC STATS`) so that the
test's own threads do not take CPU time or the GIL from it; it writes its figures to a JSON
file twice a second, and a last time once everything it produced is acknowledged.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from kafka_mirror.worker.clients import ONE_REQUEST_IN_FLIGHT
from kafka_mirror_dev.builds import REPO_ROOT
from kafka_mirror_dev.processes import ChildProcess
from tests.helpers.kafka import Record, admin_for
from tests.helpers.worker import wait_for

# Kafka's default max.message.bytes (a topic's largest record batch).
BROKER_BATCH_LIMIT = 1_048_588
# A record with a value this large, alone in its batch, is 894 bytes under that limit with our
# key and headers (1,047,694 bytes), and still about 870 under it with the mirror's provenance
# header added on the target. A test after a record right at the limit passes its own size.
NEAR_LIMIT_VALUE_SIZE = BROKER_BATCH_LIMIT - 1_024
# The generator produces what is due at most this often: a tick's records go in one batch
# (they linger 50 ms anyway), with the timestamps of their schedule.
TICK_SECONDS = 0.01


@dataclass(frozen=True)
class TrafficSpec:
    """What the generator writes, and how fast: `rate` records a second over all topics, until
    `count` records (None: until stopped)."""

    bootstrap: str
    topics: dict[str, int]  # topic → its partition count
    rate: int = 20_000
    count: int | None = None
    size: int = 100
    large_every: int = 0  # records 0, n, 2n, … get a `large_size` value (0: none)
    large_size: int = NEAR_LIMIT_VALUE_SIZE
    keyed: bool = True  # False: records without a key (a compacted topic refuses them)
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    base_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @classmethod
    def for_topics(cls, bootstrap: str, topics: Sequence[str], **options: Any) -> TrafficSpec:
        """A spec for existing `topics`, with their partition counts read from the cluster."""
        listed = admin_for(bootstrap).list_topics(timeout=10).topics
        return cls(bootstrap, {t: len(listed[t].partitions) for t in topics}, **options)

    @cached_property
    def _topic_names(self) -> list[str]:
        return list(self.topics)

    @cached_property
    def _filler(self) -> bytes:
        """Bytes that values are cut from: random, so compression cannot shrink them."""
        return random.Random(self.run).randbytes(max(self.size, self.large_size) + 256)

    def record(self, i: int) -> tuple[str, Record]:
        """Record `i`: its topic and content."""
        names = self._topic_names
        topic = names[i % len(names)]
        size = self.large_size if self.large_every and i % self.large_every == 0 else self.size
        start = i % 256
        headers: tuple[tuple[str, bytes | None], ...] = (
            ("seq", b"%d" % i),
            ("run", self.run.encode()),
            ("size", b"%d" % size),
        )
        if i % 5 == 0:
            headers += (("nullable", None),)  # a header without a value, as Kafka allows
        return topic, Record(
            key=self.key(i) if self.keyed else None,
            value=(b"%d:" % i + self._filler[start : start + size])[:size],
            headers=headers,
            timestamp=self.base_ms + i * 1000 // self.rate,
            partition=(i // len(names)) % self.topics[topic],
        )

    def key(self, i: int) -> bytes:
        return b"%s-%012d" % (self.run.encode(), i)

    def sequence(self, key: bytes) -> int:
        """The `i` of the record with `key`."""
        run, _, i = key.partition(b"-")
        if run != self.run.encode():
            raise ValueError(f"{key!r} is not a record of run {self.run}")
        return int(i)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TrafficSpec:
        return cls(**json.loads(text))


@dataclass
class TrafficStats:
    """The generator's figures. It produced records 0 … `produced` - 1."""

    produced: int = 0
    acked: dict[str, int] = field(default_factory=dict)  # acknowledged, per topic
    failed: int = 0
    errors: list[str] = field(default_factory=list)  # the first few delivery errors
    elapsed: float = 0.0  # seconds since the first record was due, when these were written
    max_behind: int = 0  # the most records ever due but not yet produced: how steady it was
    done: bool = False  # everything produced is acknowledged (or failed)

    @property
    def acked_total(self) -> int:
        return sum(self.acked.values())


class TrafficGenerator(ChildProcess):
    """The generator's child process: `start`, then `stats` while it runs, `finish`."""

    def __init__(self, spec: TrafficSpec, workdir: Path, name: str = "traffic") -> None:
        super().__init__(workdir / f"{name}.log")
        self.spec = spec
        self.spec_path = workdir / f"{name}.spec.json"
        self.stats_path = workdir / f"{name}.stats.json"

    def start(self) -> TrafficGenerator:
        self.spec_path.write_text(self.spec.to_json())
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        command = [sys.executable, "-m", "tests.helpers.traffic"]
        self.spawn(
            [*command, str(self.spec_path), str(self.stats_path)],
            env={**os.environ, "PYTHONPATH": path},
        )
        wait_for(self.stats_path.exists, 30, "the traffic generator to start", every=0.1)
        return self

    def stats(self) -> TrafficStats:
        return TrafficStats(**json.loads(self.stats_path.read_text()))

    def stats_from_now(self) -> TrafficStats:
        """Figures written after this call (the file can be half a second old, more on a busy
        machine): every record from their `produced` on was produced after it."""
        seen = self.stats()
        fresh = [seen]

        def written() -> bool:
            fresh[0] = self.stats()
            return fresh[0].elapsed != seen.elapsed or fresh[0].done

        wait_for(
            written, 30, lambda: f"the traffic generator's next figures: {fresh[0]}", every=0.05
        )
        return fresh[0]

    def finish(self, timeout: float = 300) -> TrafficStats:
        """Stop producing (a spec with a count: once it has produced them all) and wait until
        everything produced is acknowledged; the final figures."""
        assert self.process is not None
        if self.spec.count is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        assert code == 0, f"the traffic generator exited with {code}:\n{self.log()[-3000:]}"
        return self.stats()


# --- the child process ------------------------------------------------------------------------


def _write(stats: TrafficStats, path: Path) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(asdict(stats)))
    partial.replace(path)  # readers never see half a file


def generate(spec: TrafficSpec, stats_path: Path, stopping: threading.Event) -> TrafficStats:
    """Produce `spec`'s records on schedule until its count or `stopping`; then wait for the
    acknowledgements. Falling behind (a slow or restarting cluster) is caught up at once."""
    producer = Producer(
        {
            "bootstrap.servers": spec.bootstrap,
            "acks": "all",
            # Retries after a broker restart write no second copy to A: what A holds is what
            # the generator wrote, once each.
            "enable.idempotence": True,
            # As the worker's producer: else librdkafka's idempotent producer spins at a whole
            # core while a slow broker answers (docs/performance.md), on a machine the suite
            # already keeps busy.
            **ONE_REQUEST_IN_FLIGHT,
            # Batches of 50 ms, not librdkafka's 5: a tenth of the produce requests at the
            # suite's rates, whose handling cost cluster A more CPU than their records (a
            # fault-matrix case's brokers: 84 → 60 CPU-s). What the mirror reads is the same.
            "linger.ms": 50,
            # Above any record we make, so that the broker's limit is the one that applies.
            "message.max.bytes": 2 * BROKER_BATCH_LIMIT,
            # A record waits up to 5 minutes (a broker away) before it counts as failed.
            "message.timeout.ms": 300_000,
        }
    )
    stats = TrafficStats(acked=dict.fromkeys(spec.topics, 0))

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is None:
            stats.acked[str(message.topic())] += 1
        else:
            stats.failed += 1
            if len(stats.errors) < 5:
                stats.errors.append(str(error))

    end = spec.count if spec.count is not None else sys.maxsize
    started = time.monotonic()
    report_at = started
    while not stopping.is_set() and stats.produced < end:
        now = time.monotonic()
        due = min(int((now - started) * spec.rate) + 1, end)
        stats.max_behind = max(stats.max_behind, due - stats.produced)
        while stats.produced < due:
            topic, record = spec.record(stats.produced)
            assert record.partition is not None and record.timestamp is not None
            try:
                producer.produce(
                    topic,
                    record.value,
                    record.key,
                    partition=record.partition,
                    timestamp=record.timestamp,
                    headers=list(record.headers),
                    on_delivery=delivered,
                )
            except BufferError:  # the local queue is full (the cluster is slow or away)
                producer.poll(0.05)
                break
            stats.produced += 1
        producer.poll(0)
        if now >= report_at:
            stats.elapsed = now - started
            _write(stats, stats_path)
            report_at = now + 0.5
        # Until the next record is due, but awake often enough to see `stopping`, and not
        # before a tick: waking for each record cost 45 µs of CPU a record at 10,000 a second.
        due_in = started + stats.produced / spec.rate - time.monotonic()
        time.sleep(min(max(due_in, TICK_SECONDS), 0.05))
    while len(producer) > 0:
        producer.flush(0.5)
        stats.elapsed = time.monotonic() - started
        _write(stats, stats_path)
    stats.done = True
    stats.elapsed = time.monotonic() - started
    _write(stats, stats_path)
    return stats


def main(argv: Sequence[str]) -> None:
    spec_path, stats_path = (Path(arg) for arg in argv)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signal, _frame: stopping.set())
    generate(TrafficSpec.from_json(spec_path.read_text()), stats_path, stopping)


if __name__ == "__main__":
    main(sys.argv[1:])
