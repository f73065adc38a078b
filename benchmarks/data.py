"""The benchmark workload of PERFORMANCE.md, generated inside DuckDB.

``N`` rows; unit ``uid = floor(100000 · u³)`` (100k units, heavy-tailed: a few units own
many rows); 50 groups ``g``; value ``v`` uniform in [0, 100).

The table is built single-threaded after ``setseed`` so the same seed gives the same rows
(DuckDB's ``random()`` is only reproducible with one thread); the caller's thread setting
is restored afterwards.
"""

from __future__ import annotations

import duckdb

UNITS = 100_000
GROUPS = 50
V_HIGH = 100


def make_table(
    con: duckdb.DuckDBPyConnection, rows: int, *, name: str = "t", seed: float = 0.42
) -> None:
    """(Re)create table ``name`` with ``rows`` rows of the workload."""
    threads = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
    con.execute("SET threads = 1")
    try:
        con.execute(f"SELECT setseed({seed})").fetchall()
        con.execute(
            f"CREATE OR REPLACE TABLE {name} AS SELECT "
            f"CAST(floor({UNITS} * pow(random(), 3)) AS BIGINT) AS uid, "
            f"CAST(floor(random() * {GROUPS}) AS INTEGER) AS g, "
            f"random() * {V_HIGH} AS v "
            f"FROM range({int(rows)})"
        )
    finally:
        con.execute(f"SET threads = {int(threads)}")


def describe(con: duckdb.DuckDBPyConnection, name: str = "t", cap: int = 10) -> dict:
    """Facts about the generated table: a checksum, units, and how much the row cap binds."""
    rows, checksum, units = con.execute(
        f"SELECT count(*), sum(hash(uid, g, v)::HUGEINT), count(DISTINCT uid) FROM {name}"
    ).fetchall()[0]
    cells, big_cells, big_rows = con.execute(
        f"SELECT count(*), count(*) FILTER (n > {cap}), coalesce(sum(n) FILTER (n > {cap}), 0) "
        f"FROM (SELECT count(*) AS n FROM {name} GROUP BY uid, g)"
    ).fetchall()[0]
    return {
        "rows": rows,
        "checksum": str(checksum),
        "units": units,
        "cells": cells,
        "cells_over_cap": big_cells,
        "rows_in_cells_over_cap": big_rows,
    }
