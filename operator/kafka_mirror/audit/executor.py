"""A Spark executor in the audit image, for the audit on Spark on Kubernetes.

Spark's driver (the audit job's pod, `spec.audit.spark.master: k8s://…`) creates each executor
pod from the audit image with the argument `executor` and its settings in the environment, the
contract Spark's own image keeps in its entrypoint script. The audit image's entrypoint is
`kafka-mirror`, so the pod runs `kafka-mirror executor`, which starts the same Java process that
script would: Spark's Kubernetes executor backend on PySpark's jars and the Kafka source's.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from kafka_mirror.audit.spark import JARS_ENV

BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
JAVA_OPTION = re.compile(r"SPARK_JAVA_OPT_(\d+)")


def classpath(environ: Mapping[str, str], pyspark_jars: Path) -> str:
    """What the executor loads: Spark's configuration directory when given, the classpath the
    driver asks for, PySpark's jars and the Kafka source's (the image's)."""
    parts = [environ["SPARK_CONF_DIR"]] if environ.get("SPARK_CONF_DIR") else []
    parts += [p for p in environ.get("SPARK_CLASSPATH", "").split(":") if p]
    parts.append(f"{pyspark_jars}/*")
    if environ.get(JARS_ENV):
        parts.append(f"{environ[JARS_ENV]}/*")
    parts += [p for p in environ.get("SPARK_EXTRA_CLASSPATH", "").split(":") if p]
    return ":".join(parts)


def executor_command(environ: Mapping[str, str], pyspark_jars: Path) -> list[str]:
    """The executor's Java command from the environment Spark gave its pod."""
    options = sorted(
        (int(match.group(1)), value)
        for name, value in environ.items()
        if (match := JAVA_OPTION.fullmatch(name))
    )
    memory = environ["SPARK_EXECUTOR_MEMORY"]
    java = f"{environ['JAVA_HOME']}/bin/java" if environ.get("JAVA_HOME") else "java"
    return [
        java,
        *(value for _, value in options),
        f"-Xms{memory}",
        f"-Xmx{memory}",
        "-cp",
        classpath(environ, pyspark_jars),
        BACKEND,
        *("--driver-url", environ["SPARK_DRIVER_URL"]),
        *("--executor-id", environ["SPARK_EXECUTOR_ID"]),
        *("--cores", environ["SPARK_EXECUTOR_CORES"]),
        *("--app-id", environ["SPARK_APPLICATION_ID"]),
        *("--hostname", environ["SPARK_EXECUTOR_POD_IP"]),
        *("--resourceProfileId", environ.get("SPARK_RESOURCE_PROFILE_ID", "0")),
        *("--podName", environ["SPARK_EXECUTOR_POD_NAME"]),
    ]


def run() -> None:
    """Replace this process with the executor (its exit is the pod's), working in the pod's
    scratch space: it fetches the driver's jars into its working directory, and the image's
    root filesystem is read-only."""
    import pyspark

    command = executor_command(os.environ, Path(pyspark.__file__).parent / "jars")
    os.chdir(tempfile.gettempdir())
    os.execvp(command[0], command)
