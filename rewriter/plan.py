"""Planning: per aggregate, what is measured, on which grid, with what sensitivity and ε.

A *measurement* is one exact integer per group (a row count, a sum of fixed-point
values, a count of units) that the release stage perturbs; a *statistic* is what the
analyst asked for (COUNT, SUM, AVG), computed from its measurements after the noise.

Sensitivity is derived only from what the generated SQL enforces (AKMV19's sample
limiting: at most ``k`` rows per unit and group, at most ``m`` groups per unit;
clamping to the grid bounds): a unit changes the vector of one measurement over all
groups by at most ``k * m * B`` in L1, ``B`` the largest magnitude one row can add.
docs/privacy.md has the argument for each statistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sqlglot import exp

from rewriter.analyze import Aggregate, AggregateKind, Analysis
from rewriter.errors import InvalidOption, UnsupportedQuery

GRID_BITS = 40
"""Clamped values are stored as integers of at most 2**GRID_BITS grid steps."""

SMALLEST_EXPONENT = -1000
"""The finest grid, 2**-1000: its reciprocal is still a finite double."""


@dataclass(frozen=True)
class Grid:
    """A power-of-two fixed-point grid for one clamped column.

    ``step`` = 2**exponent; the clamp bounds on the grid are ``low``..``high`` steps,
    rounded inwards so every gridded value stays inside [lo, hi] (to within one step
    when the interval is narrower than a step).
    """

    exponent: int
    low: int
    high: int

    @classmethod
    def for_bounds(cls, low: float, high: float) -> Grid:
        magnitude = max(abs(low), abs(high))
        exponent = max(math.frexp(magnitude)[1] - GRID_BITS, SMALLEST_EXPONENT)
        step = math.ldexp(1.0, exponent)
        grid_low, grid_high = math.ceil(low / step), math.floor(high / step)
        # An interval narrower than one step may hold no grid point: keep one.
        return cls(exponent, grid_low, max(grid_low, grid_high))

    @property
    def step(self) -> float:
        return math.ldexp(1.0, self.exponent)

    @property
    def magnitude(self) -> int:
        return max(abs(self.low), abs(self.high))


@dataclass(frozen=True)
class Measurement:
    """One exact integer per group: ``rows`` (row count), ``units`` or ``sum`` of ``value``."""

    name: str
    kind: str
    value: exp.Expr | None
    sensitivity: int
    epsilon: float
    unit: float = 1.0
    """What one grid step is worth in the statistic's units (the grid step, or 1 for counts)."""

    @property
    def scale(self) -> float:
        """The Laplace scale in the statistic's units: sensitivity / ε, times the unit."""
        return self.sensitivity * self.unit / self.epsilon


@dataclass(frozen=True)
class Statistic:
    """An aggregate of the query and the expression computing it from noisy measurements."""

    aggregate: Aggregate
    expression: exp.Expr
    measurements: tuple[str, ...]
    grid: Grid | None = None


@dataclass(frozen=True)
class PartitionSelection:
    """Release only keys whose noisy count of distinct units clears a threshold."""

    max_groups: int
    epsilon: float
    delta: float


@dataclass(frozen=True)
class Plan:
    """Everything the generator needs, and everything ``explain`` shows."""

    analysis: Analysis
    rows_cap: int
    groups_cap: int
    measurements: tuple[Measurement, ...]
    statistics: tuple[Statistic, ...]
    partition: PartitionSelection | None
    epsilon: float
    delta: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def needs_rows(self) -> bool:
        """Whether the row cap must pick rows (some measurement sums row values)."""
        return any(m.value is not None for m in self.measurements)


def plan(analysis: Analysis, *, epsilon: float, delta: float) -> Plan:
    """Choose bounds, sensitivities and ε shares; ``epsilon``/``delta`` are session defaults."""
    options = analysis.options
    strategy = options.strategy or "AUTO"
    if strategy != "ROWS" or options.threshold == "AUTO":
        raise UnsupportedQuery(
            f"BOUND {strategy}{' AUTO' if options.threshold == 'AUTO' else ''} is not available "
            "yet; write BOUND ROWS k"
        )
    rows_cap = int(options.threshold or 0)
    if rows_cap < 1:
        raise InvalidOption("BOUND ROWS needs a row cap k >= 1")
    groups_cap = options.max_groups if analysis.keys else 1
    total_epsilon = options.epsilon or epsilon
    private_keys = bool(analysis.keys) and any(k.domain is None for k in analysis.keys)
    shares = len(analysis.aggregates) + (1 if private_keys else 0)
    if shares == 0:
        raise UnsupportedQuery("the query releases nothing private: add a DP aggregate")
    share = total_epsilon / shares
    builder = _Builder(rows_cap * groups_cap, groups_cap)
    statistics = tuple(builder.statistic(a, share) for a in analysis.aggregates)
    partition = None
    query_delta = 0.0
    if private_keys:
        query_delta = options.delta or delta
        partition = PartitionSelection(groups_cap, share, query_delta)
    return Plan(
        analysis=analysis,
        rows_cap=rows_cap,
        groups_cap=groups_cap,
        measurements=tuple(builder.measurements),
        statistics=statistics,
        partition=partition,
        epsilon=total_epsilon,
        delta=query_delta,
    )


COUNTED = {
    AggregateKind.COUNT_ROWS: ("rows", False),
    AggregateKind.COUNT_UNITS: ("units", False),
    AggregateKind.COUNT_VALUES: ("sum", True),
}
"""Counts: which measurement each is, and whether it sums a per-row indicator."""


class _Builder:
    """Accumulates measurements while turning each aggregate into a statistic."""

    def __init__(self, row_contribution: int, groups_cap: int) -> None:
        self.row_contribution = row_contribution
        self.groups_cap = groups_cap
        self.measurements: list[Measurement] = []

    def measure(
        self, kind: str, value: exp.Expr | None, bound: int, epsilon: float, unit: float = 1.0
    ) -> exp.Column:
        contribution = self.groups_cap if kind == "units" else self.row_contribution
        name = f"__m{len(self.measurements)}"
        self.measurements.append(
            Measurement(name, kind, value, max(1, contribution * bound), epsilon, unit)
        )
        return exp.column(name)

    def statistic(self, aggregate: Aggregate, epsilon: float) -> Statistic:
        kind = aggregate.kind
        if kind in COUNTED:
            measured, per_row = COUNTED[kind]
            value = _present(aggregate.argument) if per_row else None
            column = self.measure(measured, value, 1, epsilon)
            return Statistic(aggregate, _integer(column), (column.name,))
        low, high = aggregate.bounds or (0.0, 0.0)
        grid = Grid.for_bounds(low, high)
        gridded = _gridded(aggregate.argument, grid)
        if kind == AggregateKind.SUM:
            column = self.measure("sum", gridded, grid.magnitude, epsilon, grid.step)
            return Statistic(aggregate, _scaled(column, grid.step), (column.name,), grid)
        centred = exp.Sub(
            this=exp.Mul(this=exp.Literal.number(2), expression=gridded),
            expression=exp.Literal.number(grid.low + grid.high),
        )
        total = self.measure("sum", centred, grid.high - grid.low, epsilon / 2, grid.step / 2)
        count = self.measure("sum", _present(aggregate.argument), 1, epsilon / 2)
        return Statistic(aggregate, _mean(total, count, grid), (total.name, count.name), grid)


def _type(kind: exp.DType) -> exp.DataType:
    return exp.DataType(this=kind)


def _integer(column: exp.Column) -> exp.Expr:
    """A noisy count as BIGINT (NULL, never an error, in the impossible case it overflows)."""
    return exp.TryCast(this=column, to=_type(exp.DType.BIGINT))


def _double(value: float) -> exp.Expr:
    return exp.Cast(this=exp.Literal.string(repr(value)), to=_type(exp.DType.DOUBLE))


def _present(argument: exp.Expr | None) -> exp.Expr:
    """1 for a row whose value is counted (not NULL), else 0."""
    assert argument is not None
    present = exp.Not(this=exp.Is(this=argument.copy(), expression=exp.null()))
    return exp.Cast(this=present, to=_type(exp.DType.INT))


def _gridded(argument: exp.Expr | None, grid: Grid) -> exp.Expr:
    """The row's value clamped and rounded onto the grid, as an exact integer.

    TRY_CAST keeps malformed values from raising data-dependent errors (they become
    NULL); NULL stays NULL and is skipped like in SQL (DuckDB's LEAST and GREATEST
    would otherwise turn it into a bound); NaN sorts above every number in DuckDB, so
    it lands on the upper bound; infinities land on the bounds.
    """
    assert argument is not None
    steps = exp.Round(
        this=exp.Mul(
            this=exp.TryCast(this=argument.copy(), to=_type(exp.DType.DOUBLE)),
            expression=_double(math.ldexp(1.0, -grid.exponent)),
        )
    )
    clamped = exp.func(
        "least",
        exp.func("greatest", steps, exp.Literal.number(grid.low)),
        exp.Literal.number(grid.high),
    )
    kept = exp.Case(
        ifs=[exp.If(this=exp.Is(this=steps.copy(), expression=exp.null()), true=exp.null())],
        default=clamped,
    )
    return exp.Cast(this=kept, to=_type(exp.DType.BIGINT))


def _scaled(column: exp.Column, step: float) -> exp.Expr:
    return exp.Mul(this=exp.Cast(this=column, to=_type(exp.DType.DOUBLE)), expression=_double(step))


def _mean(total: exp.Column, count: exp.Column, grid: Grid) -> exp.Expr:
    """mid + (noisy centred sum) / max(1, noisy count), kept inside [low, high]."""
    step = grid.step
    middle = (grid.low + grid.high) * step / 2
    ratio = exp.Div(
        this=_scaled(total, step / 2),
        expression=exp.func(
            "greatest", exp.Cast(this=count, to=_type(exp.DType.DOUBLE)), _double(1.0)
        ),
    )
    estimate = exp.Add(this=_double(middle), expression=ratio)
    return exp.func(
        "least",
        exp.func("greatest", estimate, _double(grid.low * step)),
        _double(grid.high * step),
    )
