"""Post-processing that only selects released columns (``Stages.selected``) is made in
Arrow from the released table: the same table as its statement returns, and a
post-processing that computes anything still runs in its own database."""

from __future__ import annotations

from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

import privsql
from privsql import engines
from privsql.engines import post_process
from privsql.session import FUNCTIONS
from rewriter.analyze import analyze
from rewriter.generate import Selected, stages
from rewriter.plan import plan


@pytest.fixture
def db() -> privsql.Session:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i AS u, i % 7 AS x FROM range(100) r(i)")
    return privsql.connect(con, budget=100, seed=7, insecure=True)


def _final(db: privsql.Session, query: str):
    return stages(plan(analyze(query, db._catalog()), epsilon=1.0, delta=1e-6), FUNCTIONS)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT COUNT(*) FROM t PRIVACY_UNIT u BOUND ROWS 1",
        'SELECT COUNT(*) AS n, COUNT(*) AS "Twice" FROM t PRIVACY_UNIT u BOUND ROWS 2',
    ],
)
def test_a_selection_is_the_table_its_statement_returns(db: privsql.Session, query: str) -> None:
    parts = _final(db, query)
    assert parts.selected is not None
    released = db._engine.private(lambda: db._engine.release(parts, db._ledger.secret))
    selected = post_process(parts.final, released, parts.selected)
    assert selected.equals(post_process(parts.final, released), check_metadata=True)


def test_try_cast_to_bigint_is_duckdbs_at_the_ends_and_for_nulls() -> None:
    values = [0, -7, None, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**37, -(10**37)]
    released = pa.table(
        {
            "__m0": pa.array(
                [None if v is None else Decimal(v) for v in values], pa.decimal128(38, 0)
            ),
            "__k": pa.array(range(len(values)), pa.int64()),
        }
    )
    selected = (
        Selected("n", "__m0", True),
        Selected("m", "__m0", False),
        Selected("k", "__k", True),
        Selected("k", "__k", False),
    )
    statement = (
        'SELECT TRY_CAST(__m0 AS BIGINT) AS "n", __m0 AS "m", TRY_CAST(__k AS BIGINT) AS "k", '
        '__k AS "k" FROM __released'
    )
    made = post_process(statement, released, selected)
    assert made.equals(post_process(statement, released), check_metadata=True)
    assert made.column("n").to_pylist()[3:7] == [2**63 - 1, None, -(2**63), None]


def test_another_type_is_cast_by_its_statement() -> None:
    """Only a whole-number decimal or a BIGINT is cast in Arrow: DuckDB rounds a DOUBLE
    (half to even), which a plain Arrow cast would refuse."""
    released = pa.table({"__m0": pa.array([2.5, -3.5], pa.float64())})
    statement = 'SELECT TRY_CAST(__m0 AS BIGINT) AS "n" FROM __released'
    made = post_process(statement, released, (Selected("n", "__m0", True),))
    assert made.equals(post_process(statement, released))
    assert made.column("n").to_pylist() == [2, -4]  # half to even


@pytest.mark.parametrize(
    "query",
    [
        "SELECT COUNT(*) + 1 AS n FROM t PRIVACY_UNIT u BOUND ROWS 1",
        "SELECT COUNT(*) AS n FROM t HAVING COUNT(*) > 3 PRIVACY_UNIT u BOUND ROWS 1",
        "SELECT x, COUNT(*) AS n FROM t GROUP BY x PRIVACY_UNIT u BOUND ROWS 1",
    ],
)
def test_a_computing_post_processing_runs_in_its_own_database(
    db: privsql.Session, query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _final(db, query).selected is None
    opened = []
    own = engines._released_only

    def counted() -> duckdb.DuckDBPyConnection:
        opened.append(True)
        return own()

    monkeypatch.setattr(engines, "_released_only", counted)
    db.sql(query)
    assert opened


SELECTING = "SELECT COUNT(*) FROM t PRIVACY_UNIT u"  # BOUND AUTO: released with __excess


def test_a_selecting_query_starts_no_post_processing_statement(
    db: privsql.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "_released_only", lambda: pytest.fail("a statement ran"))
    assert db.sql(SELECTING).fetchall()[0][0] is not None


def test_a_selecting_query_answers_as_through_its_statement(
    db: privsql.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same seed gives the same table, made in Arrow or by the statement."""
    made = db.sql(SELECTING)
    monkeypatch.setattr(engines, "_select", lambda selected, released: None)
    again = privsql.connect(db._con, budget=100, seed=7, insecure=True)
    ran = again.sql(SELECTING + " EPSILON 1.0")
    assert not ran.cached
    assert made.arrow().equals(ran.arrow(), check_metadata=True)
