"""The DP aggregates, one spec each: what privsql knows about an aggregate kind, in one place.

A spec says how the analyst writes the aggregate (the sqlglot nodes classified as it, when
its argument alone decides), whether its argument needs bounds, how ``plan`` measures it
(its *form*: which exact integers per group the release perturbs, docs/privacy.md section
3), whether BOUND CLIP applies to it (RT24 bounds means and counts), how ``accuracy``
states its interval (one noisy measurement in the statistic's units, or a formula of
several), and whether its bias, in rows, is at least the number of cells bounding cut
(the bounding check, section 3.3b). A count of rows with a per-row 0/1 (``Form.PRESENT``)
carries the SQL of that 0/1 (``indicator``). Adding an aggregate is one spec here (plus its
classification in ``analyze`` when its argument is special, as COUNT's and QUANTILE's are)
and tests: COUNT_IF is one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp


class AggregateKind:
    """The DP aggregates of this version, by what they measure."""

    COUNT_ROWS = "count_rows"
    COUNT_VALUES = "count_values"
    COUNT_UNITS = "count_units"
    COUNT_IF = "count_if"
    SUM = "sum"
    AVG = "avg"
    QUANTILE = "quantile"
    VAR_SAMP = "var_samp"
    VAR_POP = "var_pop"
    STDDEV_SAMP = "stddev_samp"
    STDDEV_POP = "stddev_pop"


class Form:
    """How an aggregate is measured (``plan``): the measurements its statistic is made of."""

    ROWS = "rows"
    """One count of kept rows."""
    UNITS = "units"
    """One count of distinct units (a unit adds at most one per kept group)."""
    PRESENT = "present"
    """One count of kept rows whose argument passes the spec's ``indicator``."""
    SUM = "sum"
    """One sum of gridded, clamped values."""
    MEAN = "mean"
    """A sum of centred values and a count, each with half the ε (their ratio)."""
    SPREAD = "spread"
    """Sums of centred values, of their squares and a count, each with a third of the ε."""
    QUANTILE = "quantile"
    """A histogram of bucketed values, released by private selection."""


COUNTING = (Form.ROWS, Form.UNITS, Form.PRESENT)
"""The forms that count (rows, values, units): never below 0."""


def present(argument: exp.Expr) -> exp.Expr:
    """1 for a row whose value is counted (not NULL), else 0."""
    counted = exp.Not(this=exp.Is(this=argument.copy(), expression=exp.null()))
    return exp.Cast(this=counted, to=exp.DataType(this=exp.DType.INT))


def satisfied(argument: exp.Expr) -> exp.Expr:
    """1 for a row whose condition is TRUE, else 0 (FALSE, NULL, or no BOOLEAN: the cast is
    a TRY_CAST, so no value of the condition makes the row fail)."""
    holds = exp.TryCast(this=argument.copy(), to=exp.DataType(this=exp.DType.BOOLEAN))
    known = exp.Coalesce(this=holds, expressions=[exp.false()])
    return exp.Cast(this=known, to=exp.DataType(this=exp.DType.INT))


@dataclass(frozen=True)
class AggregateSpec:
    """One DP aggregate kind (see the module's docstring)."""

    kind: str
    form: str
    nodes: tuple[type[exp.Expr], ...] = ()
    """The sqlglot nodes that are this aggregate of one bounded argument."""
    bounded: bool = True
    """Its argument is clamped: CLAMPED BETWEEN, the owner's bounds, or BOUND AUTO's estimate."""
    clippable: bool = False
    """BOUND CLIP (RT24's per-unit clipping) bounds it."""
    single: bool = False
    """It is one noisy measurement in the statistic's own units."""
    counts_rows: bool = False
    """Its bias, in rows, is at least the number of cells bounding cut."""
    sample: bool = False
    """A spread divided by n − 1 (VAR_SAMP, STDDEV_SAMP) rather than n."""
    root: bool = False
    """A spread's square root (STDDEV)."""
    indicator: Callable[[exp.Expr], exp.Expr] | None = None
    """For ``Form.PRESENT``: a row's 0/1, as SQL over the aggregate's argument."""


SPECS = {
    spec.kind: spec
    for spec in (
        AggregateSpec(
            AggregateKind.COUNT_ROWS,
            Form.ROWS,
            bounded=False,
            clippable=True,
            single=True,
            counts_rows=True,
        ),
        AggregateSpec(
            AggregateKind.COUNT_VALUES,
            Form.PRESENT,
            bounded=False,
            clippable=True,
            single=True,
            counts_rows=True,
            indicator=present,
        ),
        AggregateSpec(
            AggregateKind.COUNT_IF,
            Form.PRESENT,
            nodes=(exp.CountIf,),
            bounded=False,
            clippable=True,
            single=True,
            counts_rows=True,
            indicator=satisfied,
        ),
        AggregateSpec(
            AggregateKind.COUNT_UNITS, Form.UNITS, bounded=False, clippable=True, single=True
        ),
        AggregateSpec(AggregateKind.SUM, Form.SUM, nodes=(exp.Sum,), single=True),
        AggregateSpec(AggregateKind.AVG, Form.MEAN, nodes=(exp.Avg,), clippable=True),
        AggregateSpec(AggregateKind.QUANTILE, Form.QUANTILE),
        AggregateSpec(AggregateKind.VAR_SAMP, Form.SPREAD, nodes=(exp.Variance,), sample=True),
        AggregateSpec(AggregateKind.VAR_POP, Form.SPREAD, nodes=(exp.VariancePop,)),
        AggregateSpec(
            AggregateKind.STDDEV_SAMP,
            Form.SPREAD,
            nodes=(exp.Stddev, exp.StddevSamp),
            sample=True,
            root=True,
        ),
        AggregateSpec(AggregateKind.STDDEV_POP, Form.SPREAD, nodes=(exp.StddevPop,), root=True),
    )
}
"""Every DP aggregate, by kind."""


def of_node(node: exp.Expr) -> AggregateSpec | None:
    """The spec of an aggregate of one bounded argument written as ``node`` (exactly its
    type: sqlglot's subclasses are other functions), else None."""
    return next((s for s in SPECS.values() if type(node) in s.nodes), None)
