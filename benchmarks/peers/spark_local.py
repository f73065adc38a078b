"""Spark local for the runners that use Spark (Tumult Analytics, privsql on Spark): one
configuration, one way to load the Parquet file, so the two are measured alike."""

from __future__ import annotations

import os
import sys
import tempfile
import time

from pyspark.sql import DataFrame, SparkSession

CONFIG = {
    "spark.driver.memory": "4g",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.ansi.enabled": "false",
}
"""Spark local on all cores, with room for 5M rows. ANSI mode off: privsql requires it on
Spark (its errors can depend on private values), and it is Spark 3.5's default anyway."""


def start(app: str) -> tuple[SparkSession, float]:
    """A local SparkSession whose Python workers run in this environment and whose warehouse
    (where Tumult keeps temporary tables) is a temporary directory, and the seconds it took
    to start (the JVM's start-up, reported apart from load and query)."""
    started = time.perf_counter()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    warehouse = tempfile.mkdtemp(prefix="peers-spark-warehouse-")
    builder = SparkSession.builder.master("local[*]").appName(app)
    builder = builder.config("spark.sql.warehouse.dir", warehouse)
    for key, value in CONFIG.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, time.perf_counter() - started


def load(spark: SparkSession, path: str, view: str | None = None) -> DataFrame:
    """The Parquet file as a cached, materialised DataFrame (and temporary view ``view``)."""
    frame = spark.read.parquet(path).cache()
    frame.count()
    if view:
        frame.createOrReplaceTempView(view)
    return frame
