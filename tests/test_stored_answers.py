"""Stored answers are keyed by the analysed, normalised query, not by its spelling.

The same question asked in lower or upper case, with other whitespace, other output
aliases, other table aliases or another spelling of a source is answered from the store
and charged once, under the new spelling's column names; two different questions — one
constant, ε, bound, key list or ordering apart — never share a stored answer.
"""

from __future__ import annotations

import duckdb
import pytest

import privsql

BASE = (
    "SELECT origin, COUNT(*) AS flights, AVG(dep_delay CLAMPED BETWEEN -30 AND 120) AS delay "
    "FROM flights WHERE month = 7 GROUP BY origin ORDER BY origin "
    "PRIVACY_UNIT tailnum BOUND ROWS 40 EPSILON 0.5"
)

SPELLINGS = {
    "lower case": BASE.lower(),
    "upper case": BASE.upper(),
    "whitespace": BASE.replace(" ", "\n    ").replace("(", "( ").replace(")", " )"),
    "comments": BASE.replace("FROM flights", "/* jul */ FROM flights -- all\n").replace(
        "GROUP BY", "/* by airport */ GROUP BY"
    ),
    "output aliases": BASE.replace("AS flights", "AS n").replace("AS delay", "AS mean_delay"),
    "no output aliases": BASE.replace(" AS flights", "").replace(" AS delay", ""),
    "table alias": BASE.replace("FROM flights", "FROM flights AS f").replace(
        "WHERE month", "WHERE f.month"
    ),
    "qualified everywhere": (
        "SELECT x.origin, COUNT(*) AS flights, "
        "AVG(x.dep_delay CLAMPED BETWEEN -30 AND 120) AS delay FROM main.flights x "
        "WHERE x.month = 7 GROUP BY x.origin ORDER BY x.origin "
        "PRIVACY_UNIT x.tailnum BOUND ROWS 40 EPSILON 0.5"
    ),
    "quoted names": BASE.replace("FROM flights", 'FROM "FLIGHTS"').replace("month", '"Month"'),
    "options in another order": BASE.replace(
        "BOUND ROWS 40 EPSILON 0.5", "EPSILON 0.5 BOUND ROWS 40"
    ),
    "order by alias": BASE.replace("SELECT origin,", "SELECT origin AS o,").replace(
        "ORDER BY origin", "ORDER BY o"
    ),
}

NEAR_MISSES = {
    "another constant": BASE.replace("month = 7", "month = 8"),
    "another ε": BASE.replace("EPSILON 0.5", "EPSILON 0.25"),
    "another bound": BASE.replace("AND 120", "AND 121"),
    "another row cap": BASE.replace("ROWS 40", "ROWS 41"),
    "another order": BASE.replace("ORDER BY origin", "ORDER BY origin DESC"),
    "another limit": BASE.replace("ORDER BY origin", "ORDER BY origin LIMIT 2"),
    "outputs swapped": BASE.replace(
        "COUNT(*) AS flights, AVG(dep_delay CLAMPED BETWEEN -30 AND 120) AS delay",
        "AVG(dep_delay CLAMPED BETWEEN -30 AND 120) AS delay, COUNT(*) AS flights",
    ),
    "another aggregate": BASE.replace("COUNT(*)", "COUNT(dep_delay)"),
    "another column": BASE.replace("AVG(dep_delay", "AVG(arr_delay"),
}


@pytest.fixture
def db(flights_con: duckdb.DuckDBPyConnection) -> privsql.Session:
    session = privsql.connect(flights_con, budget=50, seed=7, insecure=True)
    session.protect("flights", privacy_unit="tailnum", keys={"origin": ["EWR", "JFK", "LGA"]})
    return session


def fresh_columns(sql: str) -> list[str]:
    """The column names a fresh answer to ``sql`` has (over an empty table of the schema)."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE flights (origin VARCHAR, dep_delay DOUBLE, arr_delay DOUBLE, "
        "month BIGINT, tailnum VARCHAR)"
    )
    session = privsql.connect(con, budget=10)
    session.protect("flights", privacy_unit="tailnum", keys={"origin": ["EWR", "JFK", "LGA"]})
    return session.sql(sql).columns


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_every_spelling_of_one_question_is_charged_once(db: privsql.Session, spelling: str) -> None:
    first = db.sql(BASE)
    spent = db.budget.spent
    again = db.sql(SPELLINGS[spelling])
    assert again.cached and again.epsilon == 0
    assert db.budget.spent == spent
    assert len(db.budget.history) == 1
    assert again.fetchall() == first.fetchall()
    expected = fresh_columns(SPELLINGS[spelling])
    assert again.columns == expected
    assert set(again.accuracy().column_names) >= set(expected[1:])


@pytest.mark.parametrize("miss", list(NEAR_MISSES))
def test_a_different_question_is_never_answered_from_the_store(
    db: privsql.Session, miss: str
) -> None:
    db.sql(BASE)
    spent = db.budget.spent
    other = db.sql(NEAR_MISSES[miss])
    assert not other.cached and other.epsilon > 0
    assert db.budget.spent == pytest.approx(spent + other.epsilon)


def test_another_key_list_is_another_question(db: privsql.Session) -> None:
    sql = "SELECT origin, COUNT(*) FROM flights GROUP BY origin PRIVACY_UNIT tailnum EPSILON 0.5"
    db.sql(sql, keys={"origin": ["EWR", "JFK"]})
    assert db.sql(sql.lower(), keys={"origin": ["EWR", "JFK"]}).cached
    assert not db.sql(sql, keys={"origin": ["EWR", "LGA"]}).cached
    assert db.budget.spent == pytest.approx(1.0)


def test_a_string_constant_keeps_its_case(db: privsql.Session) -> None:
    """Identifiers are case-insensitive; the text inside quotes is a value and is not."""
    sql = "SELECT COUNT(*) FROM flights WHERE origin = 'JFK' PRIVACY_UNIT tailnum EPSILON 0.5"
    db.sql(sql)
    assert not db.sql(sql.replace("'JFK'", "'jfk'")).cached


def test_estimated_bounds_are_found_under_another_spelling(db: privsql.Session) -> None:
    """BOUND AUTO's privately estimated bounds are stored with the answer: a re-spelt
    query is post-processed with them, at no cost, with the same values and intervals."""
    sql = (
        "SELECT origin, AVG(distance) AS d FROM flights f GROUP BY origin ORDER BY origin "
        "PRIVACY_UNIT tailnum EPSILON 1"
    )
    first = db.sql(sql)
    spent = db.budget.spent
    again = db.sql(sql.replace("AS d", "AS mean_distance").replace("flights f", "flights g"))
    assert again.cached and db.budget.spent == spent
    assert again.fetchall() == first.fetchall()
    assert again.accuracy()["mean_distance"].to_pylist() == first.accuracy()["d"].to_pylist()


def test_aggregates_that_print_alike_keep_their_own_estimated_bounds() -> None:
    """``SUM(x)`` and ``SUM("X")`` are estimated apart (BOUND AUTO) though they spell
    alike: a stored answer keeps each aggregate's decisions by position, so the re-asked
    question is the stored answer, under the plan it was released under."""
    con = duckdb.connect()
    con.execute("CREATE TABLE v AS SELECT i % 30 AS u, (i % 7)::DOUBLE AS x FROM range(600) r(i)")
    db = privsql.connect(con, budget=100, seed=5, insecure=True, progress=False)
    db.protect("v", privacy_unit="u")
    sql = 'SELECT SUM(x) AS a, SUM("X") AS b FROM v PRIVACY_UNIT u EPSILON 10'
    first = db.sql(sql)
    again = db.sql(sql)
    assert again.cached and again.fetchall() == first.fetchall()
    assert again.accuracy().to_pylist() == first.accuracy().to_pylist()


SMALL = "SELECT COUNT(*) AS n FROM t PRIVACY_UNIT u BOUND ROWS 1 EPSILON {}"


def _small_sessions(count: int) -> list[privsql.Session]:
    """``count`` sessions on one in-memory database, so on one ledger, over ``t``."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i AS u FROM range(40) r(i)")
    sessions = [privsql.connect(con, budget=10, seed=i, insecure=True) for i in range(count)]
    sessions[0].protect("t", privacy_unit="u")
    return sessions


class _Statements:
    """A ledger's cursor that records the statements run through it."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection) -> None:
        self._cursor = cursor
        self.run: list[str] = []

    def execute(self, statement: str, *args: object) -> duckdb.DuckDBPyConnection:
        self.run.append(statement)
        return self._cursor.execute(statement, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._cursor, name)


def test_a_question_never_stored_is_told_without_reading_the_answers() -> None:
    """The ledger knows which questions it stored answers for (``_StoredKeys``): a new
    question costs no lookup, a question asked before still finds its answer."""
    (db,) = _small_sessions(1)
    statements = _Statements(db._ledger._con)
    db._ledger._con = statements
    db.sql(SMALL.format(0.5))
    assert not [s for s in statements.run if "FROM __privsql.answers" in s]
    assert db.sql(SMALL.format(0.5)).cached
    assert [s for s in statements.run if "FROM __privsql.answers" in s]


def test_answers_another_session_stored_are_found_after_it_charged() -> None:
    """Another session's charge makes what a ledger knew of the stored answers incomplete:
    from then on it reads the table, and finds the answers stored by either session."""
    first, second = _small_sessions(2)
    assert not first.sql(SMALL.format(0.5)).cached
    assert not second.sql(SMALL.format(0.25)).cached  # stored after first's ledger looked
    again = first.sql(SMALL.format(0.25))
    assert again.cached and again.epsilon == 0
    assert first.sql(SMALL.format(0.5)).cached
    assert second.sql(SMALL.format(0.5)).cached
    assert first.budget.spent == pytest.approx(0.75)
