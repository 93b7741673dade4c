"""The provenance header's cost on the worker's hot path, per record (a micro-benchmark).

The header gained the source topic's ID (16 bytes after the offset). Timed, each over 8
partitions' flows taken in turn as a batch would:

- `former`: the header before the ID, `prefix + pack(offset)` (the loop's old expression);
- `concatenated`: the ID appended, `prefix + pack(offset) + suffix`;
- `packed`: what the loop does now, one precompiled struct per flow,
  `pack(prefix, offset, suffix)`;
- the identity policy's cycle test on a record with no provenance header, with a copy's header
  (skipped) and with a derived record's (mirrored).

    .venv/bin/python bench/provenance_header.py

Prints nanoseconds per record (the best of 15 runs of 200,000 records each, the runs of all
of them taking turns) and writes them to bench/results/provenance_header.json.
"""

from __future__ import annotations

import json
import struct
import timeit
from collections.abc import Callable

from common import RESULTS

from kafka_mirror.kafka.formats import PROVENANCE_HEADER, Provenance, is_copy_from
from kafka_mirror.worker.flows import PartitionFlow
from kafka_mirror.worker.offsets import SyncEmitter

RECORDS, RUNS = 200_000, 15
TOPIC_ID, OTHER_ID = bytes(range(16)), bytes(range(16, 32))


def flows() -> list[PartitionFlow]:
    return [
        PartitionFlow(
            "orders",
            partition,
            "orders.A",
            Provenance.prefix("A", partition),
            SyncEmitter(100),
            lambda sync, due: None,
            0,
            provenance_suffix=Provenance.suffix(TOPIC_ID),
        )
        for partition in range(8)
    ]


def per_record(runs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """The best time of each, in nanoseconds per record; the runs take turns, so that a busy
    moment of the machine does not fall on one of them only."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(RUNS):
        for name, run in runs.items():
            best[name] = min(best[name], timeit.timeit(run, number=1))
    return {name: seconds / RECORDS * 1e9 for name, seconds in best.items()}


def main() -> None:
    partitions = flows()
    work = [(flow, offset) for offset in range(RECORDS // 8) for flow in partitions]
    pack_offset = struct.Struct(">q").pack

    def former() -> None:
        for flow, offset in work:
            flow.provenance_prefix + pack_offset(offset)

    def concatenated() -> None:
        for flow, offset in work:
            flow.provenance_prefix + pack_offset(offset) + flow.provenance_suffix

    def packed() -> None:
        for flow, offset in work:
            flow.pack_provenance(flow.provenance_prefix, offset, flow.provenance_suffix)

    def cycle_test(headers: list[tuple[str, bytes]]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(RECORDS):
                is_copy_from(headers, "B", TOPIC_ID)

        return run

    def header(topic_id: bytes) -> list[tuple[str, bytes]]:
        return [("app", b"x"), (PROVENANCE_HEADER, Provenance("B", 0, 7, topic_id).encode())]

    figures = per_record(
        {
            "header_former_ns": former,
            "header_concatenated_ns": concatenated,
            "header_packed_ns": packed,
            "cycle_test_no_header_ns": cycle_test([("app", b"x")]),
            "cycle_test_copy_ns": cycle_test(header(TOPIC_ID)),
            "cycle_test_derived_ns": cycle_test(header(OTHER_ID)),
        }
    )
    for name, value in figures.items():
        print(f"{name}: {value:.1f}")
    (RESULTS / "provenance_header.json").write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
