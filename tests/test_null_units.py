"""Rows whose privacy unit is NULL belong to no unit and are dropped before bounding.

Each query is asked twice on one database (so with one hashing secret), the second time
after rows with NULL units were added — extreme values, new group keys, more rows than any
cap. At ε = 10⁶ per query the noise is below 10⁻³ and every private choice (bounds,
thresholds, kept keys, quantile buckets) is the exact optimum, so the two answers agree
to 0.01 if and only if the NULL-unit rows changed no exact aggregate and no choice: one
extra unit would move a count by at least 1.
"""

from __future__ import annotations

import duckdb
import pytest

import privsql

QUERIES = {
    "count": "SELECT COUNT(*) AS n FROM t PRIVACY_UNIT u BOUND ROWS 3",
    "count, threshold chosen": "SELECT COUNT(*) AS n FROM t PRIVACY_UNIT u",
    "sum and mean": (
        "SELECT g, SUM(v CLAMPED BETWEEN 0 AND 10) AS s, AVG(v CLAMPED BETWEEN 0 AND 10) AS a "
        "FROM t GROUP BY g PRIVACY_UNIT u BOUND ROWS 2"
    ),
    "distinct units": "SELECT g, COUNT(DISTINCT u) AS units FROM t GROUP BY g PRIVACY_UNIT u",
    "bounds estimated": "SELECT SUM(v) AS s FROM t PRIVACY_UNIT u BOUND AUTO",
    "weights": "SELECT SUM(v CLAMPED BETWEEN 0 AND 10) AS s FROM t PRIVACY_UNIT u BOUND WEIGHTS 2",
    "median": "SELECT MEDIAN(v CLAMPED BETWEEN 0 AND 10) AS m FROM t PRIVACY_UNIT u BOUND ROWS 2",
    "private keys": "SELECT k, COUNT(*) AS n FROM t GROUP BY k PRIVACY_UNIT u BOUND ROWS 2",
}
NULL_ROWS = (
    "INSERT INTO t SELECT NULL, ['g1', 'g2', 'new'][i % 3 + 1], "
    "CASE i % 3 WHEN 0 THEN 1e6 WHEN 1 THEN -1e6 ELSE 5 END, 'only-null-' || (i % 4) "
    "FROM range(3000) r(i)"
)


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT i % 300 AS u, ['g1', 'g2'][i % 2 + 1] AS g, "
        "(i * 7) % 11 AS v, 'k' || (i % 300 % 2) AS k FROM range(3000) r(i)"
    )
    return con


def released(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    db = privsql.connect(con, budget=1e12, epsilon=1e6, seed=5, insecure=True)
    db.protect("t", privacy_unit="u", keys={"g": ["g1", "g2"]})
    try:
        return sorted(db.sql(sql).fetchall(), key=repr)
    finally:
        db.close()


@pytest.mark.parametrize("sql", QUERIES.values(), ids=QUERIES.keys())
def test_rows_with_a_null_unit_change_no_released_value(con, sql):
    before = released(con, sql)
    con.execute(NULL_ROWS)
    after = released(con, sql)
    assert after == [pytest.approx(row, abs=0.01) for row in before]
    assert all("only-null" not in repr(row) and "new" not in row for row in after)


def test_the_coupling_would_see_one_more_unit(con):
    """The comparison is sharp: the same rows with a unit of their own change the answer."""
    sql = QUERIES["count"]
    before = released(con, sql)
    con.execute(NULL_ROWS.replace("SELECT NULL", "SELECT 999"))
    after = released(con, sql)
    assert after != [pytest.approx(row, abs=0.01) for row in before]
