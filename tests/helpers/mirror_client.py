"""MirrorMaker 2's own client reading our checkpoints, as applications run it on failover."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from kafka_mirror_dev.builds import REPO_ROOT, kafka_libs, require
from kafka_mirror_dev.kafka import DEV_JVM, LocalKafka

Offsets = dict[tuple[str, int], int]  # (remote topic, partition) → downstream offset


def translate_groups(
    target: LocalKafka, groups: Sequence[str], source_alias: str = "A"
) -> dict[str, Offsets]:
    """Kafka's own RemoteClusterUtils.translateOffsets for each group, run from Java (one JVM
    for all of them) against the checkpoints on `target`."""
    program = REPO_ROOT / "tests" / "java" / "TranslateOffsets.java"
    result = subprocess.run(
        [
            require("java"),
            *DEV_JVM,  # the source launcher compiles the program first: C1 alone halves that
            "-cp",
            f"{kafka_libs()}/*",
            str(program),
            target.bootstrap_servers,
            source_alias,
            *groups,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    translated: dict[str, Offsets] = {group: {} for group in groups}
    for line in result.stdout.splitlines():
        if line.strip():
            group, topic, partition, offset = line.split()
            translated[group][(topic, int(partition))] = int(offset)
    return translated


def translate_with_mirror_client(target: LocalKafka, group: str) -> Offsets:
    return translate_groups(target, [group])[group]
