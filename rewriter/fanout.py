"""Bounded work per private row: how many rows public FROM items can join to each one.

A private row joined with public rows becomes as many rows as it matches, before any
bounding: ``… JOIN pub p1 ON a.secret >= 'M' JOIN pub p2 ON true …`` turns each row that
meets a private condition into |pub|ⁿ rows, so the query's run time reads the condition
(red team round 4: a planted string, one character per query, for 3·10⁻⁷ ε). The joins
of private relations with each other are capped per unit where they are generated
(``rewriter.ir``); this pass bounds the other factor, from public data only.

Each SELECT over private rows multiplies, per row of its private items, at most the
product of its public items' *fan-outs*: a public item joined on an equality between its
columns and expressions of other items matches at most as many rows as its most frequent
value of those columns (values counted equal under the collation the join compares them
in; an equality with another public item's columns bounds nothing); any other public item,
all its rows — SEMI and ANTI joins too, which emit one row at most but test their
condition against every row. A private derived table or CTE brings its own
body's product. Both are computed by
counting public rows (``Catalog.count_rows``), so whether a query is refused depends on
the SQL and public data alone; above ``MAX_FAN_OUT`` it is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlglot import exp

from rewriter.catalog import Catalog
from rewriter.errors import PrivacyError, UnsupportedQuery
from rewriter.ir import public_ctes
from rewriter.relations import Relations, items, over_from

MAX_FAN_OUT = 256
"""The most rows the public items of a query may join to (or test against) one private
row: a private condition can then change a query's work by at most this many rows per row
of one unit — about 2 ms where each is a failing ``TRY`` (about 9 µs each, red team round
5), far less otherwise — while lookups (one match per key) and small lists still join."""


def check_fan_out(select: exp.Select, relations: Relations, catalog: Catalog) -> None:
    """Refuse a query whose public joins can multiply one private row past ``MAX_FAN_OUT``."""
    counting = _Counting(relations, catalog, tuple(public_ctes(select, relations)))
    fan_out = counting.fan_out(select)
    if fan_out > MAX_FAN_OUT:
        raise UnsupportedQuery(
            f"the public tables joined to private rows can repeat each one more than "
            f"{MAX_FAN_OUT:,} times: join them on a key, or aggregate them first"
        )


@dataclass(frozen=True)
class _Counting:
    """Fan-outs counted on public data, with the query's public CTEs in scope."""

    relations: Relations
    catalog: Catalog
    ctes: tuple[exp.CTE, ...]

    def fan_out(self, query: exp.Query) -> int:
        """The most rows ``query`` makes of one private row (a union: its largest branch)."""
        if isinstance(query, exp.Subquery):  # a parenthesised operand of a set operation
            return self.fan_out(query.this)
        if isinstance(query, exp.SetOperation):
            return max(self.fan_out(query.this), self.fan_out(query.expression))
        if not isinstance(query, exp.Select):
            return 1
        product = 1
        for item in items(query):
            if self.relations.is_private(item):
                body = self.relations.body(item)
                product *= 1 if body is None else self.fan_out(body)
                continue
            # SEMI and ANTI joins emit one row at most, but test the condition against
            # every public row they may match: the work they add is counted the same
            product *= max(1, self._public(item, query))
        return product

    def _public(self, item: exp.Expr, select: exp.Select) -> int:
        """How many of a public item's rows one row of the others can match: the largest
        group of its rows sharing the values of the columns it is equi-joined on, else all
        of them (a table function's, counted only up to just past the limit)."""
        label = item.alias_or_name
        private = {i.alias_or_name for i in items(select) if self.relations.is_private(i)}
        keys: dict[str, tuple[exp.Column, exp.Expr]] = {}
        for own, other in _equalities(select, label, private):
            if own.name.lower() not in keys and self._compared_as_is(select, own, other):
                keys[own.name.lower()] = (own, other)
        body = self.relations.body(item)
        rows = body.copy() if body is not None else exp.select("*").from_(item.copy())
        if keys and not (isinstance(item, exp.Table) and isinstance(item.this, exp.Func)):
            pairs = [keys[name] for name in sorted(keys)]
            grouped = exp.select(exp.Count(this=exp.Star()).as_("n")).from_(
                _as_compared(select, rows, pairs).subquery("r")
            )
            grouped = grouped.group_by(
                *(exp.column(f"__k{i}", table="r", quoted=True) for i in range(len(pairs)))
            )
            counted = exp.select(exp.func("coalesce", exp.Max(this=exp.column("n")), 0)).from_(
                grouped.subquery("g")
            )
        else:  # counted no further than the limit: ``range(10 ** 12)`` is never enumerated
            counted = exp.select(exp.Count(this=exp.Star())).from_(
                rows.limit(MAX_FAN_OUT + 1).subquery("r")
            )
        if self.ctes:
            counted.set("with_", exp.With(expressions=[cte.copy() for cte in self.ctes]))
        return self.catalog.count_rows(counted)

    def _compared_as_is(self, select: exp.Select, own: exp.Column, other: exp.Expr) -> bool:
        """Whether the equality compares the public column in its own type: grouping its
        values then groups what the join matches. Across types DuckDB compares in a common
        one, where distinct values may meet (5,000 HUGEINTs 2¹⁰⁰ + k are one DOUBLE: red
        team, a hang on one row); and what cannot be bound here bounds nothing."""
        probe = over_from(select, [own, other])
        if self.ctes and probe.args.get("with_") is None:
            probe.set("with_", exp.With(expressions=[cte.copy() for cte in self.ctes]))
        try:
            kinds = self.catalog.types(probe.sql(dialect="duckdb"))
        except PrivacyError:
            return False
        return len(kinds) == 2 and kinds[0] == kinds[1]


def _as_compared(
    select: exp.Select, rows: exp.Query, pairs: list[tuple[exp.Column, exp.Expr]]
) -> exp.Query:
    """A public item's key columns (``__k0``, ...) in the collation the join compares them
    under, to be grouped: what one private value matches is then one group.

    A VARCHAR equality takes the collation of either side — declared on a column, written
    (``COLLATE NOCASE``), or an ICU locale's, under which 'a' equals 'a' followed by any
    number of zero-width spaces — and one private value then meets every variant of it,
    while grouping the public column alone keeps them apart. The private sides, over the
    query's FROM under ``WHERE false`` (no row read: their types alone), are put first in a
    UNION ALL with the public columns: the union combines collations as the comparison
    does, so the public rows are grouped under the very collation that joins them (a
    database's default collation applies to both alike)."""
    compared = over_from(
        select, [exp.alias_(other, f"__k{i}") for i, (_, other) in enumerate(pairs)]
    )
    compared.set("where", exp.Where(this=exp.false()))
    public = exp.select(*(exp.column(own.name, table="r", quoted=True) for own, _ in pairs)).from_(
        rows.subquery("r")
    )
    return exp.union(compared, public, distinct=False)


def _equalities(
    select: exp.Select, label: str, private: set[str]
) -> Iterator[tuple[exp.Column, exp.Expr]]:
    """Each column of the item ``label`` equated with an expression of private items'
    columns and constants only — one private row then fixes its value — with that
    expression, in a condition that pairs the item with private rows: its own ON, the ON
    that brings in the first private item when the public one stands before it (``FROM
    airports a JOIN flights f ON f.dest = a.faa`` meets one airport per flight), or the
    WHERE when every join is inner (DuckDB does not push a WHERE below an outer join, so
    its ON runs unkeyed first: red team, a FULL JOIN on a private condition). The ON of
    any other join pairs nothing with it: in ``FROM r JOIN p ON true JOIN r2 ON r2.u = r.u
    AND p.k = r2.x`` each row of ``r`` has already met every row of ``p``. Equated with
    another public item's column, ``p.k = q.k``, it bounds nothing per private row either."""
    joins = select.args.get("joins") or []
    outer = any(join.side for join in joins)
    conditions = [] if outer else [select.args.get("where")]
    order = items(select)
    position = next(i for i, item in enumerate(order) if item.alias_or_name == label)
    if position > 0:
        conditions.append(joins[position - 1].args.get("on"))
    first = next((i for i, item in enumerate(order) if item.alias_or_name in private), 0)
    if position < first:
        conditions.append(joins[first - 1].args.get("on"))
    for condition in conditions:
        if condition is None:
            continue
        node = condition.this if isinstance(condition, exp.Where) else condition
        for conjunct in node.flatten() if isinstance(node, exp.And) else [node.unnest()]:
            if not isinstance(conjunct, exp.EQ):
                continue
            sides = (conjunct.this, conjunct.expression)
            for own, other in (sides, sides[::-1]):
                if (
                    isinstance(own, exp.Column)
                    and own.table == label
                    and all(c.table in private for c in other.find_all(exp.Column))
                    and not any(other.find_all(exp.Query))
                ):
                    yield own, other
