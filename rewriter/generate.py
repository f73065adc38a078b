"""Generation: the plan as one set-based DuckDB statement.

The statement bounds contributions (AKMV19 sample limiting), aggregates per group,
hands each exact measurement to the release functions the caller names, and runs
the analyst's post-processing (output arithmetic, HAVING, ORDER BY, LIMIT) on the
released values only. Its stages, as CTEs:

``source``   one line per private row: unit, keys, gridded values (NULL units dropped)
``cells``    per (unit, group): row count and sums                 — one pass, no sort
``chosen``   at most ``m`` groups per unit, by a keyed hash of (unit, key)
``bounded``  at most ``k`` rows per (unit, group): cells with ≤ k rows pass whole;
             only cells with > k rows re-read their rows and keep the k with the
             smallest keyed hash of the row's content (ties broken by content), so
             what one unit keeps depends on its own rows only (PERFORMANCE.md)
``groups``   per group: distinct units, rows, sums
``cuts``     per group: how many cells bounding cut — kept cells over the row cap,
             and each unit's cells dropped by the group cap (all of them under listed
             keys, else a keyed sample of ``m``: the next ``m`` in ``chosen``'s order)
``released`` noise added and keys selected, materialised so each noisy value is
             drawn once however often the post-processing reads it

The rewriter knows nothing of the noise: ``noise(value, sensitivity, epsilon)``,
``keep(units, max_groups, epsilon, delta)`` and ``quantile(buckets, weights, p, low, high,
buckets_count, epsilon, interval_epsilon, unit_weight)`` (a struct of ``value``, ``lower`` and
``upper``) are names the caller registers. A quantile's
histogram (``__hist*``: per group, the sparse weighted count of each value bucket over the
kept rows) is a bounded summary: at most BUCKETS numbers per group reach the function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from rewriter.aggregates import SPECS, Form
from rewriter.analyze import Analysis
from rewriter.dialect import output_name, to_sql
from rewriter.plan import BUCKETS, Measurement, Plan, Statistic, scaled
from rewriter.relations import PRIVATE_BODY
from rewriter.strategies import STRATEGIES

SECRET = "$privsql_secret"
"""The statement's parameter carrying the database's hashing secret."""


@dataclass(frozen=True)
class Functions:
    """Names of the release functions registered in the engine."""

    noise: str
    keep: str
    quantile: str
    check: str | None = None
    """Releases the bounding check's counts (like ``noise``; ``noise`` itself when None)."""


def _sql(node: exp.Expr) -> str:
    return node.sql(dialect="duckdb")


def _list(names: Sequence[str], prefix: str = "") -> str:
    return ", ".join(f"{prefix}{n}" for n in names)


@dataclass(frozen=True)
class _Layout:
    """Column names of the generated statement: keys, per-row values and their cell sums."""

    keys: list[str]
    valued: list[Measurement]
    values: list[str]
    sums: list[str]
    histograms: list[Measurement]

    @classmethod
    def of(cls, plan: Plan) -> _Layout:
        valued = [m for m in plan.measurements if m.value is not None and m.kind != "histogram"]
        return cls(
            keys=[f"__k{i}" for i in range(len(plan.analysis.keys))],
            valued=valued,
            values=[f"__v{i}" for i in range(len(valued))],
            sums=[f"__s{i}" for i in range(len(valued))],
            histograms=[m for m in plan.measurements if m.kind == "histogram"],
        )

    @property
    def buckets(self) -> list[str]:
        return [f"__b{i}" for i in range(len(self.histograms))]

    @property
    def cell(self) -> list[str]:
        return ["__unit", *self.keys]


def _common(plan: Plan, layout: _Layout) -> dict[str, str]:
    """The stages every statement shares: rows, cells, and the groups each unit keeps."""
    return {
        "__source": _rows(
            plan.analysis,
            layout.keys,
            [m.value for m in [*layout.valued, *layout.histograms]],
            [*layout.values, *layout.buckets],
        ),
        "__cells": _cells(layout.keys, layout.values, layout.sums),
        "__chosen": _chosen(plan, layout),
    }


def _with(ctes: dict[str, str]) -> str:
    return "WITH " + ",\n".join(
        f"{name} AS{' MATERIALIZED' if name == RELEASED else ''} (\n{sql}\n)"
        for name, sql in ctes.items()
    )


RELEASED = "__released"
"""The CTE holding the noisy values, materialised so each is drawn once however often the
post-processing reads it."""


@dataclass(frozen=True)
class Stages:
    """The private query in two parts that meet at a few aggregated relations.

    ``aggregation`` (CTEs) reads the private rows and ends in the relations ``outputs``
    names: per-group exact aggregates (``__groups``), per-group bucket counts of each
    quantile (``__counts*``) and the keys' public domains (``__domain*``) — bounded by the
    number of groups, never rows. ``release`` (CTEs, then ``final``) reads only those:
    noise, partition selection and the analyst's post-processing. One engine may run both
    as one statement (``generate``); another may run the aggregation where the data is and
    the release where privsql's noise functions are, with the same result.
    """

    aggregation: dict[str, str]
    outputs: tuple[str, ...]
    release: dict[str, str]
    final: str

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


def stages(plan: Plan, functions: Functions) -> Stages:
    """The private query, split where its relations stop holding rows."""
    layout = _Layout.of(plan)
    ctes = _common(plan, layout)
    grouped = _uses_groups(plan)
    if grouped:
        ctes["__bounded"] = BOUNDING[plan.bounding.strategy](plan, layout)
        ctes["__groups"] = _groups(layout.keys, layout.sums)
    ctes.update(_histograms(plan, layout))
    ctes[CUTS] = _cuts_per_group(plan, layout)
    domains = _domains(plan, layout.keys)
    ctes.update(domains)
    counts = tuple(f"__counts{i}" for i in range(len(layout.histograms)))
    outputs = (*(("__groups",) if grouped else ()), *counts, CUTS, *domains)
    columns = _measured_columns(plan.measurements, layout.sums)
    release = _histogram_lists(layout)
    release[RELEASED] = _released(plan, layout, columns, functions)
    return Stages(ctes, outputs, release, _post_processing(plan, layout.keys))


def generate(plan: Plan, functions: Functions) -> str:
    """The whole private query as DuckDB SQL (one statement, parameter ``$privsql_secret``)."""
    return stages(plan, functions).statement()


def threshold_sql(plan: Plan) -> str:
    """Rows, one per size of a unit's largest kept cell: ``false``, that number of rows, how
    many units have it, then, for each AVG under EMMMR20's rule (``Plan.mean_sums``), the
    total of those units' rounded mean centred values; when MAX_GROUPS is above 1, also one
    row per size of a kept cell: ``true``, that number of rows and how many cells have it
    (the rank rule counts cells). ``compiler.threshold_search`` folds them with
    ``size_summary`` into the counts over each candidate cap.

    This is the only input of an AUTO threshold search: per-unit aggregates, never rows.
    Adding or removing a unit moves each unit count by at most one, each cell count by at
    most MAX_GROUPS and each total by at most the largest centred value (the mean's bound).
    The sizes are few — distinct sizes summing to at most the number of rows, so fewer than
    √(2·rows) — and one grouped statement costs the engine far less to plan than one
    aggregate per candidate.
    """
    layout = _Layout.of(plan)
    means = [
        f"round(sum({layout.sums[layout.valued.index(total)]}) / "
        f"nullif(sum({layout.sums[layout.valued.index(count)]}), 0))::HUGEINT AS __mean{i}"
        for i, (total, count) in enumerate(plan.mean_sums)
    ]
    largest = (
        f"SELECT __unit, max(__rows) AS __size{''.join(', ' + m for m in means)} "
        "FROM __chosen GROUP BY __unit"
    )
    totals = "".join(f", sum(__mean{i}) AS __total{i}" for i in range(len(means)))
    summary = f"SELECT false, __size, count(*) AS __units{totals} FROM ({largest}) GROUP BY __size"
    if plan.bounding.groups > 1:
        none = "".join(f", NULL AS __total{i}" for i in range(len(means)))
        summary += f"\nUNION ALL SELECT true, __rows, count(*){none} FROM __chosen GROUP BY __rows"
    return f"{_with(_common(plan, layout))}\n{summary}"


def size_summary(
    rows: Sequence[Sequence[object]], candidates: Sequence[int], totals: int = 0
) -> tuple[int, ...]:
    """Rows of (size, units, ``totals`` totals) (``threshold_sql``, ``groups_sql``) as one
    summary: the number of units, how many have a size above each candidate, then for each
    total its sum over all units and over the units with a size above each candidate — what
    one aggregate per candidate (``count(*) FILTER (WHERE size > c)``) would return."""
    sizes = [(int(row[0]), int(row[1]), [int(t or 0) for t in row[2:]]) for row in rows]
    summary = [sum(units for _, units, _ in sizes)]
    summary += [sum(units for size, units, _ in sizes if size > c) for c in candidates]
    for i in range(totals):
        summary.append(sum(totals[i] for _, _, totals in sizes))
        summary += [sum(totals[i] for size, _, totals in sizes if size > c) for c in candidates]
    return tuple(summary)


def groups_sql(plan: Plan) -> str:
    """Rows, one per number of groups a unit touches: that number and how many units touch
    it (``size_summary`` folds them into how many touch more than each candidate) — the
    only input of MAX_GROUPS AUTO (per-unit counts, never rows; adding or removing a unit
    moves each count by at most one)."""
    layout = _Layout.of(plan)
    common = _common(plan, layout)
    ctes = {name: common[name] for name in ("__source", "__cells")}
    touched = "SELECT __unit, count(*) AS __size FROM __cells GROUP BY __unit"
    return f"{_with(ctes)}\nSELECT __size, count(*) AS __units FROM ({touched}) GROUP BY __size"


def bounds_sql(
    analysis: Analysis, arguments: Sequence[exp.Expr], magnitudes: Sequence[float]
) -> str:
    """One row: for each argument and magnitude c, how many units have a value above c,
    then how many have one below −c (each unit counts at most once per number).

    The input of a private bounds estimate: per-unit extremes, never rows.
    """
    values = [f"__x{i}" for i in range(len(arguments))]
    numbers = [
        exp.Case(
            ifs=[exp.If(this=exp.func("isnan", _double_of(a)), true=exp.null())],
            default=_double_of(a),
        )
        for a in arguments
    ]
    extremes = ", ".join(f"max({v}) AS __hi{i}, min({v}) AS __lo{i}" for i, v in enumerate(values))
    counts = ", ".join(
        f"count(*) FILTER (WHERE __{side}{i} {op} {sign}{c!r})"
        for i in range(len(values))
        for side, op, sign in (("hi", ">", ""), ("lo", "<", "-"))
        for c in magnitudes
    )
    source = _rows(analysis, [], numbers, values)
    return (
        f"WITH __source AS (\n{source}\n),\n__extremes AS (SELECT {extremes} FROM __source "
        f"GROUP BY __unit)\nSELECT {counts} FROM __extremes"
    )


def _double_of(argument: exp.Expr) -> exp.Expr:
    return exp.TryCast(this=argument.copy(), to=exp.DataType.build("DOUBLE"))


def _rows(analysis: Analysis, keys: list[str], row_values: list, values: list[str]) -> str:
    query = analysis.select.copy()
    for arg in ("group", "having", "order", "limit", "offset"):
        query.set(arg, None)
    projection = [exp.alias_(_never_raise(analysis.unit), "__unit")]
    projection += [
        exp.alias_(_never_raise(k.expression), n)
        for k, n in zip(analysis.keys if keys else (), keys, strict=True)
    ]
    projection += [exp.alias_(_never_raise(v), n) for v, n in zip(row_values, values, strict=True)]
    query.set("expressions", projection)
    kept = exp.Not(this=exp.Is(this=analysis.unit.copy(), expression=exp.null()))
    _guard_rows(query, kept)
    for body in [q for q in query.find_all(exp.Select) if q.meta.get(PRIVATE_BODY)]:
        body.set("expressions", [_never_raise_named(e) for e in body.expressions])
        _guard_rows(body)
    return _sql(query)


def _guard_rows(query: exp.Select, kept: exp.Expr | None = None) -> None:
    """Guard a SELECT's WHERE and join conditions over private rows (see ``_never_raise``)."""
    where = query.args.get("where")
    condition = _condition(where.this) if where is not None else None
    if kept is not None:
        condition = exp.and_(condition, kept) if condition is not None else kept
    if condition is not None:
        query.set("where", exp.Where(this=condition))
    for join in query.args.get("joins") or []:
        if join.args.get("on") is not None:
            join.set("on", _condition(join.args["on"]))


def _condition(node: exp.Expr) -> exp.Expr:
    """A guarded condition, made BOOLEAN inside the guard: a condition of another type (a
    VARCHAR ``CASE``, a column) would otherwise be cast to BOOLEAN by the engine outside
    ``TRY``, and fail on one value ('x' is no BOOLEAN)."""
    return exp.TryCast(this=_never_raise(node), to=exp.DataType.build("BOOLEAN"))


def _never_raise_named(item: exp.Expr) -> exp.Expr:
    """A select item of a derived table over private rows, guarded, under the same name."""
    if isinstance(item, (exp.Column, exp.Star)):
        return item.copy()
    value = item.unalias()
    guarded = (
        _aggregate_never_raises(value) if isinstance(value, exp.AggFunc) else _never_raise(value)
    )
    return exp.alias_(guarded, output_name(item), quoted=True)


def _aggregate_never_raises(node: exp.AggFunc) -> exp.Expr:
    """A per-unit aggregate (``PER_UNIT_AGGREGATES``) that no value can make fail: its
    arguments guarded, SUM and AVG taken in DOUBLE (±inf where an integer sum overflows),
    COUNT_IF, BOOL_AND and BOOL_OR over BOOLEANs cast inside the guard."""
    kind = (
        "DOUBLE"
        if isinstance(node, (exp.Sum, exp.Avg))
        else "BOOLEAN"
        if isinstance(node, (exp.CountIf, exp.LogicalAnd, exp.LogicalOr))
        else None
    )

    def guard(argument: exp.Expr) -> exp.Expr:
        if isinstance(argument, exp.Star):
            return argument.copy()
        if isinstance(argument, exp.Distinct):
            return exp.Distinct(expressions=[guard(e) for e in argument.expressions])
        guarded = _never_raise(argument)
        return exp.TryCast(this=guarded, to=exp.DataType.build(kind)) if kind else guarded

    return _map_arguments(node, guard)


def _never_raise(node: exp.Expr) -> exp.Expr:
    """A row-level expression that yields NULL where it would raise.

    DuckDB's TRY turns a failing CAST, regular expression or overflow into NULL, so
    whether a query succeeds, and the message it fails with, cannot depend on a private
    value (a NULL condition drops the row, like SQL). Literals and columns cannot fail;
    subqueries read only public data (private sources are refused there).
    """
    if isinstance(node, (exp.Column, exp.Literal, exp.Query)):
        return node.copy()
    if not any(node.find_all(exp.Query)):
        return exp.func("try", node.copy())
    # TRY cannot hold a subquery (which reads only public data): guard the rest around it.
    return _map_arguments(node, _never_raise)


def _map_arguments(node: exp.Expr, function: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """A copy of ``node`` whose argument expressions are ``function`` of the originals."""
    mapped = node.copy()
    for key, value in node.args.items():
        if isinstance(value, exp.Expr):
            mapped.set(key, function(value))
        elif isinstance(value, list):
            mapped.set(key, [function(v) if isinstance(v, exp.Expr) else v for v in value])
    return mapped


def _cells(keys: list[str], values: list[str], sums: list[str]) -> str:
    group = _list(["__unit", *keys])
    aggregates = "".join(f", sum({v}) AS {s}" for v, s in zip(values, sums, strict=True))
    return f"SELECT {group}, count(*) AS __rows{aggregates} FROM __source GROUP BY {group}"


def _chosen(plan: Plan, layout: _Layout) -> str:
    """At most MAX_GROUPS cells per unit: units touching no more keep all theirs; only the
    cells of units over the cap are ranked, by keyed hash of (unit, key)."""
    if not plan.groups_may_exceed_cap:
        return "SELECT * FROM __cells"
    cap = plan.bounding.groups
    columns = _list([*layout.cell, "__rows", *layout.sums], "c.")
    order = _group_order(layout)
    return (
        "SELECT c.* FROM __cells AS c JOIN (SELECT __unit, count(*) AS __groups FROM __cells "
        f"GROUP BY __unit) AS u ON c.__unit = u.__unit WHERE u.__groups <= {cap}\n"
        "UNION ALL\n"
        f"SELECT {columns} FROM __cells AS c SEMI JOIN (SELECT __unit FROM __cells GROUP BY __unit "
        f"HAVING count(*) > {cap}) AS u ON c.__unit = u.__unit "
        f"QUALIFY row_number() OVER (PARTITION BY c.__unit ORDER BY {order}) <= {cap}"
    )


def _group_order(layout: _Layout) -> str:
    """The group cap's order among a unit's cells: keyed hash of (unit, key), ties by key."""
    keys = layout.keys
    return f"hash({SECRET}, c.__unit, {_list(keys, 'c.')}), {_list(keys, 'c.')}"


CUTS = "__cuts"
"""The CTE counting, per group, the cells bounding cut."""

CUT_COLUMN = "__cut"
"""The released (noisy) count of cut cells of each group."""


def _cuts_per_group(plan: Plan, layout: _Layout) -> str:
    """Per group: kept cells over the smallest row cap, plus the dropped cells of a unit
    over the group cap whose rank in ``chosen``'s order is in (m, m + s], s =
    ``Plan.dropped_sample`` (all of them under listed keys, else a keyed sample of m), so
    one unit adds at most 1 per group and ``Plan.cut_sensitivity`` over all groups."""
    keys, cap = layout.keys, plan.bounding.groups
    selected = _list(keys) + ", " if keys else ""
    parts = []
    if plan.row_cap is not None and _uses_groups(plan):  # counted by __groups
        parts.append(f"SELECT {selected}{CUT_COLUMN} FROM __groups")
    elif plan.row_cap is not None:
        parts.append(
            f"SELECT {selected}1 AS {CUT_COLUMN} FROM __chosen WHERE __rows > {plan.row_cap}"
        )
    if plan.groups_may_exceed_cap:
        parts.append(
            f"SELECT {selected}1 FROM (SELECT c.* FROM __cells AS c SEMI JOIN (SELECT __unit "
            f"FROM __cells GROUP BY __unit HAVING count(*) > {cap}) AS u ON c.__unit = u.__unit "
            f"QUALIFY row_number() OVER (PARTITION BY c.__unit ORDER BY {_group_order(layout)}) "
            f"BETWEEN {cap + 1} AND {cap + plan.dropped_sample})"
        )
    if len(parts) == 1 and parts[0].endswith("FROM __groups"):
        return parts[0]
    empty = f"SELECT {selected}0 AS {CUT_COLUMN} FROM __cells WHERE FALSE"
    cut = "\nUNION ALL\n".join(parts) or empty
    by = f" GROUP BY {_list(keys)}" if keys else ""
    return f"SELECT {selected}sum({CUT_COLUMN}) AS {CUT_COLUMN} FROM ({cut}){by}"


def _same_cell(keys: list[str], left: str, right: str) -> str:
    pairs = [f"{left}.__unit = {right}.__unit"]
    pairs += [f"{left}.{k} IS NOT DISTINCT FROM {right}.{k}" for k in keys]
    return " AND ".join(pairs)


def _rows_bounded(plan: Plan, layout: _Layout) -> str:
    """AKMV19 sample limiting: at most k rows per cell, the k smallest by keyed hash."""
    cap, cell = plan.bounding.cap, layout.cell
    if not plan.needs_rows:
        return f"SELECT {_list(cell)}, least(__rows, {cap}) AS __rows, {_over(plan)} FROM __chosen"
    whole = (
        f"SELECT {_list([*cell, '__rows', *layout.sums])}, {_over(plan)} FROM __chosen "
        f"WHERE __rows <= {cap}"
    )
    ranked = _ranked_rows(plan, layout)
    sums = "".join(f", sum({v}) AS {s}" for v, s in zip(layout.values, layout.sums, strict=True))
    capped = (
        f"SELECT {_list(cell)}, count(*) AS __rows{sums}, TRUE AS {OVER} FROM ({ranked}) "
        f"GROUP BY {_list(cell)}"
    )
    return f"{whole}\nUNION ALL\n{capped}"


OVER = "__over"
"""The column of ``__bounded`` saying a kept cell had more rows than the smallest row cap
(a cell bounding cut): ``__groups`` counts them, so the check reads no cell again."""


def _over(plan: Plan) -> str:
    """``__over`` of a kept cell of ``__chosen`` (FALSE when no measurement reads rows)."""
    return f"{'FALSE' if plan.row_cap is None else f'__rows > {plan.row_cap}'} AS {OVER}"


def _ranked_rows(plan: Plan, layout: _Layout) -> str:
    """The rows kept from cells of more than k rows: the k smallest by keyed content hash."""
    cap, cell = plan.bounding.cap, layout.cell
    content = _list([*cell, *layout.values, *layout.buckets], "r.")
    return (
        f"SELECT {content} FROM __source AS r SEMI JOIN (SELECT {_list(cell)} FROM __chosen "
        f"WHERE __rows > {cap}) AS c ON {_same_cell(layout.keys, 'r', 'c')} "
        f"QUALIFY row_number() OVER (PARTITION BY {_list(cell, 'r.')} "
        f"ORDER BY {_row_order(layout)}) <= {cap}"
    )


def _row_order(layout: _Layout) -> str:
    """Sample limiting's order inside a cell: keyed hash of the row's content, ties by content."""
    columns = [*layout.values, *layout.buckets]
    content = _list([*layout.cell, *columns], "r.")
    return f"hash({SECRET}, {content}), {_list(columns, 'r.') or 'r.__unit'}"


def _weights_bounded(plan: Plan, layout: _Layout) -> str:
    """EMMMR20 weighted averaging: a cell of s rows weighs each row min(1, h/s).

    Per cell that is ``least(s, h)`` rows and ``sum · min(1, h/s)`` on a 2**-W weight
    grid (floor division keeps |weighted| <= h·bound·2**W exactly); no row is re-read.
    """
    weighted = "".join(
        f", CASE WHEN __rows <= {plan.cap(m)} THEN CAST({s} AS HUGEINT) * {1 << m.weight_bits} "
        f"ELSE CAST({s} AS HUGEINT) * {plan.cap(m) << m.weight_bits} // __rows END AS {s}"
        for m, s in zip(layout.valued, layout.sums, strict=True)
    )
    counted = [m for m in plan.measurements if m.kind == "rows"] or [
        m for m in plan.measurements if m.kind != "units"
    ]
    rows = f"least(__rows, {plan.cap(counted[0])})" if counted else "__rows"
    return f"SELECT {_list(layout.cell)}, {rows} AS __rows{weighted}, {_over(plan)} FROM __chosen"


def _clip_bounded(plan: Plan, layout: _Layout) -> str:
    """RT24 Theorem III.1 clipping: a cell of s rows clips centred values to ±R·n/s.

    Cells with at most n rows pass whole; larger cells re-read their rows, clip each
    centred value to ±floor(R·n/s) half-steps (R the column's range), so the cell's
    centred sum stays within R·n = T, and count at most n rows.
    """
    cap, cell = plan.bounding.cap, layout.cell
    whole = (
        f"SELECT {_list([*cell, '__rows', *layout.sums])}, {_over(plan)} FROM __chosen "
        f"WHERE __rows <= {cap}"
    )
    widths = "".join(f", {m.bound * cap} // __rows AS __w{i}" for i, m in enumerate(layout.valued))
    parts = []
    for i, (m, v, s) in enumerate(zip(layout.valued, layout.values, layout.sums, strict=True)):
        if m.kind == "centred":
            parts.append(f", sum(greatest(least(r.{v}, c.__w{i}), -c.__w{i})) AS {s}")
        else:
            parts.append(f", least(sum(r.{v}), {cap}) AS {s}")
    clipped = (
        f"SELECT {_list(cell, 'r.')}, least(count(*), {cap}) AS __rows{''.join(parts)}, "
        f"TRUE AS {OVER} "
        f"FROM __source AS r JOIN (SELECT {_list(cell)}{widths} FROM __chosen "
        f"WHERE __rows > {cap}) AS c ON {_same_cell(layout.keys, 'r', 'c')} "
        f"GROUP BY {_list(cell, 'r.')}"
    )
    return f"{whole}\nUNION ALL\n{clipped}"


BOUNDING = {"ROWS": _rows_bounded, "WEIGHTS": _weights_bounded, "CLIP": _clip_bounded}
"""The ``__bounded`` stage of each strategy."""


def _histograms(plan: Plan, layout: _Layout) -> dict[str, str]:
    """Per group and quantile: the kept values' weight in each bucket.

    Every row counts ``2**W`` in its bucket, less what bounding cuts from the few cells it
    trims (:func:`_cuts`): the big aggregation is over (group, bucket) only, and only the
    rows of trimmed cells are read a second time (PERFORMANCE.md's fast shape).
    """
    keys = layout.keys
    ctes = {}
    for i, (m, bucket) in enumerate(zip(layout.histograms, layout.buckets, strict=True)):
        by = _list([*keys, bucket])
        every = (
            f"SELECT {by}, count(*) AS __n FROM __source WHERE {bucket} IS NOT NULL GROUP BY {by}"
        )
        same = " AND ".join([f"a.{bucket} = c.{bucket}", _same_keys(keys, "a", "c")])
        weights = (
            f"SELECT {_list(keys, 'a.') + ', ' if keys else ''}a.{bucket} AS __bucket, "
            f"CAST(a.__n AS HUGEINT) * {1 << m.weight_bits} - coalesce(c.__cut, 0) AS __weight "
            f"FROM ({every}) AS a LEFT JOIN ({_cuts(plan, layout, m, bucket)}) AS c ON {same}"
        )
        ctes[f"__counts{i}"] = weights
    return ctes


def _cuts(plan: Plan, layout: _Layout, m: Measurement, bucket: str) -> str:
    """Per (group, bucket): the weight bounding takes from the rows of trimmed cells.

    Trimmed cells are those over the cap, and those the group cap drops (all their rows
    go). ROWS drops the rows past the k smallest keyed content hashes (the ranking
    :func:`_ranked_rows` uses); WEIGHTS keeps floor(h·2**W/s) of each row's 2**W.
    """
    cap, cell, keys = plan.cap(m), layout.cell, layout.keys
    trimmed = f"SELECT {_list(cell)}, __rows, TRUE AS __chosen FROM __chosen WHERE __rows > {cap}"
    if plan.groups_may_exceed_cap:
        trimmed += (
            f"\nUNION ALL\nSELECT {_list(cell, 'c.')}, c.__rows, FALSE FROM __cells AS c "
            f"ANTI JOIN __chosen AS h ON {_same_cell(keys, 'c', 'h')}"
        )
    joined = f"FROM __source AS r JOIN ({trimmed}) AS c ON {_same_cell(keys, 'r', 'c')}"
    by = _list([*keys, bucket])
    if not STRATEGIES[plan.bounding.strategy].rereads_rows:  # weights: a share of each row
        full = 1 << m.weight_bits
        return (
            f"SELECT {_list([*keys, bucket], 'r.')}, sum(CASE WHEN c.__chosen THEN "
            f"{full} - {cap * full} // c.__rows ELSE {full} END) AS __cut {joined} "
            f"WHERE r.{bucket} IS NOT NULL GROUP BY {_list([*keys, bucket], 'r.')}"
        )
    ranked = (
        f"SELECT {_list([*keys, bucket], 'r.')}, c.__chosen, row_number() OVER (PARTITION BY "
        f"{_list(cell, 'r.')} ORDER BY {_row_order(layout)}) AS __rank {joined}"
    )
    return (
        f"SELECT {by}, count(*) AS __cut FROM ({ranked}) WHERE {bucket} IS NOT NULL "
        f"AND (NOT __chosen OR __rank > {cap}) GROUP BY {by}"
    )


def _histogram_lists(layout: _Layout) -> dict[str, str]:
    """Each quantile's bucket counts per group as two parallel lists, in bucket order."""
    keys = layout.keys
    group_by = f" GROUP BY {_list(keys)}" if keys else ""
    return {
        f"__hist{i}": (
            f"SELECT {_list(keys) + ', ' if keys else ''}list(__bucket ORDER BY __bucket) AS "
            f"__buckets, list(CAST(__weight AS HUGEINT) ORDER BY __bucket) AS __weights "
            f"FROM __counts{i}{group_by}"
        )
        for i in range(len(layout.histograms))
    }


def _groups(keys: list[str], sums: list[str]) -> str:
    aggregates = "".join(f", sum({s}) AS {s}" for s in sums)
    select = f"SELECT {_list(keys) + ', ' if keys else ''}count(*) AS __units, "
    select += f"sum(__rows) AS __rows{aggregates}, count(*) FILTER (WHERE {OVER}) AS {CUT_COLUMN} "
    select += "FROM __bounded"
    return select + (f" GROUP BY {_list(keys)}" if keys else "")


def _measured_columns(measurements: Sequence[Measurement], sums: list[str]) -> dict[str, str]:
    """Which column of ``__groups`` each measurement perturbs."""
    columns = {}
    next_sum = iter(sums)
    for m in measurements:
        if m.kind == "histogram":
            continue
        columns[m.name] = next(next_sum) if m.value is not None else f"__{m.kind}"
    return columns


def _released(plan: Plan, layout: _Layout, columns: dict[str, str], functions: Functions) -> str:
    keys = layout.keys
    histogram = {m.name: i for i, m in enumerate(layout.histograms)}
    noisy = ", ".join(_release(plan, m, columns, histogram, functions) for m in plan.measurements)
    noisy += (
        f", {functions.check or functions.noise}(CAST(coalesce(x.__cut, 0) AS HUGEINT), "
        f"CAST({plan.cut_sensitivity} AS HUGEINT), CAST('{plan.cut_epsilon!r}' AS DOUBLE)) "
        f"AS {CUT_COLUMN}"
    )
    grouped = _uses_groups(plan)
    if keys and plan.partition is None:
        domain = " CROSS JOIN ".join(_domains(plan, keys))
        select = f"SELECT {_list(keys, 'd.')}, {noisy} FROM (SELECT * FROM {domain}) AS d"
        if grouped:
            select += f" LEFT JOIN __groups AS g ON {_same_keys(keys, 'd', 'g')}"
        outer = "d"
    elif grouped:
        select = f"SELECT {_list(keys, 'g.') + ', ' if keys else ''}{noisy} FROM __groups AS g"
        outer = "g"
    else:  # quantiles only, no keys: one row
        select = f"SELECT {noisy} FROM (SELECT 1) AS g"
        outer = "g"
    for i in range(len(layout.histograms)):
        select += f" LEFT JOIN __hist{i} AS h{i} ON {_same_keys(keys, outer, f'h{i}')}"
    select += f" LEFT JOIN {CUTS} AS x ON {_same_keys(keys, outer, 'x')}"
    if plan.partition is not None:
        p = plan.partition
        select += (
            f" WHERE {functions.keep}(g.__units, {p.max_groups}, "
            f"CAST('{p.epsilon!r}' AS DOUBLE), CAST('{p.delta!r}' AS DOUBLE))"
        )
    return select


def _uses_groups(plan: Plan) -> bool:
    """Whether anything reads ``__groups``: a Laplace measurement or partition selection."""
    return plan.partition is not None or any(m.kind != "histogram" for m in plan.measurements)


def _domains(plan: Plan, keys: list[str]) -> dict[str, str]:
    """The public values of every key, when all keys have them and so stand for the groups."""
    if not keys or plan.partition is not None:
        return {}
    return {
        f"__domain{i}": f"SELECT {k} FROM ({_sql(key.domain)}) AS d{i}({k})"
        for i, (key, k) in enumerate(zip(plan.analysis.keys, keys, strict=True))
        if key.domain is not None
    }


def _same_keys(keys: list[str], left: str, right: str) -> str:
    pairs = [f"{left}.{k} IS NOT DISTINCT FROM {right}.{k}" for k in keys]
    return " AND ".join(pairs) or "TRUE"


def _release(
    plan: Plan,
    m: Measurement,
    columns: dict[str, str],
    histogram: dict[str, int],
    functions: Functions,
) -> str:
    """One measurement, released by the function its kind calls for."""
    epsilon = f"CAST('{m.epsilon!r}' AS DOUBLE)"
    sensitivity = f"CAST({plan.sensitivity(m)} AS HUGEINT)"
    if m.quantile is not None:
        p, low, high = m.quantile
        h = f"h{histogram[m.name]}"
        return (
            f"{functions.quantile}({h}.__buckets, {h}.__weights, CAST('{p!r}' AS DOUBLE), "
            f"CAST('{low!r}' AS DOUBLE), CAST('{high!r}' AS DOUBLE), {BUCKETS}, {epsilon}, "
            f"CAST('{m.interval_epsilon!r}' AS DOUBLE), {sensitivity}) AS {m.name}"
        )
    value = f"CAST(coalesce(g.{columns[m.name]}, 0) AS HUGEINT)"
    return f"{functions.noise}({value}, {sensitivity}, {epsilon}) AS {m.name}"


def _post_processing(plan: Plan, keys: list[str]) -> str:
    """The analyst's SELECT, HAVING, ORDER BY and LIMIT over released values only."""
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
            exp.alias_(exp.column(CUT_COLUMN), CUT_SUPPORT, quoted=True),
        ],
        from_=exp.From(this=exp.Table(this=exp.to_identifier("__released"))),
    )
    having = analysis.select.args.get("having")
    if having is not None:
        query = query.where(
            having.this.transform(resolve_aliases).transform(released, copy=False), copy=False
        )
    order = analysis.select.args.get("order")
    if order is not None:
        query.set("order", order.transform(released))
    for arg in ("limit", "offset"):
        if analysis.select.args.get(arg) is not None:
            query.set(arg, analysis.select.args[arg].copy())
    return _sql(query)


SUPPORT_PREFIX = "__privsql_"
"""Hidden output columns: the noisy parts behind an output, for its interval."""

CUT_SUPPORT = f"{SUPPORT_PREFIX}cut"
"""The hidden output column carrying each row's noisy count of cut cells."""


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
