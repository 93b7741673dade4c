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
import os
from collections.abc import Iterator

from pyspark import SparkContext
from pyspark.sql import SparkSession

from kafka_mirror.audit.spark import session

log = logging.getLogger(__name__)

# The session lives as long as its test process and audits millions of records in the fault
# matrix: there C2's code pays back its compiling, unlike in the dev stack's short-lived JVMs
# (`DEV_JVM`, C1 alone). One local[2] session auditing 1,000,000 mirrored records three times
# (2026-11-28, idle machine): C1 alone 59, 47, 50 CPU-s an audit; C1 then C2 50, 21, 15 (the
# session's start 6 → 11). The serial collector stays: G1's threads cost more on two cores.
SESSION_JVM = "-XX:+UseSerialGC"


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
            with _driver_options(SESSION_JVM):
                self._session = session("local[2]", {})
        return self._session

    def stop(self) -> None:
        if self._session is None:
            return
        if _answers(self._session):
            self._session.stop()
        else:
            _discard_gateway()


@contextlib.contextmanager
def _driver_options(options: str) -> Iterator[None]:
    """SPARK_SUBMIT_OPTS while the session's JVM is launched (the launcher gives them to it),
    the process's own (`DEV_JVM`, for the audit processes it starts) restored after."""
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = options
    try:
        yield
    finally:
        if before is None:
            del os.environ["SPARK_SUBMIT_OPTS"]
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = before


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
