"""The private FROM side of a query as a small relational IR, and the SQL generated from it.

What feeds the ``__source`` stage — the outer query's FROM items, joins and WHERE, with the
derived tables and CTEs they read — is rebuilt here as a tree of relations (after Qrlew's
Relation: tables, maps, reduces and joins), each stating whether it is public or
unit-preserving (every row it outputs comes from rows of one unit, and removing a unit
removes exactly the rows derived from it; docs/privacy.md section 2.1):

``Source``            a private base source, with its unit column by catalogue identity
``Public``            a FROM item that reads only public data, kept as written
``Join``              two relations and their join condition, as an explicit ``ON``
``Filter``            rows of a relation that meet a condition
``Project``           row-level outputs of a derived table or CTE over private rows
``PerUnitAggregate``  a derived table grouped by the unit (one row per unit and key)
``Named``             a project or per-unit aggregate used as a FROM item, under its label

Released values never enter it: the DP aggregate and the post-processing are the plan's.
The tree is built from the resolved query (``rewriter.resolve``) after ``Relations`` has
checked it, and whatever has no node here — a clause, a join method, a kind of FROM item
— is refused (``UnsupportedQuery``): what is not represented is refused. The SQL of
``__source`` is then generated from the tree alone, every row-level expression the analyst
wrote wrapped by ``rewriter.guard``, so nothing else of the analyst's text reaches DuckDB.

Two things the generation adds (docs/privacy.md section 8):

- a join of two private relations first keeps at most ``join_cap(n)`` rows of each unit on
  each side (``n`` private relations joined), the rows with the smallest keyed hash of the
  statement's secret, the unit and the row — so a unit's rows joined with themselves cannot
  grow past ``JOINED_ROWS_PER_UNIT`` before bounding, whatever that unit holds;
- an equality of two columns that pass base columns of one type unchanged (one column, or
  two of the same bound type: the comparison casts nothing and cannot fail) is left
  unguarded, so DuckDB joins on it by hash rather than comparing every pair of rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from sqlglot import exp
from sqlglot.optimizer.scope import build_scope

from rewriter.catalog import Catalog
from rewriter.errors import PrivacyError, UnsupportedQuery
from rewriter.files import INTEGERS
from rewriter.guard import condition, never_raise_named
from rewriter.relations import Origin, Relations, items, source_sql
from rewriter.resolve import IDENTITY
from rewriter.sqlbuild import byte_for_byte, secret_hash

RANK = "__privsql_rank"
"""The column ranking a heavy unit's rows in the join cap (a plain filter on it rather than
QUALIFY, which Spark has no equivalent of that keeps the columns)."""

JOINED_ROWS_PER_UNIT = 1 << 16
"""At most this many rows of one unit come out of a join of private relations: each of the
``n`` relations joined keeps ``join_cap(n)`` rows per unit, and ``join_cap(n) ** n`` is at
most this. A public constant, so the cut depends on nothing but the unit's own rows."""


def join_cap(relations: int) -> int:
    """Rows per unit each of ``relations`` joined private relations keeps: 256 for two,
    40 for three, 16 for four (``JOINED_ROWS_PER_UNIT`` over all of them)."""
    cap = math.floor(JOINED_ROWS_PER_UNIT ** (1 / relations) + 1e-9)
    return max(cap, 1)


class Privacy(Enum):
    """What a relation's rows are: public data, or private rows each of one unit."""

    PUBLIC = "public"
    UNIT_PRESERVING = "unit-preserving"


@dataclass(frozen=True)
class UnitColumn:
    """A unit by what it is, never by name: a base source's catalogue identity and column."""

    identity: str
    column: str


@dataclass(frozen=True)
class Source:
    """A private base source (table, view or file reader) read under its label."""

    table: exp.Table
    label: str
    unit: UnitColumn
    unit_name: str
    columns: tuple[str, ...]
    read: exp.Expr
    """What the generated SQL reads (``Catalog.read``), without an alias."""
    privacy = Privacy.UNIT_PRESERVING


@dataclass(frozen=True)
class Public:
    """A FROM item that reads only public data; it needs no guard."""

    item: exp.Expr
    label: str
    privacy = Privacy.PUBLIC


@dataclass(frozen=True)
class Filter:
    """The rows of ``input`` for which ``condition`` (held guarded) is true."""

    input: Relation
    condition: exp.Expr

    @property
    def privacy(self) -> Privacy:
        return self.input.privacy


@dataclass(frozen=True)
class Join:
    """``left`` joined with the FROM item ``right`` on ``condition`` (held guarded);
    ``side`` and ``kind`` as SQL spells them (``LEFT``, ``SEMI``, ``CROSS``...; none for
    an inner or comma join)."""

    left: Relation
    right: Item
    side: str
    kind: str
    condition: exp.Expr | None

    @property
    def privacy(self) -> Privacy:
        private = Privacy.UNIT_PRESERVING in (self.left.privacy, self.right.privacy)
        return Privacy.UNIT_PRESERVING if private else Privacy.PUBLIC


@dataclass(frozen=True)
class Project:
    """Row-level outputs (select items under their names, held guarded) of a derived table
    or CTE."""

    input: Relation
    outputs: tuple[exp.Expr, ...]
    distinct: bool = False
    privacy = Privacy.UNIT_PRESERVING


@dataclass(frozen=True)
class PerUnitAggregate:
    """A derived table grouped by columns that include the unit: one row per unit and key,
    each output a key or one ``relations.PER_UNIT_AGGREGATES`` aggregate, held guarded."""

    input: Relation
    keys: tuple[exp.Expr, ...]
    outputs: tuple[exp.Expr, ...]
    privacy = Privacy.UNIT_PRESERVING


@dataclass(frozen=True)
class Named:
    """A derived table (or a CTE, inlined) used as a FROM item under ``label``."""

    body: Project | PerUnitAggregate
    label: str
    unit: UnitColumn
    unit_name: str
    privacy = Privacy.UNIT_PRESERVING

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(o.alias_or_name for o in self.body.outputs)


Item = Source | Public | Named
Relation = Item | Filter | Join | Project | PerUnitAggregate

OUTER_CLAUSES = frozenset(
    {
        "expressions",
        "from_",
        "joins",
        "where",
        "group",
        "having",
        "order",
        "limit",
        "offset",
        "privacy",
        "with_",
    }
)
"""Clauses of the outer SELECT: its FROM side is the IR's; the rest is the plan's."""

BODY_CLAUSES = frozenset({"expressions", "from_", "joins", "where", "group", "distinct", "with_"})
"""Clauses a derived table or CTE over private rows may have."""

JOIN_ARGS = frozenset({"this", "on", "side", "kind"})
SOURCE_ARGS = frozenset({"this", "db", "catalog", "alias"})
SUBQUERY_ARGS = frozenset({"this", "alias"})


def build(select: exp.Select, relations: Relations, catalog: Catalog) -> Relation:
    """The outer query's FROM side (its items, joins and WHERE) as a relation.

    ``relations`` must have resolved the unit and checked every private item
    (``Relations.resolve``, ``Relations.check_reached``).
    """
    refuse_unrepresented(select, OUTER_CLAUSES)
    return _Builder(relations, catalog).block(select)


def private_rows(
    relation: Relation, projection: list[exp.Expr], unit: exp.Column, ctes: list[exp.CTE]
) -> exp.Select:
    """``SELECT projection FROM relation`` over the rows whose unit is not NULL: the rows of
    the ``__source`` stage. ``ctes`` are the public CTEs the relation may read."""
    query = _select(relation, projection)
    kept = exp.Not(this=exp.Is(this=unit.copy(), expression=exp.null()))
    where = query.args.get("where")
    query.set("where", exp.Where(this=exp.and_(where.this, kept) if where else kept))
    if ctes:
        query.set("with_", exp.With(expressions=[c.copy() for c in ctes]))
    return query


def public_ctes(select: exp.Select, relations: Relations) -> list[exp.CTE]:
    """The query's CTEs over public data, outermost first: private CTEs are inlined where
    they are read, and a public FROM item or subquery may still name a public one."""
    found = []
    for cte in select.find_all(exp.CTE):
        if relations.is_private(_reference(cte)):
            continue
        if any(
            isinstance(a, exp.CTE) and not relations.is_private(_reference(a))
            for a in _ancestors(cte)
        ):
            continue  # defined inside another public CTE, which carries it
        found.append(cte)
    return found


def _reference(cte: exp.CTE) -> exp.Table:
    return exp.Table(this=exp.to_identifier(cte.alias_or_name))


def _ancestors(node: exp.Expr) -> Iterator[exp.Expr]:
    while node.parent is not None:
        node = node.parent
        yield node


def refuse_unrepresented(node: exp.Expr, allowed: frozenset[str]) -> None:
    """Refuse a node with any argument the IR has no place for."""
    extra = sorted(k for k, v in node.args.items() if v and k not in allowed)
    if extra:
        raise UnsupportedQuery(
            f"{extra[0].rstrip('_').upper()} is not supported with private data here "
            f"({node.key.upper()})"
        )


class _Builder:
    """Builds relations from the checked query, reading ``Relations``' resolution."""

    def __init__(self, relations: Relations, catalog: Catalog) -> None:
        self.relations = relations
        self.catalog = catalog

    def block(self, select: exp.Select) -> Relation:
        """One SELECT's FROM items, joins and WHERE."""
        found = items(select)
        if not found:
            raise UnsupportedQuery("a query over private data reads it in FROM")
        relation: Relation = self.item(found[0], select)
        for join in select.args.get("joins") or []:
            refuse_unrepresented(join, JOIN_ARGS)
            right = self.item(join.this, select)
            on = join.args.get("on")
            relation = Join(
                relation,
                right,
                (join.side or "").upper(),
                (join.kind or "").upper(),
                self.condition(on, select) if on is not None else None,
            )
        where = select.args.get("where")
        if where is not None:
            relation = Filter(relation, self.condition(where.this, select))
        return relation

    def item(self, item: exp.Expr, select: exp.Select) -> Item:
        label = item.alias_or_name
        if not self.relations.is_private(item):
            return self.public(item, label)
        body = self.relations.body(item)
        unit_name = self.relations.linked.get(id(item))
        if unit_name is None:  # Relations reaches every private item before this runs
            raise UnsupportedQuery(f"{label} is not joined on the privacy unit")
        unit = self.unit(exp.column(unit_name, table=label), select)
        if body is None:
            if not isinstance(item, exp.Table) or IDENTITY not in item.meta:
                raise UnsupportedQuery(f"{label} cannot be read as a private source")
            refuse_unrepresented(item, SOURCE_ARGS)
            columns = tuple(self.catalog.columns(source_sql(item)))
            return Source(item, label, unit, unit_name, columns, self.catalog.read(item))
        if isinstance(item, exp.Subquery):
            refuse_unrepresented(item, SUBQUERY_ARGS)
        else:
            refuse_unrepresented(item, SOURCE_ARGS)
        if not isinstance(body, exp.Select):
            raise UnsupportedQuery(f"{body.key.upper()} over private data is not allowed")
        return Named(self.body(body), label, unit, unit_name)

    def public(self, item: exp.Expr, label: str) -> Public:
        """A public item: a table, a table function or a derived table that reads nothing
        of the query's other items (an implicitly lateral one would run per private row)."""
        if isinstance(item, (exp.Table, exp.Values, exp.Unnest)):
            if any(item.find_all(exp.Column)):
                raise UnsupportedQuery(
                    f"{label} reads columns of other FROM items: a table function or UNNEST "
                    "over private rows is not allowed"
                )
            return Public(item, label)
        if isinstance(item, exp.Subquery) and isinstance(item.this, exp.Query):
            scope = build_scope(item.this.copy())
            if scope is None or any(s.external_columns for s in scope.traverse()):
                raise UnsupportedQuery(
                    f"{label} reads columns of other FROM items: a lateral subquery over "
                    "private rows is not allowed"
                )
            return Public(item, label)
        raise UnsupportedQuery(
            f"{item.key.upper()} is not supported as a FROM item of a query over private data"
        )

    def body(self, select: exp.Select) -> Project | PerUnitAggregate:
        refuse_unrepresented(select, BODY_CLAUSES)
        distinct = select.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            raise UnsupportedQuery("DISTINCT ON inside a subquery over private data mixes units")
        relation = self.block(select)
        outputs = tuple(never_raise_named(o) for o in select.expressions)
        group = select.args.get("group")
        if group is not None:
            if distinct is not None:
                raise UnsupportedQuery("DISTINCT with GROUP BY over private data is not supported")
            return PerUnitAggregate(relation, tuple(group.expressions), outputs)
        return Project(relation, outputs, distinct is not None)

    def unit(self, column: exp.Column, select: exp.Select) -> UnitColumn:
        """The base column a unit column passes unchanged, by catalogue identity."""
        origin = self.relations.origin(column, select)
        if origin is None or IDENTITY not in origin.source.meta:
            raise UnsupportedQuery(f"{column.sql()} does not pass a source's unit unchanged")
        return UnitColumn(origin.source.meta[IDENTITY], origin.column.lower())

    def condition(self, node: exp.Expr, select: exp.Select) -> exp.Expr:
        """A join or WHERE condition, guarded conjunct by conjunct; an equality of two
        columns of one type stays bare (``same_type``: it cannot fail), so that
        DuckDB can join on it by hash and push each guarded conjunct down on its own."""
        parts = []
        for conjunct in _conjuncts(node):
            if self.relations.joins_units(conjunct, select):
                parts.append(self.unit_equality(conjunct, select))
            elif self.same_type(conjunct, select):
                parts.append(conjunct.copy())
            else:
                parts.append(condition(conjunct))
        return exp.and_(*parts)

    def unit_equality(self, node: exp.EQ, select: exp.Select) -> exp.Expr:
        """Two items' unit columns compared as one identity: an equality DuckDB makes
        coarser — a cast that rounds (BIGINT against DOUBLE: 2^60 + k are one DOUBLE for
        k < 128), a collation (``NOCASE`` on either side) — would pair one unit's rows with
        other units' and move a count by hundreds (red team 12). Unit columns must be of one
        type, or integers that DuckDB compares exactly; text compares byte for byte
        (``COLLATE POSIX``), whatever collation either column has."""
        origins = [self.relations.origin(s, select) for s in (node.this, node.expression)]
        kinds = None
        if origins[0] is not None and origins[1] is not None:
            kinds = self.types_of(origins[0], origins[1])
        if kinds is None or not _exactly_comparable(*kinds):
            shown = " and ".join(kinds) if kinds else "unknown types"
            raise UnsupportedQuery(
                f"the privacy unit is joined between columns of {shown}: join unit columns "
                "of one type (DuckDB's equality between others can make distinct units equal)"
            )
        if exp.DataType.build(kinds[0], dialect="duckdb").is_type(*exp.DataType.TEXT_TYPES):
            return exp.EQ(this=byte_for_byte(node.this), expression=byte_for_byte(node.expression))
        return node.copy()

    def same_type(self, node: exp.Expr, select: exp.Select) -> bool:
        """Whether ``node`` is an equality of two columns that pass base columns of one
        type unchanged: one base column (same identity and column), or two whose declared
        types are the same type name (ENUMs spelled with their members), so the comparison
        casts nothing and cannot fail."""
        if not isinstance(node, exp.EQ):
            return False
        sides = (node.this, node.expression)
        if not all(isinstance(s, exp.Column) and s.table for s in sides):
            return False
        origins = [self.relations.origin(s, select) for s in sides]
        if any(o is None or IDENTITY not in o.source.meta for o in origins):
            return False
        first, second = (UnitColumn(o.source.meta[IDENTITY], o.column.lower()) for o in origins)
        if first == second:
            return True
        kinds = self.types_of(origins[0], origins[1])
        return kinds is not None and kinds[0] == kinds[1]

    def types_of(self, first: Origin, second: Origin) -> tuple[str, str] | None:
        """Two base columns' types as the engine binds them, in one statement over their
        sources (schemas only, no rows read); None if the engine cannot say."""
        columns = []
        sources = []
        for i, origin in enumerate((first, second)):
            bare = origin.source.copy()
            bare.set("alias", exp.TableAlias(this=exp.to_identifier(f"__s{i}")))
            sources.append(bare)
            columns.append(exp.column(origin.column, table=f"__s{i}", quoted=True))
        statement = exp.Select(
            expressions=columns,
            from_=exp.From(this=sources[0]),
            joins=[exp.Join(this=sources[1], kind="CROSS")],
        )
        try:
            found = self.catalog.types(statement.sql(dialect="duckdb"))
        except PrivacyError:
            return None
        return (found[0], found[1]) if len(found) == 2 else None


EXACT_INTEGERS = INTEGERS - {"UHUGEINT"}
"""Integer types DuckDB compares with one another in a type that holds both (UHUGEINT
against any other is compared as DOUBLE)."""


def _exactly_comparable(first: str, second: str) -> bool:
    return first == second or {first, second} <= EXACT_INTEGERS


def _conjuncts(node: exp.Expr) -> Iterator[exp.Expr]:
    if isinstance(node, exp.Paren):
        yield from _conjuncts(node.this)
    elif isinstance(node, exp.And):
        yield from _conjuncts(node.this)
        yield from _conjuncts(node.expression)
    else:
        yield node


# -- generation ---------------------------------------------------------------------------


def _select(relation: Relation, projection: list[exp.Expr]) -> exp.Select:
    """``SELECT projection`` over one block: its items joined, then filtered."""
    where = None
    if isinstance(relation, Filter):
        relation, where = relation.input, relation.condition
    joins: list[Join] = []
    while isinstance(relation, Join):
        joins.insert(0, relation)
        relation = relation.left
    if not isinstance(relation, (Source, Public, Named)):
        raise UnsupportedQuery("a query over private data reads it in FROM")
    block = [relation, *(j.right for j in joins)]
    private = sum(1 for i in block if i.privacy is Privacy.UNIT_PRESERVING)
    cap = join_cap(private) if private > 1 else None
    query = exp.Select(expressions=projection, from_=exp.From(this=_item(relation, cap)))
    query.set(
        "joins",
        [
            exp.Join(
                this=_item(j.right, cap),
                on=j.condition.copy() if j.condition is not None else None,
                side=j.side or None,
                kind=j.kind or None,
            )
            for j in joins
        ],
    )
    if where is not None:
        query.set("where", exp.Where(this=where.copy()))
    return query


def _item(item: Item, cap: int | None) -> exp.Expr:
    """A FROM item; a private one capped at ``cap`` rows per unit when it is joined."""
    if isinstance(item, Public):
        return item.item.copy()
    alias = exp.TableAlias(this=exp.to_identifier(item.label))
    if isinstance(item, Source):
        read: exp.Expr = item.read.copy()
        read.set("alias", alias)
    else:
        read = exp.Subquery(this=_body(item.body), alias=alias)
    if cap is None:
        return read
    return exp.Subquery(this=_capped(read, item, cap), alias=alias.copy())


def _body(body: Project | PerUnitAggregate) -> exp.Select:
    query = _select(body.input, [o.copy() for o in body.outputs])
    if isinstance(body, PerUnitAggregate):
        query.set("group", exp.Group(expressions=[k.copy() for k in body.keys]))
    elif body.distinct:
        query.set("distinct", exp.Distinct())
    return query


def _capped(read: exp.Expr, item: Source | Named, cap: int) -> exp.Query:
    """At most ``cap`` rows of each unit of one FROM item, the smallest by keyed hash of
    (secret, unit, row): which rows a unit keeps depends on that unit's rows only.

    The item is read once, every row ranked within its unit. Passing small units whole
    and ranking only the rows of large ones is cheaper on one table, but needs the item
    three times (its rows twice, its unit sizes in each branch's IN), and nested joins
    of derived tables multiplied that to 4^depth readings of one leaf, each evaluating
    its conditions again: a condition on one unit's rows made a query 4–5 times slower
    (red team 8). Rows without a unit are dropped here: no join on the unit pairs them,
    and the rows they would pad are dropped with them in ``__source``.
    """
    label = item.label
    unit = exp.column(item.unit_name, table=label, quoted=True)
    row = [exp.column(c, table=label, quoted=True) for c in item.columns]
    taken = {c.lower() for c in item.columns}
    rank_name = RANK  # never one of the item's columns, or the filter would read that one
    while rank_name in taken:
        rank_name += "_"
    order = secret_hash(unit.copy(), *row)
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=[unit.copy()],
        order=exp.Order(expressions=[exp.Ordered(this=order)]),
    )
    ranked = exp.Subquery(
        this=exp.Select(
            expressions=[c.copy() for c in row] + [exp.alias_(rank, rank_name)],
            from_=exp.From(this=read.copy()),
            where=exp.Where(this=exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null()))),
        ),
        alias=exp.TableAlias(this=exp.to_identifier(label)),
    )
    kept = exp.LTE(this=exp.column(rank_name, table=label), expression=exp.Literal.number(cap))
    return exp.Select(
        expressions=[c.copy() for c in row], from_=exp.From(this=ranked), where=exp.Where(this=kept)
    )
