"""Each bounding strategy, on neighbouring databases: exact bounded measurements, then noise.

Privacy of a release = (the generated SQL moves each measurement by at most its declared
sensitivity) ∧ (the noise is ε-DP for that sensitivity). The first is checked exactly,
by running the generated SQL with the noise function replaced by the identity, on a
database and on the same database plus one unit with 10⁴ rows of extreme values. The
second is checked statistically, with threshold events on those exact neighbouring
values: the privacy loss passes at the declared ε and is detected when the noise is
1.5× too small.
"""

from __future__ import annotations

import math

import duckdb
import pytest
from exact_release import IDENTITY, install

import privsql
import udfs
from rewriter.analyze import analyze
from rewriter.compiler import threshold_search
from rewriter.dialect import to_sql
from rewriter.generate import EXCESS, EXCESS_SCALE, bounds_sql, generate, stages
from rewriter.plan import (
    CANDIDATES,
    MAGNITUDES,
    MEAN_BINS,
    ROW_CANDIDATES,
    ROW_WEIGHT_BITS,
    plan,
)
from udfs.threshold import magnitude_histogram

stats = pytest.importorskip("scipy.stats")

SAMPLES = 20_000
CONFIDENCE_Z = 5.3  # each proportion's bound fails with probability < 1e-7


@pytest.fixture(scope="module")
def neighbours():
    """D: 300 units with heavy-tailed row counts; D' = D + one unit of 10⁴ extreme rows."""
    con = seeded(
        0.25,
        "CREATE TABLE visits AS SELECT floor(300 * pow(random(), 3))::INT AS uid, "
        "(range % 4)::INT AS g, random() * 100 AS v FROM range(20000)",
    )
    yield con
    con.close()


def seeded(seed: float, create: str) -> duckdb.DuckDBPyConnection:
    """A database whose one table ``create`` makes from DuckDB's random() at ``seed``, with
    the identity release functions installed (``exact_release.install``)."""
    con = duckdb.connect()
    con.execute(f"SELECT setseed({seed})").fetchall()
    con.execute(create)
    install(con)
    return con


STRATEGIES = ["BOUND ROWS 5", "BOUND WEIGHTS 5", "BOUND CLIP", "BOUND ROWS AUTO", "BOUND AUTO"]
QUERY = (
    "SELECT g, COUNT(*) AS n, SUM(v CLAMPED BETWEEN 0 AND 100) AS s, "
    "STDDEV(v CLAMPED BETWEEN 0 AND 100) AS sd, "
    "AVG(v CLAMPED BETWEEN 0 AND 100) AS a FROM visits GROUP BY g "
    "PRIVACY_UNIT uid {bound} MAX_GROUPS {groups} EPSILON 1"
)


def _plan(con, bound: str, groups: int = 2):
    db = privsql.connect(con, budget=1e9, seed=1, insecure=True)
    sql = QUERY.format(bound=bound, groups=groups)
    if "CLIP" in bound:  # CLIP bounds means and counts only
        sql = sql.replace("SUM(v CLAMPED BETWEEN 0 AND 100) AS s, ", "")
        sql = sql.replace("STDDEV(v CLAMPED BETWEEN 0 AND 100) AS sd, ", "")
    analysis = analyze(sql, db._catalog(), {"g": [0, 1, 2, 3]})
    query_plan = plan(analysis, epsilon=1.0, delta=1e-6)
    db.close()
    # AUTO strategies are checked at a fixed cap: privacy must hold whichever cap is chosen.
    return query_plan.with_cap(7) if query_plan.search is not None else query_plan


def _measurements(con, query_plan) -> dict[str, list[int]]:
    table = con.execute(
        "WITH released AS (" + _released_only(generate(query_plan, IDENTITY)) + ") "
        "SELECT * FROM released ORDER BY 1",
        {"privsql_secret": 99},
    ).fetchall()
    names = [m.name for m in query_plan.measurements]
    return {name: [int(row[1 + i]) for row in table] for i, name in enumerate(names)}


def _released_only(statement: str) -> str:
    """The generated statement, stopped at its released (here: exact) measurements."""
    head, _ = statement.rsplit("\n", 1)
    return head + "\nSELECT * FROM __released"


@pytest.mark.parametrize("bound", STRATEGIES)
def test_one_extreme_unit_moves_each_measurement_by_at_most_its_sensitivity(neighbours, bound):
    query_plan = _plan(neighbours, bound)
    before = _measurements(neighbours, query_plan)
    neighbours.execute("BEGIN TRANSACTION")
    neighbours.execute("INSERT INTO visits SELECT 999999, range % 4, 1e12 FROM range(10000)")
    after = _measurements(neighbours, query_plan)
    neighbours.execute("ROLLBACK")
    for m in query_plan.measurements:
        moved = sum(abs(a - b) for a, b in zip(after[m.name], before[m.name], strict=True))
        assert moved <= query_plan.sensitivity(m), (bound, m.kind)
        if m.kind in ("rows", "units", "sum"):
            # The intruder saturates the bound: the test uses the worst case.
            assert moved >= 0.99 * query_plan.sensitivity(m), (bound, m.kind)


def _log_ratio_bounds(hits_a: int, hits_b: int, n: int) -> tuple[float, float]:
    """Lower bound of log(P_a/P_b) from two binomial counts, each at z = CONFIDENCE_Z."""
    alpha = 2 * stats.norm.sf(CONFIDENCE_Z)
    low_a = stats.beta.ppf(alpha, hits_a, n - hits_a + 1)
    high_b = stats.beta.ppf(1 - alpha, hits_b + 1, n - hits_b)
    return math.log(low_a) - math.log(high_b), math.log(hits_a / n) - math.log(hits_b / n)


def _privacy_loss(
    value_d: int, value_neighbour: int, sensitivity: int, epsilon: float, weaken: float
) -> tuple[float, float]:
    """Samples of the release on both databases; the threshold event at the larger value."""
    rng = udfs.SeededRandom(20261120, insecure=True)
    # Weakening by w is Laplace with scale (sensitivity / w) / ε, i.e. at ε·w.
    effective = epsilon * weaken
    on_d = udfs.laplace_release([value_d] * SAMPLES, sensitivity, effective, rng)
    on_neighbour = udfs.laplace_release([value_neighbour] * SAMPLES, sensitivity, effective, rng)
    threshold = max(value_d, value_neighbour)
    high, low = (on_neighbour, on_d) if value_neighbour >= value_d else (on_d, on_neighbour)
    return _log_ratio_bounds(
        sum(x >= threshold for x in high), sum(x >= threshold for x in low), SAMPLES
    )


@pytest.mark.parametrize("bound", STRATEGIES)
def test_release_passes_at_declared_epsilon_and_fails_with_too_little_noise(neighbours, bound):
    # One group per unit: the intruder's 10⁴ rows in group 0 saturate COUNT's sensitivity.
    query_plan = _plan(neighbours, bound, groups=1)
    before = _measurements(neighbours, query_plan)
    neighbours.execute("BEGIN TRANSACTION")
    neighbours.execute("INSERT INTO visits SELECT 999999, 0, 1e12 FROM range(10000)")
    after = _measurements(neighbours, query_plan)
    neighbours.execute("ROLLBACK")
    rows = next(m for m in query_plan.measurements if m.kind == "rows")
    d, d_prime = before[rows.name][0], after[rows.name][0]
    sensitivity = query_plan.sensitivity(rows)
    assert d_prime - d == sensitivity
    lower, _ = _privacy_loss(d, d_prime, sensitivity, rows.epsilon, 1.0)
    assert lower <= rows.epsilon
    lower_weak, estimate = _privacy_loss(d, d_prime, sensitivity, rows.epsilon, 1.5)
    assert lower_weak > rows.epsilon, (lower_weak, estimate)


@pytest.mark.parametrize("bound", ["BOUND ROWS AUTO", "BOUND AUTO"])
def test_auto_summaries_move_by_at_most_one_per_unit(neighbours, bound):
    """The inputs of the AUTO threshold search and the bounds estimate: each count of units
    moves by at most one when a unit (here with 10⁴ extreme rows in every group) is added,
    each count of kept cells by at most MAX_GROUPS, each total of mean values by at most
    the mean's bound, and each argument's histogram of row weights (from the bounds
    estimate's weights above and below each magnitude) by at most 2**ROW_WEIGHT_BITS in L1."""
    db = privsql.connect(neighbours, budget=1e9, seed=1, insecure=True)
    sql = (
        "SELECT g, SUM(v) AS s, AVG(v) AS a FROM visits GROUP BY g "
        f"PRIVACY_UNIT uid {bound} MAX_GROUPS 2 EPSILON 1"
    )
    analysis = analyze(sql, db._catalog(), {"g": [0, 1, 2, 3]})
    db.close()
    estimate = bounds_sql(analysis, [a.argument for a in analysis.unbounded], MAGNITUDES)
    query_plan = plan(
        analysis.with_bounds({to_sql(a.node): (0.0, 100.0) for a in analysis.unbounded}),
        epsilon=1.0,
        delta=1e-6,
    )
    search = threshold_search(query_plan)

    def summaries() -> list[int]:
        rows = [
            neighbours.execute(q, {"privsql_secret": 3} if "$privsql" in q else None).fetchall()
            for q in (estimate, search.statement)
        ]
        return [int(v) for v in (*rows[0][0], *search.summary(rows[1]))]

    def row_weights(summary: list[int]) -> list[list[int]]:
        """Per argument, its noisy-to-be histogram of row weights (both sides' bins)."""
        width, arguments = len(MAGNITUDES), len(analysis.unbounded)
        blocks = [summary[k * width : (k + 1) * width] for k in range(4 * arguments)]
        return [
            [*magnitude_histogram(blocks[2 * a + 1]), *magnitude_histogram(blocks[2 * a])]
            for a in range(arguments, 2 * arguments)
        ]

    estimated = 4 * len(analysis.unbounded) * len(MAGNITUDES)  # the bounds summary's length
    before = summaries()
    neighbours.execute("BEGIN TRANSACTION")
    neighbours.execute("INSERT INTO visits SELECT 999999, range % 4, -1e12 FROM range(10000)")
    after = summaries()
    neighbours.execute("ROLLBACK")
    for old, new in zip(row_weights(before), row_weights(after), strict=True):
        assert sum(abs(a - b) for a, b in zip(new, old, strict=True)) <= 2**ROW_WEIGHT_BITS
    after = after[: estimated // 2] + after[estimated:]  # the counts, without the weights
    before = before[: estimated // 2] + before[estimated:]
    moved = [abs(a - b) for a, b in zip(after, before, strict=True)]
    # The bounds' counts of units, then the counts of units above each candidate, move by
    # at most one.
    width = estimated // 2 + len(CANDIDATES) + 1
    assert max(moved[:width]) == 1
    # With MAX_GROUPS m > 1 the rank rule's counts of kept cells come next: a unit has at
    # most m kept cells, so each moves by at most m (here exactly: the unit fills m cells).
    groups = query_plan.bounding.groups
    assert groups == 2
    ranked = width + len(ROW_CANDIDATES)
    assert max(moved[width:ranked]) == groups
    # Under BOUND AUTO each AVG's units and totals of mean values per size bucket and bin
    # come last (v(h)'s bias term): the unit is in one cell, so the units move by one in
    # L1 and the totals by at most the mean's bound, here exactly (the unit's mean is −B).
    block = (len(CANDIDATES) + 1) * MEAN_BINS
    assert len(moved) == ranked + 2 * block * len(query_plan.mean_sums)
    for i, (total, _) in enumerate(query_plan.mean_sums):
        start = ranked + 2 * i * block
        assert sum(moved[start : start + block]) == 1
        assert sum(moved[start + block : start + 2 * block]) == total.bound


ONE_GROUP = [
    ("COUNT(*)", "ROWS 5", None, True),
    ("COUNT(*) AS n, COUNT(DISTINCT uid) AS d", "ROWS 5", None, True),
    ("COUNT(DISTINCT uid)", "ROWS 5", None, True),
    ("COUNT(*)", "ROWS AUTO", {"rank": 4}, True),
    ("SUM(v CLAMPED BETWEEN 0 AND 100) AS s, AVG(v CLAMPED BETWEEN 0 AND 100) AS a", "WEIGHTS 5",
     None, True),
    ("COUNT(*) AS n, AVG(v CLAMPED BETWEEN 0 AND 100) AS a", "WEIGHTS AUTO",
     {"rank": 5, "variance": 3}, True),
    ("AVG(v CLAMPED BETWEEN 0 AND 100)", "CLIP", {"rank": 4, "variance": 4}, False),
]  # fmt: skip
"""Queries without group keys (selection, BOUND, AUTO caps, whether ``__groups`` is then one
aggregate over ``__chosen``): ROWS over no row value and WEIGHTS bound each cell from its
own row of ``__chosen``; CLIP re-reads rows. (ROWS over row values re-reads them too, but
keeps other rows once a key is in their hash: not comparable so.)"""


@pytest.mark.parametrize(("select", "bound", "caps", "one_aggregate"), ONE_GROUP)
def test_without_group_keys_the_release_is_one_listed_groups(select, bound, caps, one_aggregate):
    """Without group keys a query's exact released values (measurements, each row cap's
    count of cut cells and rows cut) are those of the same query grouped by a listed key
    every row has, whose rows cut are summed per unit in an ``__excess`` stage — where
    ``__groups`` is one aggregate over ``__chosen`` (no ``__bounded`` nor ``__excess``
    stage) for the bounding strategies that read each cell's row of ``__chosen`` alone —
    and the check's are the definition's: per row cap c, the units of more than c rows,
    and their rows beyond c in 1/EXCESS_SCALE steps of c, at most EXCESS_SCALE each."""
    con = seeded(
        0.5,
        "CREATE TABLE t AS SELECT floor(60 * pow(random(), 3))::INT AS uid, 0 AS g, "
        "CASE WHEN range % 11 = 0 THEN NULL ELSE random() * 100 END AS v FROM range(2000)",
    )
    sizes = [n for (n,) in con.execute("SELECT count(*) FROM t GROUP BY uid").fetchall()]
    db = privsql.connect(con, seed=1, insecure=True)
    db.protect("t", privacy_unit="uid")
    released = []
    for keys, group, listed in (("", "", None), ("g, ", "GROUP BY g ", {"g": [0]})):
        sql = f"SELECT {keys}{select} FROM t {group}PRIVACY_UNIT uid BOUND {bound} EPSILON 1"
        query_plan = plan(analyze(sql, db._catalog(), listed), epsilon=1.0, delta=1e-6)
        query_plan = query_plan.with_caps(caps) if caps else query_plan
        parts = stages(query_plan, IDENTITY)
        if listed is None:
            folded = "__bounded" not in parts.aggregation and EXCESS not in parts.aggregation
            assert folded == one_aggregate
        else:  # rows cut summed per unit (none without a row cap: COUNT(DISTINCT) alone)
            assert (EXCESS in parts.aggregation) == bool(query_plan.cut_caps)
        statement = _released_only(parts.statement())
        secret = {"privsql_secret": 99} if "$privsql_secret" in statement else None
        (row,) = con.execute(statement, secret).fetchall()
        released.append(row[len(query_plan.analysis.keys) :])
    assert released[0] == released[1]
    checked = released[0][len(query_plan.measurements) :]  # cut cells, then rows, per row cap
    cut_caps = query_plan.cut_caps
    cut = [sum(n > c for n in sizes) for c in cut_caps]
    scale = EXCESS_SCALE
    excess = [sum(min(scale, (n - c) * scale // c) for n in sizes if n > c) for c in cut_caps]
    assert checked == ((*cut, *excess) if cut_caps else (0,))  # no cap: COUNT(DISTINCT)
    assert all(checked) == bool(cut_caps)
    db.close()
