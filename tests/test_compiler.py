"""The compiler's entry point (``rewriter/compiler.py``): the searches come in the order the
privacy argument needs (bounds, then MAX_GROUPS, then caps), each decision is data, and the
decisions a stored answer keeps compile to the very release it was made by."""

from __future__ import annotations

import duckdb
import pytest

import privsql
from privsql.session import FUNCTIONS
from rewriter.analyze import analyze
from rewriter.compiler import Decided, Search, compile_all, compile_query
from rewriter.dialect import to_sql

SETTINGS = {"epsilon": 1.0, "delta": 1e-6, "functions": FUNCTIONS}


@pytest.fixture(scope="module")
def db():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT i % 40 AS uid, i % 5 AS g, i * 0.5 AS v FROM range(400) r(i)"
    )
    return privsql.connect(con, budget=100)


def placeholder(search: Search, decided: Decided) -> Decided:
    """A decision for each search, as ``explain`` might assume one (no data read)."""
    if search.step == "bounds":
        assert search.estimating is not None
        bounds = {agg: (0.0, 100.0) for agg in _bounded(search)}
        return Decided(bounds=bounds, spent=search.estimating.epsilon, groups=decided.groups)
    if search.step == "groups":
        return Decided(decided.bounds, decided.spent, groups=3)
    return Decided(decided.bounds, decided.spent, decided.groups, caps={"rank": 7, "variance": 4})


def _bounded(search: Search) -> list[str]:
    assert search.estimating is not None
    return [to_sql(a.node) for a in search.estimating.aggregates]


@pytest.mark.parametrize(
    ("query", "steps"),
    [
        ("SELECT COUNT(*) FROM t PRIVACY_UNIT uid BOUND ROWS 3", []),
        ("SELECT COUNT(*) FROM t PRIVACY_UNIT uid BOUND ROWS AUTO", ["threshold"]),
        ("SELECT g, COUNT(*) FROM t GROUP BY g PRIVACY_UNIT uid BOUND ROWS 2", ["groups"]),
        ("SELECT g, SUM(v) FROM t GROUP BY g PRIVACY_UNIT uid", ["groups", "bounds", "threshold"]),
        ("SELECT AVG(v) FROM t PRIVACY_UNIT uid BOUND AUTO", ["bounds", "threshold"]),
    ],
)
def test_searches_come_groups_then_bounds_then_caps(db, query, steps):
    analysis = analyze(query, db._catalog(), {"g": list(range(5))} if "GROUP" in query else None)
    final, searches = compile_all(analysis, **SETTINGS, decide=placeholder)
    assert [s.step for s in searches] == steps
    assert final.search is None and final.stages is not None and final.plan is not None
    if "groups" in steps:
        assert final.plan.bounding.groups == 3
    if "threshold" in steps:
        assert final.plan.search is None and final.decided.caps == final.plan.caps


def test_a_search_reads_per_unit_aggregates_only_and_names_no_release_function(db):
    analysis = analyze("SELECT g, SUM(v) FROM t GROUP BY g PRIVACY_UNIT uid", db._catalog())
    _, searches = compile_all(analysis, **SETTINGS, decide=placeholder)
    for search in searches:
        assert "GROUP BY __unit" in search.statement
        assert not any(name in search.statement for name in vars(FUNCTIONS).values() if name)


def test_kept_decisions_compile_to_the_same_release(db):
    query = "SELECT g, AVG(v) FROM t GROUP BY g PRIVACY_UNIT uid BOUND AUTO"
    analysis = analyze(query, db._catalog(), {"g": list(range(5))})
    final, _ = compile_all(analysis, **SETTINGS, decide=placeholder)
    kept = Decided.from_json(final.decided.as_json())
    again = compile_query(analysis, **SETTINGS, decided=kept)
    assert again.search is None and again.stages is not None and final.stages is not None
    assert again.stages.statement() == final.stages.statement()
    assert again.plan == final.plan


def test_the_session_stores_the_decisions_its_searches_made(db):
    query = "SELECT g, COUNT(*) AS n FROM t GROUP BY g PRIVACY_UNIT uid BOUND ROWS AUTO"
    first = db.sql(query, keys={"g": list(range(5))})
    second = db.sql(query, keys={"g": list(range(5))})
    assert second.cached and second.fetchall() == first.fetchall()
    assert second.epsilon == 0 and first.epsilon > 0
