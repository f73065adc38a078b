"""Exact values on neighbouring databases: the rewritten SQL run with noise switched off.

The generated statement is run with its release functions replaced by the identity
(``exact_release.install`` must have run on the connection) and stopped at one of its
stages (``__released``: the exact measurements; ``__groups``: the exact units per key;
``__hist0``: a quantile's histogram). Samplers in the privacy tests then apply the real
release functions of ``udfs`` to these exact values many times.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
from exact_release import IDENTITY

from rewriter.generate import EXCESS, generate
from rewriter.plan import Plan
from rewriter.sqlbuild import level

SECRET = {"privsql_secret": 99}


def stage(con: duckdb.DuckDBPyConnection, plan: Plan, name: str = "__released") -> list[tuple]:
    """The rows of one stage of the generated statement, with exact release functions."""
    head, _ = generate(plan, IDENTITY).rsplit("\n", 1)
    parameters = SECRET if "$privsql_secret" in head else None
    return con.execute(f"{head}\nSELECT * FROM {name} ORDER BY ALL", parameters).fetchall()


def excess(con: duckdb.DuckDBPyConnection, plan: Plan) -> tuple[int, ...]:
    """The exact rows-cut totals, one per row cap, that the check's release function is
    given: read from ``__released`` with the identity release functions (every group's row
    carries the same), wherever the statement computes them (the ``__excess`` stage, or,
    without group keys, ``__groups``'s one aggregate)."""
    names = ", ".join(level(EXCESS, i) for i in range(plan.cut_levels))
    head, _ = generate(plan, IDENTITY).rsplit("\n", 1)
    parameters = SECRET if "$privsql_secret" in head else None
    (row,) = con.execute(f"{head}\nSELECT DISTINCT {names} FROM __released", parameters).fetchall()
    return tuple(int(v) for v in row)


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
