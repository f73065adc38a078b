"""Bounded work per row: no expression may build values much larger than the row it reads.

TRY turns a failing expression into NULL, but it cannot stop an expression that succeeds
slowly or runs out of memory. String functions that multiply sizes (``replace`` with a
longer replacement, ``regexp_replace`` with the ``g`` flag, a concatenation of a column
with itself repeated through derived tables) let a condition on one unit's values decide
whether a row costs a few bytes or gigabytes — an outcome (failure, or a long run) that
depends on one unit's data. So every expression of a query over private data is given a
static bound on the size of its value, ``factor · R + constant``, where ``R`` is the size of
the row read from the source, and a query whose bound exceeds ``MAX_FACTOR`` or
``MAX_CONSTANT`` anywhere — in any scope, through any chain of derived tables — is refused
before anything runs. The bound is decided from the query text alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, build_scope

from rewriter.errors import UnsupportedQuery

MAX_FACTOR = 8
"""The largest multiple of a row's own size that one value may reach. DuckDB's strings stop
at 4 GB with an error no TRY catches, so a stored value of more than 4 GB / MAX_FACTOR
could still reach it: docs/privacy.md §8 names this limit."""

MAX_CONSTANT = 1_000_000
"""The largest size, in characters, a value may reach beyond that multiple."""

SCALAR = 64
"""A generous size for a value that is not text (a number, a date, a boolean)."""


@dataclass(frozen=True)
class Size:
    """A bound on a value's size: ``factor`` times the row's size plus ``constant``."""

    factor: float
    constant: float

    def __add__(self, other: Size) -> Size:
        return Size(self.factor + other.factor, self.constant + other.constant)

    def times(self, multiple: float) -> Size:
        return Size(self.factor * multiple, self.constant * multiple)


NOTHING = Size(0, 0)


def refuse_growth(query: exp.Query) -> None:
    """Refuse a query in which some value may grow beyond the limits (module docstring)."""
    root = build_scope(query)
    if root is None:
        return
    sizes = _Sizes({id(scope.expression): scope for scope in root.traverse()})
    for scope in root.traverse():
        for part in _parts(scope.expression):
            sizes.of(part, scope)


def _parts(query: exp.Expr) -> list[exp.Expr]:
    """The expressions a SELECT evaluates itself (not those of its nested queries)."""
    if not isinstance(query, exp.Select):
        return []
    parts = [*query.expressions]
    for arg in ("where", "group", "having", "order", "qualify"):
        if query.args.get(arg) is not None:
            parts.append(query.args[arg])
    parts += [j.args["on"] for j in query.args.get("joins") or [] if j.args.get("on")]
    return parts


class _Sizes:
    """Size bounds of expressions, following columns into the scopes that define them."""

    def __init__(self, scopes: dict[int, Scope]) -> None:
        self._scopes = scopes
        self._columns: dict[tuple[int, str], Size] = {}

    def of(self, node: exp.Expr, scope: Scope) -> Size:
        size = self._size(node, scope)
        if size.factor > MAX_FACTOR or size.constant > MAX_CONSTANT:
            raise UnsupportedQuery(
                f"{node.sql(dialect='duckdb')[:80]} could build values far larger than the "
                "rows it reads; privsql bounds the work each row may cost"
            )
        return size

    def _size(self, node: exp.Expr, scope: Scope) -> Size:
        if isinstance(node, exp.Column):
            return self._column(node, scope)
        if isinstance(node, exp.Literal):
            return Size(0, len(node.name)) if node.is_string else Size(0, SCALAR)
        if isinstance(node, (exp.Query, exp.Subquery)):
            return Size(0, SCALAR)
        children = [c for c in node.iter_expressions() if not isinstance(c, exp.Query)]
        sizes = [self.of(child, scope) for child in children]
        total = sum(sizes, NOTHING)
        if isinstance(node, exp.Pad):
            return Size(0, _constant_length(node))
        if isinstance(node, exp.Replace):
            return _replaced(node, sizes)
        if isinstance(node, exp.RegexpReplace):
            return _regexp_replaced(node, sizes)
        if isinstance(node, exp.ConcatWs) and sizes:  # the separator goes between each pair
            return sizes[0].times(max(len(sizes) - 2, 1)) + sum(sizes[1:], NOTHING)
        if isinstance(node, (exp.Identifier, exp.Var, exp.DataType, exp.Boolean, exp.Null)):
            return total
        return total + Size(0, SCALAR)

    def _column(self, column: exp.Column, scope: Scope) -> Size:
        source = scope.sources.get(column.table)
        if not isinstance(source, Scope):
            return Size(1, 0)
        key = (id(source.expression), column.name)
        if key not in self._columns:
            self._columns[key] = self._projection(source, column.name)
        return self._columns[key]

    def _projection(self, source: Scope, name: str) -> Size:
        """The size of a derived table's column: of its defining expression, or the
        largest over the branches of a set operation."""
        query = source.expression
        if isinstance(query, exp.SetOperation):
            # branches pair columns by position, under the first branch's names
            branches = [self._scopes.get(id(s)) for s in _branches(query)]
            found = [b for b in branches if b is not None]
            first = found[0].expression if found else None
            names = [i.alias_or_name for i in first.expressions] if first is not None else []
            if name not in names:
                raise UnsupportedQuery(f"column {name} of a derived table could not be sized")
            sizes = [self._at(b, names.index(name)) for b in found]
            return max(sizes, key=lambda s: (s.factor, s.constant), default=Size(1, 0))
        if not isinstance(query, exp.Select):
            return Size(1, 0)
        for item in query.expressions:
            if item.alias_or_name == name:
                return self.of(item.unalias(), source)
        raise UnsupportedQuery(f"column {name} of a derived table could not be sized")

    def _at(self, branch: Scope, position: int) -> Size:
        """The size of a set operation branch's column at ``position``."""
        query = branch.expression
        if not isinstance(query, exp.Select) or position >= len(query.expressions):
            raise UnsupportedQuery("a column of a set operation could not be sized")
        return self.of(query.expressions[position].unalias(), branch)


def _branches(query: exp.SetOperation) -> list[exp.Expr]:
    found = []
    for side in (query.left, query.right):
        while isinstance(side, exp.Subquery):  # a parenthesised operand
            side = side.this
        found += _branches(side) if isinstance(side, exp.SetOperation) else [side]
    return found


def _constant_length(node: exp.Pad) -> int:
    """The padded length (``rewriter.functions`` admits only a bounded constant)."""
    length = node.args.get("expression")
    if isinstance(length, exp.Literal) and not length.is_string:
        return int(float(length.name))
    return MAX_CONSTANT + 1


def _text(node: exp.Expr | None) -> str | None:
    return node.name if isinstance(node, exp.Literal) and node.is_string else None


def _replaced(node: exp.Replace, sizes: list[Size]) -> Size:
    """``replace(s, from, to)``: at most ``ceil(len(to) / len(from))`` times ``s``."""
    found, replacement = _text(node.expression), _text(node.args.get("replacement"))
    if not found or replacement is None:
        raise UnsupportedQuery(
            "replace over private data needs a constant, non-empty search string and a "
            "constant replacement"
        )
    return sizes[0].times(max(1, math.ceil(len(replacement) / len(found))))


def _regexp_replaced(node: exp.RegexpReplace, sizes: list[Size]) -> Size:
    """``regexp_replace(s, pattern, r)``: each of the ``len(s) + 1`` places may gain ``r``
    (an empty match) and each character may be copied by ``r``'s back-references, so at
    most ``(1 + len(r))`` times ``s`` plus ``len(r)``."""
    replacement = _text(node.args.get("replacement"))
    if replacement is None:
        raise UnsupportedQuery("regexp_replace over private data needs a constant replacement")
    return sizes[0].times(1 + len(replacement)) + Size(0, len(replacement))
