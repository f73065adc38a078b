"""explain's expected ± and warnings, and the ε planner (``Session.plan``).

Both read no data and spend nothing; the ± they state must be the one ``accuracy()`` then
reports on the released answer (same formula), and the planner's ε must reach its target
without overspending.
"""

from __future__ import annotations

import re

import pytest

import privsql
import udfs
from privsql.session import FUNCTIONS
from privsql.stage_sql import PLACEHOLDER_CAP, PLACEHOLDER_GROUPS
from rewriter.analyze import analyze
from rewriter.generate import generate
from rewriter.plan import plan

FIXED = """
    SELECT origin, COUNT(*) AS flights, SUM(distance CLAMPED BETWEEN 0 AND 5000) AS miles,
           AVG(distance CLAMPED BETWEEN 0 AND 5000) AS avg_miles,
           COUNT(DISTINCT tailnum) AS planes
    FROM flights GROUP BY origin
    PRIVACY_UNIT tailnum BOUND ROWS 300 MAX_GROUPS 3 EPSILON {epsilon}
    ORDER BY origin
"""
MONTHLY = """
    SELECT month, COUNT(*) AS flights, AVG(dep_delay CLAMPED BETWEEN -30 AND 180) AS delay
    FROM flights GROUP BY month
    PRIVACY_UNIT tailnum BOUND ROWS 30 MAX_GROUPS 12 EPSILON 0.1
"""
PLANES = 4043
"""Public: the number of aircraft in the data (the FAA registry bounds it)."""


def test_explain_states_the_half_widths_accuracy_reports(flights_db):
    query = FIXED.format(epsilon=0.5)
    explanation = flights_db.explain(query)
    assert flights_db.budget.spent == 0
    result = flights_db.sql(query)
    accuracy = result.accuracy(0.05).to_pydict()
    for name in ("flights", "miles", "planes"):
        assert explanation.half_widths[name] is not None
        assert accuracy[name] == [pytest.approx(explanation.half_widths[name])] * 3
    assert f"flights: ±{explanation.half_widths['flights']:,.0f}" in str(explanation)
    # an AVG's ± is stated for a count, at the worst value: an upper bound of the released one
    smallest = min(n for _, n, *_ in result.fetchall())
    at_count = flights_db.explain(query, rows=int(smallest * 0.9))
    assert at_count.avg_rows == int(smallest * 0.9)
    assert all(w <= at_count.half_widths["avg_miles"] for w in accuracy["avg_miles"])
    assert "AVG over 1,000 rows" in str(explanation)


def test_the_planner_finds_the_smallest_epsilon_for_a_target(flights_db):
    query = FIXED.format(epsilon=1)
    suggestion = flights_db.plan(query, 1000)
    assert flights_db.budget.spent == 0
    assert suggestion.target == {"flights": 1000.0}
    assert suggestion.half_widths["flights"] <= 1000
    # a little less ε misses the target: the suggestion is within 5% of the smallest
    less = flights_db.explain(FIXED.format(epsilon=repr(suggestion.epsilon / 1.05)))
    assert less.half_widths["flights"] > 1000
    # the released answer's intervals meet it
    result = flights_db.sql(FIXED.format(epsilon=repr(suggestion.epsilon)))
    assert result.epsilon == suggestion.epsilon
    assert max(result.accuracy(0.05).to_pydict()["flights"]) <= 1000
    assert f"EPSILON {suggestion.epsilon:g}" in str(suggestion)


def test_the_planner_takes_a_target_per_output(flights_db):
    query = FIXED.format(epsilon=1)
    targets = {"miles": 500_000, "avg_miles": 20}
    suggestion = flights_db.plan(query, targets, rows=50_000)
    got = suggestion.half_widths
    assert got["miles"] <= 500_000 and got["avg_miles"] <= 20
    less = flights_db.explain(FIXED.format(epsilon=repr(suggestion.epsilon / 1.05)), rows=50_000)
    assert less.half_widths["miles"] > 500_000 or less.half_widths["avg_miles"] > 20
    with pytest.raises(privsql.PrivacyError, match="AUTO"):
        flights_db.plan("SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum", 100)
    assert flights_db.budget.spent == 0


def test_partition_selection_on_a_monthly_grouping_warns_it_is_likely_empty(flights_db):
    stated = flights_db.explain(MONTHLY, units=PLANES)
    selection = stated.partition_selection
    assert selection is not None and selection["threshold"] > PLANES
    assert any(w.startswith("likely empty") for w in stated.warnings)
    assert f"needs about {selection['threshold']:,} units" in str(stated)
    # without a public bound, explain says what the threshold means but cannot judge it
    unstated = flights_db.explain(MONTHLY)
    assert not any(w.startswith("likely empty") for w in unstated.warnings)
    assert any("state units=" in w for w in unstated.warnings)
    assert flights_db.budget.spent == 0


def test_a_cap_far_below_the_rows_is_called_mostly_bias(flights_db):
    query = "SELECT COUNT(*) AS flights FROM flights PRIVACY_UNIT tailnum BOUND ROWS 10"
    explanation = flights_db.explain(query, rows=336_776, units=PLANES)
    (count,) = explanation.aggregates  # the COUNT's share of ε, after the bounding check's
    width = udfs.laplace_halfwidth(10, count["epsilon"], 0.05)
    assert explanation.half_widths == {"flights": pytest.approx(width)}
    assert any(w.startswith("mostly bias") for w in explanation.warnings)
    assert not flights_db.explain(query.replace("10", "600"), rows=336_776, units=PLANES).warnings


def test_an_auto_plan_shows_its_sql_with_placeholders(flights_db):
    explanation = flights_db.explain(
        "SELECT origin, COUNT(*) AS n FROM flights GROUP BY origin PRIVACY_UNIT tailnum "
        "MAX_GROUPS 3"
    )
    assert explanation.half_widths == {"n": None} and explanation.per_cap["n"] > 0
    assert "-- 1. per-unit summary" in explanation.sql and "$cap" in explanation.sql
    assert "$sensitivity_m0" in explanation.sql
    assert "per row of the privately chosen cap" in str(explanation)


AUTO_EVERYTHING = (
    "SELECT dest, COUNT(*) AS n, AVG(dep_delay) AS delay FROM flights GROUP BY dest "
    "PRIVACY_UNIT tailnum"
)


def test_an_auto_plan_shows_every_statement_it_runs(flights_db):
    """Bounds estimated, MAX_GROUPS and the cap chosen privately: four statements, each
    shown in full, what they decide as placeholders, no placeholder number left over."""
    sql = flights_db.explain(AUTO_EVERYTHING).sql
    labels = [line for line in sql.splitlines() if line[:5] in {f"-- {i}." for i in range(9)}]
    assert [label.split(". ")[1].split(",")[0] for label in labels] == [
        "the number of groups each unit touches",
        "per-unit extremes",
        "per-unit summary from which the cap is chosen privately:",
        "the release:",
    ]
    for placeholder in ("$bounds0", "$max_groups", "$cap", "$sensitivity_m0"):
        assert placeholder in sql
    assert "AVG(dep_delay)" in sql.split("-- 1.")[0]  # the legend says what $bounds0 is
    for number in (PLACEHOLDER_CAP, PLACEHOLDER_GROUPS, PLACEHOLDER_GROUPS + 1):
        assert str(number) not in sql
    assert flights_db.budget.spent == 0


def _filled(sql: str, values: dict[str, int]) -> str:
    """``sql`` with each placeholder given its value and the small sums it stands in worked
    out, as the generator writes them."""
    for name in sorted(values, key=len, reverse=True):
        sql = sql.replace(name, str(values[name]))
    return re.sub(
        r"\((\d+) ([*+]) (\d+)\)",
        lambda m: str(int(m[1]) * int(m[3]) if m[2] == "*" else int(m[1]) + int(m[3])),
        sql,
    )


def test_the_release_shown_is_the_one_that_runs_once_the_choices_are_made(flights_db):
    query = "SELECT dest, COUNT(*) AS n FROM flights GROUP BY dest PRIVACY_UNIT tailnum"
    shown = flights_db.explain(query).sql.split("the release:\n")[1]
    analysis = analyze(query, flights_db._catalog(), None)
    decided = plan(
        analysis, epsilon=flights_db.epsilon, delta=flights_db.delta, decided_groups=3
    ).with_cap(7)
    values = {"$cap": 7, "$max_groups": 3, "$sensitivity_cut": decided.cut_sensitivity}
    values |= {
        f"$sensitivity_{m.name.lstrip('_')}": decided.sensitivity(m) for m in decided.measurements
    }
    assert _filled(shown, values) == generate(decided, FUNCTIONS)


def test_a_plan_without_auto_shows_its_one_statement_as_it_runs(flights_db):
    query = FIXED.format(epsilon=0.5)
    sql = flights_db.explain(query).sql
    assert "$" not in sql.replace("$privsql_secret", "") and not sql.startswith("--")


def test_numbers_are_marked_only_where_two_generations_differ_in_numbers_alone():
    from privsql.stage_sql import _differing, _mark

    sql, other = (
        "SELECT x * CAST('0.5' AS DOUBLE), 7 FROM t",
        "SELECT x * CAST('0.25' AS DOUBLE), 7 FROM t",
    )
    positions = _differing(sql, other)
    assert positions is not None and len(positions) == 1
    assert _mark(sql, dict.fromkeys(positions, "$bounds0")) == (
        "SELECT x * CAST($bounds0 AS DOUBLE), 7 FROM t"
    )
    assert _differing(sql, other.replace("FROM t", "FROM u")) is None
