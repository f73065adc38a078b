"""Tumult Analytics on Spark local on the workload; runs in Tumult's own environment.

Spark starts once (the startup, reported apart). The Parquet file is read into a cached
Spark DataFrame (the load). Each release opens a ``Session.from_dataframe`` with
``PureDPBudget(1)`` protecting ``AddRowsWithID("uid")`` and evaluates two queries, as
Tumult's docs show for a per-ID truncation with public keys:
``QueryBuilder(...).enforce(MaxRowsPerGroupPerID("g", 10)).enforce(MaxGroupsPerID("g", 50))
.groupby(KeySet.from_dict({"g": [0..49]}))`` then ``.count()`` and ``.sum("v", 0, 100)``,
each with ``PureDPBudget(0.5)`` (a query has one aggregate).

    /tmp/peers/tumult/bin/python benchmarks/peers/run_tumult.py data.parquet --runs 20
"""

from __future__ import annotations

import spark_local
from common import (
    EPSILON,
    HIGH,
    KEYS,
    LOW,
    MAX_GROUPS,
    ROWS_PER_GROUP,
    Answer,
    Contender,
    arguments,
    run,
    versions,
)
from pyspark.sql import DataFrame
from tmlt.analytics import (
    AddRowsWithID,
    KeySet,
    MaxGroupsPerID,
    MaxRowsPerGroupPerID,
    PureDPBudget,
    QueryBuilder,
    Session,
)


def release(frame: DataFrame) -> Answer:
    session = Session.from_dataframe(
        privacy_budget=PureDPBudget(EPSILON),
        source_id="t",
        dataframe=frame,
        protected_change=AddRowsWithID("uid"),
    )
    grouped = (
        QueryBuilder("t")
        .enforce(MaxRowsPerGroupPerID("g", ROWS_PER_GROUP))
        .enforce(MaxGroupsPerID("g", MAX_GROUPS))
        .groupby(KeySet.from_dict({"g": KEYS}))
    )
    half = PureDPBudget(EPSILON / 2)
    counts = session.evaluate(grouped.count(name="n"), half).toPandas()
    sums = session.evaluate(grouped.sum("v", LOW, HIGH, name="s"), half).toPandas()
    n = dict(zip(counts["g"], counts["n"], strict=True))
    s = dict(zip(sums["g"], sums["s"], strict=True))
    return {int(g): (float(n[g]), float(s[g])) for g in n}


def main() -> None:
    args = arguments()
    spark, startup = spark_local.start("peers-tumult")
    run(
        lambda: spark_local.load(spark, args.parquet),
        [
            Contender(
                "Tumult Analytics (Spark local)",
                versions("tmlt.analytics", "tmlt.core", "pyspark"),
                release,
                "two queries, PureDPBudget(0.5) each: COUNT and SUM",
                notes="MaxRowsPerGroupPerID(g, 10) + MaxGroupsPerID(g, 50), KeySet of 50 keys",
            )
        ],
        loads=args.loads,
        runs=args.runs,
        startup=startup,
    )
    spark.stop()


if __name__ == "__main__":
    main()
