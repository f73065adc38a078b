"""Accepted query shapes: exact pre-noise values, and the enforced bound on neighbours.

Each shape of SPEC section 2 that privsql accepts — subqueries and CTEs that keep the unit,
joins of private sources on the unit, joins with public tables on any key, WHERE filters of
any kind, post-processing of noisy outputs — is checked in two ways:

- its exact answer: the generated SQL run with the noise replaced by the identity (and every
  group kept) must equal a hand computation on a tiny table; once per shape the same query
  also runs through ``db.sql`` with a huge ε and a fixed seed, and must give that answer;
- its bound (docs/privacy.md section 2.1): adding one unit with many rows, duplicated by the
  joins, moves each exact measurement by at most its declared sensitivity, and saturates it.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from exact_release import IDENTITY, install
from neighbours import SECRET, measurements, with_rows

import privsql
from rewriter.analyze import analyze
from rewriter.generate import CUT_SUPPORT, EXCESS_SUPPORT, generate
from rewriter.plan import Plan, plan

# Three units and one row without a unit. visits: u1 has 3 rows, u2 2, u3 1; notes hold
# values that break a CAST ('ok') or a regular expression ('bad(').
TABLES = """
CREATE TABLE visits AS SELECT * FROM (VALUES
    (1, 'a', 10.0::DOUBLE, 'ok'), (1, 'a', 20.0, 'ok'), (1, 'b', 30.0, 'x1'),
    (2, 'b', 5.0, 'ok'), (2, 'b', 7.0, '12'),
    (3, 'a', 100.0, 'bad('),
    (NULL, 'a', 1.0, 'ok')
) AS t(user_id, site, amount, note);
CREATE TABLE orders AS SELECT * FROM (VALUES (1, 3), (1, 4), (2, 8), (4, 50)) AS t(uid, total);
CREATE TABLE sites AS SELECT * FROM (VALUES ('a', 'north'), ('b', 'south')) AS t(site, region);
CREATE TABLE other AS SELECT * FROM (VALUES (1, 100), (3, 300)) AS t(user_id, x);
CREATE TABLE dup AS SELECT 'a' AS site, range AS copy FROM range(250);  -- within fanout.MAX_FAN_OUT
"""


@pytest.fixture(scope="module")
def other_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shapes") / "other.parquet"
    con = duckdb.connect()
    con.execute(TABLES)
    con.execute(f"COPY other TO '{path}' (FORMAT parquet)")
    con.close()
    return path


@pytest.fixture(scope="module")
def db(other_parquet: Path):
    con = duckdb.connect()
    con.execute(TABLES)
    install(con)
    session = privsql.connect(con, budget=1e9, seed=1, insecure=True)
    session.protect("visits", privacy_unit="user_id", bounds={"amount": (0, 50)})
    session.protect("orders", privacy_unit="uid", bounds={"total": (0, 10)})
    session.public("sites")
    session.public("dup")
    yield session, con
    session.close()


def _plan(session: privsql.Session, sql: str, keys: dict | None = None) -> Plan:
    return plan(analyze(sql, session._catalog(), keys), epsilon=1.0, delta=1e-6)


def exact(db, sql: str, keys: dict | None = None) -> list[tuple]:
    """The query's answer with no noise: the generated SQL with identity release functions."""
    session, con = db
    cursor = _run(con, generate(_plan(session, sql, keys), IDENTITY))
    rows = cursor.fetchall()
    names = [d[0] for d in cursor.description]
    shown = [i for i, name in enumerate(names) if name not in (CUT_SUPPORT, EXCESS_SUPPORT)]
    return [tuple(row[i] for i in shown) for row in rows]  # without the bounding check


def _run(con: duckdb.DuckDBPyConnection, statement: str) -> duckdb.DuckDBPyConnection:
    """Run a generated statement, with the hashing secret when it ranks rows."""
    return con.execute(statement, SECRET if "$privsql_secret" in statement else None)


def assert_rows(got: list[tuple], expected: list[tuple], tolerance: float = 1e-9) -> None:
    assert len(got) == len(expected), got
    for row, want in zip(got, expected, strict=True):
        for value, wanted in zip(row, want, strict=True):
            if isinstance(wanted, str):
                assert value == wanted, got
            else:
                assert value == pytest.approx(wanted, abs=tolerance), got


R = "BOUND ROWS 10"
"""A cap no unit of the tiny tables reaches: exact answers are the unbounded ones."""

SHAPES = [
    # -- subqueries and CTEs that keep the unit ------------------------------------------------
    pytest.param(
        "SELECT COUNT(*) AS n FROM (SELECT user_id, amount FROM visits WHERE amount > 6) AS s "
        f"PRIVACY_UNIT user_id {R}",
        None,
        [(5,)],  # 10, 20, 30 (u1), 7 (u2), 100 (u3)
        id="subquery-filter",
    ),
    pytest.param(
        f"SELECT COUNT(*) AS n FROM (SELECT user_id FROM visits) PRIVACY_UNIT user_id {R}",
        None,
        [(6,)],  # the row without a unit is left out
        id="subquery-unnamed",
    ),
    pytest.param(
        "WITH c AS (SELECT user_id, amount * 2 AS doubled FROM visits) "
        f"SELECT SUM(doubled CLAMPED BETWEEN 0 AND 100) AS s FROM c PRIVACY_UNIT user_id {R}",
        None,
        [(244,)],  # 20 + 40 + 60 + 10 + 14 + min(200, 100)
        id="cte-computed-column",
    ),
    pytest.param(
        "WITH c1 AS (SELECT * FROM visits WHERE site = 'a'), "
        "c2 AS (SELECT * FROM c1 WHERE amount >= 20) "
        f"SELECT SUM(amount) AS s FROM c2 PRIVACY_UNIT user_id {R}",
        None,
        [(70,)],  # 20 (u1) + min(100, 50) (u3): the owner's bounds follow the column
        id="cte-chain-star-declared-bounds",
    ),
    pytest.param(
        "SELECT COUNT(DISTINCT person) AS units FROM "
        f"(SELECT user_id AS person, site FROM visits) AS s PRIVACY_UNIT person {R}",
        None,
        [(3,)],
        id="subquery-renames-unit",
    ),
    pytest.param(
        "SELECT region, COUNT(*) AS n FROM (SELECT v.user_id, s.region FROM visits AS v "
        "JOIN sites AS s ON v.site = s.site) AS t GROUP BY region "
        f"PRIVACY_UNIT user_id {R} MAX_GROUPS 2 ORDER BY region",
        {"region": ["north", "south"]},
        [("north", 3), ("south", 3)],  # north: u1 2 + u3 1; south: u1 1 + u2 2
        id="subquery-joins-public",
    ),
    pytest.param(
        "WITH c AS (SELECT user_id, amount FROM visits WHERE site = 'a') "
        f"SELECT COUNT(*) AS n FROM c AS a JOIN c AS b ON a.user_id = b.user_id "
        f"PRIVACY_UNIT a.user_id {R}",
        None,
        [(5,)],  # u1: 2 x 2, u3: 1 x 1
        id="cte-self-join-on-unit",
    ),
    # -- per-unit GROUP BY and DISTINCT inside them ---------------------------------------------
    pytest.param(
        "SELECT SUM(total CLAMPED BETWEEN 0 AND 100) AS s, COUNT(*) AS n FROM "
        "(SELECT user_id, SUM(amount) AS total FROM visits GROUP BY user_id) AS p "
        "PRIVACY_UNIT user_id BOUND ROWS 1",
        None,
        [(172, 3)],  # per unit: 60, 12, 100
        id="per-unit-totals",
    ),
    pytest.param(
        "SELECT site, COUNT(*) AS n, SUM(visits CLAMPED BETWEEN 0 AND 10) AS v FROM "
        "(SELECT user_id, site, COUNT(*) AS visits FROM visits GROUP BY user_id, site) AS p "
        f"GROUP BY site PRIVACY_UNIT user_id {R} MAX_GROUPS 2 ORDER BY site",
        {"site": ["a", "b"]},
        [("a", 2, 3), ("b", 2, 3)],  # a: u1 (2), u3 (1); b: u1 (1), u2 (2)
        id="per-unit-and-key-counts",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM (SELECT user_id, MAX(CAST(note AS INTEGER)) AS top "
        "FROM visits GROUP BY user_id) AS p WHERE top IS NOT NULL "
        f"PRIVACY_UNIT user_id {R}",
        None,
        [(1,)],  # only u2 has a note that is a number; the others' casts yield NULL
        id="per-unit-guarded-aggregate",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM (SELECT user_id, SUM(CAST(amount AS HUGEINT) * "
        "5000000000000000000000000000000000000) AS s FROM visits GROUP BY user_id) AS p "
        f"WHERE s > 0 PRIVACY_UNIT user_id {R}",
        None,
        [(2,)],  # u1's sum passes HUGEINT's range (summed in DOUBLE); u3's product overflows
        id="per-unit-sum-cannot-overflow",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM (SELECT DISTINCT user_id, site FROM visits) AS p "
        f"PRIVACY_UNIT user_id {R}",
        None,
        [(4,)],  # (u1, a), (u1, b), (u2, b), (u3, a)
        id="distinct-rows-of-units",
    ),
    # -- joins of private sources on the unit --------------------------------------------------
    pytest.param(
        "SELECT COUNT(*) AS n, SUM(o.total) AS t FROM visits AS v JOIN orders AS o "
        f"ON v.user_id = o.uid PRIVACY_UNIT v.user_id {R}",
        None,
        [(8, 37)],  # u1: 3 visits x 2 orders (3 + 4 each); u2: 2 x 1 (8 each)
        id="join-private-on-unit",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n, COUNT(o.total) AS c FROM visits AS v LEFT JOIN orders AS o "
        f"ON v.user_id = o.uid PRIVACY_UNIT v.user_id {R}",
        None,
        [(9, 8)],  # u3's visit has no order
        id="left-join-private-on-unit",
    ),
    pytest.param(
        "SELECT COUNT(DISTINCT v.user_id) AS units FROM visits AS v LEFT JOIN orders AS o "
        f"ON v.user_id = o.uid PRIVACY_UNIT v.user_id {R}",
        None,
        [(3,)],
        id="count-distinct-unit-left-join",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM (SELECT v.user_id FROM visits AS v FULL JOIN "
        f"(SELECT 9 AS user_id) AS p USING (user_id)) AS s PRIVACY_UNIT user_id {R}",
        None,
        [(6,)],  # the public row matches no unit: its NULL v.user_id is dropped
        id="subquery-full-join-qualified-unit",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM visits AS a JOIN visits AS b "
        f"ON a.user_id = b.user_id AND a.amount < b.amount PRIVACY_UNIT a.user_id {R}",
        None,
        [(4,)],  # u1: (10, 20), (10, 30), (20, 30); u2: (5, 7)
        id="self-join-on-unit-and-more",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM visits AS v, orders AS o "
        f"WHERE o.uid = v.user_id AND o.total > 3 PRIVACY_UNIT v.user_id {R}",
        None,
        [(5,)],  # u1: 3 visits x order 4; u2: 2 visits x order 8
        id="comma-join-where-unit",
    ),
    pytest.param(
        "SELECT SUM(x CLAMPED BETWEEN 0 AND 1000) AS s FROM visits JOIN other USING (user_id) "
        f"PRIVACY_UNIT user_id {R}",
        None,
        [(600,)],  # u1: 3 x 100, u3: 1 x 300
        id="join-undeclared-using-unit",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM visits AS v JOIN read_parquet('{other}') AS f "
        f"ON v.user_id = f.user_id PRIVACY_UNIT v.user_id {R}",
        None,
        [(4,)],
        id="join-parquet-on-unit",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM visits AS v ANTI JOIN orders AS o ON v.user_id = o.uid "
        f"PRIVACY_UNIT v.user_id {R}",
        None,
        [(1,)],  # only u3 has no order
        id="anti-join-on-unit",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM visits AS v SEMI JOIN orders AS o ON v.user_id = o.uid "
        f"PRIVACY_UNIT v.user_id {R}",
        None,
        [(5,)],
        id="semi-join-on-unit",
    ),
    # -- private ⋈ public on any key -----------------------------------------------------------
    pytest.param(
        "SELECT s.region, COUNT(*) AS n FROM visits AS v JOIN sites AS s ON v.site >= s.site "
        f"GROUP BY s.region PRIVACY_UNIT v.user_id {R} MAX_GROUPS 2 ORDER BY s.region",
        None,
        [("north", 6), ("south", 3)],  # every site >= 'a'; only 'b' rows >= 'b'
        id="join-public-inequality",
    ),
    # -- WHERE filters of any kind -------------------------------------------------------------
    pytest.param(
        f"SELECT COUNT(*) AS n FROM visits WHERE note LIKE 'o%' PRIVACY_UNIT user_id {R}",
        None,
        [(3,)],
        id="where-like",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM visits WHERE regexp_matches(note, '^x[0-9]$') "
        f"PRIVACY_UNIT user_id {R}",
        None,
        [(1,)],
        id="where-regex",
    ),
    pytest.param(
        f"SELECT COUNT(*) AS n FROM visits WHERE site IN ('b') PRIVACY_UNIT user_id {R}",
        None,
        [(3,)],
        id="where-in-list",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM visits WHERE CASE WHEN amount > 25 THEN true ELSE false END "
        f"PRIVACY_UNIT user_id {R}",
        None,
        [(2,)],
        id="where-case",
    ),
    pytest.param(
        f"SELECT COUNT(*) AS n FROM visits WHERE length(upper(note)) = 2 PRIVACY_UNIT user_id {R}",
        None,
        [(5,)],
        id="where-functions",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM visits WHERE CAST(note AS INTEGER) = 12 "
        f"PRIVACY_UNIT user_id {R}",
        None,
        [(1,)],  # 'ok' cannot be cast: NULL, the row is dropped, nothing fails
        id="where-failing-cast",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n FROM (SELECT user_id FROM visits "
        f"WHERE CAST(note AS INTEGER) = 12) AS s PRIVACY_UNIT user_id {R}",
        None,
        [(1,)],  # the WHERE inside the derived table is guarded too
        id="subquery-failing-cast",
    ),
    # -- post-processing of noisy outputs ------------------------------------------------------
    pytest.param(
        "SELECT site, COUNT(*) * 2 + 1 AS n2, ROUND(SUM(amount) / 3, 1) AS r, "
        "CASE WHEN COUNT(*) > 2 THEN 'many' ELSE 'few' END AS c FROM visits GROUP BY site "
        f"HAVING r > 20 PRIVACY_UNIT user_id {R} MAX_GROUPS 2 ORDER BY r DESC",
        {"site": ["a", "b"]},
        [("a", 7, 26.7, "many")],  # a: 10 + 20 + min(100, 50) = 80; b: 42 -> 14.0
        id="post-processing-having",
    ),
    pytest.param(
        "SELECT site, SUM(amount) AS s FROM visits GROUP BY site "
        f"PRIVACY_UNIT user_id {R} MAX_GROUPS 2 ORDER BY s LIMIT 1",
        {"site": ["a", "b"]},
        [("b", 42)],
        id="post-processing-order-limit",
    ),
]


@pytest.mark.parametrize(("sql", "keys", "expected"), SHAPES)
def test_exact_answer(db, other_parquet: Path, sql: str, keys, expected: list) -> None:
    sql = sql.replace("{other}", str(other_parquet))
    assert_rows(exact(db, sql, keys), expected)


THROUGH_SESSION = {
    "join-private-on-unit",
    "cte-chain-star-declared-bounds",
    "subquery-joins-public",
    "post-processing-having",
}


@pytest.mark.parametrize(
    ("sql", "keys", "expected"), [s for s in SHAPES if s.id in THROUGH_SESSION]
)
def test_answer_through_the_session(db, sql: str, keys, expected: list) -> None:
    """With ε huge the released answer is the exact one; the query is charged its ε."""
    session, _ = db
    spent = session.budget.spent
    result = session.sql(sql.replace(R, f"{R} EPSILON 1e6"), keys=keys)
    assert_rows(result.fetchall(), expected, tolerance=0.06)
    assert session.budget.spent == pytest.approx(spent + 1e6)


# -- the enforced bound: one unit with many rows, duplicated by joins --------------------------

BOUNDED = [
    pytest.param(
        "SELECT COUNT(*) AS n, SUM(amount) AS s FROM visits AS v JOIN dup AS d "
        "ON v.site = d.site PRIVACY_UNIT v.user_id BOUND ROWS 5",
        "INSERT INTO visits VALUES (9, 'a', 1e9, 'x')",
        id="public-join-duplicates-250x",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n, SUM(o.total) AS t FROM visits AS v JOIN orders AS o "
        "ON v.user_id = o.uid PRIVACY_UNIT v.user_id BOUND ROWS 5",
        "INSERT INTO visits SELECT 9, 'a', 1.0, 'x' FROM range(100); "
        "INSERT INTO orders SELECT 9, 1e6 FROM range(100)",
        id="private-join-10000-pairs",
    ),
    pytest.param(
        "WITH c AS (SELECT user_id, amount * 1000 AS big FROM visits) "
        "SELECT COUNT(*) AS n, SUM(a.big CLAMPED BETWEEN -10 AND 10) AS s FROM c AS a "
        "JOIN c AS b ON a.user_id = b.user_id PRIVACY_UNIT a.user_id BOUND ROWS 3",
        "INSERT INTO visits SELECT 9, 'b', -1e9, 'x' FROM range(100)",
        id="cte-self-join",
    ),
    pytest.param(
        "SELECT COUNT(*) AS n, SUM(total CLAMPED BETWEEN 0 AND 100) AS s FROM "
        "(SELECT user_id, site, SUM(amount) AS total FROM visits GROUP BY user_id, site) AS p "
        "PRIVACY_UNIT user_id BOUND ROWS 1",
        "INSERT INTO visits SELECT 9, ['a', 'b'][range % 2 + 1], 1e9, 'x' FROM range(100)",
        id="per-unit-totals",
    ),
    pytest.param(
        "SELECT region, COUNT(*) AS n FROM (SELECT v.user_id, s.region FROM visits AS v "
        "JOIN sites AS s ON true) AS t GROUP BY region "
        "PRIVACY_UNIT user_id BOUND ROWS 4 MAX_GROUPS 1",
        "INSERT INTO visits SELECT 9, 'a', 1.0, 'x' FROM range(50)",
        id="subquery-cross-join-public-groups",
    ),
]


@pytest.mark.parametrize(("sql", "add_unit"), BOUNDED)
def test_one_unit_moves_each_measurement_by_at_most_its_sensitivity(db, sql, add_unit) -> None:
    session, con = db
    keys = {"region": ["north", "south"]} if "region" in sql else None
    query_plan = _plan(session, sql, keys)
    before = measurements(con, query_plan)
    with with_rows(con, add_unit):
        after = measurements(con, query_plan)
    for m in query_plan.measurements:
        moved = sum(abs(a - b) for a, b in zip(after[m.name], before[m.name], strict=True))
        assert moved <= query_plan.sensitivity(m), (m.kind, moved)
        # the new unit saturates its bound: the check is at the worst case
        assert moved >= 0.99 * query_plan.sensitivity(m), (m.kind, moved)
