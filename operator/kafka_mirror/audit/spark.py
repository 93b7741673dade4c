"""The audit's Spark session and Spark's Kafka source options for a mirror's clusters."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from kafka_mirror import render_spark
from kafka_mirror.api.worker_config import ClusterConnection

JARS_ENV = "KAFKA_MIRROR_SPARK_JARS"  # the image's directory of Spark's Kafka source jars


def _artifact(jar: Path) -> str:
    """`kafka-clients-3.9.0.jar` → `kafka-clients`."""
    return re.sub(r"-\d[\w.]*\.jar$", "", jar.name)


def kafka_source_jars() -> list[Path]:
    """Spark's Kafka source and the jars it needs that PySpark does not ship itself."""
    directory = os.environ.get(JARS_ENV)
    if not directory:
        # The image sets it; from a checkout, the dev package's Maven resolution does
        # (kafka_mirror_dev.builds.export_spark_jars, `kafka-mirror dev env`).
        raise RuntimeError(f"{JARS_ENV} is not set: it names the directory of Spark's Kafka jars")
    candidates = sorted(Path(directory).glob("*.jar"))
    import pyspark

    shipped = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [jar for jar in candidates if _artifact(jar) not in shipped]


def session(master: str, conf: Mapping[str, str]) -> SparkSession:
    builder = (
        SparkSession.builder.master(master)
        .appName("kafka-mirror-audit")
        .config("spark.jars", ",".join(str(jar) for jar in kafka_source_jars()))
        .config("spark.sql.shuffle.partitions", "8")
        # One query of two small aggregations per run: adaptive execution would make each
        # shuffle stage a job of its own (3 jobs, not 1) and gained nothing at 1,000,000 records.
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "true")  # progress while it runs
    )
    if master.startswith("k8s://"):  # the driver of executor pods: where it is, who it is
        conf = {**render_spark.pod_conf(dict(os.environ)), **conf}
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def kafka_options(connection: ClusterConnection, environ: Mapping[str, str]) -> dict[str, str]:
    """Spark Kafka source options (Java client settings) equal to the worker's connection."""
    settings = connection.client_config(environ)
    options = {
        "kafka.bootstrap.servers": settings["bootstrap.servers"],
        "kafka.security.protocol": settings["security.protocol"],
    }
    if "sasl.mechanism" in settings:
        mechanism = settings["sasl.mechanism"]
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        username, password = (_jaas_quote(settings[k]) for k in ("sasl.username", "sasl.password"))
        options["kafka.sasl.mechanism"] = mechanism
        options["kafka.sasl.jaas.config"] = (
            f'{module} required username="{username}" password="{password}";'
        )
    if "ssl.ca.pem" in settings:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.certificates"] = settings["ssl.ca.pem"]
    if "ssl.certificate.pem" in settings:
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = settings["ssl.certificate.pem"]
        options["kafka.ssl.keystore.key"] = settings["ssl.key.pem"]
    if settings.get("ssl.endpoint.identification.algorithm") == "none":
        options["kafka.ssl.endpoint.identification.algorithm"] = ""
    return options


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
