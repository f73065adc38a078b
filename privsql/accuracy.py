"""How exact each released cell is: per output, alpha -> the (1 - alpha) half-width.

Everything here is post-processing of released values and public parameters. A COUNT or
SUM has the Laplace tail of its one measurement (:func:`udfs.laplace_halfwidth`). A
statistic computed from several noisy measurements (AVG, VARIANCE, STDDEV) gets the widest
change of its formula over the box in which all its exact measurements lie with
probability 1 - alpha (each measurement's interval at alpha / parts, a union bound). A
quantile carries its own interval, released with it at INTERVAL_ALPHA by
:func:`udfs.private_quantile_interval`; for a smaller alpha only the clamping range is a
guarantee. docs/privacy.md, section 3.6, gives the arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyarrow as pa

import udfs
from privsql.result import BoundingCheck, HalfWidth, Range
from rewriter.aggregates import COUNTING, SPECS, AggregateKind, Form
from rewriter.dialect import to_sql
from rewriter.generate import (
    CUT_SUPPORT,
    EXCESS_SCALE,
    EXCESS_SUPPORT,
    output_name,
    support_name,
)
from rewriter.plan import Measurement, Plan, Spread, Statistic
from rewriter.sqlbuild import level

SINGLE = tuple(kind for kind, spec in SPECS.items() if spec.single)
"""Statistics that are one noisy measurement in the statistic's units."""


def half_widths(plan: Plan, table: pa.Table) -> dict[str, HalfWidth]:
    """The interval half-width function of every output that is a bare DP aggregate."""
    measurements = {m.name: m for m in plan.measurements}
    statistics = {to_sql(s.aggregate.node): s for s in plan.statistics}
    widths: dict[str, HalfWidth] = {}
    for item in plan.analysis.select.expressions:
        statistic = statistics.get(to_sql(item.unalias()))
        if statistic is not None:
            parts = [measurements[n] for n in statistic.measurements]
            name = output_name(item)
            widths[name] = _half_width(plan, statistic, parts, table, name)
    return widths


COUNTS = tuple(kind for kind, spec in SPECS.items() if spec.form in COUNTING)
"""Statistics that count (rows, values, weights or units): never below 0."""


def ranges(plan: Plan) -> dict[str, Range]:
    """Where each bare DP output's exact value lies, from the query alone (for
    ``Result.clamp``): a count at least 0; a SUM of values clamped to [lo, hi] at least 0
    when lo ≥ 0 and at most 0 when hi ≤ 0; an AVG or quantile within its bounds; a
    VARIANCE within [0, largest] and a STDDEV within [0, √largest]."""
    statistics = {to_sql(s.aggregate.node): s for s in plan.statistics}
    found: dict[str, Range] = {}
    for item in plan.analysis.select.expressions:
        statistic = statistics.get(to_sql(item.unalias()))
        if statistic is not None:
            known = _range(plan, statistic)
            if known is not None:
                found[output_name(item)] = known
    return found


def _range(plan: Plan, statistic: Statistic) -> Range | None:
    kind, grid, spread = statistic.aggregate.kind, statistic.grid, statistic.spread
    if kind in COUNTS:
        return 0.0, math.inf
    if spread is not None:
        return 0.0, math.sqrt(spread.largest) if spread.root else spread.largest
    if grid is not None:
        low, high = grid.low * grid.step, grid.high * grid.step
        if kind == AggregateKind.AVG:
            return low, high
        if kind == AggregateKind.SUM:
            return (0.0 if low >= 0 else -math.inf), (0.0 if high <= 0 else math.inf)
    quantile = next(
        (m.quantile for m in plan.measurements if m.name in statistic.measurements and m.quantile),
        None,
    )
    if quantile is not None:
        return quantile[1], quantile[2]
    return None


ROW_COUNTS = tuple(kind for kind, spec in SPECS.items() if spec.counts_rows)
"""Counts whose bias, in rows, is at least the number of cells bounding cut."""


def guessed_outputs(plan: Plan, guessed: frozenset[str]) -> frozenset[str]:
    """The outputs computed from an aggregate whose bounds BOUND AUTO had to guess (no
    estimate cleared its threshold at this ε), or whose AUTO cap's search was blind
    (``udfs.RankChoice``): their values may be clamped or cut far from where they lie,
    whatever their intervals say."""
    if not guessed:
        return frozenset()
    return frozenset(
        output_name(item)
        for item in plan.analysis.select.expressions
        if any(to_sql(node) in guessed for node in item.walk())
    )


def bounding_checks(plan: Plan, table: pa.Table) -> dict[str, BoundingCheck]:
    """Per output computed from DP aggregates: the released per-row count of cells its row
    cap cut (the smallest of its aggregates' caps: under WEIGHTS AUTO an AVG may have its
    own) with its noise half-width, and the rows that cap surely cut over all groups
    (post-processing)."""
    if CUT_SUPPORT not in table.column_names:
        return {}
    statistics = {to_sql(s.aggregate.node): s for s in plan.statistics}
    measurements = {m.name: m for m in plan.measurements}
    sensitivity, epsilon = plan.cut_sensitivity, plan.level_cut_epsilon
    checks = {}
    for item in plan.analysis.select.expressions:
        used = [statistics[text] for node in item.walk() if (text := to_sql(node)) in statistics]
        if not used:
            continue
        index = min(plan.cut_level(measurements[n]) for s in used for n in s.measurements)
        bare = statistics.get(to_sql(item.unalias()))
        checks[output_name(item)] = BoundingCheck(
            cut=_column(table, level(CUT_SUPPORT, index)),
            cut_width=lambda alpha: udfs.laplace_halfwidth(sensitivity, epsilon, alpha),
            counts_rows=bare is not None and bare.aggregate.kind in ROW_COUNTS,
            rows_cut=_rows_cut(plan, table, index),
        )
    return checks


def _rows_cut(plan: Plan, table: pa.Table, index: int) -> Callable[[float], float]:
    """alpha -> a (1 - alpha) lower bound on the rows the ``index``-th row cap cut over all
    groups, from its released ``__excess`` (each unit's rows cut, in caps, clipped to 1:
    the total times the cap is at most the rows cut); 0 when nothing was released or no
    row is left."""
    name, epsilon = level(EXCESS_SUPPORT, index), plan.level_excess_epsilon
    if not plan.cut_caps or name not in table.column_names or not len(table):
        return lambda alpha: 0.0
    cap = plan.cut_caps[index]
    released = float(_column(table, name)[0]) / EXCESS_SCALE

    def lower(alpha: float) -> float:
        width = udfs.laplace_halfwidth(EXCESS_SCALE, epsilon, alpha) / EXCESS_SCALE
        return max(0.0, cap * (released - width))

    return lower


def _half_width(
    plan: Plan, statistic: Statistic, parts: list[Measurement], table: pa.Table, name: str
) -> HalfWidth:
    released = _column(table, name)

    def part(role: str) -> np.ndarray:
        return _column(table, support_name(role, name))

    def width(m: Measurement, alpha: float) -> float:
        return udfs.laplace_halfwidth(plan.sensitivity(m), m.epsilon, alpha) * m.unit

    kind = statistic.aggregate.kind
    if kind in SINGLE:
        return lambda alpha: _array(np.full(table.num_rows, width(parts[0], alpha)))
    grid = statistic.grid
    if SPECS[kind].form == Form.MEAN:
        assert grid is not None
        low, high = grid.low * grid.step, grid.high * grid.step
        return lambda alpha: _array(
            _mean_half_width(
                released,
                part("n"),
                width(parts[0], alpha / 2),
                width(parts[1], alpha / 2),
                low,
                high,
            )
        )
    if statistic.spread is not None:
        form = statistic.spread
        sums = part("s1"), part("s2"), part("n")
        return lambda alpha: _array(
            _spread_half_width(released, sums, [width(m, alpha / 3) for m in parts], form)
        )
    if parts[0].quantile is None:
        return lambda alpha: None
    _, low, high = parts[0].quantile
    return lambda alpha: _array(_quantile_half_width(released, part, alpha, low, high))


def _column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy().astype(np.float64)


def _array(values: np.ndarray) -> pa.Array:
    return pa.array(values, pa.float64())


def _mean_half_width(
    estimate: np.ndarray,
    count: np.ndarray,
    total_width: float,
    count_width: float,
    low: float,
    high: float,
) -> np.ndarray:
    """A conservative half-width for mid + S/N from the half-widths of S and N."""
    middle = (low + high) / 2
    spread = total_width + np.abs(estimate - middle) * count_width
    floor = np.maximum(count - count_width, 1.0)
    return np.minimum(spread / floor, high - low)


def _ratio_range(
    numerator: tuple[np.ndarray, np.ndarray], denominator: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The range of a / b over a box with b > 0: its extremes are at the corners."""
    corners = [a / b for a in numerator for b in denominator]
    return np.minimum.reduce(corners), np.maximum.reduce(corners)


def _spread_half_width(
    released: np.ndarray,
    sums: tuple[np.ndarray, np.ndarray, np.ndarray],
    widths: list[float],
    form: Spread,
) -> np.ndarray:
    """The widest change of the variance formula over the box of exact sums (S1, S2, N)."""
    (s1, s2, n), (w1, w2, wn) = sums, widths
    counts = np.maximum(n - wn, 1.0), np.maximum(n + wn, 1.0)
    mean_low, mean_high = _ratio_range((s1 - w1, s1 + w1), counts)
    squares_low, squares_high = _ratio_range((s2 - w2, s2 + w2), counts)
    mean_sq_high = np.maximum(mean_low**2, mean_high**2)
    mean_sq_low = np.where(
        (mean_low <= 0) & (mean_high >= 0), 0.0, np.minimum(mean_low**2, mean_high**2)
    )
    low = squares_low + form.offset - mean_sq_high
    high = squares_high + form.offset - mean_sq_low
    if form.sample:
        # N/(N - 1), N - 1 at least 1, rises on [1, 2] and falls after: extremes at the
        # ends of the count's range or at N = 2.
        def factor(x: np.ndarray) -> np.ndarray:
            return x / np.maximum(x - 1.0, 1.0)

        ends = factor(counts[0]), factor(counts[1])
        top = np.where((counts[0] <= 2) & (counts[1] >= 2), 2.0, np.maximum(*ends))
        bottom = np.minimum(*ends)
        corners = [low * bottom, low * top, high * bottom, high * top]
        low, high = np.minimum.reduce(corners), np.maximum.reduce(corners)
    low = np.clip(low, 0.0, form.largest)
    high = np.clip(high, 0.0, form.largest)
    if form.root:
        low, high = np.sqrt(low), np.sqrt(high)
    return np.maximum(released - low, high - released)


def _quantile_half_width(
    released: np.ndarray,
    part: Callable[[str], np.ndarray],
    alpha: float,
    low: float,
    high: float,
) -> np.ndarray:
    """The released interval's reach from the point, or the range's below INTERVAL_ALPHA."""
    if alpha >= udfs.INTERVAL_ALPHA:
        lower, upper = part("lower"), part("upper")
    else:
        lower, upper = np.full_like(released, low), np.full_like(released, high)
    return np.maximum(released - lower, upper - released)
