"""Set operations over private rows (rewriter/ir.py ``Combined``, rewriter/relations.py):
which are represented, which are refused, and that a unit's rows stay its own through them
(docs/privacy.md §2.1)."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest
import test_ir
from neighbours import SECRET, measurements, with_rows
from sqlglot import exp
from test_ir import PLANTED
from test_neighbour_fuzz import Query, compare, make_session

import privsql
from privsql import PrivacyError
from rewriter.analyze import Analysis, analyze
from rewriter.ir import Combined, Named, Privacy, Project, private_rows
from rewriter.plan import plan

con = test_ir.con
"""test_ir's tables: ``visits`` (unit ``user_id``, a heavy unit of planted notes),
``orders`` (unit ``uid``) and public ``sites``."""
db = test_ir.db


def _analysis(db: privsql.Session, sql: str) -> Analysis:
    analysis = analyze(sql, db._catalog())
    assert isinstance(analysis, Analysis)
    return analysis


VISITS = "SELECT user_id, site FROM visits"
ORDERS = "SELECT uid, total % 5 AS site FROM orders"
ACCEPTED = {
    "UNION ALL": f"{VISITS} UNION ALL {ORDERS}",
    "UNION": f"{VISITS} UNION {ORDERS}",
    "INTERSECT": f"{VISITS} INTERSECT {ORDERS}",
    "INTERSECT ALL": f"{VISITS} INTERSECT ALL {VISITS} WHERE site > 2",
    "EXCEPT": f"{VISITS} EXCEPT {ORDERS}",
    "EXCEPT ALL": f"{VISITS} EXCEPT ALL {ORDERS}",
    "nested": f"{VISITS} UNION ALL ({ORDERS} EXCEPT {VISITS} WHERE site = 1)",
    "nested first": f"({VISITS} EXCEPT {ORDERS}) UNION ALL {ORDERS}",
    "per unit": (
        "SELECT user_id, COUNT(*) AS n FROM visits GROUP BY user_id "
        "UNION ALL SELECT uid, COUNT(*) FROM orders GROUP BY uid"
    ),
    "joined branch": (
        "SELECT v.user_id, v.site FROM visits AS v JOIN sites AS s ON v.site = s.site "
        f"UNION ALL {ORDERS}"
    ),
}


@pytest.mark.parametrize("name", ACCEPTED)
def test_a_set_operation_of_private_relations_releases_its_rows(
    db: privsql.Session, con: duckdb.DuckDBPyConnection, name: str
) -> None:
    """Every kind of set operation whose branches pass the unit: the exact count released
    (noise off, bound high enough to keep every row) is DuckDB's own count of its rows."""
    body = ACCEPTED[name]
    sql = f"SELECT COUNT(*) AS n FROM ({body}) AS u PRIVACY_UNIT user_id BOUND ROWS 100000"
    analysis = _analysis(db, sql)
    assert isinstance(analysis.rows, Named) and isinstance(analysis.rows.body, Combined)
    exact = measurements(con, plan(analysis, epsilon=1.0, delta=1e-6))
    expected = con.execute(f"SELECT count(*) FROM ({body}) WHERE user_id IS NOT NULL")
    assert list(exact.values()) == [[expected.fetchall()[0][0]]]
    db.sql(f"{sql} EPSILON 0.5")


def test_the_node_states_its_operation_and_keeps_the_unit_by_identity(db: privsql.Session) -> None:
    analysis = _analysis(
        db,
        "WITH c AS (SELECT user_id AS who, site FROM visits UNION SELECT uid, total FROM orders) "
        "SELECT COUNT(*) FROM c PRIVACY_UNIT who",
    )
    named = analysis.rows
    assert isinstance(named, Named) and isinstance(named.body, Combined)
    assert (named.body.operation, named.body.distinct) == ("UNION", True)
    assert named.privacy is Privacy.UNIT_PRESERVING
    assert all(isinstance(b, Project) for b in named.body.branches())
    assert named.columns == ("who", "site")
    plain = _analysis(db, "SELECT COUNT(*) FROM visits PRIVACY_UNIT user_id").rows
    assert named.unit == plain.unit


REFUSED = [
    # another column of a declared source in the unit's place: the unit swap of issue 11
    (
        f"SELECT COUNT(*) FROM ({VISITS} UNION ALL SELECT row_id, site FROM visits) AS u "
        "PRIVACY_UNIT user_id",
        "declared its privacy unit as user_id, not row_id",
    ),
    (
        f"SELECT COUNT(*) FROM ({VISITS} UNION ALL SELECT total, uid FROM orders) AS u "
        "PRIVACY_UNIT user_id",
        "declared its privacy unit as uid, not total",
    ),
    # the first branch names the unit, the second puts it elsewhere
    (
        f"SELECT COUNT(*) FROM ({VISITS} UNION ALL SELECT site, user_id FROM visits) AS u "
        "PRIVACY_UNIT user_id",
        "declared its privacy unit as user_id, not site",
    ),
    # a constant or a computed value in the unit's place belongs to no unit
    (
        f"SELECT COUNT(*) FROM ({VISITS} UNION ALL SELECT 3, total FROM orders) AS u "
        "PRIVACY_UNIT user_id",
        "does not keep its privacy unit unchanged",
    ),
    (
        f"SELECT COUNT(*) FROM ({VISITS} UNION ALL SELECT uid + 1, total FROM orders) AS u "
        "PRIVACY_UNIT user_id",
        "does not keep its privacy unit unchanged",
    ),
    # a public branch
    (
        f"SELECT COUNT(*) FROM ({VISITS} UNION ALL SELECT site, site FROM sites) AS u "
        "PRIVACY_UNIT user_id",
        "is not a private unit column",
    ),
    # BY NAME pairs columns by name, not position
    (
        f"SELECT COUNT(*) FROM ({VISITS} UNION ALL BY NAME SELECT uid AS user_id, total AS site "
        "FROM orders) AS u PRIVACY_UNIT user_id",
        "BY NAME on a set operation",
    ),
    # rows kept by an order over every unit's rows
    (
        f"SELECT COUNT(*) FROM ({VISITS} UNION ALL {ORDERS} ORDER BY 2 LIMIT 5) AS u "
        "PRIVACY_UNIT user_id",
        "LIMIT on a set operation",
    ),
    # column types that differ would be cast, which can fail or merge units
    (
        f"SELECT COUNT(*) FROM ({VISITS} UNION ALL SELECT uid, note FROM orders, visits "
        "WHERE uid = user_id) AS u PRIVACY_UNIT user_id",
        "branch 2 of a set operation .* has column types",
    ),
    (
        "SELECT COUNT(*) FROM (SELECT user_id, site FROM visits UNION ALL "
        "SELECT uid, total::INTEGER FROM orders) AS u PRIVACY_UNIT user_id",
        "branch 2 of a set operation .* has column types",
    ),
    # two columns of the first branch named as the unit
    (
        "SELECT COUNT(*) FROM (SELECT user_id, row_id AS user_id FROM visits UNION ALL "
        "SELECT uid, uid FROM orders) AS u PRIVACY_UNIT user_id",
        "unchanged as one column user_id of its first branch",
    ),
    # a set operation as the whole private query
    (
        f"SELECT COUNT(*) AS n FROM visits PRIVACY_UNIT user_id UNION ALL {VISITS}",
        "set operations over private data are not allowed",
    ),
]


@pytest.mark.parametrize(("sql", "reason"), REFUSED)
def test_a_branch_that_does_not_pass_the_unit_is_refused(
    db: privsql.Session, sql: str, reason: str
) -> None:
    spent = db.budget.spent
    with pytest.raises(PrivacyError, match=reason) as caught:
        db.sql(f"{sql} EPSILON 0.5" if sql.endswith("user_id") else sql)
    assert db.budget.spent == spent
    assert PLANTED not in str(caught.value)


def test_a_source_read_under_two_units_across_branches_is_refused(
    con: duckdb.DuckDBPyConnection,
) -> None:
    """With no owner declaration the analyst picks the unit, but one source has one: a
    branch reading ``loose`` by ``b`` where the other reads it by ``a`` is refused."""
    con.execute("CREATE TABLE loose AS SELECT i % 9 AS a, i % 4 AS b FROM range(90) r(i)")
    db = privsql.connect(con, budget=10, seed=5, insecure=True)
    sql = (
        "SELECT COUNT(*) FROM (SELECT a, b FROM loose UNION ALL SELECT b, a FROM loose) AS u "
        "PRIVACY_UNIT a EPSILON 0.5"
    )
    with pytest.raises(PrivacyError, match="two different unit columns"):
        db.sql(sql)
    assert db.budget.spent == 0
    db.sql(
        "SELECT COUNT(*) FROM (SELECT a, b FROM loose UNION ALL SELECT a, b FROM loose "
        "WHERE b > 1) AS u PRIVACY_UNIT a EPSILON 0.5"
    )


def test_a_parenthesised_operand_still_has_its_fan_out_counted(db: privsql.Session) -> None:
    """A public table function joined inside a nested operand repeats each private row
    1,000 times: counted there as anywhere else, and refused."""
    sql = (
        f"SELECT COUNT(*) FROM ({VISITS} UNION ALL (SELECT v.user_id, v.site FROM visits AS v, "
        "range(1000) AS r UNION ALL {ORDERS})) AS u PRIVACY_UNIT user_id EPSILON 0.5"
    ).replace("{ORDERS}", ORDERS)
    with pytest.raises(PrivacyError, match="repeat each one"):
        db.sql(sql)
    assert db.budget.spent == 0


def _per_unit(con: duckdb.DuckDBPyConnection, analysis: Analysis) -> dict[int, tuple]:
    """The ``__source`` rows of a query per unit: how many, and a fingerprint of which."""
    projection = [
        exp.alias_(analysis.unit.copy(), "__unit"),
        exp.alias_(exp.column("site", table="u"), "__c0"),
    ]
    rows = private_rows(analysis.rows, projection, analysis.unit, list(analysis.ctes))
    statement = (
        f"SELECT __unit, count(*), sum(hash(__c0) % 1000003) FROM "
        f"({rows.sql(dialect='duckdb')}) GROUP BY __unit"
    )
    parameters = SECRET if "$privsql_secret" in statement else None
    return {u: (n, f) for u, n, f in con.execute(statement, parameters).fetchall()}


NEIGHBOUR = "INSERT INTO {table} SELECT 888, {columns} FROM range(3000) r(i)"
PLANTS = {
    "visits": "500000 + i, i % 7, 'x'",
    "orders": "i",
}


@pytest.mark.parametrize("name", ["UNION ALL", "UNION", "INTERSECT", "EXCEPT", "nested"])
@pytest.mark.parametrize("table", sorted(PLANTS))
def test_one_unit_added_changes_no_other_units_rows(
    db: privsql.Session, con: duckdb.DuckDBPyConnection, name: str, table: str
) -> None:
    """Neighbouring databases: a unit planted in either branch's source changes the rows
    of that unit only — a DISTINCT never merges, an INTERSECT never matches and an EXCEPT
    never removes another unit's rows."""
    analysis = _analysis(db, f"SELECT COUNT(*) FROM ({ACCEPTED[name]}) AS u PRIVACY_UNIT user_id")
    before = _per_unit(con, analysis)
    with with_rows(con, NEIGHBOUR.format(table=table, columns=PLANTS[table])):
        after = _per_unit(con, analysis)
    after.pop(888, None)
    assert after == before


def test_a_unit_in_every_branch_moves_a_count_by_at_most_its_bound(
    db: privsql.Session, con: duckdb.DuckDBPyConnection
) -> None:
    """A unit's rows from every branch add up before bounding: one added unit with 6,000
    rows across both branches, and the union joined with the source again, moves COUNT(*)
    BOUND ROWS 5 by exactly 5."""
    sql = (
        f"SELECT COUNT(*) AS n FROM ({VISITS} UNION ALL {ORDERS}) AS u "
        "JOIN visits AS v ON u.user_id = v.user_id PRIVACY_UNIT u.user_id BOUND ROWS 5"
    )
    query_plan = plan(_analysis(db, sql), epsilon=1.0, delta=1e-6)
    before = measurements(con, query_plan)
    both = "; ".join(NEIGHBOUR.format(table=t, columns=c) for t, c in PLANTS.items())
    with with_rows(con, both):
        after = measurements(con, query_plan)
    (m,) = query_plan.measurements
    assert abs(after[m.name][0] - before[m.name][0]) == query_plan.sensitivity(m) == 5


# -- planted extreme and malformed values (the neighbour fuzz test's D and D') ----------------


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[privsql.Session, ...]]:
    """D and D' of the neighbour fuzz test (``test_neighbour_fuzz.make_session``)."""
    root = tmp_path_factory.mktemp("set_operations")
    sessions = (make_session(root / "D", False), make_session(root / "D_prime", True))
    yield sessions
    for session in sessions:
        session.close()


PLANTED_SHAPES = [
    "SELECT SUM(CAST(s AS INT) CLAMPED BETWEEN 0 AND 10) AS c0 FROM (SELECT u, s FROM t "
    "UNION SELECT u, s FROM t WHERE CAST(s AS INT) > 1) AS sub PRIVACY_UNIT u EPSILON 1e6",
    "SELECT COUNT(*) AS c0 FROM (SELECT u, x FROM t EXCEPT SELECT u, y FROM t2 "
    "WHERE y / 0 > 1) AS sub WHERE x / 0 < 1 PRIVACY_UNIT u EPSILON 1e6",
    "SELECT k, COUNT(*) AS c0 FROM (SELECT u, k, l FROM t INTERSECT ALL SELECT u, k, l FROM t "
    "WHERE len(l) > 1) AS sub GROUP BY k PRIVACY_UNIT u EPSILON 1e6",
    "SELECT COUNT(*) AS c0 FROM (SELECT u, d, big FROM t UNION ALL SELECT u, d + 1, big * 2 "
    "FROM t) AS sub WHERE big > 0 PRIVACY_UNIT u BOUND ROWS 5 EPSILON 1e6",
    "SELECT AVG(n CLAMPED BETWEEN 0 AND 50) AS c0 FROM (SELECT u, SUM(x) AS n FROM t GROUP BY u "
    "UNION ALL SELECT u, SUM(y) FROM t2 GROUP BY u) AS sub PRIVACY_UNIT u EPSILON 1e6",
    "SELECT COUNT(*) AS c0 FROM (SELECT u, j FROM t UNION SELECT u, j FROM t "
    "WHERE j LIKE '{%') AS sub JOIN t2 ON sub.u = t2.u PRIVACY_UNIT sub.u EPSILON 1e6",
    # refused alike: the unit's position holds another column, or the types differ
    "SELECT COUNT(*) AS c0 FROM (SELECT u, s FROM t UNION ALL SELECT k, s FROM t) AS sub "
    "PRIVACY_UNIT u EPSILON 1e6",
    "SELECT COUNT(*) AS c0 FROM (SELECT u, s FROM t UNION ALL SELECT u, x FROM t) AS sub "
    "PRIVACY_UNIT u EPSILON 1e6",
]


@pytest.mark.parametrize("sql", PLANTED_SHAPES)
def test_a_planted_unit_changes_nothing_observable_through_a_set_operation(
    planted: tuple[privsql.Session, ...], sql: str
) -> None:
    """D and D' (one more unit of failing casts, extreme numbers and dates, NaN, broken
    JSON, empty lists) give the same outcome, message, schema and, with public keys, the
    same row count, and no planted value appears anywhere."""
    compare(planted, Query(sql, {"k": [0, 1, 2, 3, 4, 5]} if "GROUP BY k" in sql else None, True))
