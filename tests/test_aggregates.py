"""The aggregate and strategy specs (``rewriter/aggregates.py``, ``rewriter/strategies.py``)
are what the planner follows: each written aggregate is classified as its spec's kind,
measured as its form says, BOUND CLIP accepts exactly the clippable ones, and a plan
bounds as its strategy's spec says."""

from __future__ import annotations

import duckdb
import pytest

import privsql
from rewriter.aggregates import SPECS, AggregateKind, Form
from rewriter.analyze import analyze
from rewriter.errors import UnsupportedQuery
from rewriter.generate import Functions, stages
from rewriter.plan import WEIGHT_BITS, WEIGHTED, plan
from rewriter.strategies import STRATEGIES

WRITTEN = {
    AggregateKind.COUNT_ROWS: "COUNT(*)",
    AggregateKind.COUNT_VALUES: "COUNT(v)",
    AggregateKind.COUNT_UNITS: "COUNT(DISTINCT uid)",
    AggregateKind.COUNT_IF: "COUNT_IF(v > 3)",
    AggregateKind.SUM: "SUM(v CLAMPED BETWEEN 0 AND 10)",
    AggregateKind.AVG: "AVG(v CLAMPED BETWEEN 0 AND 10)",
    AggregateKind.QUANTILE: "MEDIAN(v CLAMPED BETWEEN 0 AND 10)",
    AggregateKind.VAR_SAMP: "VARIANCE(v CLAMPED BETWEEN 0 AND 10)",
    AggregateKind.VAR_POP: "VAR_POP(v CLAMPED BETWEEN 0 AND 10)",
    AggregateKind.STDDEV_SAMP: "STDDEV(v CLAMPED BETWEEN 0 AND 10)",
    AggregateKind.STDDEV_POP: "STDDEV_POP(v CLAMPED BETWEEN 0 AND 10)",
}
MEASURED = {
    Form.ROWS: ["rows"],
    Form.UNITS: ["units"],
    Form.PRESENT: ["count"],
    Form.SUM: ["sum"],
    Form.MEAN: ["centred", "count"],
    Form.SPREAD: ["centred", "squares", "count"],
    Form.QUANTILE: ["histogram"],
}


@pytest.fixture(scope="module")
def db():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 10 AS uid, i * 0.1 AS v FROM range(100) r(i)")
    return privsql.connect(con, budget=100)


def test_every_kind_has_a_spec_and_an_example():
    kinds = {v for k, v in vars(AggregateKind).items() if not k.startswith("_")}
    assert kinds == set(SPECS) == set(WRITTEN)


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_an_aggregate_is_measured_as_its_form_says(db, kind):
    spec = SPECS[kind]
    query = f"SELECT {WRITTEN[kind]} FROM t PRIVACY_UNIT uid BOUND ROWS 2 EPSILON 1"
    analysis = analyze(query, db._catalog())
    [aggregate] = analysis.aggregates
    assert aggregate.kind == kind
    assert (aggregate.bounds is not None) == spec.bounded
    query_plan = plan(analysis, epsilon=1.0, delta=1e-6)
    [statistic] = query_plan.statistics
    measurements = {m.name: m for m in query_plan.measurements}
    kinds = [measurements[name].kind for name in statistic.measurements]
    assert kinds == MEASURED[spec.form]
    assert spec.single == (len(kinds) == 1 and spec.form != Form.QUANTILE)


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_bound_clip_accepts_exactly_the_clippable_aggregates(db, kind):
    query = f"SELECT {WRITTEN[kind]} FROM t PRIVACY_UNIT uid BOUND CLIP EPSILON 1"
    analysis = analyze(query, db._catalog())
    if SPECS[kind].clippable:
        assert plan(analysis, epsilon=1.0, delta=1e-6).bounding.strategy == "CLIP"
    else:
        with pytest.raises(UnsupportedQuery, match="CLIP"):
            plan(analysis, epsilon=1.0, delta=1e-6)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_plan_follows_its_strategys_spec(db, name):
    spec = STRATEGIES[name]
    threshold = "" if spec.always_automatic else " 3"
    query = (
        f"SELECT AVG(v CLAMPED BETWEEN 0 AND 10), COUNT(*) FROM t PRIVACY_UNIT uid "
        f"BOUND {name}{threshold} EPSILON 1"
    )
    query_plan = plan(analyze(query, db._catalog()), epsilon=1.0, delta=1e-6)
    assert query_plan.bounding.strategy == name
    assert (query_plan.search is not None) == spec.always_automatic
    assert query_plan.needs_rows == spec.rereads_rows
    weighted = {m.weight_bits for m in query_plan.measurements if m.kind in WEIGHTED}
    assert weighted == {spec.weight_bits}


def _exact_groups(db, query: str) -> list[tuple]:
    """The exact per-group measurements (``__groups``, without the bounding check's
    columns) of a query's generated statement."""
    query_plan = plan(analyze(query, db._catalog()), epsilon=1.0, delta=1e-6)
    parts = stages(query_plan, Functions("noise", "keep", "quantile"))
    measured = "COLUMNS(lambda c: c NOT IN ('__cut', '__excess'))"
    statement = f"SELECT {measured} FROM ({parts.output('__groups')})"
    secret = {"privsql_secret": 7} if "$privsql_secret" in statement else None
    return db._con.execute(statement, secret).fetchall()


@pytest.mark.parametrize("strategy, weight_bits", [("ROWS", 0), ("WEIGHTS", WEIGHT_BITS)])
def test_count_if_measures_the_rows_its_condition_selects(db, strategy, weight_bits):
    """COUNT_IF is one spec: its indicator is what the generated SQL sums, so with a cap
    that cuts nothing its exact measurement is DuckDB's own COUNT_IF."""
    [(units, rows, selected)] = _exact_groups(
        db, f"SELECT COUNT_IF(v > 3) FROM t PRIVACY_UNIT uid BOUND {strategy} 100 EPSILON 1"
    )
    [(expected,)] = db._con.sql("SELECT count_if(v > 3) FROM t").fetchall()
    assert (units, rows) == (10, 100)
    assert selected == expected << weight_bits and 0 < expected < 100


def test_count_if_counts_only_kept_rows_and_no_condition_value_raises(db):
    """Bounded like COUNT: at most k kept rows per unit count; a condition that is NULL, not
    a BOOLEAN after TRY, or fails on a row counts 0 for that row and raises nothing."""
    [(units, rows, selected)] = _exact_groups(
        db, "SELECT COUNT_IF(v > 3) FROM t PRIVACY_UNIT uid BOUND ROWS 2 EPSILON 1"
    )
    assert (units, rows) == (10, 20) and 0 < selected <= 20
    hostile = "CAST(CASE WHEN v > 5 THEN 'x' ELSE '1' END AS INT) / (uid - 3) > 0"
    [(units, rows, selected)] = _exact_groups(
        db, f"SELECT COUNT_IF({hostile}) FROM t PRIVACY_UNIT uid BOUND ROWS 100 EPSILON 1"
    )
    [(expected,)] = db._con.sql(f"SELECT count(*) FROM t WHERE TRY({hostile}) IS TRUE").fetchall()
    assert (units, rows, selected) == (10, 100, expected) and 0 < expected < 100


@pytest.mark.parametrize("aggregate", ["COUNT(DISTINCT uid)", "COUNT(*)"])
def test_the_cut_count_holds_each_units_sampled_dropped_cell(aggregate):
    """Under MAX_GROUPS 1 and private keys, the bounding check counts one dropped cell of
    each unit touching more than one group (its keyed sample of m = 1), whether or not a
    row cap is measured (COUNT(DISTINCT unit) measures none): 7 of these 10 units."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE touches AS SELECT u AS uid, g FROM range(10) a(u), range(4) b(g) "
        "WHERE g <= u % 4"
    )
    db = privsql.connect(con, budget=100)
    query = (
        f"SELECT g, {aggregate} FROM touches GROUP BY g PRIVACY_UNIT uid BOUND ROWS 100 "
        "MAX_GROUPS 1 EPSILON 1"
    )
    query_plan = plan(analyze(query, db._catalog()), epsilon=1.0, delta=1e-6)
    assert query_plan.dropped_sample == 1
    cuts = stages(query_plan, Functions("noise", "keep", "quantile")).output("__cuts")
    [(cut,)] = con.execute(f"SELECT sum(__cut) FROM ({cuts})", {"privsql_secret": 7}).fetchall()
    assert cut == 7
