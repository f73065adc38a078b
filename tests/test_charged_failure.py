"""A query that fails after reading private data is charged (red team 42).

A decision made from a search's noisy summary (v(h)'s cap, say) ran in Python after the
search statement had read the data and before the release and its charge: an exception
there was free, and whether it happened could depend on the data. An AVG whose bounds were
one value divided by its bound, 0, whenever one unit passed the noise floor: a free yes/no
question about one unit, asked again and again."""

from __future__ import annotations

import duckdb
import pytest

import privsql
from privsql import session

QUERY = (
    "SELECT AVG(v CLAMPED BETWEEN 5 AND 5) AS a FROM t WHERE uid = 7 AND v > {x} "
    "PRIVACY_UNIT uid EPSILON {eps}"
)


@pytest.fixture
def db():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT i % 300 AS uid, (i % 300)::DOUBLE AS v FROM range(3000) r(i)"
    )
    db = privsql.connect(con, budget=1000, seed=4, insecure=True)
    db.protect("t", privacy_unit="uid")
    yield db
    db.close()


@pytest.mark.parametrize("x", [6.5, 50.0])
def test_an_avg_of_one_value_answers_that_value_and_is_charged(db, x):
    """Whether unit 7's rows pass the filter (v = 7 > 6.5, not > 50) changes neither the
    outcome class nor the charge: both answer 5 and cost their ε (before: the first raised
    ZeroDivisionError, uncharged)."""
    for i in range(3):
        spent = db.budget.spent
        [(value,)] = db.sql(QUERY.format(x=x, eps=100 + i)).fetchall()
        assert value == 5
        assert db.budget.spent == pytest.approx(spent + 100 + i)


def test_a_failure_after_the_data_is_read_is_charged_and_says_nothing(db, monkeypatch):
    """Any failure of a decision after a search statement has run is charged like an answer
    and raised as ``ChargedFailure``, whose message carries no value; a refusal decided from
    the query alone (here: over the budget) is still free."""

    def failing(self, search, summary, decided):
        raise ValueError(f"PLANTED {sorted(summary)[-1]}")

    monkeypatch.setattr(session.Session, "_decide", failing)
    spent = db.budget.spent
    with pytest.raises(privsql.ChargedFailure) as raised:
        db.sql("SELECT AVG(v) AS a FROM t PRIVACY_UNIT uid EPSILON 2")
    assert str(raised.value) == (
        "[failed] the query failed after reading private data: its ε was charged and "
        "nothing was released"
    )
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert db.budget.spent == pytest.approx(spent + 2)
    with pytest.raises(privsql.BudgetExceeded):
        db.sql("SELECT AVG(v) AS a FROM t PRIVACY_UNIT uid EPSILON 5000")
    assert db.budget.spent == pytest.approx(spent + 2)


@pytest.mark.parametrize("high", ["1e150", "1e300"])
def test_an_avg_of_a_huge_range_answers(db, high):
    """Red team 43: v(h)'s error squared the range (10¹⁵⁰ and up overflowed a double), so
    every such AVG under BOUND AUTO failed after its search — the same for any data, but
    charged as a failure. Its terms all scale with the range's square, so the minimiser is
    found on a range of 1: the query answers (a value within its bounds) and is charged."""
    spent = db.budget.spent
    [(value,)] = db.sql(
        f"SELECT AVG(v CLAMPED BETWEEN 0 AND {high}) AS a FROM t PRIVACY_UNIT uid EPSILON 1"
    ).fetchall()
    assert value is not None and 0 <= value <= float(high)
    assert db.budget.spent == pytest.approx(spent + 1)
