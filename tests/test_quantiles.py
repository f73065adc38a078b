"""Quantiles and spread through the whole pipeline: accuracy, edge cases, bounded histograms."""

from __future__ import annotations

import duckdb
import pytest

import privsql
from rewriter.analyze import analyze
from rewriter.generate import Functions, generate
from rewriter.plan import BUCKETS, plan

TOTALS = "SELECT __k0, list_sum(__weights) AS total FROM __hist0 ORDER BY 1"

SPREADS = """
    SELECT origin,
           VAR_SAMP(distance CLAMPED BETWEEN 0 AND 5000) AS var_samp,
           VAR_POP(distance CLAMPED BETWEEN 0 AND 5000) AS var_pop,
           STDDEV(distance CLAMPED BETWEEN 0 AND 5000) AS sd,
           STDDEV_POP(distance CLAMPED BETWEEN 0 AND 5000) AS sd_pop
    FROM flights GROUP BY origin
    PRIVACY_UNIT tailnum {bound} MAX_GROUPS 3 EPSILON 1e5 ORDER BY origin
"""


@pytest.mark.parametrize("bound", ["BOUND ROWS 600", "BOUND WEIGHTS 600"])
def test_quantiles_match_duckdb_at_large_epsilon(flights_db, flights_con, bound):
    noisy = flights_db.sql(
        "SELECT origin, MEDIAN(air_time CLAMPED BETWEEN 0 AND 700) AS m, "
        "QUANTILE(air_time, 0.9 CLAMPED BETWEEN 0 AND 700) AS p90, "
        "PERCENTILE_CONT(0.25 CLAMPED BETWEEN 0 AND 700) WITHIN GROUP (ORDER BY air_time) AS q1 "
        f"FROM flights GROUP BY origin PRIVACY_UNIT tailnum {bound} MAX_GROUPS 3 EPSILON 1e4 "
        "ORDER BY origin"
    ).fetchall()
    exact = flights_con.execute(
        "SELECT origin, quantile_cont(air_time, 0.5), quantile_cont(air_time, 0.9), "
        "quantile_cont(air_time, 0.25) FROM flights WHERE tailnum IS NOT NULL "
        "GROUP BY origin ORDER BY origin"
    ).fetchall()
    bucket = 700 / BUCKETS
    for got, want in zip(noisy, exact, strict=True):
        for g, w in zip(got[1:], want[1:], strict=True):
            # Air times are whole minutes: the answer is the bucket holding the true
            # quantile, give or take one bucket.
            assert abs(g - w) <= 2 * bucket + 1


@pytest.mark.parametrize("bound", ["BOUND ROWS 600", "BOUND WEIGHTS 600"])
def test_variance_and_stddev_match_duckdb_at_large_epsilon(flights_db, flights_con, bound):
    noisy = flights_db.sql(SPREADS.format(bound=bound)).fetchall()
    exact = flights_con.execute(
        "SELECT origin, var_samp(distance), var_pop(distance), stddev_samp(distance), "
        "stddev_pop(distance) FROM flights WHERE tailnum IS NOT NULL GROUP BY origin "
        "ORDER BY origin"
    ).fetchall()
    for got, want in zip(noisy, exact, strict=True):
        for g, w in zip(got[1:], want[1:], strict=True):
            assert g == pytest.approx(w, rel=0.01)


def test_spread_is_noisy_and_stays_in_range_at_small_epsilon(flights_db):
    rows = flights_db.sql(
        SPREADS.replace("EPSILON 1e5", "EPSILON 0.05").format(bound="BOUND ROWS 50")
    ).fetchall()
    for _, var_samp, var_pop, sd, sd_pop in rows:
        assert 0 <= var_pop <= 2500**2 and 0 <= var_samp <= 2500**2
        assert 0 <= sd_pop <= 2500 and 0 <= sd <= 2500


def _seeded(create: str) -> duckdb.DuckDBPyConnection:
    """A new database holding the table ``create`` makes, with DuckDB's random() seeded."""
    con = duckdb.connect()
    con.execute("SELECT setseed(0.25)").fetchall()
    con.execute(create)
    return con


@pytest.fixture
def awkward():
    """Values that test the data-independent semantics: NULL, NaN, ±inf, out of range."""
    con = _seeded(
        "CREATE TABLE t AS SELECT range AS u, 'a' AS g, "
        "CASE range % 5 WHEN 0 THEN NULL WHEN 1 THEN 'nan'::DOUBLE WHEN 2 THEN 'inf'::DOUBLE "
        "WHEN 3 THEN '-inf'::DOUBLE ELSE 1e9 END AS x FROM range(500)"
    )
    db = privsql.connect(con, budget=1e9, seed=11, insecure=True)
    yield db
    con.close()


def test_awkward_values_never_fail_and_answers_stay_in_bounds(awkward):
    # NULL rows are dropped; NaN and +inf land on the upper bound, -inf on the lower one;
    # 1e9 is clamped to the upper bound: so 3 of 4 non-NULL values sit at 10.
    median, p10, variance = awkward.sql(
        "SELECT MEDIAN(x CLAMPED BETWEEN 0 AND 10) AS m, QUANTILE(x, 0.1 CLAMPED BETWEEN 0 AND 10) "
        "AS p10, VAR_POP(x CLAMPED BETWEEN 0 AND 10) AS v FROM t "
        "PRIVACY_UNIT u BOUND ROWS 1 EPSILON 1e4"
    ).fetchall()[0]
    assert 10 - 2 * 10 / BUCKETS <= median <= 10
    assert 0 <= p10 <= 2 * 10 / BUCKETS
    assert variance == pytest.approx(0.75 * 0.25 * 100, rel=0.01)


def test_empty_and_public_groups_get_a_value_in_bounds(awkward):
    rows = awkward.sql(
        "SELECT g, MEDIAN(x CLAMPED BETWEEN 0 AND 10) AS m FROM t GROUP BY g "
        "PRIVACY_UNIT u BOUND ROWS 1 EPSILON 1",
        keys={"g": ["a", "nobody"]},
    ).fetchall()
    assert sorted(r[0] for r in rows) == ["a", "nobody"]
    assert all(0 <= r[1] <= 10 for r in rows)


def test_one_unit_moves_a_group_histogram_by_at_most_the_unit_weight(flights_con):
    db = privsql.connect(flights_con, budget=1e9, seed=1, insecure=True)
    db.protect("flights", privacy_unit="tailnum")
    query = (
        "SELECT origin, MEDIAN(air_time CLAMPED BETWEEN 0 AND 700) AS m FROM flights "
        "GROUP BY origin PRIVACY_UNIT tailnum {bound} MAX_GROUPS 2 EPSILON 1"
    )
    for bound in ("BOUND ROWS 7", "BOUND WEIGHTS 7"):
        query_plan = plan(analyze(query.format(bound=bound), db._catalog()), epsilon=1, delta=1e-6)
        histogram = next(m for m in query_plan.measurements if m.kind == "histogram")
        statement = generate(query_plan, Functions("n", "k", "q")).rsplit("\n", 1)[0]

        def weights(statement=statement):
            rows = flights_con.execute(statement + "\n" + TOTALS, {"privsql_secret": 5}).fetchall()
            return {k: int(v) for k, v in rows}

        before = weights()
        flights_con.execute("BEGIN TRANSACTION")
        flights_con.execute(
            "INSERT INTO flights (tailnum, origin, air_time) "
            "SELECT 'INTRUDER', origin, 1e6 FROM (SELECT origin FROM flights LIMIT 5000)"
        )
        after = weights()
        flights_con.execute("ROLLBACK")
        moved = sum(abs(after.get(k, 0) - before.get(k, 0)) for k in before | after)
        assert 0 < moved <= query_plan.sensitivity(histogram), bound


# --- accuracy() intervals -----------------------------------------------------------------

SPREAD_AND_QUANTILES = (
    "SELECT g, VAR_POP(x CLAMPED BETWEEN 0 AND 100) AS v, "
    "STDDEV_SAMP(x CLAMPED BETWEEN 0 AND 100) AS sd, "
    "MEDIAN(x CLAMPED BETWEEN 0 AND 100) AS m, "
    "QUANTILE(x, 0.9 CLAMPED BETWEEN 0 AND 100) AS p90 "
    "FROM t GROUP BY g PRIVACY_UNIT u BOUND ROWS 5 MAX_GROUPS 2 EPSILON {epsilon} ORDER BY g"
)
EXACT = (
    "SELECT g, var_pop(x), stddev_samp(x), quantile_cont(x, 0.5), quantile_cont(x, 0.9) "
    "FROM t GROUP BY g ORDER BY g"
)


def _spread_data() -> duckdb.DuckDBPyConnection:
    """300 units with at most 5 rows in each of 2 groups (so ROWS 5 keeps every row), on a
    grid of 1/64 so gridding is exact; a skewed group and a uniform one."""
    return _seeded(
        "CREATE TABLE t AS SELECT i % 300 AS u, (i // 300) % 2 AS g, "
        "CASE WHEN (i // 300) % 2 = 0 THEN round(100 * pow(random(), 3) * 64) / 64 "
        "ELSE round(100 * random() * 64) / 64 END AS x FROM range(3000) r(i)"
    )


@pytest.mark.parametrize("epsilon", [1.0, 10.0])
def test_accuracy_intervals_cover_spread_and_quantiles(epsilon):
    """Over 40 independent releases, each cell's 95% half-width covers its exact value at
    least 90% of the time for every column (the bounds are union bounds, so coverage is
    near 100%; a count of 36 of 40 at a true 95% rate has probability < 0.14 — and the
    test needs each of 8 cells to pass, so the limit sits at 33 of 40, P < 1e-3)."""
    data = _spread_data()
    exact = data.execute(EXACT).fetchall()
    query = SPREAD_AND_QUANTILES.format(epsilon=epsilon)
    covered = {}
    for seed in range(40):
        con = duckdb.connect()
        con.register("source", data.sql("SELECT * FROM t").to_arrow_table())
        con.execute("CREATE TABLE t AS SELECT * FROM source")
        db = privsql.connect(con, budget=100, seed=seed, insecure=True)
        db.protect("t", privacy_unit="u")
        result = db.sql(query)
        widths = result.accuracy(0.05).to_pylist()
        for row, width, want in zip(result.fetchall(), widths, exact, strict=True):
            for column, got, truth in zip(("v", "sd", "m", "p90"), row[1:], want[1:], strict=True):
                assert width[column] is not None and width[column] >= 0
                key = (row[0], column)
                covered[key] = covered.get(key, 0) + (abs(got - truth) <= width[column] + 1e-9)
        db.close()
    assert all(count >= 33 for count in covered.values()), covered


def test_quantile_accuracy_below_the_released_alpha_is_the_range():
    db = privsql.connect(_spread_data(), budget=10, seed=3, insecure=True)
    db.protect("t", privacy_unit="u")
    result = db.sql(SPREAD_AND_QUANTILES.format(epsilon=1.0))
    narrow, wide = result.accuracy(0.05).to_pylist(), result.accuracy(0.01).to_pylist()
    for row, n, w in zip(result.fetchall(), narrow, wide, strict=True):
        assert n["m"] <= w["m"]
        assert w["m"] == pytest.approx(max(row[3], 100 - row[3]))


@pytest.mark.parametrize("bound", ["BOUND ROWS 3", "BOUND WEIGHTS 3"])
def test_histogram_counts_exactly_the_kept_rows_of_the_chosen_cells(bound):
    """With row caps and a group cap both binding, each group's histogram holds exactly the
    rows (or weights) bounding keeps: least(s, 3) rows of each chosen cell of s rows under
    ROWS, s·floor(3·2^W/s) under WEIGHTS — computed here from ``__chosen`` directly."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT u, (u + j) % 5 AS g, (u * 13 + j * 7 + r) % 100 AS x "
        "FROM range(60) a(u), range(4) b(j), range(6) c(r) WHERE r <= (u * 7 + j) % 6"
    )
    db = privsql.connect(con, budget=1e9)
    db.protect("t", privacy_unit="u", keys={"g": list(range(5))})
    query = (
        "SELECT g, MEDIAN(x CLAMPED BETWEEN 0 AND 100) AS m FROM t GROUP BY g "
        f"PRIVACY_UNIT u {bound} MAX_GROUPS 2 EPSILON 1"
    )
    query_plan = plan(analyze(query, db._catalog()), epsilon=1, delta=1e-6)
    assert query_plan.groups_may_exceed_cap
    full = 1 << query_plan.measurements[0].weight_bits
    kept = (
        "least(__rows, 3)"
        if "ROWS" in bound
        else f"CASE WHEN __rows <= 3 THEN __rows * {full} ELSE __rows * ({3 * full} // __rows) END"
    )
    statement = generate(query_plan, Functions("n", "k", "q")).rsplit("\n", 1)[0]
    histogram = con.execute(statement + "\n" + TOTALS, {"privsql_secret": 5}).fetchall()
    expected = con.execute(
        statement + f"\nSELECT __k0, sum({kept}) FROM __chosen GROUP BY 1 ORDER BY 1",
        {"privsql_secret": 5},
    ).fetchall()
    assert [(k, int(v)) for k, v in histogram] == [(k, int(v)) for k, v in expected]
    assert (
        sum(int(v) for _, v in expected)
        < con.execute("SELECT count(*) FROM t").fetchone()[0] * full
    )
