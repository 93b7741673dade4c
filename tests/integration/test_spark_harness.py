"""The tests' Spark session is replaced when it stops answering (tests/helpers/spark.py): a test
interrupted by its timeout mid-call once left py4j's connection a step behind, and the Spark
tests after it in that process failed by the dozen. Here the session stops answering the
plainest way, its JVM killed; the interrupted call's state is not reproducible on demand."""

from __future__ import annotations

import pytest
from pyspark import SparkContext
from pyspark.sql import functions

from tests.helpers.spark import LocalSpark

pytestmark = pytest.mark.spark


def test_a_session_that_stopped_answering_is_replaced_by_one_that_answers(
    local_spark: LocalSpark,
) -> None:
    spark = local_spark.get()
    gateway = SparkContext._gateway
    assert gateway is not None
    gateway.proc.kill()
    gateway.proc.wait()
    with pytest.raises(Exception):  # noqa: B017 - whatever py4j makes of a dead JVM
        spark.range(3).count()

    replaced = local_spark.get()
    assert replaced is not spark
    assert replaced.range(3).select(functions.lit(1)).count() == 3
    assert local_spark.get() is replaced  # one that answers is kept
