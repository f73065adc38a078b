"""Exact values on neighbouring databases: the rewritten SQL run with noise switched off.

The generated statement is run with its release functions replaced by the identity, and
stopped at one of its stages (``__released``: the exact measurements; ``__groups``: the
exact units per key; ``__hist0``: a quantile's histogram). Samplers in the privacy tests
then apply the real release functions of ``udfs`` to these exact values many times.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import pyarrow as pa

from rewriter.generate import Functions, generate
from rewriter.plan import Plan

EXACT = Functions(noise="exact_value", keep="keep_all", quantile="no_quantile")
SECRET = {"privsql_secret": 99}


def register_exact(con: duckdb.DuckDBPyConnection) -> None:
    """The release functions of ``EXACT``: the value itself, keep every key, no quantile."""
    hugeint, double, bigint = (duckdb.sqltype(t) for t in ("HUGEINT", "DOUBLE", "BIGINT"))
    con.create_function(
        "exact_value", lambda v, s, e: v, [hugeint, hugeint, double], hugeint, type="arrow"
    )
    con.create_function(
        "keep_all",
        lambda u, g, e, d: pa.array([True] * len(u)),
        [bigint, bigint, double, double],
        duckdb.sqltype("BOOLEAN"),
        type="arrow",
    )
    con.create_function(
        "no_quantile",
        lambda b, w, p, lo, hi, n, e, u: pa.array([0.0] * len(b)),
        [duckdb.sqltype(t) for t in ("INTEGER[]", "HUGEINT[]", *["DOUBLE"] * 3, "INTEGER")]
        + [double, hugeint],
        double,
        type="arrow",
    )


def stage(con: duckdb.DuckDBPyConnection, plan: Plan, name: str = "__released") -> list[tuple]:
    """The rows of one stage of the generated statement, with exact release functions."""
    head, _ = generate(plan, EXACT).rsplit("\n", 1)
    parameters = SECRET if "$privsql_secret" in head else None
    return con.execute(f"{head}\nSELECT * FROM {name} ORDER BY ALL", parameters).fetchall()


def measurements(con: duckdb.DuckDBPyConnection, plan: Plan) -> dict[str, list[int]]:
    """Each measurement's exact value per group (groups in key order)."""
    rows = stage(con, plan)
    keys = len(plan.analysis.keys)
    names = [m.name for m in plan.measurements]
    return {name: [int(row[keys + i]) for row in rows] for i, name in enumerate(names)}


@contextmanager
def with_rows(con: duckdb.DuckDBPyConnection, insert: str) -> Iterator[None]:
    """The database plus the rows ``insert`` adds (one privacy unit's), rolled back after."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(insert)
        yield
    finally:
        con.execute("ROLLBACK")
