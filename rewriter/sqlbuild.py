"""Builders of the generated statement's sqlglot nodes, and its column layout.

The private statement is built as sqlglot expressions, never as text: each stage is a
tree of these nodes, rendered once (``render``). The builders make nodes directly (no
parsing, no copies) because a statement is built for every query and its cost is part of
the per-query overhead. They are shared by ``generate`` (the stages) and ``strategies``
(each bounding strategy's ``__bounded`` stage).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

if TYPE_CHECKING:
    from rewriter.plan import Measurement, Plan

SECRET = "privsql_secret"
"""The statement's parameter (``$privsql_secret``) carrying the database's hashing secret."""

HUGEINT = exp.DataType(this=exp.DataType.Type.USERDEFINED, kind="HUGEINT")
"""DuckDB's 128-bit integer, written as DuckDB names it."""

DOUBLE = exp.DataType(this=exp.DataType.Type.DOUBLE)


DUCKDB = Dialect.get_or_raise("duckdb")


def render(node: exp.Expr) -> str:
    """A stage as DuckDB SQL. The tree is built for this rendering only, so it is rendered
    in place (sqlglot's default first deep-copies it, most of the cost); function names as
    the caller registered them."""
    return DUCKDB.generate(node, copy=False, normalize_functions=False)


def column(name: str, table: str | None = None) -> exp.Column:
    """A generated (never quoted) column, optionally of a FROM item."""
    return exp.Column(
        this=exp.Identifier(this=name, quoted=False),
        table=exp.Identifier(this=table, quoted=False) if table else None,
    )


def columns(names: Sequence[str], table: str | None = None) -> list[exp.Expr]:
    return [column(n, table) for n in names]


def number(value: int) -> exp.Literal:
    return exp.Literal.number(value)


def named(node: exp.Expr, name: str) -> exp.Alias:
    """``node AS name``."""
    return exp.Alias(this=node, alias=exp.Identifier(this=name, quoted=False))


def huge(node: exp.Expr) -> exp.Cast:
    """``CAST(node AS HUGEINT)``."""
    return exp.Cast(this=node, to=HUGEINT.copy())


def bigint(node: exp.Expr) -> exp.Cast:
    """``CAST(node AS BIGINT)``."""
    return exp.Cast(this=node, to=exp.DataType(this=exp.DataType.Type.BIGINT))


def double(value: float) -> exp.Cast:
    """A DOUBLE constant, written as the text of its ``repr`` so it reads back exactly."""
    return exp.Cast(this=exp.Literal.string(repr(value)), to=DOUBLE.copy())


def call(name: str, *arguments: exp.Expr) -> exp.Anonymous:
    """A call of a function by name (the caller's release functions, ``hash``)."""
    return exp.Anonymous(this=name, expressions=list(arguments))


def secret_hash(*arguments: exp.Expr) -> exp.Anonymous:
    """``hash($privsql_secret, …)``: a keyed hash no analyst can reproduce."""
    return call("hash", exp.Placeholder(this=SECRET), *arguments)


def count_rows() -> exp.Count:
    return exp.Count(this=exp.Star())


def total(node: exp.Expr) -> exp.Sum:
    return exp.Sum(this=node)


def least(*nodes: exp.Expr) -> exp.Least:
    return exp.Least(this=nodes[0], expressions=list(nodes[1:]), ignore_nulls=True)


def greatest(*nodes: exp.Expr) -> exp.Greatest:
    return exp.Greatest(this=nodes[0], expressions=list(nodes[1:]), ignore_nulls=True)


def coalesce(*nodes: exp.Expr) -> exp.Coalesce:
    return exp.Coalesce(this=nodes[0], expressions=list(nodes[1:]))


def all_of(conditions: Sequence[exp.Expr]) -> exp.Expr:
    """The conjunction of ``conditions`` (TRUE when there are none)."""
    if not conditions:
        return exp.true()
    result = conditions[0]
    for condition in conditions[1:]:
        result = exp.And(this=result, expression=condition)
    return result


def table(name: str, alias: str | None = None) -> exp.Table:
    """A CTE or table by name, optionally under an alias."""
    return exp.Table(
        this=exp.Identifier(this=name, quoted=False),
        alias=exp.TableAlias(this=exp.Identifier(this=alias, quoted=False)) if alias else None,
    )


def derived(query: exp.Query, alias: str | None = None, names: Sequence[str] = ()) -> exp.Expr:
    """``(query) AS alias(names)``."""
    table_alias = None
    if alias:
        table_alias = exp.TableAlias(
            this=exp.Identifier(this=alias, quoted=False),
            columns=[exp.Identifier(this=n, quoted=False) for n in names] or None,
        )
    return exp.Subquery(this=query, alias=table_alias)


def joining(item: exp.Expr, on: exp.Expr | None = None, kind: str = "", side: str = "") -> exp.Join:
    """A join of ``item``: ``kind`` SEMI, ANTI or CROSS, ``side`` LEFT."""
    return exp.Join(this=item, on=on, kind=kind or None, side=side or None)


def select(
    items: Sequence[exp.Expr],
    source: exp.Expr | None = None,
    *,
    joins: Sequence[exp.Join] = (),
    where: exp.Expr | None = None,
    group: Sequence[exp.Expr] = (),
    having: exp.Expr | None = None,
    qualify: exp.Expr | None = None,
) -> exp.Select:
    """One SELECT, clause by clause (none given, none written)."""
    return exp.Select(
        expressions=list(items),
        from_=exp.From(this=source) if source is not None else None,
        joins=list(joins) or None,
        where=exp.Where(this=where) if where is not None else None,
        group=exp.Group(expressions=list(group)) if group else None,
        having=exp.Having(this=having) if having is not None else None,
        qualify=exp.Qualify(this=qualify) if qualify is not None else None,
    )


def union_all(queries: Sequence[exp.Query]) -> exp.Query:
    """The queries' rows, one after the other."""
    result = queries[0]
    for query in queries[1:]:
        result = exp.Union(this=result, expression=query, distinct=False)
    return result


def rank(partition: Sequence[exp.Expr], order: Sequence[exp.Expr]) -> exp.Window:
    """``row_number() OVER (PARTITION BY partition ORDER BY order)``."""
    return exp.Window(
        this=exp.RowNumber(),
        partition_by=list(partition),
        order=exp.Order(expressions=[exp.Ordered(this=o, nulls_first=False) for o in order]),
        over="OVER",
    )


def filtered(aggregate: exp.Expr, condition: exp.Expr) -> exp.Filter:
    """``aggregate FILTER (WHERE condition)``."""
    return exp.Filter(this=aggregate, expression=exp.Where(this=condition))


def same_keys(keys: Sequence[str], left: str, right: str) -> exp.Expr:
    """Two FROM items are of one group (keys may be NULL: a NULL key is a group)."""
    return all_of([exp.NullSafeEQ(this=column(k, left), expression=column(k, right)) for k in keys])


def same_cell(keys: Sequence[str], left: str, right: str) -> exp.Expr:
    """Two FROM items are of one (unit, group) cell."""
    unit = exp.EQ(this=column("__unit", left), expression=column("__unit", right))
    return exp.And(this=unit, expression=same_keys(keys, left, right)) if keys else unit


@dataclass(frozen=True)
class Layout:
    """Column names of the generated statement: keys, per-row values and their cell sums."""

    keys: list[str]
    valued: list[Measurement]
    values: list[str]
    sums: list[str]
    histograms: list[Measurement]

    @classmethod
    def of(cls, plan: Plan) -> Layout:
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


def row_order(layout: Layout) -> list[exp.Expr]:
    """Sample limiting's order inside a cell (AKMV19): keyed hash of the row's content, ties
    by content, so which rows a unit keeps depends on its own rows only (PERFORMANCE.md)."""
    content = [*layout.values, *layout.buckets]
    return [
        secret_hash(*columns([*layout.cell, *content], "r")),
        *columns(content or ["__unit"], "r"),
    ]


def chosen_over(layout: Layout, cap: int, extra: Sequence[exp.Expr] = ()) -> exp.Select:
    """The cells of ``__chosen`` with more than ``cap`` rows (their cell, then ``extra``)."""
    return select(
        [*columns(layout.cell), *extra],
        table("__chosen"),
        where=exp.GT(this=column("__rows"), expression=number(cap)),
    )


OVER = "__over"
"""The column of ``__bounded`` saying a kept cell had more rows than the smallest row cap
(a cell bounding cut): ``__groups`` counts them, so the check reads no cell again. A plan
with more row caps (``Plan.cut_caps``) has one such column per cap (``level``)."""


def level(name: str, index: int) -> str:
    """The name of a bounding-check column for the ``index``-th row cap (the first keeps
    ``name``: a plan with one cap, as most have, generates what it always did)."""
    return name if index == 0 else f"{name}{index}"


def over(plan: Plan) -> list[exp.Alias]:
    """``__over`` of a cell of ``__chosen``, per row cap (FALSE when no measurement reads
    rows)."""
    caps = plan.cut_caps
    if not caps:
        return [named(exp.false(), OVER)]
    return [
        named(exp.GT(this=column("__rows"), expression=number(cap)), level(OVER, i))
        for i, cap in enumerate(caps)
    ]


def at_most(node: exp.Expr, cap: int) -> exp.LTE:
    return exp.LTE(this=node, expression=number(cap))


def byte_for_byte(text: exp.Expr) -> exp.Expr:
    """``text`` compared by its bytes, whatever collation it has (``COLLATE POSIX``; the
    Spark engine's ``UTF8_BINARY``)."""
    return exp.Collate(this=text.copy(), expression=exp.Var(this="POSIX"))


CANONICAL_KEYS = (exp.DType.DOUBLE, exp.DType.FLOAT, *exp.DataType.TEXT_TYPES, exp.DType.INTERVAL)
"""The key types whose equal values DuckDB may hold in several forms, written in one by
``canonical_key``."""


def canonical_key(key: exp.Expr, kind: exp.DataType | None) -> exp.Expr:
    """A key released from the data (of type ``kind``; None where the keys come from their
    public domains) in one form per group. DuckDB groups values it finds equal and
    releases whichever form the group's first row had: -0.0 or 0.0, a NaN's sign,
    ``'Smith'`` or ``'SMITH'`` under a NOCASE collation, ``INTERVAL '1 month'`` or
    ``'30 days'`` — one unit's raw value, without noise (red team 45). So a float's zero
    and NaN are written as one value each, text is grouped by its bytes (``byte_for_byte``:
    each spelling its own group, selected as any group is) and an interval is normalised;
    the key types ``rewriter.analyze.RELEASED_FROM_DATA`` admits besides these hold equal
    values identical."""
    if kind is None:
        return key
    if kind.is_type(exp.DType.DOUBLE, exp.DType.FLOAT):
        return exp.Case(
            ifs=[
                exp.If(this=exp.EQ(this=key.copy(), expression=number(0)), true=_typed(0, kind)),
                exp.If(this=call("isnan", key.copy()), true=_typed("nan", kind)),
            ],
            default=key,
        )
    if kind.is_type(*exp.DataType.TEXT_TYPES):
        return byte_for_byte(key)
    if kind.is_type(exp.DType.INTERVAL):  # guarded: the one step here that computes
        return exp.Try(this=call("normalized_interval", key))
    return key


def _typed(value: int | str, kind: exp.DataType) -> exp.Cast:
    return exp.Cast(this=exp.Literal.string(str(value)), to=kind.copy())
