"""Black-box privacy audit of every release mechanism on worst-case neighbouring databases.

For each mechanism, D is a database and D' is D plus *all* rows of one privacy unit — the
worst the bounding allows (10⁴ rows of extreme values, so the unit saturates every cap).
The rewritten SQL runs once on each to get the exact bounded aggregates; the real release
functions of ``udfs`` then sample the mechanism many times on them, and ``auditor.audit``
(threshold events, Clopper–Pearson bounds; see tests/auditor.py) checks the declared ε.
COUNT and SUM are also audited end to end through ``Session.sql``.

Every audit runs twice: as shipped, where it must pass (a correct mechanism is reported
as violating with probability < 10⁻⁷), and with the noise 1.5× too small
(``udfs.weakening.weaken_noise_for_tests``), where it must detect the violation.

Sample sizes: the default run detects the weakened noise with a wide margin in about 35 s
of CPU; ``python -m pytest -m slow tests/test_audit.py`` runs the full audit (10× the
samples, quantiles over the shipped 4096 buckets instead of a 64-bucket coarsening of the
same histogram, and the v(h) threshold search).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from fractions import Fraction
from pathlib import Path

import duckdb
import neighbours
import numpy as np
import pytest
from auditor import Report, Sampler, audit
from exact_release import install

import privsql
import udfs
from privsql.session import GROUP_COUNTS
from rewriter.analyze import analyze
from rewriter.generate import EXCESS_SCALE, bounds_sql, groups_sql, size_summary
from rewriter.plan import (
    BUCKETS,
    CANDIDATES,
    CUT_SHARE,
    EXCESS_PART,
    GROUPS_SHARE,
    MAGNITUDES,
    MEAN_BINS,
    ROW_CANDIDATES,
    ROW_WEIGHT_BITS,
    Plan,
    bounds_search,
    mean_bin_width,
    plan,
)
from udfs.quantile import _private_reach, _Ranks, interval_margin
from udfs.threshold import TWO_SIDED_FROM
from udfs.unit_means import WINDOW_SHARE
from udfs.weakening import weaken_noise_for_tests

WEAKENED = 1.5
EXTREME = "INSERT INTO visits SELECT 999999, 0, 1e12 FROM range(10000)"
"""One privacy unit with 10⁴ rows of a value far above every clamp."""


def sizes(full: bool) -> dict[str, int]:
    """Samples per side for the test phase, and for the selection of events."""
    scale = 10 if full else 1
    return {"samples": 10_000 * scale, "selection_samples": 2_000 * scale}


SIZES = [pytest.param(False, id="ci"), pytest.param(True, id="full", marks=pytest.mark.slow)]


def database(*statements: str) -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """A connection holding ``visits`` (made by ``statements``) and a seeded session on it."""
    connection = duckdb.connect()
    for statement in statements:
        connection.execute(statement)
    install(connection)
    session = privsql.connect(connection, budget=1e9, seed=20261121, insecure=True)
    yield connection, session
    session.close()
    connection.close()


@pytest.fixture(scope="module")
def visits() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """D: 300 units with heavy-tailed row counts (one up to ~1000 rows), values in [0, 100)."""
    yield from database(
        "SELECT setseed(0.25)",
        "CREATE TABLE visits AS SELECT floor(300 * pow(random(), 3))::INT AS uid, "
        "(range % 4)::INT AS g, random() * 100 AS v FROM range(20000)",
    )


def planned(db: privsql.Session, sql: str, keys: dict | None = None) -> Plan:
    """The plan of ``sql``; an AUTO cap is fixed at what the real search picks on D.

    Privacy of the measurements must hold whichever cap the search picks; the search
    itself is audited separately (``test_rank_rule_threshold_search``).
    """
    query_plan = plan(analyze(sql, db._catalog(), keys), epsilon=1.0, delta=1e-6)
    if query_plan.search is None:
        return query_plan
    summary = db._threshold_summary(query_plan)
    return query_plan.with_caps(db._thresholds(query_plan, summary)[0])


def on_neighbours(con, query_plan: Plan, read: Callable) -> tuple[object, object]:
    """``read(con, plan)`` on D and on D' (D plus the extreme unit)."""
    before = read(con, query_plan)
    with neighbours.with_rows(con, EXTREME):
        after = read(con, query_plan)
    return before, after


def laplace_sampler(query_plan: Plan, exact: tuple[dict, dict], seed: int) -> Sampler:
    """Every measurement of the query released by ``udfs.laplace_release``, as one vector."""
    rng = udfs.SeededRandom(seed, insecure=True)

    def sample(neighbour: bool, n: int) -> np.ndarray:
        values = exact[neighbour]
        return np.column_stack(
            [
                udfs.laplace_release(values[m.name] * n, query_plan.sensitivity(m), m.epsilon, rng)
                for m in query_plan.measurements
            ]
        )

    return sample


def noise(weaken: bool) -> AbstractContextManager[None]:
    """The shipped noise, or (inside the test-only hook) noise 1.5× too small."""
    return weaken_noise_for_tests(WEAKENED if weaken else 1.0)


def check(report: Report, weaken: bool) -> None:
    """Shipped: no violation; weakened: a violation, certifying more than the declared ε."""
    print(report)
    if weaken:
        assert report.violated, report
        assert report.epsilon_lower_bound > report.epsilon
    else:
        assert not report.violated, report


CLAMP = "v CLAMPED BETWEEN 0 AND 100"
STATISTICS = {"COUNT": "COUNT(*)", "SUM": f"SUM({CLAMP})", "AVG": f"AVG({CLAMP})"}
STRATEGIES = ["BOUND ROWS 5", "BOUND WEIGHTS 5", "BOUND CLIP", "BOUND ROWS AUTO", "BOUND AUTO"]
LAPLACE_CASES = [
    pytest.param(statistic, strategy, id=f"{statistic}-{strategy.removeprefix('BOUND ')}")
    for strategy in STRATEGIES
    for statistic in STATISTICS
    if not (statistic == "SUM" and strategy == "BOUND CLIP")  # CLIP bounds means only
] + [
    pytest.param("COUNT(DISTINCT uid)", "BOUND ROWS 5", id="COUNT-DISTINCT"),
    pytest.param(f"STDDEV({CLAMP})", "BOUND ROWS 5", id="STDDEV-ROWS 5"),
    pytest.param(f"VARIANCE({CLAMP})", "BOUND WEIGHTS 5", id="VARIANCE-WEIGHTS 5"),
]


@pytest.mark.parametrize("full", SIZES)
@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
@pytest.mark.parametrize(("statistic", "strategy"), LAPLACE_CASES)
def test_laplace_releases(visits, statistic, strategy, weaken, full):
    """COUNT, COUNT(DISTINCT unit), SUM and AVG (its noisy sum and count together) under
    every bounding strategy, and STDDEV/VARIANCE (three measurements): ε-DP at the declared
    ε, detected when the noise is too small."""
    con, db = visits
    aggregate = STATISTICS.get(statistic, statistic)
    sql = f"SELECT {aggregate} FROM visits PRIVACY_UNIT uid {strategy} EPSILON 2"
    query_plan = planned(db, sql)
    exact = on_neighbours(con, query_plan, neighbours.measurements)
    for m in query_plan.measurements:  # the intruder saturates every sensitivity
        moved = abs(exact[1][m.name][0] - exact[0][m.name][0])
        assert 0.99 * query_plan.sensitivity(m) <= moved <= query_plan.sensitivity(m)
    epsilon = sum(m.epsilon for m in query_plan.measurements)
    sample = laplace_sampler(query_plan, exact, seed=zlib.crc32(f"{statistic} {strategy}".encode()))
    with noise(weaken):
        check(audit(sample, epsilon, **sizes(full)), weaken)


@pytest.fixture(scope="module")
def medians() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """D for quantiles: one unit's five rows at 16, in bucket 10 of 64 over [0, 100].

    Adding the extreme unit (five kept rows at the top) moves the target rank from 2.5 to
    5: the ten empty buckets below the data trail the best score by 2.5 in D and by 5 = 2Δ
    in D', while the 53 above catch up with it. "Output below 15.6" is then the
    mechanism's tightest threshold event among those tried (a search over placements): at
    the declared ε its log-ratio is 0.89 ε, and 1.35 ε with the weakened noise.
    """
    yield from database(
        "CREATE TABLE visits AS SELECT 1 AS uid, 0 AS g, 16.0::DOUBLE AS v FROM range(5)"
    )


def histogram(con, query_plan: Plan) -> list[int]:
    """The quantile's exact histogram, as the generated SQL builds it."""
    ((buckets, weights),) = neighbours.stage(con, query_plan, "__hist0")
    counts = [0] * BUCKETS
    for b, w in zip(buckets, weights, strict=True):
        counts[b] = int(w)
    return counts


def coarsened(counts: list[int], buckets: int) -> list[int]:
    """The same histogram over fewer, wider buckets (adjacent buckets merged)."""
    width = len(counts) // buckets
    return [sum(counts[i : i + width]) for i in range(0, len(counts), width)]


@pytest.mark.parametrize("full", SIZES)
@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
@pytest.mark.parametrize("strategy", ["BOUND ROWS 5", "BOUND WEIGHTS 5"])
def test_quantile(medians, strategy, weaken, full):
    """MEDIAN by permute-and-flip over the histogram the SQL builds. The default run
    merges it into 64 buckets (same function, 60× faster); the full run uses all 4096."""
    con, db = medians
    sql = f"SELECT MEDIAN({CLAMP}) FROM visits PRIVACY_UNIT uid {strategy} EPSILON 2"
    query_plan = planned(db, sql)
    (m,) = query_plan.measurements
    exact = on_neighbours(con, query_plan, histogram)
    if not full:
        exact = tuple(coarsened(counts, 64) for counts in exact)
    p, low, high = m.quantile
    rng = udfs.SeededRandom(zlib.crc32(strategy.encode()), insecure=True)

    def sample(neighbour: bool, n: int) -> list[float]:
        counts, rows = exact[neighbour], query_plan.sensitivity(m)
        return [udfs.private_quantile(counts, p, low, high, m.epsilon, rows, rng) for _ in range(n)]

    samples = 40_000 if not full else 100_000  # the event has probability 0.06 to 0.15
    with noise(weaken):
        check(audit(sample, m.epsilon, samples=samples, selection_samples=samples // 4), weaken)


def test_quantile_with_its_interval(medians):
    """What the release function returns — the point and its 95% interval together —
    passes against the quantile's whole ε (the point's and the interval's), over 64 buckets.

    Shipped only: on this instance the triple's privacy loss stays far below its ε, so too
    little noise cannot be told apart here. The parts are each shown to fail when
    weakened: the point above and the interval's reach below
    (``test_quantile_interval_reach``).
    """
    con, db = medians
    sql = f"SELECT MEDIAN({CLAMP}) FROM visits PRIVACY_UNIT uid BOUND ROWS 5 EPSILON 2"
    query_plan = planned(db, sql)
    (m,) = query_plan.measurements
    exact = tuple(coarsened(counts, 64) for counts in on_neighbours(con, query_plan, histogram))
    p, low, high = m.quantile
    rng = udfs.SeededRandom(zlib.crc32(b"interval"), insecure=True)

    def sample(neighbour: bool, n: int) -> list[tuple[float, float, float]]:
        counts, rows = exact[neighbour], query_plan.sensitivity(m)
        return [
            udfs.private_quantile_interval(
                counts, p, low, high, m.epsilon, m.interval_epsilon, rows, rng
            )
            for _ in range(n)
        ]

    epsilon = m.epsilon + m.interval_epsilon
    check(audit(sample, epsilon, samples=20_000, selection_samples=5_000), False)


@pytest.fixture(scope="module")
def reaches() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """D for the quantile's interval: 146 one-row units, 141 in bucket 0 of 64 over
    [0, 100] and 5 in bucket 2. With the point in bucket 0 the interval reaches up only;
    at the interval's ε = 0.475 the target margin is K = 70 ranks, every reach short of
    bucket 2 keeps K − 2 ranks above the median and the wider ones K + 3. The extreme unit
    (five kept rows at the top) takes Δ = 2.5 from every margin, so the short reaches fall
    further behind K and the wide ones come within 0.5 of it. "Reach at most 1 bucket" is
    then the tightest threshold event among the shapes tried (a search over two atoms'
    sizes and places and the point's bucket): its exact log-ratio is 0.92 ε at the declared
    ε and 1.38 ε with the weakened noise, at probabilities 0.06 to 0.13.
    """
    yield from database(
        "CREATE TABLE visits AS SELECT range AS uid, 0 AS g, "
        "(CASE WHEN range < 141 THEN 0.5 ELSE 2.5 END) * 100 / 64 AS v FROM range(146)"
    )


@pytest.mark.parametrize("full", SIZES)
@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
def test_quantile_interval_reach(reaches, weaken, full):
    """The MEDIAN's interval: its reach from the point's bucket, chosen by permute-and-flip
    over the SQL's histogram (merged into 64 buckets), is ε-DP at the interval's ε given
    that bucket (the point, released first, fixes it: sequential composition), and
    detected when the noise is too small. The full run takes 10× the samples."""
    con, db = reaches
    sql = f"SELECT MEDIAN({CLAMP}) FROM visits PRIVACY_UNIT uid BOUND ROWS 5 EPSILON 2"
    query_plan = planned(db, sql)
    (m,) = query_plan.measurements
    exact = tuple(coarsened(counts, 64) for counts in on_neighbours(con, query_plan, histogram))
    assert (exact[0][0], exact[0][2], sum(exact[0]), exact[1][63]) == (141, 5, 146, 5)
    rows, p = query_plan.sensitivity(m), Fraction(m.quantile[0])
    epsilon = Fraction(m.interval_epsilon)
    margin = interval_margin(64, m.quantile[0], m.interval_epsilon, rows)
    rng = udfs.SeededRandom(zlib.crc32(b"reach"), insecure=True)

    def sample(neighbour: bool, n: int) -> list[int]:
        ranks = _Ranks(exact[neighbour])
        return [_private_reach(ranks, 0, rows, p, epsilon, margin, rng) for _ in range(n)]

    samples = 60_000 * (10 if full else 1)
    with noise(weaken):
        check(
            audit(sample, m.interval_epsilon, samples=samples, selection_samples=samples // 4),
            weaken,
        )


THRESHOLD = udfs.partition_threshold(1, 1.0, 1e-6)
"""The public partition-selection threshold of the query below (ε_p = 1, δ = 10⁻⁶)."""


@pytest.fixture(scope="module")
def keys() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """D for partition selection: key 0 held by T − 1 units and, in D', by T: the keep
    probabilities are then P(Z ≥ 1) and P(Z ≥ 0), whose ratio is exactly e^ε_p, the most
    the decision may reveal; key 1 is held by 100 units."""
    yield from database(
        "CREATE TABLE visits AS SELECT range AS uid, 0 AS g, 1.0::DOUBLE AS v "
        f"FROM range({THRESHOLD - 1}) UNION ALL SELECT 10000 + range, 1, 1.0 FROM range(100)"
    )


@pytest.mark.parametrize("full", SIZES)
@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
def test_partition_selection(keys, weaken, full):
    """Non-public GROUP BY keys: the keep decision is (ε_p, δ)-DP at its declared ε_p."""
    con, db = keys
    epsilon = 2 / (1 - CUT_SHARE)  # ε_p = 1 after the bounding check's share
    sql = (
        "SELECT g, COUNT(*) FROM visits GROUP BY g PRIVACY_UNIT uid BOUND ROWS 5 MAX_GROUPS 1 "
        f"EPSILON {epsilon!r}"
    )
    query_plan = planned(db, sql)
    selection = query_plan.partition
    assert selection.epsilon == pytest.approx(1.0)
    units = on_neighbours(con, query_plan, lambda c, p: neighbours.stage(c, p, "__groups"))
    held = [rows[0][1] for rows in units]  # key 0's exact number of units
    assert held == [THRESHOLD - 1, THRESHOLD]
    rng = udfs.SeededRandom(11, insecure=True)

    def sample(neighbour: bool, n: int) -> list[bool]:
        count = held[neighbour]
        return udfs.keep_partitions([count] * n, 1, selection.epsilon, selection.delta, rng)

    with noise(weaken):
        check(audit(sample, selection.epsilon, selection.delta, **sizes(full)), weaken)


@pytest.fixture(scope="module")
def cells() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """D for the rank rule's two-sided score (ε_s·r = 17.6 nats, above
    ``udfs.threshold.TWO_SIDED_FROM``): largest cells of 17 rows (100 units), 20 rows (1)
    and 25 rows (9). With r = 10 units wanted above the cap, the row caps 19 (10 units
    above) and 23 (9) then score 1 plus a prior step apart, and every other candidate
    (16: 110 above; 27 and up: none) far below; a unit of 10⁴ rows raises every count by
    one and moves the gap between 19 and 23 by 2: the worst case of permute-and-flip."""
    yield from database(
        "CREATE TABLE visits AS SELECT u AS uid, 0 AS g, 1.0::DOUBLE AS v FROM range(110) "
        "AS a(u), range(30) AS b(r) WHERE r < CASE WHEN u < 100 THEN 17 WHEN u = 100 THEN 20 "
        "ELSE 25 END"
    )


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
def test_rank_rule_threshold_search(cells, weaken):
    """The private choice of a BOUND ROWS AUTO cap (AKMV19's rank rule) from the summary the
    SQL computes on D and D' is ε_auto-DP; 100 public groups set the target rank to 10."""
    con, db = cells
    sql = (
        "SELECT g, COUNT(*) FROM visits GROUP BY g PRIVACY_UNIT uid BOUND ROWS AUTO MAX_GROUPS 1 "
        "EPSILON 13"
    )
    query_plan = plan(analyze(sql, db._catalog(), {"g": list(range(100))}), epsilon=1, delta=0.1)
    search = query_plan.search
    assert (search.rules, search.rank) == (("rank",), 10)
    summaries = on_neighbours(
        con,
        query_plan,
        lambda c, p: db._threshold_summary(p),
    )

    def sample(neighbour: bool, n: int) -> list[int]:
        summary = summaries[neighbour]
        return [db._thresholds(query_plan, summary)[0]["rank"] for _ in range(n)]

    with noise(weaken):
        check(audit(sample, search.epsilon, samples=10_000, selection_samples=1_000), weaken)


@pytest.fixture(scope="module")
def top_unit() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """D for the rank rule's one-sided, monotone score (ε_s·r = 1.76 nats, below
    ``udfs.threshold.TWO_SIDED_FROM``): 100 units of 17 rows and one of 20, one group.
    With r = 1 the row caps 19 (1 unit above), 23, 27, … (none) all score 0 less their
    prior, 16 (101 above) far below; a unit of 10⁴ rows raises every count by one, which
    lowers 19's score by 1 and leaves the others: one score moves by the whole
    sensitivity while its rivals stay, the worst case for monotone scores, which
    permute-and-flip then runs at sensitivity 1/2."""
    yield from database(
        "CREATE TABLE visits AS SELECT u AS uid, 0 AS g, 1.0::DOUBLE AS v FROM range(101) "
        "AS a(u), range(20) AS b(r) WHERE r < CASE WHEN u < 100 THEN 17 ELSE 20 END"
    )


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
def test_rank_rule_one_sided(top_unit, weaken):
    """The private choice of a BOUND ROWS AUTO cap with one group (r = 1), where the rank
    rule's score is one-sided and permute-and-flip runs at the monotone sensitivity 1/2,
    from the summary the SQL computes on D and D' is ε_auto-DP."""
    con, db = top_unit
    sql = "SELECT COUNT(*) FROM visits PRIVACY_UNIT uid BOUND ROWS AUTO EPSILON 13"
    query_plan = plan(analyze(sql, db._catalog()), epsilon=1, delta=0.1)
    search = query_plan.search
    assert (search.rules, search.rank) == (("rank",), 1)
    assert search.epsilon * 9 / 10 * search.rank < TWO_SIDED_FROM  # the one-sided score
    summaries = on_neighbours(con, query_plan, lambda c, p: db._threshold_summary(p))

    def sample(neighbour: bool, n: int) -> list[int]:
        return [db._thresholds(query_plan, summaries[neighbour])[0]["rank"] for _ in range(n)]

    # The telling event, the lowest cap (19 selected), has probability 0.57 on D and 0.05 on
    # D' when weakened: 4 000 selection samples are what ranks it first at SELECTION_Z.
    with noise(weaken):
        check(audit(sample, search.epsilon, samples=10_000, selection_samples=4_000), weaken)


@pytest.fixture(scope="module")
def extremes() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """D for the bounds rule: 40 units with a value in (1, 2] and 5 units at each of ±10¹²
    (the bin (2³⁹, 2⁴⁰] of each side). At the audited ε a side's bin passes its threshold
    T ≈ 5.8 units with probability about 1/8 on D; the neighbouring unit, with one row at
    each of ±10¹², adds one unit to that bin on both sides, where the discrete Laplace
    tail is exactly e^(ε/2) heavier per side."""
    yield from database(
        "CREATE TABLE visits AS SELECT u AS uid, 0 AS g, CASE WHEN u < 40 THEN 1.5 "
        "WHEN u < 45 THEN 1e12 ELSE -1e12 END AS v FROM range(50) AS a(u)"
    )


def _bounds_summaries(con, db, sql: str, rows: str):
    """The bounds search of ``sql`` and the summaries its SQL computes on D and on D' (D
    and a unit with ``rows``)."""
    analysis = analyze(sql, db._catalog())
    search = bounds_search(analysis, epsilon=1.0)
    arguments = [a.argument for a in search.aggregates]
    read = lambda: db._engine.row(bounds_sql(analysis, arguments, MAGNITUDES), db._ledger.secret)  # noqa: E731
    before = read()
    with neighbours.with_rows(con, f"INSERT INTO visits VALUES {rows}"):
        after = read()
    return search, (before, after)


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
def test_bounds_search(extremes, weaken):
    """The private estimate of missing bounds under BOUND AUTO (udfs.magnitude_bounds: per
    side, a Laplace histogram of the units' extremes and the top bin above a threshold)
    from the summary the SQL computes on D and D' is ε_bounds-DP. A MEDIAN takes these
    bounds as they are (a SUM's are tightened further: ``test_row_weights_search``)."""
    con, db = extremes
    sql = "SELECT MEDIAN(v) FROM visits PRIVACY_UNIT uid BOUND AUTO EPSILON 40"
    search, summaries = _bounds_summaries(con, db, sql, "(999999, 0, 1e12), (999999, 0, -1e12)")
    assert not search.tightened(search.aggregates[0])

    def sample(neighbour: bool, n: int) -> list[list[float]]:
        def one() -> list[float]:
            bounds, guessed, blind = db._bounds(search, summaries[neighbour])
            return [*next(iter(bounds.values())), float(bool(guessed)), float(bool(blind))]

        return [one() for _ in range(n)]

    with noise(weaken):
        check(audit(sample, search.epsilon, samples=10_000, selection_samples=2_000), weaken)


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
@pytest.mark.parametrize("aggregate", ["SUM", "VARIANCE"])
def test_row_weights_search(extremes, weaken, aggregate):
    """The histogram of the rows' weights that tightens a SUM's, AVG's, VARIANCE's or
    STDDEV's missing bounds (udfs.noisy_row_weights, before udfs.balanced_bounds or
    udfs.spread_bounds, from the SQL's weighted sums on D and D') is ε_weights-DP
    (TIGHTEN_SHARE of the query's ε; a spread takes it as a sum does): the neighbouring
    unit's one row at 10¹² weighs 2**ROW_WEIGHT_BITS, all in that bin, where the discrete
    Laplace tail the audit reads is exactly e^ε heavier."""
    con, db = extremes
    sql = f"SELECT {aggregate}(v) FROM visits PRIVACY_UNIT uid BOUND AUTO EPSILON 80"
    search, summaries = _bounds_summaries(con, db, sql, "(999999, 0, 1e12)")
    assert search.tightened(search.aggregates[0])
    assert search.spread(search.aggregates[0]) == (aggregate == "VARIANCE")
    width = len(MAGNITUDES)
    top = next(j for j, m in enumerate(MAGNITUDES) if m >= 1e12) - 1  # bin (m_j, m_j+1]
    epsilon = Fraction(search.weights_epsilon)
    rng = udfs.SeededRandom(zlib.crc32(b"row-weights"), insecure=True)

    def sample(neighbour: bool, n: int) -> list[float]:
        summary = [int(v) for v in summaries[neighbour]]
        above, below = summary[2 * width : 3 * width], summary[3 * width : 4 * width]
        out = []
        for _ in range(n):
            noisy = udfs.noisy_row_weights(above, below, 2**ROW_WEIGHT_BITS, epsilon, rng)
            out.append(noisy[width - 1 + top] / 2**ROW_WEIGHT_BITS)
        return out

    with noise(weaken):
        check(audit(sample, float(epsilon), samples=10_000, selection_samples=2_000), weaken)


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
@pytest.mark.parametrize("part", ["sizes", "window", "sums"])
def test_variance_rule_histograms(visits, part, weaken):
    """The private part of the WEIGHTS AUTO cap for AVG (udfs.noisy_histograms) on the
    ordinary neighbours, one release at a time at its own ε (sequential composition; the
    minimisation after them is post-processing): the Laplace histogram of largest cell
    sizes at ε_auto/2, the AVG's noisy bins of the units' means at a quarter of the other
    half (udfs.noisy_mean_bins) and its sums of clamped means per size bucket at the rest
    (udfs.clamped_mean_sums, in the window the bins set on D). The extreme unit lands in
    one size bucket and one bin, and its mean, B, is beyond the window's edge:
    each audited cell moves by exactly its release's sensitivity."""
    con, db = visits
    sql = f"SELECT AVG({CLAMP}) FROM visits PRIVACY_UNIT uid BOUND AUTO EPSILON 80"
    query_plan = plan(analyze(sql, db._catalog()), epsilon=1.0, delta=1e-6)
    search = query_plan.search
    assert search.rules == ("variance",)
    width = len(CANDIDATES)
    [(total, _)] = query_plan.mean_sums
    block = (width + 1) * MEAN_BINS

    def read(c, p) -> tuple:
        summary = [int(v) for v in db._threshold_summary(p)]
        start = width + 1 + len(ROW_CANDIDATES)
        means = udfs.MeanHistogram(
            summary[start : start + block],
            summary[start + block : start + 2 * block],
            total.bound,
            mean_bin_width(total.bound),
            MEAN_BINS,
        )
        return summary[0], summary[1 : width + 1], means

    summaries = on_neighbours(con, query_plan, read)
    bucket = next(i for i, c in enumerate(CANDIDATES) if c >= 10_000)  # 10⁴ rows: (c_{i−1}, c_i]
    half = Fraction(search.epsilon) / 2
    epsilon = {"sizes": half, "window": half * WINDOW_SHARE, "sums": half * (1 - WINDOW_SHARE)}
    per_bin = [
        [sum(means.units[k::MEAN_BINS]) for k in range(MEAN_BINS)] for _, _, means in summaries
    ]
    [landed] = [k for k in range(MEAN_BINS) if per_bin[1][k] != per_bin[0][k]]
    window = udfs.mean_window(per_bin[0], Fraction(10**6))  # D's exact window: public here
    assert not window[0] <= landed < window[1] and window[1] - window[0] < MEAN_BINS
    rng = udfs.SeededRandom(zlib.crc32(f"variance-rule-{part}".encode()), insecure=True)

    def release(units: int, exceedances: list, means: udfs.MeanHistogram) -> float:
        if part == "sizes":
            counts, _ = udfs.noisy_histograms(units, exceedances, [means], 2 * half, rng)
            return counts[bucket]
        if part == "window":
            return udfs.noisy_mean_bins(means, epsilon[part], rng)[landed]
        sums = udfs.clamped_mean_sums(means, window, epsilon[part], rng)
        return sums.sums[bucket] / sums.reach

    def sample(neighbour: bool, n: int) -> list[float]:
        return [release(*summaries[neighbour]) for _ in range(n)]

    with noise(weaken):
        check(audit(sample, float(epsilon[part]), samples=30_000, selection_samples=4_000), weaken)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["BOUND CLIP", "BOUND AUTO"])
def test_threshold_search_on_ordinary_data(visits, strategy):
    """RT24's cap (rank rule, doubled rank) and EMMMR20's v(h) minimiser on the ordinary
    neighbours, at a large query ε: shipped only, as one chosen cap reveals far less than
    ε_auto there (v(h) is post-processing of a noisy histogram)."""
    con, db = visits
    sql = f"SELECT AVG({CLAMP}) FROM visits PRIVACY_UNIT uid {strategy} EPSILON 20"
    query_plan = plan(analyze(sql, db._catalog()), epsilon=1.0, delta=1e-6)
    summaries = on_neighbours(
        con,
        query_plan,
        lambda c, p: db._threshold_summary(p),
    )

    def sample(neighbour: bool, n: int) -> list[list[int]]:
        summary = summaries[neighbour]
        return [list(db._thresholds(query_plan, summary)[0].values()) for _ in range(n)]

    check(audit(sample, query_plan.search.epsilon, samples=1_000, selection_samples=250), False)


GROUPS = 2_000
"""End to end: each released group is one sample; odd groups hold the extra unit."""


@pytest.fixture(scope="module")
def copies() -> Iterator[privsql.Session]:
    """GROUPS copies of a small D, each in its own group with its own units (5 units of
    3 rows at v = 50); odd copies also hold one unit with 20 rows at v = 10¹², which
    saturates the cap of 5 rows and the clamp."""
    connection = duckdb.connect()
    connection.execute(
        "CREATE TABLE copies AS SELECT g, g * 100 + u AS uid, 50.0 AS v "
        f"FROM range({GROUPS}) AS a(g), range(5) AS b(u), range(3) AS c(r) "
        f"UNION ALL SELECT g, g * 100 + 99, 1e12 FROM range(1, {GROUPS}, 2) AS a(g), "
        "range(20) AS c(r)"
    )
    session = privsql.connect(connection, budget=1e12, seed=5, insecure=True)
    session.protect("copies", privacy_unit="uid")
    yield session
    session.close()


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
def test_count_and_sum_end_to_end(copies, weaken):
    """COUNT and SUM through ``Session.sql``: the released (count, sum) of a copy of D and
    of a copy of D' are compared; each run releases GROUPS/2 samples of each, under a
    fresh LIMIT (above GROUPS: it keeps every row) so that no stored answer is returned."""
    runs = iter(range(GROUPS + (10**6 if weaken else 0), 10**7))

    def sample(neighbour: bool, n: int) -> np.ndarray:
        out: list[np.ndarray] = []
        while sum(len(o) for o in out) < n:
            result = copies.sql(
                f"SELECT g, COUNT(*) AS n, SUM({CLAMP}) AS s FROM copies GROUP BY g "
                f"PRIVACY_UNIT uid BOUND ROWS 5 MAX_GROUPS 1 EPSILON 2 LIMIT {next(runs)}",
                keys={"g": list(range(GROUPS))},
            ).fetchall()
            out.append(np.array([row[1:] for row in result if row[0] % 2 == neighbour]))
        return np.vstack(out)[:n]

    with noise(weaken):
        report = audit(sample, 2.0 * (1 - CUT_SHARE), samples=6_000, selection_samples=2_000)
    check(report, weaken)


def test_weakening_is_reachable_only_from_python():
    """The hook is a context manager of udfs: nothing in privsql or rewriter reads it,
    and it restores the shipped noise on exit, also after an error."""
    root = Path(__file__).resolve().parents[1]
    for package in ("privsql", "rewriter"):
        for path in (root / package).rglob("*.py"):
            assert "weaken" not in path.read_text(), path
    with pytest.raises(RuntimeError), weaken_noise_for_tests(2.0):
        raise RuntimeError
    shipped = udfs.scale_of(5, 1.0)
    assert shipped == (5, 1)
    with weaken_noise_for_tests(WEAKENED):
        assert udfs.scale_of(5, 1.0) == (10, 3)
    assert udfs.scale_of(5, 1.0) == shipped
    with pytest.raises(ValueError), weaken_noise_for_tests(0.5):
        pass


# -- MAX_GROUPS AUTO and the bounding check --------------------------------------------------

SPREAD = "INSERT INTO visits SELECT 999999, g, 1e12 FROM range({groups}) AS a(g), range(10)"
"""The neighbouring unit: 10 rows in each of ``groups`` groups (over every cap it meets)."""


@pytest.fixture(scope="module")
def touched() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """D for MAX_GROUPS AUTO, ``cells`` with groups for rows: 100 units touch 17 groups, 1
    touches 20 and 9 touch 30 (of 200 public keys). With r = 10 units wanted above the cap,
    candidates 17 and 26 score at least 2 apart and the rest far below; a unit touching every
    group raises both counts by one: permute-and-flip's worst case, as in ``cells``."""
    yield from database(
        "CREATE TABLE visits AS SELECT u AS uid, g, 1.0::DOUBLE AS v FROM range(110) AS a(u), "
        "range(30) AS b(g) WHERE g < CASE WHEN u < 100 THEN 17 WHEN u = 100 THEN 20 ELSE 30 END"
    )


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
def test_group_cap_search(touched, weaken):
    """MAX_GROUPS AUTO (AKMV19's rank rule on the number of groups a unit touches) from the
    summary the SQL computes on D and on D' (D plus a unit in all 200 groups) is ε_g-DP."""
    con, db = touched
    groups = 200
    epsilon = 20 / (1 - GROUPS_SHARE - CUT_SHARE)  # one aggregate's ε 20: r = ⌈200/20⌉
    sql = (
        "SELECT g, COUNT(*) FROM visits GROUP BY g PRIVACY_UNIT uid BOUND ROWS 5 "
        f"EPSILON {epsilon!r}"
    )
    query_plan = plan(analyze(sql, db._catalog(), {"g": list(range(groups))}), epsilon=1, delta=0.1)
    search = query_plan.group_search
    assert search.rank == 10 and search.candidates[-1] == groups
    query = groups_sql(query_plan)
    before = size_summary(db._engine.rows(query, db._ledger.secret), search.candidates)
    with neighbours.with_rows(con, SPREAD.format(groups=groups)):
        after = size_summary(db._engine.rows(query, db._ledger.secret), search.candidates)
    assert after[0] == before[0] + 1  # one more unit, above every candidate below 200
    summaries = (before, after)

    def sample(neighbour: bool, n: int) -> list[int]:
        return [
            db._group_cap(query_plan, search.candidates, summaries[neighbour]) for _ in range(n)
        ]

    with noise(weaken):
        check(audit(sample, search.epsilon, samples=10_000, selection_samples=1_000), weaken)


@pytest.fixture(scope="module")
def spread_cells() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """``cells`` in each of 4 groups: every unit has 4 cells of 17 rows (100 units), 20
    (1) or 25 (9), so 40 cells lie above 19 rows, 36 above 23 and none above 27. With
    r = 40 cells wanted above the cap, the rank rule's two-sided per-cell scores −|C − r|/m
    (m = MAX_GROUPS 4) put 19 and 23 one apart, plus a prior step; a unit of 10⁴ rows in 4
    groups adds 4 cells above both and moves the gap by 2: permute-and-flip's worst case,
    as in ``cells``."""
    yield from database(
        "CREATE TABLE visits AS SELECT u AS uid, g, 1.0::DOUBLE AS v FROM range(110) AS a(u), "
        "range(4) AS c(g), range(30) AS b(r) WHERE r < CASE WHEN u < 100 THEN 17 "
        "WHEN u = 100 THEN 20 ELSE 25 END"
    )


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
def test_rank_rule_counts_cells(spread_cells, weaken):
    """The rank rule on per-cell counts (MAX_GROUPS above 1), whose sensitivity is m, with
    its scores divided by m, from the summary the SQL computes on D and on D' (D plus a unit
    of 10⁴ rows in each of 4 groups) is ε_auto-DP; 104 public groups set r to 40 cells."""
    con, db = spread_cells
    sql = (
        "SELECT g, COUNT(*) FROM visits GROUP BY g PRIVACY_UNIT uid BOUND ROWS AUTO MAX_GROUPS 4 "
        "EPSILON 13"
    )
    query_plan = plan(analyze(sql, db._catalog(), {"g": list(range(104))}), epsilon=1, delta=0.1)
    search = query_plan.search
    assert (search.rules, search.rank) == (("rank",), 40)
    before = db._threshold_summary(query_plan)
    insert = "INSERT INTO visits SELECT 999999, g, 1.0 FROM range(4) AS a(g), range(10000)"
    with neighbours.with_rows(con, insert):
        after = db._threshold_summary(query_plan)
    summaries = (before, after)

    def sample(neighbour: bool, n: int) -> list[int]:
        return [db._thresholds(query_plan, summaries[neighbour])[0]["rank"] for _ in range(n)]

    with noise(weaken):
        check(audit(sample, search.epsilon, samples=10_000, selection_samples=1_000), weaken)


@pytest.fixture(scope="module")
def few_groups() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    """D for ``udfs.bulk_top``: 40 units touch 2 groups and 2 units touch 5."""
    yield from database(
        "CREATE TABLE visits AS SELECT u AS uid, g, 1.0::DOUBLE AS v FROM range(42) AS a(u), "
        "range(5) AS b(g) WHERE g < CASE WHEN u < 40 THEN 2 ELSE 5 END"
    )


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
def test_groups_bound_when_keys_are_private(few_groups, weaken):
    """``udfs.bulk_top``, MAX_GROUPS AUTO's private bound on the most groups a unit touches
    (keys not listed), on the summary the SQL computes on D and on D' (one more unit in 5
    groups), at the half of ε_g it gets, is ε_b-DP. Here ε_b = 2, so the threshold is
    ln(65/0.2)/2 ≈ 2.9 units: the top bin (4, 5] (2 units on D, 3 on D') passes on D when
    its noise is at least 1, on D' when it is at least 0, e^ε_b more likely: the worst case
    of the Laplace tail."""
    con, db = few_groups
    sql = "SELECT g, COUNT(*) FROM visits GROUP BY g PRIVACY_UNIT uid BOUND ROWS 5 EPSILON 40"
    query_plan = plan(analyze(sql, db._catalog()), epsilon=1, delta=0.1)
    epsilon = query_plan.group_search.epsilon / 2
    assert epsilon == pytest.approx(2.0)
    query = groups_sql(query_plan)

    def summary() -> tuple[int, ...]:
        return size_summary(db._engine.rows(query, db._ledger.secret), GROUP_COUNTS)

    before = summary()
    insert = "INSERT INTO visits SELECT 999999, g, 1.0 FROM range(5) AS a(g)"
    with neighbours.with_rows(con, insert):
        after = summary()
    assert after[0] == before[0] + 1
    summaries = (before, after)
    rng = udfs.SeededRandom(20261123, insecure=True)

    def sample(neighbour: bool, n: int) -> list[float]:
        units, over = int(summaries[neighbour][0]), [int(v) for v in summaries[neighbour][1:]]
        tops = [udfs.bulk_top(GROUP_COUNTS, units, over, epsilon, rng) for _ in range(n)]
        return [-1.0 if t is None else float(t) for t in tops]

    with noise(weaken):
        check(audit(sample, epsilon, samples=10_000, selection_samples=2_000), weaken)


CHECKED = {
    "groups-dropped": ("SELECT g, COUNT(*) FROM visits WHERE g < 2 GROUP BY g", 2),
    "one-group": ("SELECT COUNT(*) FROM visits", 1),
    "two-caps": (
        "SELECT g, COUNT(*), AVG(v CLAMPED BETWEEN 0 AND 100) FROM visits WHERE g < 2 GROUP BY g",
        2,
    ),
}
"""Bounding-check cases: the query (MAX_GROUPS 1, BOUND ROWS 5 but for ``two-caps``, whose
COUNT has the row cap 5 and its AVG 3 under WEIGHTS AUTO: two levels) and the check's
sensitivity (per level)."""


def checked_plan(db: privsql.Session, case: str) -> Plan:
    select, _ = CHECKED[case]
    # Two levels share the check's ε: twice the query's, for the same ε per level.
    bound, epsilon = ("WEIGHTS AUTO", 80) if case == "two-caps" else ("ROWS 5", 40)
    sql = f"{select} PRIVACY_UNIT uid BOUND {bound} MAX_GROUPS 1 EPSILON {epsilon}"
    keys = {"g": [0, 1]} if "GROUP BY" in select else None
    query_plan = plan(analyze(sql, db._catalog(), keys), epsilon=1, delta=0.1)
    if case == "two-caps":
        query_plan = query_plan.with_caps({"rank": 5, "variance": 3})
        assert query_plan.cut_caps == (3, 5)
    return query_plan


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
@pytest.mark.parametrize("case", list(CHECKED))
def test_bounding_check(visits, case, weaken):
    """The per-group count of cut cells of each row cap, released with
    ``Plan.cut_sensitivity`` at ``Plan.level_cut_epsilon`` (the levels' ε adding up to
    ``Plan.cut_epsilon``), is ε-DP, and detected when the noise is too small. The neighbour
    has 10 rows in each group: in two public groups under MAX_GROUPS 1 its kept cell is over
    every row cap and its dropped cell is sampled (L1 move 2 = 2m per cap); without GROUP BY
    its one cell is over the cap (1 = m). The move is the sensitivity: the neighbour
    saturates it at every level."""
    con, db = visits
    query_plan = checked_plan(db, case)
    levels = query_plan.cut_levels
    assert levels * query_plan.level_cut_epsilon == pytest.approx(query_plan.cut_epsilon)
    first = len(query_plan.analysis.keys) + len(query_plan.measurements)

    def cuts(c: duckdb.DuckDBPyConnection, p: Plan, level: int) -> list[int]:
        return [int(row[first + level]) for row in neighbours.stage(c, p)]

    for level in range(levels):
        before = cuts(con, query_plan, level)
        with neighbours.with_rows(con, SPREAD.format(groups=2)):
            after = cuts(con, query_plan, level)
        moved = sum(abs(a - b) for a, b in zip(after, before, strict=True))
        assert moved == query_plan.cut_sensitivity == CHECKED[case][1]
        exact = (before, after)
        rng = udfs.SeededRandom(zlib.crc32(f"{case}-{level}".encode()), insecure=True)

        def sample(neighbour: bool, n: int, exact=exact, rng=rng) -> np.ndarray:
            sensitivity, epsilon = query_plan.cut_sensitivity, query_plan.level_cut_epsilon
            return np.column_stack(
                [udfs.laplace_release([v] * n, sensitivity, epsilon, rng) for v in exact[neighbour]]
            )

        with noise(weaken):
            check(audit(sample, query_plan.level_cut_epsilon, **sizes(False)), weaken)


@pytest.mark.parametrize("weaken", [False, True], ids=["shipped", "weakened"])
@pytest.mark.parametrize("case", list(CHECKED))
def test_rows_cut_over_all_groups(visits, case, weaken):
    """The rows bounding cut over all groups (each unit's in row caps, clipped to 1, in steps
    of 1/EXCESS_SCALE), one total per row cap, each released once with sensitivity
    EXCESS_SCALE at ``Plan.level_excess_epsilon`` (adding up to ``Plan.excess_epsilon``),
    is ε-DP, and detected when the noise is too small. The neighbour's 10 rows per group
    are over every row cap (5 and 3) in its kept cell by at least the cap: its share is
    clipped to one cap at every level, the whole sensitivity, and the other units' shares
    do not move."""
    con, db = visits
    query_plan = checked_plan(db, case)
    assert query_plan.excess_epsilon == pytest.approx(query_plan.epsilon * CUT_SHARE * EXCESS_PART)
    levels = query_plan.cut_levels
    assert levels * query_plan.level_excess_epsilon == pytest.approx(query_plan.excess_epsilon)

    def totals(c: duckdb.DuckDBPyConnection) -> tuple[int, ...]:
        return neighbours.excess(c, query_plan)

    before = totals(con)
    with neighbours.with_rows(con, SPREAD.format(groups=2)):
        after = totals(con)
    assert len(before) == levels
    for level in range(levels):
        assert after[level] - before[level] == EXCESS_SCALE
        exact = (before[level], after[level])
        rng = udfs.SeededRandom(zlib.crc32(f"excess-{case}-{level}".encode()), insecure=True)

        def sample(neighbour: bool, n: int, exact=exact, rng=rng) -> np.ndarray:
            epsilon = query_plan.level_excess_epsilon
            return np.asarray(
                udfs.laplace_release([exact[neighbour]] * n, EXCESS_SCALE, epsilon, rng)
            )

        with noise(weaken):
            check(audit(sample, query_plan.level_excess_epsilon, **sizes(False)), weaken)
