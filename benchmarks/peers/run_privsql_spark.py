"""privsql on Spark local on the workload, in privsql's own environment (``privsql[spark]``).

Spark starts once (the startup, reported apart) with the same configuration as Tumult's
runner. The Parquet file is read into a cached Spark DataFrame, registered as the view
``t`` (the load), as for Tumult. Each release is one ``db.sql`` of the same query as on
DuckDB, on a session ``privsql.connect(engine="spark", spark=...)`` whose ledger is a
DuckDB file of its own.

    python benchmarks/peers/run_privsql_spark.py data.parquet --runs 5
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

import spark_local  # noqa: E402
from common import Contender, arguments, run, versions  # noqa: E402
from run_duckdb import answer_of  # noqa: E402

import privsql  # noqa: E402
from benchmarks.core import PRIVSQL, PrivsqlRun  # noqa: E402

VIEW = "t"


def main() -> None:
    args = arguments()
    spark, startup = spark_local.start("peers-privsql")
    with tempfile.TemporaryDirectory() as directory:
        db = privsql.connect(
            engine="spark", spark=spark, budget=1e9, ledger=Path(directory) / "ledger.duckdb"
        )
        release = PrivsqlRun(db, PRIVSQL["sum"], VIEW)
        run(
            lambda: spark_local.load(spark, args.parquet, view=VIEW),
            [
                Contender(
                    "privsql (Spark local)",
                    versions("pyspark", "duckdb"),
                    lambda _: answer_of(release()),
                    "ε/2 COUNT, ε/2 SUM (Laplace, L1 over 50 groups × 10 rows)",
                    notes="bounding and aggregation in Spark SQL, noise in a local DuckDB",
                )
            ],
            loads=args.loads,
            runs=args.runs,
            startup=startup,
        )
        db.close()
    spark.stop()


if __name__ == "__main__":
    main()
