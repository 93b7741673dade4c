"""The audit's job, unchanged, on a real Spark standalone cluster (a master and a worker from
PySpark's own distribution): the same counts as in local mode, the work done by the cluster's
executor. The job runs as the CronJob runs it (`kafka-mirror audit --master spark://…`), in a
process of its own: one process holds one Spark context, and this one's is local."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.audit.main import audit
from kafka_mirror_dev.spark import SparkStandalone
from tests.helpers.audit import commit, delete_before, mirror_everything
from tests.helpers.kafka import create_topics, produce, records, unique
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import worker_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
COUNTS = (
    "result",
    "partitionsChecked",
    "recordsChecked",
    "missing",
    "altered",
    "duplicates",
    "lostToRetention",
    "expiredOnSource",
    "expiredOnTarget",
    "checkpointsChecked",
    "unsafeCheckpoints",
    "offsetSyncsChecked",
    "offsetSyncsUnverifiable",
    "badOffsetSyncs",
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    standalone = SparkStandalone(tmp_path_factory.mktemp("spark-standalone"))
    standalone.start()
    yield standalone
    standalone.stop()


def test_the_audit_on_a_standalone_cluster_counts_what_local_mode_counts(
    stack: MirrorStack,
    cluster: SparkStandalone,
    tmp_path: Path,
) -> None:
    topic = unique("cluster")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=3)
    produce(stack.kafka_a.bootstrap_servers, topic, records(300, 3))
    commit(stack.kafka_a, "app", topic, dict.fromkeys(range(3), 50))
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    mirror_everything(config, topic, tmp_path, stack.kafka_b)
    delete_before(
        stack.kafka_b, f"{topic}.A", {0: 40}
    )  # some unverifiable, for the counts to differ
    local = audit(WorkerConfig.model_validate(config), stack.spark).model_dump(by_alias=True)

    config_path, report_path = tmp_path / "worker.yaml", tmp_path / "report.json"
    config_path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "kafka_mirror", "audit", "--config", str(config_path)]
    options = ["--master", cluster.master_url, "--no-status", "--report", str(report_path)]
    finished = subprocess.run(
        [*command, *options],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    on_cluster = json.loads(report_path.read_text())
    assert {k: on_cluster[k] for k in COUNTS} == {k: local[k] for k in COUNTS}
    assert (on_cluster["recordsChecked"], on_cluster["expiredOnTarget"]) == (260, 40)

    # The application ran on the cluster, and its executor (on the worker) ran the tasks.
    (application,) = [
        a for a in cluster.state()["completedapps"] if a["name"] == "kafka-mirror-audit"
    ]
    logs = [p for p in cluster.executor_logs() if p.parts[-3] == application["id"]]
    assert logs, f"no executor of {application['id']} under {cluster.work_dir}"
    assert "Finished task" in logs[0].read_text()
