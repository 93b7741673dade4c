"""The test process's local Spark session, and its recovery from a test interrupted mid-call.

A test stopped by its timeout inside a call to the JVM (pytest-timeout raises in the main thread)
leaves that call's answer unread on py4j's connection: every later call then reads the answer of
the one before it (`KeyError: 'm'`, "org.apache.spark.sql.functions does not exist in the JVM"),
and every later Spark test of the process failed so (25 failures after one timeout, in a busy
run). Each test therefore gets the session after one small job proved it answers; one that does
not is replaced by a new JVM, and the interrupted test stays the only failure."""

from __future__ import annotations

import contextlib
import logging

from pyspark import SparkContext
from pyspark.sql import SparkSession

from kafka_mirror.audit.spark import session

log = logging.getLogger(__name__)


class LocalSpark:
    """One local session per test process (its JVM takes 10-20 s to start), made on first use."""

    def __init__(self) -> None:
        self._session: SparkSession | None = None

    def get(self) -> SparkSession:
        if self._session is not None and not _answers(self._session):
            log.warning("Spark's gateway is out of step (a test interrupted mid-call): a new JVM")
            _discard_gateway()
            self._session = None
        if self._session is None:
            self._session = session("local[2]", {})
        return self._session

    def stop(self) -> None:
        if self._session is None:
            return
        if _answers(self._session):
            self._session.stop()
        else:
            _discard_gateway()


def _answers(spark: SparkSession) -> bool:
    try:
        return bool(spark.range(1).count() == 1)
    except Exception:  # an answer out of step is of any type, or a py4j error
        return False


def _discard_gateway() -> None:
    """Kill the gateway's JVM and forget it, so that the next session launches a new one.
    PySpark has no call for this: these are the class attributes its `getOrCreate` reads."""
    gateway = SparkContext._gateway
    if gateway is not None:
        with contextlib.suppress(Exception):  # its connections are out of step already
            gateway.shutdown()
        gateway.proc.kill()
        gateway.proc.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
