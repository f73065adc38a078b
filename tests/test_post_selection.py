"""Post-processing that only selects released columns, in the order of the group keys and
within a LIMIT (``Stages.selected``), is made in Arrow from the released table: the same
table as its statement returns, and a post-processing that computes anything still runs
in its own database."""

from __future__ import annotations

import threading
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

import privsql
from privsql import engines
from privsql.engines import post_process
from privsql.session import FUNCTIONS
from rewriter.analyze import analyze
from rewriter.generate import Selected, Selection, stages
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
        "SELECT x, COUNT(*) AS n FROM t GROUP BY x PRIVACY_UNIT u BOUND ROWS 1",
        "SELECT COUNT(*) AS n FROM t GROUP BY x PRIVACY_UNIT u BOUND ROWS 1 LIMIT 3 OFFSET 2",
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
    made = post_process(statement, released, Selection(selected))
    assert made.equals(post_process(statement, released), check_metadata=True)
    assert made.column("n").to_pylist()[3:7] == [2**63 - 1, None, -(2**63), None]


def test_another_type_is_cast_by_its_statement() -> None:
    """Only a whole-number decimal or a BIGINT is cast in Arrow: DuckDB rounds a DOUBLE
    (half to even), which a plain Arrow cast would refuse."""
    released = pa.table({"__m0": pa.array([2.5, -3.5], pa.float64())})
    statement = 'SELECT TRY_CAST(__m0 AS BIGINT) AS "n" FROM __released'
    made = post_process(statement, released, Selection((Selected("n", "__m0", True),)))
    assert made.equals(post_process(statement, released))
    assert made.column("n").to_pylist() == [2, -4]  # half to even


@pytest.mark.parametrize(
    "query",
    [
        "SELECT COUNT(*) + 1 AS n FROM t PRIVACY_UNIT u BOUND ROWS 1",
        "SELECT COUNT(*) AS n FROM t HAVING COUNT(*) > 3 PRIVACY_UNIT u BOUND ROWS 1",
        "SELECT x, COUNT(*) AS n FROM t GROUP BY x ORDER BY n PRIVACY_UNIT u BOUND ROWS 1",
        "SELECT x, COUNT(*) AS n FROM t GROUP BY x ORDER BY x PRIVACY_UNIT u BOUND ROWS 1",
        "SELECT x, COUNT(*) AS n FROM t GROUP BY x ORDER BY x DESC PRIVACY_UNIT u BOUND ROWS 1",
        "SELECT x, COUNT(*) AS n FROM t GROUP BY x PRIVACY_UNIT u BOUND ROWS 1 LIMIT 1 + 1",
        "SELECT x, COUNT(*) AS n FROM t GROUP BY x PRIVACY_UNIT u BOUND ROWS 1 LIMIT 50%",
    ],
)
def test_a_computing_or_ordering_post_processing_runs_in_its_own_database(
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


ORDERED = {
    "int": pa.array([3, None, -1, 2**62, 0, -(2**63)], pa.int64()),
    "double": pa.array([1.5, float("nan"), None, float("-inf"), -0.0, float("inf")]),
    "text": pa.array(["b", "", None, "B", "é", "a\x00"]),
    "date": pa.array([2, None, -1, 0, 40000, 1], pa.date32()),
    "timestamp": pa.array([5, None, -5, 0, 1, 2], pa.timestamp("us")),
    "decimal": pa.array([Decimal("1.5"), None, Decimal("-2"), Decimal(0), Decimal(7), Decimal(1)]),
    "bool": pa.array([True, None, False, True, False, None]),
}
"""Key columns with their hard cases: NULL, NaN and the infinities, signed zero, empty and
non-ASCII text, the ends of the range."""


@pytest.mark.parametrize("kind", sorted(ORDERED))
@pytest.mark.parametrize("window", ["", " LIMIT 3", " LIMIT 2 OFFSET 1", " OFFSET 4", " LIMIT 0"])
def test_rows_are_ordered_and_windowed_as_duckdb_does(kind: str, window: str) -> None:
    """Sorted in Arrow by each key type, ascending with NULLs last, then two keys."""
    keys = ORDERED[kind]
    released = pa.table({"__k0": keys, "__k1": pa.array(range(len(keys))[::-1]), "__m0": keys})
    outputs = (Selected("k", "__k0", False), Selected("m", "__m0", False))
    for order in (("__k0",), ("__k0", "__k1")):
        terms = ", ".join(f"__released.{c} NULLS LAST" for c in order)
        statement = f'SELECT __k0 AS "k", __m0 AS "m" FROM __released ORDER BY {terms}{window}'
        offset = int(window.split("OFFSET ")[1]) if "OFFSET" in window else 0
        limit = int(window.split("LIMIT ")[1].split()[0]) if "LIMIT" in window else None
        made = post_process(statement, released, Selection(outputs, order, offset, limit))
        ran = post_process(statement, released)
        assert made.schema.equals(ran.schema, check_metadata=True)
        assert _spelt(made) == _spelt(ran)  # NaN is not equal to itself in Table.equals


def _spelt(table: pa.Table) -> list[list[str]]:
    return [[repr(v) for v in column.to_pylist()] for column in table.columns]


def test_an_order_arrow_may_not_mirror_runs_as_a_statement() -> None:
    """An ENUM orders by its members, not its text: left to the statement."""
    enum = pa.array(["b", "a", "c"]).dictionary_encode()
    released = pa.table({"__k0": enum, "__m0": pa.array([1, 2, 3])})
    statement = 'SELECT __m0 AS "m" FROM __released ORDER BY __released.__k0 NULLS LAST'
    selection = Selection((Selected("m", "__m0", False),), ("__k0",))
    assert engines._select(selection, released) is None
    assert post_process(statement, released, selection).equals(post_process(statement, released))


def test_sessions_opened_together_read_duckdbs_functions_together() -> None:
    """The first read of DuckDB's own functions, made by every session as it opens, runs
    on a cursor of its own: on the shared connection itself, two at once made the second
    fail (red team 44: a server's first clients were dropped)."""
    failures = []

    def first_read() -> None:
        try:
            engines.builtin_functions.__wrapped__()
        except duckdb.Error as error:
            failures.append(error)

    for _ in range(20):
        threads = [threading.Thread(target=first_read) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
