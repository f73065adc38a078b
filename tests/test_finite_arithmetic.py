"""Finite-arithmetic attacks on SUM and AVG (Mironov, CCS 2012; Casacuberta, Shoemate,
Vadhan, Wagaman, CCS 2022: "Widespread underestimation of sensitivity in differentially
private libraries and how to fix it").

Those attacks pick values — huge and tiny, over many orders of magnitude, in an order that
makes floating-point sums round one way — so that one unit moves a float sum by more than
the declared sensitivity. privsql sums fixed-point integers (docs/privacy.md section 4).
These tests run the rewritten SQL with the noise switched off and check, on adversarial
data, that

* the exact pre-noise measurement is *exactly* the documented per-row rule summed (so no
  value, NaN or infinity can escape the clamp), and within the documented grid error of the
  exact real sum of the clamped values;
* it does not depend on the order of the rows or on DuckDB's thread count;
* one unit of 10⁴ adversarial rows moves it by at most the declared sensitivity;
* sums beyond the 64-bit range stay exact.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from fractions import Fraction

import duckdb
import neighbours
import pyarrow as pa
import pytest
from exact_release import install

import privsql
from rewriter.analyze import analyze
from rewriter.plan import Grid, Plan, plan

HUGE = 1.7976931348623157e308
TINY = 5e-324  # the smallest subnormal
BOUNDS = [
    (0.0, 100.0),
    (-1e10, 1e10),
    (0.1, 0.3),  # neither bound is on the grid
    (-HUGE, HUGE),
    (-1e-300, 1e-300),  # below the finest grid, 2**-1000
    (-3.0, -3.0),  # a single point
]


def adversarial(low: float, high: float) -> list[float]:
    """Values built to break float sums and clamps: both infinities, NaN, the largest and
    smallest doubles, subnormals, ±0, powers of ten from 1e-320 to 1e300 of both signs,
    the bounds and their neighbouring doubles on both sides."""
    edges = [
        x
        for bound in (low, high)
        for x in (bound, math.nextafter(bound, -math.inf), math.nextafter(bound, math.inf))
    ]
    powers = [sign * 10.0**k for k in range(-320, 301, 7) for sign in (1, -1)]
    special = [math.nan, math.inf, -math.inf, HUGE, -HUGE, TINY, -TINY, 2.2250738585072014e-308]
    return [*special, 0.0, -0.0, 1 / 3, 0.1, *edges, *powers]


def steps(x: float, grid: Grid) -> int:
    """docs/privacy.md section 4's q(x), computed exactly: round x·2^−e half away from
    zero, clamp to [lo_q, hi_q]; NaN and +inf land on hi_q, −inf on lo_q."""
    if math.isnan(x) or x == math.inf:
        return grid.high
    if x == -math.inf:
        return grid.low
    t = Fraction(x) / Fraction(2) ** grid.exponent
    rounded = math.floor(t + Fraction(1, 2)) if t >= 0 else math.ceil(t - Fraction(1, 2))
    return min(max(rounded, grid.low), grid.high)


def clamped(x: float, low: float, high: float) -> Fraction:
    """The value the analyst asked for: x clamped to [low, high] (NaN counts as high)."""
    if math.isnan(x):
        return Fraction(high)
    return Fraction(min(max(x, low), high))


@pytest.fixture
def session() -> Iterator[tuple[duckdb.DuckDBPyConnection, privsql.Session]]:
    con = duckdb.connect()
    install(con)
    db = privsql.connect(con, budget=1e9, seed=1, insecure=True)
    yield con, db
    db.close()
    con.close()


def load(con: duckdb.DuckDBPyConnection, units: list[int], values: list[float]) -> None:
    con.execute("DROP TABLE IF EXISTS visits")
    con.register("rows", pa.table({"uid": units, "v": pa.array(values, pa.float64())}))
    con.execute("CREATE TABLE visits AS SELECT * FROM rows")
    con.unregister("rows")


def planned(db: privsql.Session, statistic: str, low: float, high: float, bound: str) -> Plan:
    sql = (
        f"SELECT {statistic}(v CLAMPED BETWEEN {low!r} AND {high!r}) FROM visits "
        f"PRIVACY_UNIT uid {bound} EPSILON 1"
    )
    query_plan = plan(analyze(sql, db._catalog()), epsilon=1.0, delta=1e-6)
    return query_plan if query_plan.search is None else query_plan.with_cap(3)


@pytest.mark.parametrize(("low", "high"), BOUNDS)
def test_sum_is_the_gridded_rule_exactly_and_within_the_grid_error(session, low, high):
    """One row per unit (all kept): the pre-noise SUM is Σ q(x) exactly, and within n·γ of
    the real sum of the clamped values (γ/2 from rounding, < γ/2 more where a bound is off
    the grid)."""
    con, db = session
    values = adversarial(low, high)
    load(con, list(range(len(values))), values)
    query_plan = planned(db, "SUM", low, high, "BOUND ROWS 1")
    (m,) = query_plan.measurements
    grid = query_plan.statistics[0].grid
    (measured,) = neighbours.measurements(con, query_plan)[m.name]
    assert measured == sum(steps(x, grid) for x in values)
    step = Fraction(2) ** grid.exponent
    error = abs(measured * step - sum(clamped(x, low, high) for x in values))
    assert error <= len(values) * step


@pytest.mark.parametrize(("low", "high"), BOUNDS)
def test_avg_before_noise_stays_in_bounds_and_near_the_real_mean(session, low, high):
    """AVG's centred sum is Σ (2q − lo_q − hi_q) exactly; mid + S/N lies in [lo, hi] (up to
    a grid step when the interval is narrower than one) and within γ of the real mean."""
    con, db = session
    values = adversarial(low, high)
    load(con, list(range(len(values))), values)
    query_plan = planned(db, "AVG", low, high, "BOUND ROWS 1")
    centred, count = query_plan.measurements
    grid = query_plan.statistics[0].grid
    exact = neighbours.measurements(con, query_plan)
    assert exact[centred.name] == [sum(2 * steps(x, grid) - grid.low - grid.high for x in values)]
    assert exact[count.name] == [len(values)]
    step = Fraction(2) ** grid.exponent
    mean = Fraction(grid.low + grid.high, 2) * step + exact[centred.name][0] * step / 2 / len(
        values
    )
    assert grid.low * step <= mean <= grid.high * step
    assert abs(mean - sum(clamped(x, low, high) for x in values) / len(values)) <= step


STRATEGIES = [
    ("SUM", "BOUND ROWS 3"),
    ("SUM", "BOUND WEIGHTS 3"),
    ("AVG", "BOUND ROWS 3"),
    ("AVG", "BOUND WEIGHTS 3"),
    ("AVG", "BOUND CLIP"),
]


def units_of(values: list[float], rng: random.Random) -> list[int]:
    """50 units with 1 to 30 rows each (so caps bite), assigned at random."""
    return [rng.randrange(50) for _ in values]


@pytest.mark.parametrize(("low", "high"), [(-1e10, 1e10), (-HUGE, HUGE), (0.1, 0.3)])
@pytest.mark.parametrize(("statistic", "bound"), STRATEGIES)
def test_row_order_and_threads_never_change_the_measurements(session, statistic, bound, low, high):
    """The same multiset of (unit, value) rows, in three orders and at 1 and 4 threads,
    gives identical exact measurements, also where caps choose which rows to keep."""
    con, db = session
    rng = random.Random(7)
    values = adversarial(low, high) * 4
    rows = list(zip(units_of(values, rng), values, strict=True))
    results = []
    for threads in (1, 4):
        con.execute(f"SET threads = {threads}")
        for _ in range(3):
            rng.shuffle(rows)
            load(con, [u for u, _ in rows], [v for _, v in rows])
            query_plan = planned(db, statistic, low, high, bound)
            results.append(neighbours.measurements(con, query_plan))
    assert all(r == results[0] for r in results)


@pytest.mark.parametrize(("low", "high"), [(-1e10, 1e10), (-HUGE, HUGE), (0.1, 0.3)])
@pytest.mark.parametrize(("statistic", "bound"), STRATEGIES)
def test_one_adversarial_unit_moves_nothing_beyond_its_sensitivity(
    session, statistic, bound, low, high
):
    """D: adversarial rows over 50 units; D': plus one unit with 10⁴ adversarial rows
    (every value of the list, cycled). Each measurement moves by at most its sensitivity."""
    con, db = session
    rng = random.Random(11)
    values = adversarial(low, high) * 4
    load(con, units_of(values, rng), values)
    query_plan = planned(db, statistic, low, high, bound)
    before = neighbours.measurements(con, query_plan)
    intruder = [values[i % len(values)] for i in range(10_000)]
    con.register("extra", pa.table({"v": pa.array(intruder, pa.float64())}))
    with neighbours.with_rows(con, "INSERT INTO visits SELECT 999999, v FROM extra"):
        after = neighbours.measurements(con, query_plan)
    for m in query_plan.measurements:
        assert abs(after[m.name][0] - before[m.name][0]) <= query_plan.sensitivity(m), m


def test_sums_beyond_64_bits_stay_exact(session):
    """10⁷ rows at the upper bound 127 (about 2⁴⁰ grid steps each): the grid sum is about
    1.1·10¹⁹ > 2⁶³, exact in HUGEINT."""
    con, db = session
    con.execute(
        "CREATE TABLE visits AS SELECT range // 1000 AS uid, 127.0::DOUBLE AS v "
        "FROM range(10000000)"
    )
    query_plan = planned(db, "SUM", 0.0, 127.0, "BOUND ROWS 1000")
    (m,) = query_plan.measurements
    grid = query_plan.statistics[0].grid
    (measured,) = neighbours.measurements(con, query_plan)[m.name]
    assert measured > 2**63
    assert measured == 10_000_000 * grid.high


@pytest.mark.parametrize(("low", "high"), [(0.0, 100.0), (-100.0, 100.0), (0.0, 127.0)])
@pytest.mark.parametrize("cap", [8, 10, 11])
def test_weighted_cells_at_the_bounds_stay_exact_on_both_sides_of_64_bits(session, low, high, cap):
    """BOUND WEIGHTS h weighs a cell in BIGINT only when h·bound·2**W < 2**63, and in
    HUGEINT otherwise (strategies._fits_bigint): units of h rows (whole cells) and of
    3·h + 1 rows (floored shares) at both bounds give each measurement exactly the
    documented per-cell weight, on both sides of that limit (the caps and bounds here
    straddle it: 10·(100·2**33)·2**20 < 2**63 < 11·(100·2**33)·2**20)."""
    con, db = session
    sizes = [cap, 3 * cap + 1] * 2
    units = [u for u, size in enumerate(sizes) for _ in range(size)]
    values = [low if u % 2 else high for u in units]
    load(con, units, values)
    query_plan = planned(db, "AVG", low, high, f"BOUND WEIGHTS {cap}")
    limits = [cap * m.bound << m.weight_bits for m in query_plan.measurements]
    grid = query_plan.statistics[0].grid
    measured = neighbours.measurements(con, query_plan)
    for m, limit in zip(query_plan.measurements, limits, strict=True):
        per_row = 2 * steps(high, grid) - grid.low - grid.high if m.kind == "centred" else 1
        expected = 0
        for u, size in enumerate(sizes):
            row = per_row if m.kind != "centred" or u % 2 == 0 else -per_row
            expected += (size * row << m.weight_bits) * cap // max(size, cap)
        assert measured[m.name] == [expected], (m.kind, limit > 2**63 - 1)
    if (low, high) == (0.0, 100.0):  # the limit is crossed between h = 10 and h = 11
        assert (max(limits) > 2**63 - 1) == (cap == 11)
