"""Guards: row-level expressions over private rows that no value can make fail.

Whether a query over private data succeeds, and the message it fails with, must not depend
on any one unit's values (docs/privacy.md section 2.4). Every expression the analyst wrote
that runs on private rows — a condition, a projected value, a per-unit aggregate's argument
— reaches DuckDB only as one of these guarded forms (``rewriter.ir`` builds every private
relation with them): DuckDB's ``TRY`` turns a failing cast, regular expression or overflow
into NULL, and a NULL condition drops the row, as SQL does. ``rewriter.functions`` keeps
what may appear inside a guard to what ``TRY`` is proven to hold.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from rewriter.dialect import output_name

BOOLEAN = exp.DataType.build("BOOLEAN")


def never_raise(node: exp.Expr) -> exp.Expr:
    """A row-level expression that yields NULL where it would raise.

    Literals and columns cannot fail; subqueries read only public data (private sources
    are refused there), and ``TRY`` cannot hold them, so the rest is guarded around them.
    """
    if isinstance(node, (exp.Column, exp.Literal, exp.Query)):
        return node.copy()
    if not any(node.find_all(exp.Query)):
        return exp.Try(this=node.copy())
    return map_arguments(node, never_raise)


def condition(node: exp.Expr) -> exp.Expr:
    """A guarded condition, made BOOLEAN inside the guard: a condition of another type (a
    VARCHAR ``CASE``, a column) would otherwise be cast to BOOLEAN by the engine outside
    ``TRY``, and fail on one value ('x' is no BOOLEAN)."""
    return exp.TryCast(this=never_raise(node), to=BOOLEAN.copy())


def never_raise_named(item: exp.Expr) -> exp.Expr:
    """A select item of a derived table over private rows, guarded, under the same name."""
    if isinstance(item, (exp.Column, exp.Star)):
        return item.copy()
    value = item.unalias()
    guarded = (
        aggregate_never_raises(value) if isinstance(value, exp.AggFunc) else never_raise(value)
    )
    return exp.alias_(guarded, output_name(item), quoted=True)


def aggregate_never_raises(node: exp.AggFunc) -> exp.Expr:
    """A per-unit aggregate (``relations.PER_UNIT_AGGREGATES``) that no value can make fail:
    its arguments guarded, SUM and AVG taken in DOUBLE (±inf where an integer sum overflows),
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
        guarded = never_raise(argument)
        return exp.TryCast(this=guarded, to=exp.DataType.build(kind)) if kind else guarded

    return map_arguments(node, guard)


def map_arguments(node: exp.Expr, function: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """A copy of ``node`` whose argument expressions are ``function`` of the originals."""
    mapped = node.copy()
    for key, value in node.args.items():
        if isinstance(value, exp.Expr):
            mapped.set(key, function(value))
        elif isinstance(value, list):
            mapped.set(key, [function(v) if isinstance(v, exp.Expr) else v for v in value])
    return mapped
