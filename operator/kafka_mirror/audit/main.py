"""`kafka-mirror audit --config FILE`: the job in each audit pod (the mirror's CronJob).

Each run audits what came after the previous run's verified watermark (`watermarks.py`);
`--full` (or a new `--full-request` value, from `spec.audit.fullAuditRequest`) audits everything.
Exit status: 0 when the audit ran, whatever its verdict (a `Failed` verdict is a result, in the
report and `status.lastAudit`, not a crash: the Job must not run it again), 2 when it could not
audit (a cluster unreachable), and Python's 1 on any other error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kubernetes import client
from pyspark.sql import SparkSession

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.api.worker_config import WorkerConfig, load
from kafka_mirror.audit.checks import as_json, run_checks
from kafka_mirror.audit.records import AuditInputs, PartitionWindow
from kafka_mirror.audit.report import AuditReport
from kafka_mirror.audit.spark import kafka_options, session
from kafka_mirror.audit.watermarks import Watermark, in_effect, read_watermarks, write_watermarks
from kafka_mirror.kafka.client import ClusterUnavailable
from kafka_mirror.kafka.formats import offset_syncs_topic
from kafka_mirror.kafka.observe import ClusterReader
from kafka_mirror.kafka.schemas import SchemaSync
from kafka_mirror.kube import api_client
from kafka_mirror.topics import plan_topics

log = logging.getLogger("kafka_mirror.audit")


def log_ends(reader: ClusterReader, topics: dict[str, int], topic: str) -> dict[int, int]:
    """Partition → log end of `topic` (none where it does not exist yet)."""
    if topic not in topics:
        return {}
    return {p: end for (_, p), (_, end) in reader.log_ranges({topic: topics[topic]}).items()}


def audit_inputs(
    config: WorkerConfig, previous: Iterable[Watermark] = (), full_request: str | None = None
) -> AuditInputs:
    """Per selected source partition, the window (log start to the workers' committed offset),
    the watermark it resumes from (if still in effect), the remote partition's range, what was
    lost to retention after the watermark, and the topics' IDs."""
    source = ClusterReader(config.source.alias, config.source.client_config())
    target = ClusterReader(config.target.alias, config.target.client_config())
    try:
        usable, _ = config.compiled_selections()
        topics = source.topics()
        plan = plan_topics(topics, usable, config.namer(), config.target.alias)
        mirrored = {t: topics[t] for t in plan.mirrored}
        progress = source.progress(config.consumer_group, mirrored)
        source_ids = source.topic_ids(sorted(mirrored))
        remotes = {plan.mirrored[t]: n for t, n in mirrored.items()}
        target_topics = target.topics()
        present = set(target_topics)
        on_source = config.offset_syncs.location == "source"
        syncs_end = log_ends(
            source if on_source else target,
            topics if on_source else target_topics,
            offset_syncs_topic(
                config.source.alias, config.target.alias, config.offset_syncs.location
            ),
        )
        target_ranges = target.log_ranges({r: n for r, n in remotes.items() if r in present})
        identity = config.topic_naming.policy == "identity"
        cycle_ids = target.topic_ids(sorted(set(remotes) & present)) if identity else None
        compacted = target.compacted(sorted(set(remotes) & present))
    finally:
        source.close()
        target.close()
    kept = {(w.topic, w.partition): w for w in previous}
    windows = []
    for p in progress:
        remote = plan.mirrored[p.topic]
        target_start, target_end = target_ranges.get((remote, p.partition), (0, 0))
        end = max(p.committed or 0, p.start)
        watermark = in_effect(
            kept.get((p.topic, p.partition)),
            source_ids.get(p.topic),
            full_request,
            p.end,
            target_end,
        )
        resume = watermark.source_offset if watermark else 0
        loss = p.loss if p.loss is not None and p.loss.end > resume else None  # reported before
        windows.append(
            PartitionWindow(
                p.topic,
                remote,
                p.partition,
                p.start,
                end,
                target_start,
                target_end,
                loss,
                watermark,
                on_target=(remote, p.partition) in target_ranges,
            )
        )
    return AuditInputs(
        mirror=config.mirror,
        source_alias=config.source.alias,
        target_alias=config.target.alias,
        source_options=kafka_options(config.source, os.environ),
        target_options=kafka_options(config.target, os.environ),
        source_client=config.source.client_config(),
        target_client=config.target.client_config(),
        windows=windows,
        offset_syncs_on_source=on_source,
        source_ids=source_ids,
        cycle_ids=cycle_ids,
        compacted_remotes=compacted,
        offset_syncs_end=syncs_end,
        exactly_once=config.delivery == "exactlyOnce",
        **_wire_format(config, plan.mirrored),
    )


def _wire_format(config: WorkerConfig, mirrored: dict[str, str]) -> dict[str, Any]:
    """What the copies of wire-format records carry (spec.schemaRegistry): per topic, the
    target's id of each schema its records may name, as the registries say."""
    if config.schema_registry is None:
        return {}
    schemas = SchemaSync(config.schema_registry, os.environ)
    try:
        ids = schemas.equivalents(mirrored)
    except Exception as error:  # unavailable, refusing, or answering what no registry should
        raise ClusterUnavailable(
            "SchemaRegistryUnavailable", f"a schema registry: {error}"
        ) from None
    return {"schema_ids": ids, "wire_keys": config.schema_registry.keys}


def audit(
    config: WorkerConfig, spark: SparkSession, full: bool = False, full_request: str | None = None
) -> AuditReport:
    """Audit from each partition's verified watermark (from the start with `full`, or where the
    watermark is not in effect), then keep the new watermarks on the target."""
    target = config.target.client_config()
    previous = [] if full else read_watermarks(target, config.source.alias, config.mirror)
    inputs = audit_inputs(config, previous, full_request)
    report = run_checks(spark, inputs)
    ids = inputs.source_ids or {}
    advanced = [
        Watermark(
            v.topic,
            v.partition,
            ids.get(v.topic),
            v.verified_to,
            v.target_offset,
            v.records,
            full_request,
            v.offset_syncs_position,
        )
        for v in report.verified
    ]
    write_watermarks(target, config.source.alias, config.mirror, advanced)
    return report


def write_status(api: client.ApiClient, mirror: str, report: AuditReport) -> None:
    namespace, name = mirror.split("/", 1)
    summary = report.summary().model_dump(mode="json", by_alias=True, exclude_none=True)
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "kafkamirrors", name, {"status": {"lastAudit": summary}}
    )


def run(
    config_path: Path,
    report_path: Path | None,
    history: str | None,
    master: str,
    conf: dict[str, str],
    kubeconfig: Path | None,
    update_status: bool,
    full: bool = False,
    full_request: str | None = None,
) -> int:
    config = load(config_path)
    spark = session(master, conf)
    try:
        report = audit(config, spark, full, full_request)
        if history:
            append_history(spark, report, history)
    except ClusterUnavailable as error:
        log.error("cannot audit %s: %s", config.mirror, error)
        return 2
    finally:
        spark.stop()
    text = as_json(report)
    if report_path is not None:
        report_path.write_text(text + "\n")
    else:
        print(text)
    if update_status:
        write_status(api_client(kubeconfig), config.mirror, report)
    log.info("audit %s: %s", report.result, report.summary().message)
    return 0


def append_history(spark: SparkSession, report: AuditReport, path: str) -> None:
    """One row per run appended to a Parquet dataset (any path Spark can write)."""
    row = report.summary().model_dump(mode="json", by_alias=True)
    spark.createDataFrame([{"mirror": report.mirror, **row}]).write.mode("append").parquet(path)
