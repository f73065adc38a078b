"""Generation: the plan as one set-based DuckDB statement.

The statement bounds contributions (AKMV19 sample limiting), aggregates per group,
hands each exact measurement to the release functions the caller names, and runs
the analyst's post-processing (output arithmetic, HAVING, ORDER BY, LIMIT) on the
released values only. Its stages, as CTEs:

``source``   one line per private row: unit, keys, gridded values (NULL units dropped),
             each expression the analyst wrote evaluated once per row (``_rows``)
``cells``    per (unit, group): row count and sums                 — one pass, no sort
``ranked``   the cells of the units touching more than ``m`` groups, each ranked among
             its unit's cells by a keyed hash of (unit, key): the one ranking the group
             cap's stages read (only when some unit can touch more than ``m`` groups)
``chosen``   at most ``m`` groups per unit: every cell of a unit not in ``ranked``, and
             the first ``m`` ranked cells of the others (when no unit can touch more
             than ``m`` groups, the cells stage itself, under this name)
``bounded``  the strategy's bounding of each kept cell (``strategies``; for ROWS: at most
             ``k`` rows per (unit, group): cells with ≤ k rows pass whole; only cells
             with > k rows re-read their rows and keep the k with the smallest keyed
             hash of the row's content (ties broken by content), so what one unit keeps
             depends on its own rows only (PERFORMANCE.md))
``groups``   per group: distinct units, rows, sums, and kept cells over the row cap;
             when ``bounded`` reads each cell's row of ``chosen`` alone (ROWS over no
             row value, WEIGHTS), over ``chosen`` with the bounding's expressions in
             place (no ``bounded`` stage), and, without group keys, ``excess`` in the
             same aggregate (no ``excess`` stage: ``_bounded_cell``)
``cuts``     per group: how many cells bounding cut — kept cells over the row cap,
             and each unit's cells dropped by the group cap (all of them under listed
             keys, else a keyed sample of ``m``: ranks ``m+1 .. 2m`` in ``ranked``);
             when only the row cap cuts (no group cap can drop a cell), ``groups``
             alone counts them and the release reads them there (no such stage)
``excess``   over all units, per row cap: the rows bounding cut, in caps (``_excess``)
``released`` noise added and keys selected, materialised so each noisy value is
             drawn once however often the post-processing reads it

Every stage is built as sqlglot expressions (``rewriter.sqlbuild``) and rendered once; no
SQL text is pasted together except the CTE list of ``Stages``.

The rewriter knows nothing of the noise: ``noise(value, sensitivity, epsilon)``,
``keep(units, max_groups, epsilon, delta)`` and ``quantile(buckets, weights, p, low, high,
buckets_count, epsilon, interval_epsilon, unit_weight)`` (a struct of ``value``, ``lower`` and
``upper``) are names the caller registers. A quantile's
histogram (``__hist*``: per group, the sparse weighted count of each value bucket over the
kept rows) is a bounded summary: at most BUCKETS numbers per group reach the function.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from rewriter.aggregates import SPECS, Form
from rewriter.analyze import Analysis
from rewriter.dialect import output_name, to_sql
from rewriter.guard import never_raise
from rewriter.ir import private_rows
from rewriter.plan import (
    BUCKETS,
    MEAN_BINS,
    ROW_WEIGHT_BITS,
    Measurement,
    Plan,
    Statistic,
    mean_bin_width,
    scaled,
)
from rewriter.sqlbuild import (
    DUCKDB,
    OVER,
    Layout,
    at_most,
    call,
    canonical_key,
    chosen_over,
    coalesce,
    column,
    columns,
    count_rows,
    derived,
    double,
    filtered,
    greatest,
    huge,
    joining,
    least,
    level,
    named,
    number,
    rank,
    render,
    same_keys,
    secret_hash,
    select,
    table,
    total,
    union_all,
)
from rewriter.strategies import STRATEGIES


@dataclass(frozen=True)
class Functions:
    """Names of the release functions registered in the engine."""

    noise: str
    keep: str
    quantile: str
    check: str | None = None
    """Releases the bounding check's counts (like ``noise``; ``noise`` itself when None)."""


def _sql(node: exp.Expr) -> str:
    """``node`` as DuckDB SQL (sqlglot's normalised function names), printed in place: every
    tree passed here is built for this printing from copies (``never_raise``, ``transform``
    and ``rewriter.ir`` copy what they take from the analysis), and sqlglot's default copy
    of it would be most of the printing's cost."""
    return DUCKDB.generate(node, copy=False)


def _common(plan: Plan, layout: Layout, sources: Sources | None = None) -> dict[str, str]:
    """The stages every statement shares: rows, cells, and the groups each unit keeps.

    When no unit can touch more groups than MAX_GROUPS, every cell is kept and the cells
    stage itself is ``__chosen``: each stage is one more for DuckDB to plan (about half a
    millisecond of every query).
    """
    source, cells = _source(plan, layout, sources), render(_cells(layout))
    if not plan.groups_may_exceed_cap:
        return {"__source": source, "__chosen": cells}
    return {
        "__source": source,
        "__cells": cells,
        RANKED: render(_ranked(plan, layout)),
        "__chosen": render(_chosen(layout, plan.bounding.groups)),
    }


def _source(plan: Plan, layout: Layout, sources: Sources | None = None) -> str:
    """The ``__source`` stage of the plan's measurements (``_rows``), rendered once per
    compilation when ``sources`` keeps it."""
    values = [m.value for m in [*layout.valued, *layout.histograms]]
    names = [*layout.values, *layout.buckets]
    if sources is None:
        return _rows(plan.analysis, layout.keys, values, names)
    return sources.rows(plan.analysis, layout.keys, values, names)


class Sources:
    """The ``__source`` stages of one compilation, each rendered once.

    A query's searches (MAX_GROUPS AUTO, the AUTO caps) and its release read the same rows
    through the same ``__source`` (``_rows``), the costliest stage to build and print. It
    is kept under everything it is built from: the analysis, by identity (one compilation
    compiles one analysis, which is kept alive here, so the identity is never another's),
    the keys' and values' names, and each row value as privsql prints it (``to_sql``, the
    text queries are compared by). A plan whose rows differ gets its own.
    """

    def __init__(self) -> None:
        self._rendered: dict[tuple, tuple[Analysis, str]] = {}

    def rows(self, analysis: Analysis, keys: list[str], row_values: list, values: list[str]) -> str:
        """``_rows(analysis, keys, row_values, values)``, rendered at most once."""
        key = (id(analysis), tuple(keys), tuple(values), tuple(to_sql(v) for v in row_values))
        found = self._rendered.get(key)
        if found is None or found[0] is not analysis:
            found = (analysis, _rows(analysis, keys, row_values, values))
            self._rendered[key] = found
        return found[1]


def _with(ctes: dict[str, str]) -> str:
    return "WITH " + ",\n".join(
        f"{name} AS{' MATERIALIZED' if name in DRAWN else ''} (\n{sql}\n)"
        for name, sql in ctes.items()
    )


RELEASED = "__released"
"""The CTE holding the noisy values, materialised so each is drawn once however often the
post-processing reads it."""

EXCESS = "__excess"
"""The CTE holding, summed over units, the rows bounding cut from each unit in caps (clipped
to 1 per unit, in 1/EXCESS_SCALE steps), and then its noisy release (one row)."""

EXCESS_RELEASED = "__excess_released"
"""The one-row CTE holding the noisy ``__excess``, materialised so it is drawn once however
many groups' rows read it (a query without group keys, whose ``__released`` is one row,
draws it there)."""

EXCESS_SCALE = 1024
"""A unit's share of the rows-cut total is counted in steps of 1/EXCESS_SCALE of a cap."""

DRAWN = (RELEASED, EXCESS_RELEASED)
"""The CTEs whose noise is drawn once (``MATERIALIZED``)."""


@dataclass(frozen=True)
class Selected:
    """One output of a post-processing that only selects: released column ``column`` as
    output ``name``, cast to BIGINT when ``bigint`` (``TRY_CAST``: NULL where it does not
    fit)."""

    name: str
    column: str
    bigint: bool


@dataclass(frozen=True)
class Selection:
    """A post-processing that computes nothing: released columns as its outputs
    (``outputs``), rows in the order of released columns (``order``: each ascending, NULLs
    last — the group keys, as ``_post_processing`` orders them) and the window of them a
    LIMIT and OFFSET keep (``offset``, ``limit``)."""

    outputs: tuple[Selected, ...]
    order: tuple[str, ...] = ()
    offset: int = 0
    limit: int | None = None


@dataclass(frozen=True)
class Stages:
    """The private query in two parts that meet at a few aggregated relations.

    ``aggregation`` (CTEs) reads the private rows and ends in the relations ``outputs``
    names: per-group exact aggregates (``__groups``), per-group bucket counts of each
    quantile (``__counts*``) and the keys' public domains (``__domain*``) — bounded by the
    number of groups, never rows. ``release`` (CTEs, then ``final``) reads only those:
    noise, partition selection and the analyst's post-processing. One engine may run both
    as one statement (``generate``); another may run the aggregation where the data is and
    the release where privsql's noise functions are, with the same result. Each CTE is
    held as its rendered SQL (built as sqlglot expressions, rendered once).
    """

    aggregation: dict[str, str]
    outputs: tuple[str, ...]
    release: dict[str, str]
    final: str
    selected: Selection | None = None
    """``final`` when it only selects released columns, each as it is or as a ``TRY_CAST``
    to BIGINT, in the order of released columns and within a window of rows: the table
    ``final`` returns, which an engine may make from the released table without running
    ``final``."""

    def statement(self) -> str:
        """Both parts as one statement (parameter ``$privsql_secret``)."""
        return f"{_with({**self.aggregation, **self.release})}\n{self.final}"

    def output(self, name: str) -> str:
        """The statement computing one output of the aggregation."""
        return f"{_with(self.aggregation)}\nSELECT * FROM {name}"

    def released(self) -> str:
        """The release as a statement over the outputs, given as tables of their names."""
        return f"{_with(self.release)}\n{self.final}"

    def noisy(self, *, from_outputs: bool = False) -> str:
        """The released values before post-processing: both parts, or (``from_outputs``)
        the release over the outputs given as tables of their names. ``final`` then runs
        over this statement's result, given as the table ``__released``."""
        ctes = self.release if from_outputs else {**self.aggregation, **self.release}
        return f"{_with(ctes)}\nSELECT * FROM {RELEASED}"


def stages(plan: Plan, functions: Functions, sources: Sources | None = None) -> Stages:
    """The private query, split where its relations stop holding rows (its ``__source``
    kept in ``sources``, when given, for the compilation's other statements)."""
    layout = Layout.of(plan)
    ctes = _common(plan, layout, sources)
    grouped = _uses_groups(plan)
    one_aggregate = False
    if grouped:
        bounded = STRATEGIES[plan.bounding.strategy].bounded(plan, layout)
        cell = _bounded_cell(bounded)
        one_aggregate = cell is not None and not layout.keys
        if cell is None:
            ctes["__bounded"] = render(bounded)
        ctes["__groups"] = render(_groups(plan, layout, cell))
    ctes.update({name: render(q) for name, q in _histograms(plan, layout).items()})
    if not _cuts_in_groups(plan):
        ctes[CUTS] = render(_cuts_per_group(plan, layout))
    excess_apart = bool(plan.excess_epsilon) and not one_aggregate
    if excess_apart:
        ctes[EXCESS] = render(_excess(plan, layout))
    domains = {name: render(q) for name, q in _domains(plan, layout.keys).items()}
    ctes.update(domains)
    counts = tuple(f"__counts{i}" for i in range(len(layout.histograms)))
    cuts = () if _cuts_in_groups(plan) else (CUTS,)
    cuts += (EXCESS,) if excess_apart else ()
    outputs = (*(("__groups",) if grouped else ()), *counts, *cuts, *domains)
    columns_of = _measured_columns(plan.measurements, layout.sums)
    release = {name: render(q) for name, q in _histogram_lists(layout).items()}
    if plan.excess_epsilon and layout.keys:
        release[EXCESS_RELEASED] = render(_excess_released(plan, functions))
    release[RELEASED] = render(_released(plan, layout, columns_of, functions, one_aggregate))
    final = _post_processing(plan, layout.keys)
    selected = _selected(final)  # first: rendering in place may change the tree
    return Stages(ctes, outputs, release, render(final), selected)


def generate(plan: Plan, functions: Functions) -> str:
    """The whole private query as DuckDB SQL (one statement, parameter ``$privsql_secret``)."""
    return stages(plan, functions).statement()


def threshold_sql(plan: Plan, sources: Sources | None = None) -> str:
    """Rows of (kind, size, number, bin, total). Kind 0, one per size of a unit's largest
    kept cell: that number of rows and how many units have it. Kind 1 when MAX_GROUPS is
    above 1, one per size of a kept cell: how many cells have it (the rank rule counts
    cells). Kind 2 + i for the i-th AVG under EMMMR20's rule (``Plan.mean_sums``), one per
    size and bin of the units' rounded mean centred value (``MEAN_BINS`` bins of
    ``mean_bin_width(B)`` from −B, B the mean's bound): how many units and the total of
    their means. ``compiler.threshold_search`` reads them as counts over each candidate cap
    and histograms of the means per size bucket.

    This is the only input of an AUTO threshold search: per-unit aggregates, never rows.
    Adding or removing a unit moves each unit count by at most one, each cell count by at
    most MAX_GROUPS and each total by at most the largest centred value (the mean's bound).
    The sizes are few — distinct sizes summing to at most the number of rows, so fewer than
    √(2·rows) — and one grouped statement costs the engine far less to plan than one
    aggregate per candidate.
    """
    layout = Layout.of(plan)
    ctes = _common(plan, layout, sources)
    means = [
        named(
            huge(
                exp.Round(
                    this=exp.Div(
                        this=total(column(layout.sums[layout.valued.index(centred)])),
                        expression=exp.Nullif(
                            this=total(column(layout.sums[layout.valued.index(count)])),
                            expression=number(0),
                        ),
                    )
                )
            ),
            f"__mean{i}",
        )
        for i, (centred, count) in enumerate(plan.mean_sums)
    ]
    empty = [named(exp.null(), "__bin"), named(exp.null(), "__total")]
    if not layout.keys and not plan.groups_may_exceed_cap and not means:
        # a unit's one cell is its largest: its sizes are read from __chosen without
        # grouping by unit (one aggregate fewer for DuckDB; the same rows)
        parts = [
            select(
                [
                    number(0),
                    named(column("__rows"), "__size"),
                    named(count_rows(), "__units"),
                    *empty,
                ],
                table("__chosen"),
                group=[column("__rows")],
            )
        ]
    else:
        ctes[LARGEST] = render(
            select(
                [column("__unit"), named(exp.Max(this=column("__rows")), "__size"), *means],
                table("__chosen"),
                group=[column("__unit")],
            )
        )
        parts = [
            select(
                [number(0), column("__size"), named(count_rows(), "__units"), *empty],
                table(LARGEST),
                group=[column("__size")],
            )
        ]
        for i, (centred, _) in enumerate(plan.mean_sums):
            position = _mean_bin(column(f"__mean{i}"), centred.bound)
            parts.append(
                select(
                    [
                        number(2 + i),
                        column("__size"),
                        count_rows(),
                        named(position.copy(), "__bin"),
                        total(column(f"__mean{i}")),
                    ],
                    table(LARGEST),
                    group=[column("__size"), position],
                )
            )
    if plan.bounding.groups > 1:
        parts.append(
            select(
                [number(1), column("__rows"), count_rows(), exp.null(), exp.null()],
                table("__chosen"),
                group=[column("__rows")],
            )
        )
    return f"{_with(ctes)}\n{render(union_all(parts))}"


LARGEST = "__largest"
"""The threshold search's stage of each unit's largest kept cell and mean values."""


def _mean_bin(mean: exp.Column, bound: int) -> exp.Expr:
    """The bin of a unit's mean centred value in [−bound, bound]: (mean + bound) //
    width, the last bin holding the top (never negative: the mean is at least −bound)."""
    shifted = exp.Paren(this=exp.Add(this=mean, expression=number(bound)))
    return least(
        exp.IntDiv(this=shifted, expression=number(mean_bin_width(bound))), number(MEAN_BINS - 1)
    )


def size_summary(rows: Sequence[Sequence[object]], candidates: Sequence[int]) -> tuple[int, ...]:
    """Rows of (size, units) (``threshold_sql``, ``groups_sql``) as one summary: the number
    of units, then how many have a size above each candidate — what one aggregate per
    candidate (``count(*) FILTER (WHERE size > c)``) would return."""
    sizes = [(int(row[0]), int(row[1])) for row in rows]
    summary = [sum(units for _, units in sizes)]
    summary += [sum(units for size, units in sizes if size > c) for c in candidates]
    return tuple(summary)


def mean_histogram(
    rows: Sequence[Sequence[object]], candidates: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Rows of (size, units, bin, total) of one AVG (``threshold_sql``, kind 2 + i) as two
    flat histograms over (size bucket, bin), bucket-major: the units, then the totals of
    their means. Bucket j holds the sizes in (c_{j−1}, c_j] of ``candidates`` (the last, the
    sizes above them all), bin k the means in [−B + k·w, −B + (k + 1)·w); a unit whose mean
    is NULL (no value) is in no bin."""
    units = [0] * ((len(candidates) + 1) * MEAN_BINS)
    totals = list(units)
    for size, count, position, value in rows:
        if position is not None:
            cell = bisect_left(candidates, int(size)) * MEAN_BINS + int(position)
            units[cell] += int(count)
            totals[cell] += int(value or 0)
    return tuple(units), tuple(totals)


def groups_sql(plan: Plan, sources: Sources | None = None) -> str:
    """Rows, one per number of groups a unit touches: that number and how many units touch
    it (``size_summary`` folds them into how many touch more than each candidate) — the
    only input of MAX_GROUPS AUTO (per-unit counts, never rows; adding or removing a unit
    moves each count by at most one)."""
    layout = Layout.of(plan)
    ctes = {"__source": _source(plan, layout, sources), "__cells": render(_cells(layout))}
    touched = select(
        [column("__unit"), named(count_rows(), "__size")],
        table("__cells"),
        group=[column("__unit")],
    )
    sizes = select(
        [column("__size"), named(count_rows(), "__units")],
        derived(touched),
        group=[column("__size")],
    )
    return f"{_with(ctes)}\n{render(sizes)}"


def bounds_sql(
    analysis: Analysis, arguments: Sequence[exp.Expr], magnitudes: Sequence[float]
) -> str:
    """One row: for each argument in turn, how many units have a value above each magnitude
    c, then how many have one below −c (each unit counts at most once per number); after
    those, for each argument in turn, the total weight of the rows above each c, then below
    each −c, each unit's rows weighing 2**ROW_WEIGHT_BITS in all (``udfs.tightened_bounds``).

    The input of a private bounds estimate: per-unit extremes and per-unit weighted row
    counts, never rows. A unit with k values gives each ⌊2**ROW_WEIGHT_BITS / k⌋, so it
    adds at most 2**ROW_WEIGHT_BITS to the weights of all bins together.
    """
    values = [f"__x{i}" for i in range(len(arguments))]
    weights = [f"__w{i}" for i in range(len(arguments))]
    numbers = [
        exp.Case(
            ifs=[exp.If(this=exp.func("isnan", _double_of(a)), true=exp.null())],
            default=_double_of(a),
        )
        for a in arguments
    ]
    extremes = [
        named(function(this=column(v)), f"__{side}{i}")
        for i, v in enumerate(values)
        for function, side in ((exp.Max, "hi"), (exp.Min, "lo"))
    ]
    per_unit_weights = [
        named(
            exp.IntDiv(
                this=number(2**ROW_WEIGHT_BITS),
                expression=exp.Nullif(
                    this=exp.Window(
                        this=exp.Count(this=column(v)),
                        partition_by=[column("__unit")],
                        over="OVER",
                    ),
                    expression=number(0),
                ),
            ),
            w,
        )
        for v, w in zip(values, weights, strict=True)
    ]
    sides = (("hi", exp.GT, False), ("lo", exp.LT, True))
    counts = [
        filtered(count_rows(), comparison(this=column(f"__{side}{i}"), expression=bound))
        for i in range(len(values))
        for side, comparison, negative in sides
        for bound in (_magnitude(c, negative) for c in magnitudes)
    ]
    masses = [
        select(
            [
                coalesce(
                    filtered(total(column("__w")), comparison(this=column("__x"), expression=b)),
                    number(0),
                )
                for _, comparison, negative in sides
                for b in (_magnitude(c, negative) for c in magnitudes)
            ],
            table(f"__values{i}"),
        )
        for i in range(len(values))
    ]
    ctes = {
        "__source": _rows(analysis, [], numbers, values),
        "__extremes": render(select(extremes, table("__source"), group=[column("__unit")])),
        "__weighted": render(select([exp.Star(), *per_unit_weights], table("__source"))),
        # One row per distinct value: the comparisons below then run over far fewer rows.
        **{
            f"__values{i}": render(
                select(
                    [named(column(v), "__x"), named(total(column(w)), "__w")],
                    table("__weighted"),
                    group=[column(v)],
                )
            )
            for i, (v, w) in enumerate(zip(values, weights, strict=True))
        },
    }
    parts = [select(counts, table("__extremes")), *masses]
    statement = select(
        [exp.Star()],
        derived(parts[0], "__p0"),
        joins=[
            exp.Join(this=derived(part, f"__p{i}"), kind="CROSS")
            for i, part in enumerate(parts[1:], 1)
        ],
    )
    return f"{_with(ctes)}\n{render(statement)}"


def _magnitude(value: float, negative: bool) -> exp.Expr:
    """A magnitude, or its negation, as the exact text of its ``repr``."""
    literal = exp.Literal.number(repr(value))
    return exp.Neg(this=literal) if negative else literal


def _double_of(argument: exp.Expr) -> exp.Expr:
    return exp.TryCast(this=argument.copy(), to=exp.DataType.build("DOUBLE"))


def _rows(analysis: Analysis, keys: list[str], row_values: list, values: list[str]) -> str:
    """The ``__source`` stage: unit, keys and row values of each private row, compiled from
    the query's IR (``rewriter.ir``) with every row-level expression guarded.

    It has two layers, so that each expression the analyst wrote runs once per row
    (docs/privacy.md section 8): the inner one (``private_rows``) reads the rows, filters
    them and projects the unit, each key and each distinct aggregate argument, guarded,
    under a name of its own; the outer one builds the row values (clamps, grids, squares,
    0/1 indicators, buckets) from those names only. A row value spelling its argument
    twice, or two aggregates of one argument, then read a column, not the argument again.
    """
    projected = [
        (k.expression, n) for k, n in zip(analysis.keys if keys else (), keys, strict=True)
    ]
    arguments = [a.argument for a in analysis.aggregates if a.argument is not None]
    projected += [(a, f"__a{i}") for i, a in enumerate(arguments)]
    names: dict[exp.Expr, str] = {}
    for node, name in projected:
        names.setdefault(node, name)
    read: set[str] = set(keys)

    def reading(node: exp.Expr) -> exp.Expr:
        name = names.get(node)
        if name is None:
            return node
        read.add(name)
        return column(name, ROW)

    kinds = [k.kind for k in analysis.keys] if keys else []
    outer = [column("__unit", ROW)]
    outer += [named(canonical_key(column(k, ROW), t), k) for k, t in zip(keys, kinds, strict=True)]
    outer += [
        named(never_raise(v.transform(reading)), n) for v, n in zip(row_values, values, strict=True)
    ]
    inner = [exp.alias_(never_raise(analysis.unit), "__unit")]
    inner += [exp.alias_(never_raise(node), n) for node, n in projected if n in read]
    rows = private_rows(analysis.rows, inner, analysis.unit, list(analysis.ctes))
    return _sql(select(outer, derived(rows, ROW)))


ROW = "__row"
"""The inner layer of ``__source``: one row per private row, each analyst expression once."""


def _cells(layout: Layout) -> exp.Select:
    """Per (unit, group): row count and sums, one pass over the rows."""
    sums = [named(total(column(v)), s) for v, s in zip(layout.values, layout.sums, strict=True)]
    return select(
        [*columns(layout.cell), named(count_rows(), "__rows"), *sums],
        table("__source"),
        group=columns(layout.cell),
    )


RANKED = "__ranked"
"""The CTE holding the cells of the units touching more than MAX_GROUPS groups, each with
its rank among its unit's cells in the group cap's order (``__rank``): the one ranking
every group-cap stage reads (``__chosen``, ``__cuts``, the dropped cells of ``_trimmed``)."""


def _ranked(plan: Plan, layout: Layout) -> exp.Select:
    """The cells of units over the group cap, ranked once by keyed hash of (unit, key).

    Only those units' cells are ranked (a SEMI JOIN with the units touching more than m
    groups): a unit within the cap keeps every cell, and the stages that read the ranking
    ask only about units over it. Each cell's rank depends on its unit's own cells and the
    secret only (docs/privacy.md, 2)."""
    return select(
        [*columns([*layout.cell, "__rows", *layout.sums], "c"), named(_group_rank(layout), RANK)],
        table("__cells", "c"),
        joins=[_units_over(plan.bounding.groups)],
    )


RANK = "__rank"
"""A cell's rank among its unit's cells in the group cap's order (``__ranked``)."""


def _chosen(layout: Layout, cap: int) -> exp.Query:
    """At most MAX_GROUPS cells per unit when a unit may touch more (``_common``): units
    touching no more keep all theirs (every cell of a unit not in ``__ranked``), the others
    the first ``cap`` of their ranked cells."""
    kept = columns([*layout.cell, "__rows", *layout.sums])
    few = select(
        [exp.Column(this=exp.Star(), table=exp.to_identifier("c"))],
        table("__cells", "c"),
        joins=[
            joining(
                table(RANKED, "r"),
                exp.EQ(this=column("__unit", "c"), expression=column("__unit", "r")),
                "ANTI",
            )
        ],
    )
    ranked = select(kept, table(RANKED), where=at_most(column(RANK), cap))
    return union_all([few, ranked])


def _units_over(cap: int) -> exp.Join:
    """SEMI JOIN of ``__cells AS c`` with the units touching more than ``cap`` groups."""
    units = select(
        [column("__unit")],
        table("__cells"),
        group=[column("__unit")],
        having=exp.GT(this=count_rows(), expression=number(cap)),
    )
    on = exp.EQ(this=column("__unit", "c"), expression=column("__unit", "u"))
    return joining(derived(units, "u"), on, "SEMI")


def _group_rank(layout: Layout) -> exp.Window:
    """A cell's rank among its unit's cells in the group cap's order: keyed hash of (unit,
    key), ties by key."""
    keys = layout.keys
    order = [secret_hash(column("__unit", "c"), *columns(keys, "c")), *columns(keys, "c")]
    return rank([column("__unit", "c")], order)


CUTS = "__cuts"
"""The CTE counting, per group, the cells bounding cut."""

CUT_COLUMN = "__cut"
"""The released (noisy) count of cut cells of each group."""


def _cuts_in_groups(plan: Plan) -> bool:
    """Whether ``__groups`` alone counts the cut cells (kept cells over the row cap, and no
    group cap that can drop any), so no ``__cuts`` stage is needed."""
    return plan.row_cap is not None and _uses_groups(plan) and not plan.groups_may_exceed_cap


def _cuts_per_group(plan: Plan, layout: Layout) -> exp.Query:
    """Per group and row cap (``Plan.cut_caps``): kept cells over the cap (counted by
    ``__groups``), plus the dropped cells of a unit over the group cap whose rank in
    ``chosen``'s order is in (m, m + s], s = ``Plan.dropped_sample`` (all of them under
    listed keys, else a keyed sample of m), so one unit adds at most 1 per group and
    ``Plan.cut_sensitivity`` over all groups to each cap's count."""
    keys, cap = layout.keys, plan.bounding.groups
    cuts = [level(CUT_COLUMN, i) for i in range(plan.cut_levels)]
    caps = plan.cut_caps

    def every(value: int) -> list[exp.Expr]:
        return [named(number(value), cut) for cut in cuts]

    parts: list[exp.Query] = []
    if caps and _uses_groups(plan):
        parts.append(select([*columns(keys), *columns(cuts)], table("__groups")))
    elif caps:
        # Every cell here is over the smallest cap; whether over the others, it says.
        over = [
            named(number(1) if i == 0 else exp.cast(_over_cap(c), "INT"), cut)
            for i, (cut, c) in enumerate(zip(cuts, caps, strict=True))
        ]
        parts.append(select([*columns(keys), *over], table("__chosen"), where=_over_cap(caps[0])))
    if plan.groups_may_exceed_cap:
        sampled = exp.Between(
            this=column(RANK), low=number(cap + 1), high=number(cap + plan.dropped_sample)
        )
        parts.append(select([*columns(keys), *every(1)], table(RANKED), where=sampled))
    if not parts:
        parts.append(select([*columns(keys), *every(0)], table("__chosen"), where=exp.false()))
    return select(
        [*columns(keys), *(named(total(column(cut)), cut) for cut in cuts)],
        derived(union_all(parts)),
        group=columns(keys),
    )


def _over_cap(cap: int) -> exp.GT:
    """A cell of ``__chosen`` has more rows than ``cap``."""
    return exp.GT(this=column("__rows"), expression=number(cap))


def _excess(plan: Plan, layout: Layout) -> exp.Query:
    """Over all units, per row cap (``Plan.cut_caps``): the rows bounding cut from each
    unit — beyond the cap in its kept cells, and all of its dropped cells (``_trimmed``) —
    in caps, clipped to 1 per unit and counted in steps of 1/EXCESS_SCALE. A unit moves
    each cap's total by at most EXCESS_SCALE.

    Without group keys a unit has one cell, and nothing is dropped: its rows cut are those
    of its cell of ``__chosen`` beyond the cap, read there with no grouping by unit (one
    aggregate fewer for DuckDB; the same numbers). With keys that no group cap can drop,
    its kept cells over the smallest cap are read from ``__chosen`` alone (no union with
    dropped cells, no flag telling them apart: about 0.15 ms of a 100-row release)."""
    caps = plan.cut_caps
    excess = [level(EXCESS, i) for i in range(len(caps))]
    if not layout.keys and not plan.groups_may_exceed_cap:
        return select(_excess_of_cells(plan), table("__chosen"))
    units: exp.Select
    if plan.groups_may_exceed_cap:
        lost = [
            exp.If(
                this=column("__chosen", "c"),
                true=_beyond(column("__rows", "c"), cap, i),
                false=column("__rows", "c"),
            )
            for i, cap in enumerate(caps)
        ]
        units = select(
            [named(total(huge(x)), level("__lost", i)) for i, x in enumerate(lost)],
            _trimmed(plan, layout, caps[0]),
            group=[column("__unit", "c")],
        )
    else:
        units = select(
            [
                named(total(huge(_beyond(column("__rows"), cap, i))), level("__lost", i))
                for i, cap in enumerate(caps)
            ],
            table("__chosen"),
            where=_over_cap(caps[0]),
            group=[column("__unit")],
        )
    return select(
        [
            named(_excess_sum(column(level("__lost", i)), cap), name)
            for i, (cap, name) in enumerate(zip(caps, excess, strict=True))
        ],
        derived(units),
    )


def _excess_of_cells(plan: Plan) -> list[exp.Alias]:
    """Each row cap's ``__excess`` as an aggregate over ``__chosen`` when a unit has one
    cell and none is dropped (no group keys): its rows cut are those of that cell beyond
    the cap, summed over the cells over the smallest cap (a FILTER: the aggregate may
    compute ``__groups`` too, ``_groups``)."""
    caps = plan.cut_caps
    over = _over_cap(caps[0])
    return [
        named(_excess_sum(huge(_beyond(column("__rows"), cap, i)), cap, over), level(EXCESS, i))
        for i, cap in enumerate(caps)
    ]


def _beyond(rows: exp.Column, cap: int, index: int) -> exp.Expr:
    """A trimmed cell's rows beyond ``cap``: it has more rows than the smallest cap
    (``index`` 0), not always than the others."""
    beyond = exp.Sub(this=rows, expression=number(cap))
    return beyond if index == 0 else greatest(beyond, number(0))


def _excess_sum(lost: exp.Expr, cap: int, where: exp.Expr | None = None) -> exp.Expr:
    """The sum over units (those ``where`` holds for, when given) of each one's ``lost``
    rows (a HUGEINT) in 1/EXCESS_SCALE steps of ``cap``, at most EXCESS_SCALE each; 0 when
    no unit lost any."""
    share = exp.IntDiv(
        this=exp.Mul(this=lost, expression=number(EXCESS_SCALE)), expression=number(cap)
    )
    summed: exp.Expr = total(least(share, number(EXCESS_SCALE)))
    return coalesce(summed if where is None else filtered(summed, where), number(0))


def _excess_noise(plan: Plan, functions: Functions, excess: exp.Column) -> exp.Expr:
    """A noisy total of rows cut (Laplace, sensitivity EXCESS_SCALE)."""
    return call(
        functions.check or functions.noise,
        huge(excess),
        huge(number(EXCESS_SCALE)),
        double(plan.level_excess_epsilon),
    )


def _excess_names(plan: Plan) -> list[str]:
    return [level(EXCESS, i) for i in range(plan.cut_levels)]


def _excess_released(plan: Plan, functions: Functions) -> exp.Select:
    """The noisy totals of ``__excess``, drawn once for every group's row."""
    return select(
        [named(_excess_noise(plan, functions, column(e)), e) for e in _excess_names(plan)],
        table(EXCESS),
    )


def _histograms(plan: Plan, layout: Layout) -> dict[str, exp.Query]:
    """Per group and quantile: the kept values' weight in each bucket.

    Every row counts ``2**W`` in its bucket, less what bounding cuts from the few cells it
    trims (the strategy's ``histogram_cut``): the big aggregation is over (group, bucket)
    only, and only the rows of trimmed cells are read a second time (PERFORMANCE.md's fast
    shape).
    """
    keys = layout.keys
    cut_of = STRATEGIES[plan.bounding.strategy].histogram_cut
    ctes = {}
    for i, (m, bucket) in enumerate(zip(layout.histograms, layout.buckets, strict=True)):
        by = [*keys, bucket]
        present = exp.Not(this=exp.Is(this=column(bucket), expression=exp.null()))
        every = select(
            [*columns(by), named(count_rows(), "__n")],
            table("__source"),
            where=present,
            group=columns(by),
        )
        cut = cut_of(plan, layout, m, bucket, _trimmed(plan, layout, plan.cap(m)))
        weight = exp.Sub(
            this=exp.Mul(this=huge(column("__n", "a")), expression=number(1 << m.weight_bits)),
            expression=coalesce(column("__cut", "c"), number(0)),
        )
        same = exp.And(
            this=exp.EQ(this=column(bucket, "a"), expression=column(bucket, "c")),
            expression=same_keys(keys, "a", "c"),
        )
        ctes[f"__counts{i}"] = select(
            [
                *columns(keys, "a"),
                named(column(bucket, "a"), "__bucket"),
                named(weight, "__weight"),
            ],
            derived(every, "a"),
            joins=[joining(derived(cut, "c"), same, side="LEFT")],
        )
    return ctes


def _trimmed(plan: Plan, layout: Layout, cap: int) -> exp.Expr:
    """``(…) AS c``: the cells bounding trims — kept cells over ``cap`` (``__chosen`` true)
    and, when the group cap may bind, the cells it dropped (false: the cells of
    ``__ranked`` past rank MAX_GROUPS, read there rather than by joining every cell with
    ``__chosen``) — with their rows."""
    kept = chosen_over(layout, cap, [column("__rows"), named(exp.true(), "__chosen")])
    if not plan.groups_may_exceed_cap:
        return derived(kept, "c")
    dropped = select(
        [*columns(layout.cell), column("__rows"), exp.false()],
        table(RANKED),
        where=exp.GT(this=column(RANK), expression=number(plan.bounding.groups)),
    )
    return derived(union_all([kept, dropped]), "c")


def _histogram_lists(layout: Layout) -> dict[str, exp.Query]:
    """Each quantile's bucket counts per group as two parallel lists, in bucket order."""
    keys = layout.keys

    def in_order(node: exp.Expr) -> exp.Expr:
        order = exp.Order(this=node, expressions=[exp.Ordered(this=column("__bucket"))])
        return exp.ArrayAgg(this=order)

    return {
        f"__hist{i}": select(
            [
                *columns(keys),
                named(in_order(column("__bucket")), "__buckets"),
                named(in_order(huge(column("__weight"))), "__weights"),
            ],
            table(f"__counts{i}"),
            group=columns(keys),
        )
        for i in range(len(layout.histograms))
    }


def _bounded_cell(bounded: exp.Query) -> dict[str, exp.Expr] | None:
    """``__bounded``'s columns as expressions of ``__chosen``'s, when the strategy's stage
    is one row per cell of ``__chosen`` computed from that row alone (a SELECT of it with no
    join, filter or grouping: ROWS over no row value, WEIGHTS), so ``__groups`` can read
    ``__chosen`` itself (``_groups``). Else None: ROWS over row values and CLIP re-read the
    rows of cells over the cap.

    ``__bounded`` is then no stage: one CTE fewer for DuckDB to plan, for the same numbers.
    Without group keys (each unit has one cell, none dropped) ``__groups`` also computes
    the rows cut (``__excess``) in the same aggregate, so ``__excess`` is no stage either
    and ``__released`` joins nothing: one aggregate, not two over a ``__chosen`` read twice
    (with the CTE, about 0.2 ms of a 100-row COUNT's release).
    """
    if not isinstance(bounded, exp.Select):
        return None
    source = bounded.args["from_"].this
    if not (isinstance(source, exp.Table) and source.name == "__chosen"):
        return None
    if any(bounded.args.get(clause) for clause in ("joins", "where", "group", "qualify")):
        return None
    return {item.alias_or_name: item.unalias() for item in bounded.expressions}


def _groups(plan: Plan, layout: Layout, cell: dict[str, exp.Expr] | None = None) -> exp.Select:
    """Per group: distinct units, kept rows, sums, and kept cells over each row cap, over
    ``__bounded``; or, given ``__bounded``'s columns as expressions of ``__chosen``'s
    (``_bounded_cell``, each used once here, so taken as they are), over ``__chosen``,
    and then, without group keys, with each row cap's ``__excess`` (``_excess_of_cells``)
    beside them."""

    def bounded(name: str) -> exp.Expr:
        return column(name) if cell is None else cell[name]

    sums = [named(total(bounded(s)), s) for s in layout.sums]
    cuts = [
        named(filtered(count_rows(), bounded(level(OVER, i))), level(CUT_COLUMN, i))
        for i in range(plan.cut_levels)
    ]
    with_excess = cell is not None and not layout.keys and bool(plan.excess_epsilon)
    excess = _excess_of_cells(plan) if with_excess else []
    return select(
        [
            *columns(layout.keys),
            named(count_rows(), "__units"),
            named(total(bounded("__rows")), "__rows"),
            *sums,
            *cuts,
            *excess,
        ],
        table("__bounded" if cell is None else "__chosen"),
        group=columns(layout.keys),
    )


def _measured_columns(measurements: Sequence[Measurement], sums: list[str]) -> dict[str, str]:
    """Which column of ``__groups`` each measurement perturbs."""
    measured = {}
    next_sum = iter(sums)
    for m in measurements:
        if m.kind == "histogram":
            continue
        measured[m.name] = next(next_sum) if m.value is not None else f"__{m.kind}"
    return measured


def _released(
    plan: Plan,
    layout: Layout,
    measured: dict[str, str],
    functions: Functions,
    excess_in_groups: bool = False,
) -> exp.Select:
    """Noise on each measurement and each check's count, per group (``__excess`` read from
    ``__groups`` when ``excess_in_groups``: ``_groups``'s one-aggregate form)."""
    keys = layout.keys
    histogram = {m.name: i for i, m in enumerate(layout.histograms)}
    noisy = [_release(plan, m, measured, histogram, functions) for m in plan.measurements]
    counted = "g" if _cuts_in_groups(plan) else "x"
    for cut in (level(CUT_COLUMN, i) for i in range(plan.cut_levels)):
        check = call(
            functions.check or functions.noise,
            huge(coalesce(column(cut, counted), number(0))),
            huge(number(plan.cut_sensitivity)),
            double(plan.level_cut_epsilon),
        )
        noisy.append(named(check, cut))
    grouped = _uses_groups(plan)
    joins: list[exp.Join] = []
    if keys and plan.partition is None:
        domains = [f"__domain{i}" for i in range(len(keys))]
        source: exp.Expr = table(domains[0], "d")
        if len(domains) > 1:
            product = select(
                [exp.Star()],
                table(domains[0]),
                joins=[joining(table(name), kind="CROSS") for name in domains[1:]],
            )
            source = derived(product, "d")
        outer, items = "d", columns(keys, "d")
        if grouped:
            joins.append(joining(table("__groups", "g"), same_keys(keys, "d", "g"), side="LEFT"))
    elif grouped:
        source, outer, items = table("__groups", "g"), "g", columns(keys, "g")
    else:  # quantiles only, no keys: one row
        source, outer, items = derived(select([number(1)]), "g"), "g", []
    for i in range(len(layout.histograms)):
        joins.append(
            joining(table(f"__hist{i}", f"h{i}"), same_keys(keys, outer, f"h{i}"), side="LEFT")
        )
    if not _cuts_in_groups(plan):
        joins.append(joining(table(CUTS, "x"), same_keys(keys, outer, "x"), side="LEFT"))
    if plan.excess_epsilon and keys:  # drawn once, before, for every group's row
        joins.append(joining(table(EXCESS_RELEASED, "e"), kind="CROSS"))
        noisy.extend(named(column(e, "e"), e) for e in _excess_names(plan))
    elif plan.excess_epsilon:  # one row, drawn here: a stage and a join fewer for DuckDB
        if not excess_in_groups:
            joins.append(joining(table(EXCESS, "e"), kind="CROSS"))
        read = "g" if excess_in_groups else "e"
        noisy.extend(
            named(_excess_noise(plan, functions, column(e, read)), e) for e in _excess_names(plan)
        )
    where = None
    if plan.partition is not None:
        p = plan.partition
        where = call(
            functions.keep,
            column("__units", "g"),
            number(p.max_groups),
            double(p.epsilon),
            double(p.delta),
        )
    return select([*items, *noisy], source, joins=joins, where=where)


def _uses_groups(plan: Plan) -> bool:
    """Whether anything reads ``__groups``: a Laplace measurement or partition selection."""
    return plan.partition is not None or any(m.kind != "histogram" for m in plan.measurements)


def _domains(plan: Plan, keys: list[str]) -> dict[str, exp.Query]:
    """The public values of every key, when all keys have them and so stand for the groups."""
    if not keys or plan.partition is not None:
        return {}
    return {
        f"__domain{i}": select([column(k)], derived(key.domain.copy(), f"d{i}", [k]))
        for i, (key, k) in enumerate(zip(plan.analysis.keys, keys, strict=True))
        if key.domain is not None
    }


def _release(
    plan: Plan,
    m: Measurement,
    measured: dict[str, str],
    histogram: dict[str, int],
    functions: Functions,
) -> exp.Expr:
    """One measurement, released by the function its kind calls for."""
    epsilon = double(m.epsilon)
    sensitivity = huge(number(plan.sensitivity(m)))
    if m.quantile is not None:
        p, low, high = m.quantile
        h = f"h{histogram[m.name]}"
        value = call(
            functions.quantile,
            column("__buckets", h),
            column("__weights", h),
            double(p),
            double(low),
            double(high),
            number(BUCKETS),
            epsilon,
            double(m.interval_epsilon),
            sensitivity,
        )
        return named(value, m.name)
    exact = huge(coalesce(column(measured[m.name], "g"), number(0)))
    return named(call(functions.noise, exact, sensitivity, epsilon), m.name)


def _post_processing(plan: Plan, keys: list[str]) -> exp.Select:
    """The analyst's SELECT, HAVING, ORDER BY and LIMIT over released values only.

    Rows come out in an order decided by released values alone: the analyst's ORDER BY,
    then the group keys. The engine's own order is not: a key list's groups that no unit
    holds left the domain's join after those some unit holds, so the order of a listed
    key (and which rows a LIMIT kept) told whether any unit was in its group."""
    analysis = plan.analysis
    statistics = {to_sql(s.aggregate.node): s.expression for s in plan.statistics}
    key_columns = {to_sql(k.expression): n for k, n in zip(analysis.keys, keys, strict=True)}
    aliases = {s.alias.lower(): s.unalias() for s in analysis.select.expressions if s.alias}

    def released(node: exp.Expr) -> exp.Expr:
        text = to_sql(node)
        if text in statistics:
            return statistics[text].copy()
        if text in key_columns:
            return exp.column(key_columns[text])
        return node

    def resolve_aliases(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases:
            return aliases[node.name.lower()].copy()
        return node

    outputs = [
        exp.alias_(item.unalias().transform(released), output_name(item), quoted=True)
        for item in analysis.select.expressions
    ]
    query = exp.Select(
        expressions=[
            *outputs,
            *_support_columns(plan),
            *(
                exp.alias_(exp.column(level(CUT_COLUMN, i)), level(CUT_SUPPORT, i), quoted=True)
                for i in range(plan.cut_levels)
            ),
            *(
                exp.alias_(exp.column(e), level(EXCESS_SUPPORT, i), quoted=True)
                for i, e in enumerate(_excess_names(plan) if plan.excess_epsilon else ())
            ),
        ],
        from_=exp.From(this=exp.Table(this=exp.to_identifier("__released"))),
    )
    having = analysis.select.args.get("having")
    if having is not None:
        query = query.where(
            having.this.transform(resolve_aliases).transform(released, copy=False), copy=False
        )
    written = analysis.select.args.get("order")
    order = [o.transform(released) for o in written.expressions] if written is not None else []
    order += [exp.Ordered(this=column(k, RELEASED), nulls_first=False) for k in keys]
    if order:
        query.set("order", exp.Order(expressions=order))
    for arg in ("limit", "offset"):
        if analysis.select.args.get(arg) is not None:
            query.set(arg, analysis.select.args[arg].copy())
    return query


def _selected(final: exp.Select) -> Selection | None:
    """``final`` as a ``Selection`` (``Stages.selected``) when it only selects, orders by
    released columns ascending with NULLs last, and keeps a window given by whole numbers;
    else None."""
    if any(v for a, v in final.args.items() if a not in ("expressions", "from_", *WINDOW)):
        return None  # a filter, DISTINCT, grouping: not only a selection
    found = []
    for item in final.expressions:
        if not isinstance(item, exp.Alias):
            return None
        value, bigint = item.this, False
        if isinstance(value, exp.TryCast) and value.to.this == exp.DType.BIGINT:
            value, bigint = value.this, True
        if not (isinstance(value, exp.Column) and not value.table):
            return None
        found.append(Selected(item.alias, value.name, bigint))
    order = final.args.get("order")
    terms = order.expressions if order is not None else []
    if not all(_ascending_nulls_last(term) for term in terms):
        return None
    window = _window(final)
    if window is None:
        return None
    return Selection(tuple(found), tuple(t.this.name for t in terms), *window)


WINDOW = ("order", "limit", "offset")
"""The parts of a post-processing a ``Selection`` may have besides its outputs."""


def _ascending_nulls_last(term: exp.Ordered) -> bool:
    """Whether ``term`` orders by a released column, ascending, NULLs last."""
    column = term.this
    return (
        isinstance(column, exp.Column)
        and column.table == RELEASED
        and not term.args.get("desc")
        and term.args.get("nulls_first") is False
    )


def _window(final: exp.Select) -> tuple[int, int | None] | None:
    """The rows ``final``'s OFFSET skips and its LIMIT keeps (0 and None without them), or
    None where either is not a plain whole number (a percentage, an expression, ties)."""
    found = []
    for arg in ("offset", "limit"):
        clause = final.args.get(arg)
        if clause is None:
            found.append(None)
            continue
        number = clause.args.get("expression")
        plain = {k for k, v in clause.args.items() if v} == {"expression"}
        if not (plain and isinstance(number, exp.Literal) and number.is_int):
            return None
        found.append(int(number.this))  # a literal is never negative: -1 is a Neg
    offset, limit = found
    return offset or 0, limit


SUPPORT_PREFIX = "__privsql_"
"""Hidden output columns: the noisy parts behind an output, for its interval."""

CUT_SUPPORT = f"{SUPPORT_PREFIX}cut"
"""The hidden output column carrying each row's noisy count of cut cells (one per row cap:
``sqlbuild.level``)."""

EXCESS_SUPPORT = f"{SUPPORT_PREFIX}excess"
"""The hidden output column carrying, in every row, the noisy ``__excess`` (the same value;
one per row cap)."""


def support_name(role: str, output: str) -> str:
    """The hidden column holding part ``role`` of output ``output``'s statistic."""
    return f"{SUPPORT_PREFIX}{role}_{output}"


def _support_columns(plan: Plan) -> list[exp.Expr]:
    """The noisy parts behind each output that is an AVG, VARIANCE, STDDEV or quantile."""
    measurements = {m.name: m for m in plan.measurements}
    statistics = {to_sql(s.aggregate.node): s for s in plan.statistics}
    return [
        exp.alias_(value, support_name(role, output_name(item)), quoted=True)
        for item in plan.analysis.select.expressions
        if (statistic := statistics.get(to_sql(item.unalias()))) is not None
        for role, value in _support(statistic, [measurements[n] for n in statistic.measurements])
    ]


def _support(statistic: Statistic, parts: list[Measurement]) -> list[tuple[str, exp.Expr]]:
    """An AVG's noisy count ``n`` (in rows, whatever the weighting); a spread's sums ``s1``,
    ``s2`` and count ``n``; a quantile's interval ``lower`` and ``upper``."""
    if SPECS[statistic.aggregate.kind].form == Form.MEAN:
        return [("n", scaled(parts[1]))]
    if statistic.spread is not None:
        return [(role, scaled(m)) for role, m in zip(("s1", "s2", "n"), parts, strict=True)]
    if parts[0].quantile is not None:
        column = exp.column(parts[0].name)
        return [
            (end, exp.StructExtract(this=column.copy(), expression=exp.Literal.string(end)))
            for end in ("lower", "upper")
        ]
    return []
