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
``released`` noise added and keys selected, materialised so each noisy value is
             drawn once however often the post-processing reads it

The rewriter knows nothing of the noise: ``noise(value, sensitivity, epsilon)`` and
``keep(units, max_groups, epsilon, delta)`` are names the caller registers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from rewriter.dialect import to_sql
from rewriter.plan import Measurement, Plan

SECRET = "$privsql_secret"
"""The statement's parameter carrying the database's hashing secret."""


@dataclass(frozen=True)
class Functions:
    """Names of the release functions registered in the engine."""

    noise: str
    keep: str


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

    @classmethod
    def of(cls, plan: Plan) -> _Layout:
        valued = [m for m in plan.measurements if m.value is not None]
        return cls(
            keys=[f"__k{i}" for i in range(len(plan.analysis.keys))],
            valued=valued,
            values=[f"__v{i}" for i in range(len(valued))],
            sums=[f"__s{i}" for i in range(len(valued))],
        )

    @property
    def cell(self) -> list[str]:
        return ["__unit", *self.keys]


def _common(plan: Plan, layout: _Layout) -> dict[str, str]:
    """The stages every statement shares: rows, cells, and the groups each unit keeps."""
    return {
        "__source": _rows(plan, layout.keys, [m.value for m in layout.valued], layout.values),
        "__cells": _cells(layout.keys, layout.values, layout.sums),
        "__chosen": _chosen(plan, layout.keys),
    }


def _with(ctes: dict[str, str]) -> str:
    return "WITH " + ",\n".join(f"{name} AS (\n{sql}\n)" for name, sql in ctes.items())


def generate(plan: Plan, functions: Functions) -> str:
    """The whole private query as DuckDB SQL (one statement, parameter ``$privsql_secret``)."""
    layout = _Layout.of(plan)
    ctes = _common(plan, layout)
    ctes["__bounded"] = BOUNDING[plan.bounding.strategy](plan, layout)
    ctes["__groups"] = _groups(layout.keys, layout.sums)
    columns = _measured_columns(plan.measurements, layout.sums)
    released = _released(plan, layout.keys, columns, functions)
    return (
        f"{_with(ctes)},\n__released AS MATERIALIZED (\n{released}\n)\n"
        f"{_post_processing(plan, layout.keys)}"
    )


def threshold_sql(plan: Plan, candidates: Sequence[int]) -> str:
    """One row: the number of units, then how many have a kept cell of more than each
    candidate number of rows.

    This is the only input of an AUTO threshold search: per-unit aggregates, never rows.
    Adding or removing a unit moves each count by at most one.
    """
    counts = ", ".join(
        f"count(*) FILTER (WHERE __largest > {c}) AS __over{i}" for i, c in enumerate(candidates)
    )
    largest = "SELECT __unit, max(__rows) AS __largest FROM __chosen GROUP BY __unit"
    return (
        f"{_with(_common(plan, _Layout.of(plan)))}\n"
        f"SELECT count(*) AS __units, {counts} FROM ({largest})"
    )


def _rows(plan: Plan, keys: list[str], row_values: list, values: list[str]) -> str:
    analysis = plan.analysis
    query = analysis.select.copy()
    for arg in ("group", "having", "order", "limit", "offset"):
        query.set(arg, None)
    projection = [exp.alias_(_never_raise(analysis.unit), "__unit")]
    projection += [
        exp.alias_(_never_raise(k.expression), n) for k, n in zip(analysis.keys, keys, strict=True)
    ]
    projection += [exp.alias_(_never_raise(v), n) for v, n in zip(row_values, values, strict=True)]
    query.set("expressions", projection)
    where = query.args.get("where")
    kept = exp.Not(this=exp.Is(this=analysis.unit.copy(), expression=exp.null()))
    condition = exp.and_(_never_raise(where.this), kept) if where is not None else kept
    query.set("where", exp.Where(this=condition))
    for join in query.args.get("joins") or []:
        if join.args.get("on") is not None:
            join.set("on", _never_raise(join.args["on"]))
    return _sql(query)


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
    guarded = node.copy()
    for key, value in guarded.args.items():
        if isinstance(value, exp.Expr):
            guarded.set(key, _never_raise(value))
        elif isinstance(value, list):
            guarded.set(key, [_never_raise(v) if isinstance(v, exp.Expr) else v for v in value])
    return guarded


def _cells(keys: list[str], values: list[str], sums: list[str]) -> str:
    group = _list(["__unit", *keys])
    aggregates = "".join(f", sum({v}) AS {s}" for v, s in zip(values, sums, strict=True))
    return f"SELECT {group}, count(*) AS __rows{aggregates} FROM __source GROUP BY {group}"


def _chosen(plan: Plan, keys: list[str]) -> str:
    if not keys:
        return "SELECT * FROM __cells"
    order = f"hash({SECRET}, __unit, {_list(keys)}), {_list(keys)}"
    return (
        "SELECT * FROM __cells QUALIFY row_number() OVER "
        f"(PARTITION BY __unit ORDER BY {order}) <= {plan.bounding.groups}"
    )


def _same_cell(keys: list[str], left: str, right: str) -> str:
    pairs = [f"{left}.__unit = {right}.__unit"]
    pairs += [f"{left}.{k} IS NOT DISTINCT FROM {right}.{k}" for k in keys]
    return " AND ".join(pairs)


def _rows_bounded(plan: Plan, layout: _Layout) -> str:
    """AKMV19 sample limiting: at most k rows per cell, the k smallest by keyed hash."""
    cap, cell = plan.bounding.cap, layout.cell
    if not plan.needs_rows:
        return f"SELECT {_list(cell)}, least(__rows, {cap}) AS __rows FROM __chosen"
    whole = f"SELECT {_list([*cell, '__rows', *layout.sums])} FROM __chosen WHERE __rows <= {cap}"
    content = _list([*cell, *layout.values], "r.")
    ranked = (
        f"SELECT r.* FROM __source AS r JOIN (SELECT {_list(cell)} FROM __chosen "
        f"WHERE __rows > {cap}) AS c ON {_same_cell(layout.keys, 'r', 'c')} "
        f"QUALIFY row_number() OVER (PARTITION BY {_list(cell, 'r.')} "
        f"ORDER BY hash({SECRET}, {content}), {_list(layout.values, 'r.') or 'r.__unit'}) <= {cap}"
    )
    sums = "".join(
        f", sum({v}) AS {s}" for v, s in zip(layout.values, layout.sums, strict=True)
    )
    capped = f"SELECT {_list(cell)}, count(*) AS __rows{sums} FROM ({ranked}) GROUP BY {_list(cell)}"
    return f"{whole}\nUNION ALL\n{capped}"


def _weights_bounded(plan: Plan, layout: _Layout) -> str:
    """EMMMR20 weighted averaging: a cell of s rows weighs each row min(1, h/s).

    Per cell that is ``least(s, h)`` rows and ``sum · min(1, h/s)`` on a 2**-W weight
    grid (floor division keeps |weighted| <= h·bound·2**W exactly); no row is re-read.
    """
    cap = plan.bounding.cap
    weighted = "".join(
        f", CASE WHEN __rows <= {cap} THEN CAST({s} AS HUGEINT) * {1 << m.weight_bits} "
        f"ELSE CAST({s} AS HUGEINT) * {cap << m.weight_bits} // __rows END AS {s}"
        for m, s in zip(layout.valued, layout.sums, strict=True)
    )
    return f"SELECT {_list(layout.cell)}, least(__rows, {cap}) AS __rows{weighted} FROM __chosen"


def _clip_bounded(plan: Plan, layout: _Layout) -> str:
    """RT24 Theorem III.1 clipping: a cell of s rows clips centred values to ±R·n/s.

    Cells with at most n rows pass whole; larger cells re-read their rows, clip each
    centred value to ±floor(R·n/s) half-steps (R the column's range), so the cell's
    centred sum stays within R·n = T, and count at most n rows.
    """
    cap, cell = plan.bounding.cap, layout.cell
    whole = f"SELECT {_list([*cell, '__rows', *layout.sums])} FROM __chosen WHERE __rows <= {cap}"
    widths = "".join(
        f", {m.bound * cap} // __rows AS __w{i}" for i, m in enumerate(layout.valued)
    )
    parts = []
    for i, (m, v, s) in enumerate(zip(layout.valued, layout.values, layout.sums, strict=True)):
        if m.kind == "centred":
            parts.append(f", sum(greatest(least(r.{v}, c.__w{i}), -c.__w{i})) AS {s}")
        else:
            parts.append(f", least(sum(r.{v}), {cap}) AS {s}")
    clipped = (
        f"SELECT {_list(cell, 'r.')}, least(count(*), {cap}) AS __rows{''.join(parts)} "
        f"FROM __source AS r JOIN (SELECT {_list(cell)}{widths} FROM __chosen "
        f"WHERE __rows > {cap}) AS c ON {_same_cell(layout.keys, 'r', 'c')} "
        f"GROUP BY {_list(cell, 'r.')}"
    )
    return f"{whole}\nUNION ALL\n{clipped}"


BOUNDING = {"ROWS": _rows_bounded, "WEIGHTS": _weights_bounded, "CLIP": _clip_bounded}
"""The ``__bounded`` stage of each strategy."""


def _groups(keys: list[str], sums: list[str]) -> str:
    aggregates = "".join(f", sum({s}) AS {s}" for s in sums)
    select = f"SELECT {_list(keys) + ', ' if keys else ''}count(*) AS __units, "
    select += f"sum(__rows) AS __rows{aggregates} FROM __bounded"
    return select + (f" GROUP BY {_list(keys)}" if keys else "")


def _measured_columns(measurements: Sequence[Measurement], sums: list[str]) -> dict[str, str]:
    """Which column of ``__groups`` each measurement perturbs."""
    columns = {}
    next_sum = iter(sums)
    for m in measurements:
        columns[m.name] = next(next_sum) if m.value is not None else f"__{m.kind}"
    return columns


def _released(plan: Plan, keys: list[str], columns: dict[str, str], functions: Functions) -> str:
    noisy = ", ".join(
        f"{functions.noise}(CAST(coalesce(g.{columns[m.name]}, 0) AS HUGEINT), "
        f"CAST({plan.sensitivity(m)} AS HUGEINT), CAST('{m.epsilon!r}' AS DOUBLE)) AS {m.name}"
        for m in plan.measurements
    )
    domains = [k.domain for k in plan.analysis.keys]
    if keys and plan.partition is None:
        domain = " CROSS JOIN ".join(
            f"({_sql(d)}) AS d{i}({k})"
            for i, (d, k) in enumerate(zip(domains, keys, strict=True))
            if d
        )
        on = " AND ".join(f"d.{k} IS NOT DISTINCT FROM g.{k}" for k in keys)
        return (
            f"SELECT {_list(keys, 'd.')}, {noisy} FROM (SELECT * FROM {domain}) AS d "
            f"LEFT JOIN __groups AS g ON {on}"
        )
    select = f"SELECT {_list(keys, 'g.') + ', ' if keys else ''}{noisy} FROM __groups AS g"
    if plan.partition is not None:
        p = plan.partition
        select += (
            f" WHERE {functions.keep}(g.__units, {p.max_groups}, "
            f"CAST('{p.epsilon!r}' AS DOUBLE), CAST('{p.delta!r}' AS DOUBLE))"
        )
    return select


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
        expressions=[*outputs, *_support_columns(plan)],
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


SUPPORT_PREFIX = "__privsql_n_"
"""Hidden output columns: the noisy count behind each AVG output, for its interval."""


def output_name(item: exp.Expr) -> str:
    """The name DuckDB would give a select item: its alias, column name, or text."""
    return item.alias_or_name if isinstance(item, (exp.Alias, exp.Column)) else to_sql(item)


def _support_columns(plan: Plan) -> list[exp.Expr]:
    averages = {
        to_sql(s.aggregate.node): s.measurements[1]
        for s in plan.statistics
        if len(s.measurements) == 2
    }
    return [
        exp.alias_(
            exp.column(averages[to_sql(item.unalias())]),
            SUPPORT_PREFIX + output_name(item),
            quoted=True,
        )
        for item in plan.analysis.select.expressions
        if to_sql(item.unalias()) in averages
    ]
