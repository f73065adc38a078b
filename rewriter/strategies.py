"""The bounding strategies, one spec each: what privsql knows about a way of bounding one
unit's contribution to a (unit, group) cell, in one place (docs/privacy.md sections 2–3).

``ROWS`` is AKMV19's sample limiting (keep the k rows with the smallest keyed content hash),
``WEIGHTS`` EMMMR20's weighted averaging (a cell of s rows weighs each row min(1, h/s)),
``CLIP`` RT24's per-unit clipping (Theorem III.1: a cell's centred sum clipped to T = R·n).
Each spec carries its SQL as sqlglot builders: ``bounded``, the ``__bounded`` stage (one row
per kept (unit, group) cell: ``__rows``, the cell's sums, and ``__over``, whether the cell had
more rows than the row cap), and ``histogram_cut``, the weight it takes from a quantile's
bucket counts. Adding a strategy is one spec here (plus its name in the dialect) and tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from rewriter.sqlbuild import (
    OVER,
    Layout,
    at_most,
    bigint,
    chosen_over,
    column,
    columns,
    count_rows,
    derived,
    greatest,
    huge,
    joining,
    least,
    named,
    number,
    over,
    rank,
    row_order,
    same_cell,
    select,
    table,
    total,
    union_all,
)

if TYPE_CHECKING:
    from rewriter.plan import Measurement, Plan

WEIGHT_BITS = 20
"""BOUND WEIGHTS: weights min(1, h/s) are applied on a grid of 2**-WEIGHT_BITS."""


def _whole(plan: Plan, layout: Layout, cap: int) -> exp.Select:
    """The cells of ``__chosen`` with at most ``cap`` rows, passed whole."""
    return select(
        [*columns([*layout.cell, "__rows", *layout.sums]), *over(plan)],
        table("__chosen"),
        where=at_most(column("__rows"), cap),
    )


BIGINT_MAX = 2**63 - 1


def _fits_bigint(limit: int) -> bool:
    """Whether a weighted cell sum of magnitude at most ``limit`` can be a BIGINT.

    Under BOUND WEIGHTS h a kept cell of s rows weighs ``Σq·2**W`` when s <= h, so
    ``|Σq| <= s·bound <= h·bound`` and the product is at most ``limit = h·bound·2**W``;
    else ``floor(Σq·h·2**W / s)``, at most ``limit`` too, since ``|Σq| <= s·bound``
    (docs/privacy.md 3.1). Where ``limit`` is at most BIGINT_MAX, the cast of the cell sum
    (s <= h) and of the floored share (computed in HUGEINT: ``Σq·h·2**W`` alone may not
    fit) cannot overflow, and the BIGINT product ``CAST(Σq AS BIGINT)·2**W`` cannot either:
    every value is the exact integer the HUGEINT form computes. DuckDB's SUM of BIGINTs
    is a HUGEINT, as before.
    """
    return limit <= BIGINT_MAX


def _rows_bounded(plan: Plan, layout: Layout) -> exp.Query:
    """AKMV19 sample limiting: at most k rows per cell, the k smallest by keyed hash.

    Cells with at most k rows pass whole; only cells with more re-read their rows (a SEMI
    JOIN: the cell only selects them) and keep the k smallest keyed content hashes.
    """
    cap, cell = plan.bounding.cap, layout.cell
    if not plan.needs_rows:
        rows = named(least(column("__rows"), number(cap)), "__rows")
        return select([*columns(cell), rows, *over(plan)], table("__chosen"))
    ranked = select(
        columns([*cell, *layout.values, *layout.buckets], "r"),
        table("__source", "r"),
        joins=[
            joining(
                derived(chosen_over(layout, cap), "c"), same_cell(layout.keys, "r", "c"), "SEMI"
            )
        ],
        qualify=at_most(rank(columns(cell, "r"), row_order(layout)), cap),
    )
    sums = [named(total(column(v)), s) for v, s in zip(layout.values, layout.sums, strict=True)]
    capped = select(
        [*columns(cell), named(count_rows(), "__rows"), *sums, named(exp.true(), OVER)],
        derived(ranked),
        group=columns(cell),
    )
    return union_all([_whole(plan, layout, cap), capped])


def _weights_bounded(plan: Plan, layout: Layout) -> exp.Query:
    """EMMMR20 weighted averaging: a cell of s rows weighs each row min(1, h/s).

    Per cell that is ``least(s, h)`` rows and ``sum · min(1, h/s)`` on a 2**-W weight
    grid (floor division keeps |weighted| <= h·bound·2**W exactly); no row is re-read.

    The weighted sum is a BIGINT when that bound is below 2**63 (``_fits_bigint``), else
    a HUGEINT; either way it is exact.
    """
    weighted = []
    for m, s in zip(layout.valued, layout.sums, strict=True):
        cap, full = plan.cap(m), 1 << m.weight_bits
        small = _fits_bigint(cap * m.bound * full)
        whole = exp.Mul(this=(bigint if small else huge)(column(s)), expression=number(full))
        share: exp.Expr = exp.IntDiv(
            this=exp.Mul(this=huge(column(s)), expression=number(cap << m.weight_bits)),
            expression=column("__rows"),
        )
        if small:
            share = bigint(share)
        case = exp.Case(ifs=[exp.If(this=at_most(column("__rows"), cap), true=whole)])
        weighted.append(named(case.else_(share, copy=False), s))
    counted = [m for m in plan.measurements if m.kind == "rows"] or [
        m for m in plan.measurements if m.kind != "units"
    ]
    rows = least(column("__rows"), number(plan.cap(counted[0]))) if counted else column("__rows")
    return select(
        [*columns(layout.cell), named(rows, "__rows"), *weighted, *over(plan)], table("__chosen")
    )


def _clip_bounded(plan: Plan, layout: Layout) -> exp.Query:
    """RT24 Theorem III.1 clipping: a cell of s rows clips centred values to ±R·n/s.

    Cells with at most n rows pass whole; larger cells re-read their rows, clip each
    centred value to ±floor(R·n/s) half-steps (R the column's range), so the cell's
    centred sum stays within R·n = T, and count at most n rows.
    """
    cap, cell = plan.bounding.cap, layout.cell
    widths = [
        named(exp.IntDiv(this=number(m.bound * cap), expression=column("__rows")), f"__w{i}")
        for i, m in enumerate(layout.valued)
    ]
    parts = []
    for i, (m, v, s) in enumerate(zip(layout.valued, layout.values, layout.sums, strict=True)):
        width = column(f"__w{i}", "c")
        if m.kind == "centred":
            clipped = greatest(least(column(v, "r"), width), exp.Neg(this=width.copy()))
            parts.append(named(total(clipped), s))
        else:
            parts.append(named(least(total(column(v, "r")), number(cap)), s))
    clipped_cells = select(
        [
            *columns(cell, "r"),
            named(least(count_rows(), number(cap)), "__rows"),
            *parts,
            named(exp.true(), OVER),
        ],
        table("__source", "r"),
        joins=[
            joining(
                derived(chosen_over(layout, cap, widths), "c"), same_cell(layout.keys, "r", "c")
            )
        ],
        group=columns(cell, "r"),
    )
    return union_all([_whole(plan, layout, cap), clipped_cells])


def _ranked_cut(
    plan: Plan, layout: Layout, m: Measurement, bucket: str, trimmed: exp.Expr
) -> exp.Query:
    """Sample limiting's cut of a bucket: the rows of trimmed cells past the k smallest keyed
    content hashes (the ranking ``__bounded`` keeps), and every row of a dropped cell."""
    by = [*layout.keys, bucket]
    ranked = select(
        [
            *columns(by, "r"),
            column("__chosen", "c"),
            named(rank(columns(layout.cell, "r"), row_order(layout)), "__rank"),
        ],
        table("__source", "r"),
        joins=[joining(trimmed, same_cell(layout.keys, "r", "c"))],
    )
    cut = exp.Or(
        this=exp.Not(this=column("__chosen")),
        expression=exp.GT(this=column("__rank"), expression=number(plan.cap(m))),
    )
    present = exp.Not(this=exp.Is(this=column(bucket), expression=exp.null()))
    return select(
        [*columns(by), named(count_rows(), "__cut")],
        derived(ranked),
        where=exp.And(this=present, expression=exp.Paren(this=cut)),
        group=columns(by),
    )


def _weighted_cut(
    plan: Plan, layout: Layout, m: Measurement, bucket: str, trimmed: exp.Expr
) -> exp.Query:
    """Weighted averaging's cut of a bucket: a kept cell of s rows keeps floor(h·2**W/s) of
    each row's 2**W; a dropped cell's rows lose all of it."""
    full, by = 1 << m.weight_bits, columns([*layout.keys, bucket], "r")
    kept = exp.Sub(
        this=number(full),
        expression=exp.IntDiv(this=number(plan.cap(m) * full), expression=column("__rows", "c")),
    )
    share = exp.Case(ifs=[exp.If(this=column("__chosen", "c"), true=kept)]).else_(
        number(full), copy=False
    )
    present = exp.Not(this=exp.Is(this=column(bucket, "r"), expression=exp.null()))
    return select(
        [*by, named(total(share), "__cut")],
        table("__source", "r"),
        joins=[joining(trimmed, same_cell(layout.keys, "r", "c"))],
        where=present,
        group=[b.copy() for b in by],
    )


Stage = Callable[["Plan", Layout], exp.Query]
"""A strategy's ``__bounded`` stage."""

Cut = Callable[["Plan", Layout, "Measurement", str, exp.Expr], exp.Query]
"""A strategy's cut of a quantile's bucket counts: per (group, bucket), the weight its
bounding takes from the rows of ``trimmed`` cells (cells over the cap, ``__chosen`` true,
and cells the group cap dropped)."""


@dataclass(frozen=True)
class StrategySpec:
    """One bounding strategy (see the module's docstring)."""

    name: str
    bounded: Stage
    """Its ``__bounded`` stage."""
    histogram_cut: Cut = _ranked_cut
    """What it takes from each quantile bucket's count."""
    weight_bits: int = 0
    """Per-row weights on a 2**-bits fixed-point grid (0: rows are kept or dropped whole)."""
    rereads_rows: bool = True
    """Cells over the cap read their rows again (to rank or clip them); weighting does not."""
    always_automatic: bool = False
    """The cap is always chosen privately (RT24's T has no analyst-written form)."""
    rank_factor: int = 1
    """The AUTO rank rule's target is this many times AKMV19's (RT24 doubles it)."""
    per_rule_caps: bool = False
    """Each AUTO rule may get its own cap (weighting needs no common one)."""
    only_clippable: bool = False
    """Only aggregates whose spec is ``clippable`` can be bounded this way."""


STRATEGIES = {
    spec.name: spec
    for spec in (
        StrategySpec("ROWS", _rows_bounded),
        StrategySpec(
            "WEIGHTS",
            _weights_bounded,
            histogram_cut=_weighted_cut,
            weight_bits=WEIGHT_BITS,
            rereads_rows=False,
            per_rule_caps=True,
        ),
        StrategySpec(
            "CLIP",
            _clip_bounded,
            always_automatic=True,
            rank_factor=2,
            only_clippable=True,
        ),
    )
}
"""Every bounding strategy, by the name BOUND takes (AUTO is WEIGHTS with AUTO caps)."""
