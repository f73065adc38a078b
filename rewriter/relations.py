"""Private relations: which FROM items read private data, and which column carries the unit.

Private data may be read only as FROM items: base sources (tables, views, files) and
derived tables or CTEs whose bodies are row-level or per-unit (grouped by the unit) SELECTs
over private items. Each private item exposes one *unit column*, and the private items of
one FROM are joined on it. Under these rules every row the outer FROM produces comes from
rows of exactly one unit, so removing a unit removes exactly the rows derived from it
(docs/privacy.md section 2.1).
Anything else that reads private data — a subquery in WHERE or SELECT, an aggregate across
units or a window inside a derived table, a join of private items on another column — is
refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlglot import exp

from rewriter.catalog import Catalog
from rewriter.errors import InvalidPrivacyUnit, UnsupportedQuery

PER_UNIT_AGGREGATES = frozenset(
    {
        exp.Count,
        exp.CountIf,
        exp.Sum,
        exp.Avg,
        exp.Min,
        exp.Max,
        exp.LogicalAnd,
        exp.LogicalOr,
    }
)
"""Aggregates a per-unit subquery may use: none can fail on a value once its arguments are
guarded (SUM and AVG are taken in DOUBLE, which saturates at ±inf instead of overflowing),
and none depends on the order rows arrive in (FIRST, LAST, ANY_VALUE, ARG_MIN/ARG_MAX with
ties, LIST and STRING_AGG do: which value a unit keeps would be the engine's choice)."""

MAX_READINGS = 4
"""How many times one CTE over private data may run in one query (``refuse_private_rereads``)."""

PRIVATE_BODY = "privsql_private_body"
"""Meta flag on the SELECT body of a derived table or CTE over private data: generation
guards its row-level expressions so that no private value can make the query fail."""


@dataclass(frozen=True)
class Origin:
    """A base source's column that reaches a FROM item's column unchanged."""

    source: exp.Table
    column: str


def source_sql(source: exp.Table) -> str:
    """A base source as DuckDB reads it, without its alias."""
    bare = source.copy()
    bare.set("alias", None)
    return bare.sql(dialect="duckdb", copy=False)  # bare is a copy made to be printed


def items(select: exp.Select) -> list[exp.Expr]:
    """The FROM items of one SELECT: its FROM and each JOIN's table, in order."""
    from_ = select.args.get("from_")
    found = [from_.this] if from_ is not None else []
    return found + [join.this for join in select.args.get("joins") or []]


def over_from(select: exp.Select, expressions: list[exp.Expr]) -> exp.Select:
    """``SELECT expressions`` over copies of ``select``'s WITH, FROM and joins: to bind
    expressions of the query (their types) without touching it. (A list's ``copy()`` is
    shallow: setting it elsewhere would move the query's own joins out of it.)"""
    over = exp.Select(expressions=[e.copy() for e in expressions])
    for arg in ("with_", "from_", "joins"):
        value = select.args.get(arg)
        if value is not None:
            over.set(arg, [v.copy() for v in value] if isinstance(value, list) else value.copy())
    return over


def _conjuncts(node: exp.Expr | None) -> Iterator[exp.Expr]:
    if isinstance(node, exp.Paren):
        yield from _conjuncts(node.this)
    elif isinstance(node, exp.And):
        yield from _conjuncts(node.this)
        yield from _conjuncts(node.expression)
    elif node is not None:
        yield node


class Relations:
    """The private items of a query, resolved from its outermost SELECT down.

    ``units`` records, per base source, the column taken as its unit: a source that is
    read several times must be read with the same unit column every time, or the rows of
    one unit in one reading could join rows of another unit in the other.
    """

    def __init__(self, select: exp.Select, catalog: Catalog, private: list[exp.Table]) -> None:
        self.outer = select
        self.catalog = catalog
        names = [cte.alias_or_name.lower() for cte in select.find_all(exp.CTE)]
        if len(set(names)) < len(names):
            raise UnsupportedQuery("two CTEs share a name: give each CTE its own name")
        self.ctes = {cte.alias_or_name.lower(): cte.this for cte in select.find_all(exp.CTE)}
        self._private = {id(t) for t in private}
        self._reads: dict[int, bool] = {}
        self.reached: set[int] = set()
        self.units: dict[str, str] = {}
        self.linked: dict[int, str] = {}
        """Unit column name by private item (``id``), for every item resolved so far."""
        self.unit_item: exp.Expr | None = None
        """The item of the outer FROM that carries the unit ``PRIVACY_UNIT`` names."""

    # -- what an item is ------------------------------------------------------------------

    def body(self, item: exp.Expr) -> exp.Query | None:
        """The query behind a derived table or a CTE reference; None for a base source."""
        if isinstance(item, exp.Subquery):
            return item.this
        if (
            isinstance(item, exp.Table)
            and isinstance(item.this, exp.Identifier)
            and not item.db
            and item.name.lower() in self.ctes
        ):
            return self.ctes[item.name.lower()]
        return None

    def is_private(self, item: exp.Expr) -> bool:
        """Whether the item reads private data (directly, or anywhere in its body)."""
        body = self.body(item)
        if body is None:
            return id(item) in self._private
        if id(body) not in self._reads:
            self._reads[id(body)] = False  # a recursive CTE reads what its base case reads
            self._reads[id(body)] = any(
                self.is_private(t) for t in body.find_all(exp.Table, exp.Subquery) if t is not body
            )
        return self._reads[id(body)]

    def columns(self, item: exp.Expr) -> list[str]:
        """The column names a FROM item exposes."""
        alias = item.args.get("alias")
        if isinstance(alias, exp.TableAlias) and alias.columns:
            return [c.name for c in alias.columns]
        body = self.body(item)
        if body is None:
            if isinstance(item, exp.Table) and not isinstance(item.this, exp.GenerateSeries):
                return list(self.catalog.columns(source_sql(item)))
            return []
        while isinstance(body, exp.SetOperation):
            body = body.this
        if not isinstance(body, exp.Select):
            return []
        select = body
        names: list[str] = []
        for output in select.expressions:
            covered = _star_of(output)
            if covered is None:
                names.append(output.alias_or_name)
                continue
            excluded = {c.name.lower() for c in covered.args.get("except_") or []}
            for inner in items(select):
                if output is covered or _label(inner).lower() == output.table.lower():
                    names += [c for c in self.columns(inner) if c.lower() not in excluded]
        return names

    def item_of(self, column: exp.Column, select: exp.Select) -> exp.Expr | None:
        """The FROM item of ``select`` a column belongs to (the first, if ambiguous)."""
        name = column.name.lower()
        for item in items(select):
            if column.table:
                if _label(item).lower() == column.table.lower():
                    return item
            elif name in {c.lower() for c in self.columns(item)}:
                return item
        return None

    # -- resolving the unit ---------------------------------------------------------------

    def resolve(self, unit: exp.Column) -> tuple[exp.Column, exp.Expr]:
        """The unit as a qualified column of the outer FROM, and the item it belongs to.

        Every private item of the query must be reached from it: through the unit column of
        a derived table, or through a join on the unit.
        """
        item = self.item_of(unit, self.outer)
        if item is None or not self.is_private(item):
            raise InvalidPrivacyUnit(
                f"{unit.sql()} is not a column of a private source (a subquery or CTE over "
                "private data must keep the unit column)"
            )
        self.verify(item, unit.name)
        self.link(self.outer, item)
        self.unit_item = item
        return exp.column(self.linked[id(item)], table=_label(item), quoted=True), item

    def verify(self, item: exp.Expr, name: str) -> None:
        """Check that column ``name`` of a private item is its unit, recursively."""
        if id(item) in self.linked:
            if self.linked[id(item)].lower() != name.lower():
                raise UnsupportedQuery(
                    f"{_label(item)} is joined on {name} and on {self.linked[id(item)]}: "
                    "a private source has one privacy unit column"
                )
            return
        alias = item.args.get("alias")
        if isinstance(alias, exp.TableAlias) and alias.columns:
            raise UnsupportedQuery(
                f"column lists in the alias of private source {_label(item)} are not supported"
            )
        body = self.body(item)
        if body is None:
            self.linked[id(item)] = self._verify_source(item, name)
        else:
            self.linked[id(item)] = self._verify_body(item, body, name)
        self.reached.add(id(item))

    def _verify_source(self, source: exp.Table, name: str) -> str:
        columns = {c.lower(): c for c in self.catalog.columns(source_sql(source))}
        if name.lower() not in columns:
            raise InvalidPrivacyUnit(f"{name} is not a column of the private source")
        protection = self.catalog.protection(source)
        if protection and protection.privacy_unit.lower() != name.lower():
            raise InvalidPrivacyUnit(
                f"the owner of {_label(source)} declared its privacy unit as "
                f"{protection.privacy_unit}, not {name}"
            )
        key = self.catalog.identity(source)
        if self.units.setdefault(key, name.lower()) != name.lower():
            raise UnsupportedQuery(
                f"{source.name} is read with two different unit columns; a private source "
                "has one privacy unit column"
            )
        return columns[name.lower()]

    def _verify_body(self, item: exp.Expr, body: exp.Query, name: str) -> str:
        if isinstance(body, exp.SetOperation):
            raise UnsupportedQuery("set operations over private data are not allowed")
        if not isinstance(body, exp.Select):
            raise UnsupportedQuery(f"{body.key.upper()} over private data is not allowed")
        self._refuse_body_shapes(body)
        body.meta[PRIVATE_BODY] = True
        passed = self._output(body, name)
        if passed is None:
            raise InvalidPrivacyUnit(
                f"{_label(item)} reads private data but does not keep its privacy unit "
                f"unchanged as column {name}"
            )
        inner, inner_name = passed
        if not self.is_private(inner):
            raise InvalidPrivacyUnit(f"{name} of {_label(item)} is not a private unit column")
        self._refuse_cross_unit_grouping(body, inner, inner_name)
        self.verify(inner, inner_name)
        self.link(body, inner)
        return name

    def _refuse_cross_unit_grouping(self, body: exp.Select, unit: exp.Expr, name: str) -> None:
        """GROUP BY and aggregates inside a private derived table only per unit.

        Grouped by columns that include the unit, each group holds one unit's rows, so the
        body still maps a unit's rows to rows of that unit only. Keys are columns and each
        output a key or one aggregate of ``PER_UNIT_AGGREGATES`` (their arguments guarded
        at generation), so that no value can make the grouping fail; HAVING and expressions
        over aggregates belong to the outer query, where they are guarded.
        """
        group = body.args.get("group")
        if not group and not any(self._aggregates(output) for output in body.expressions):
            return
        keys = group.expressions if group else []
        if (
            not group
            or any(group.args.get(a) for a in ("rollup", "cube", "grouping_sets", "all"))
            or not all(isinstance(k, exp.Column) for k in keys)
            or not any(
                self.item_of(k, body) is unit and k.name.lower() == name.lower() for k in keys
            )
        ):
            raise UnsupportedQuery(
                "aggregates inside a subquery over private data must be per unit: GROUP BY "
                "columns that include the unit column"
            )
        if body.args.get("having") is not None:
            raise UnsupportedQuery(
                "HAVING inside a subquery over private data is not allowed: filter in the "
                "outer WHERE"
            )
        for output in body.expressions:
            value = output.unalias()
            if isinstance(value, exp.Column) or (
                type(value) in PER_UNIT_AGGREGATES
                and not any(self._aggregates(a) for a in value.iter_expressions())
            ):
                continue
            raise UnsupportedQuery(
                f"{output.sql(dialect='duckdb')}: a per-unit subquery outputs its GROUP BY "
                "columns and single aggregates (COUNT, SUM, AVG, MIN, MAX, ...); compute "
                "with them in the outer query"
            )

    def _output(self, body: exp.Select, name: str) -> tuple[exp.Expr, str] | None:
        """The inner item and column a derived table's output ``name`` passes through.

        An unqualified column merged by USING or NATURAL in a RIGHT or FULL join is the
        COALESCE of both sides — not a column of either — and passes nothing through.
        """
        merged = _merges_columns(body)
        for output in body.expressions:
            covered = _star_of(output)
            if covered is not None:
                if merged and output is covered:
                    break
                if covered.args.get("replace") and any(
                    r.alias_or_name.lower() == name.lower() for r in covered.args["replace"]
                ):
                    break
                excluded = {c.name.lower() for c in covered.args.get("except_") or []}
                for inner in items(body):
                    if output is covered or _label(inner).lower() == output.table.lower():
                        columns = {c.lower(): c for c in self.columns(inner)}
                        if name.lower() in columns and name.lower() not in excluded:
                            return inner, columns[name.lower()]
                continue
            if output.alias_or_name.lower() != name.lower():
                continue
            column = output.unalias()
            if merged and isinstance(column, exp.Column) and not column.table:
                break
            if isinstance(column, exp.Column) and not isinstance(column.this, exp.Star):
                inner = self.item_of(column, body)
                if inner is not None:
                    return inner, column.name
            break
        return None

    def link(self, select: exp.Select, unit_item: exp.Expr) -> None:
        """Resolve every other private item of ``select`` through a join on the unit.

        A link is a conjunct ``a.x = b.y`` of an ON or WHERE condition (or a USING column)
        where one side is a known unit column: the other side's item is then read with
        that column as its unit. What the conjunction adds beyond the equality only drops
        pairs of rows, each pair from one unit.
        """
        for join in select.args.get("joins") or []:
            method, kind = (join.method or "").upper(), (join.kind or "").upper()
            if method in ("POSITIONAL", "ASOF"):
                raise UnsupportedQuery(
                    f"{method} JOIN with private data is not allowed: which rows it pairs "
                    "depends on other units' rows"
                )
            if kind in ("SEMI", "ANTI") and join.this is unit_item:
                raise InvalidPrivacyUnit(
                    f"the privacy unit must be a column of the output; {kind} JOIN drops "
                    f"{_label(unit_item)}"
                )
        pairs = list(self._equalities(select))
        pending = [i for i in items(select) if i is not unit_item and self.is_private(i)]
        progress = True
        while pending and progress:
            progress = False
            for known, other in [*pairs, *((b, a) for a, b in pairs)]:
                if known is None or other is None or not self._is_unit(*known):
                    continue
                if any(p is other[0] for p in pending) and self._verifies(*other):
                    pending = [p for p in pending if p is not other[0]]
                    progress = True
        if pending:
            raise UnsupportedQuery(
                f"private sources {_label(unit_item)} and {_label(pending[0])} must be joined "
                "on the privacy unit (ON a.unit = b.unit)"
            )

    def _verifies(self, item: exp.Expr, name: str) -> bool:
        """Whether ``name`` is the unit of ``item``: an equality on another column is just
        a filter, and the join may still be on the unit through another conjunct."""
        try:
            self.verify(item, name)
        except InvalidPrivacyUnit:
            return False
        return True

    def _is_unit(self, item: exp.Expr, name: str) -> bool:
        return self.linked.get(id(item), "").lower() == name.lower()

    def joins_units(self, node: exp.Expr, select: exp.Select) -> bool:
        """Whether ``node`` equates the unit columns of two private items of ``select``."""
        if not isinstance(node, exp.EQ):
            return False
        sides = [node.this, node.expression]
        if not all(isinstance(side, exp.Column) for side in sides):
            return False
        found = [self._side(side, select) for side in sides]
        return (
            found[0] is not None
            and found[1] is not None
            and found[0][0] is not found[1][0]
            and all(self.is_private(item) and self._is_unit(item, name) for item, name in found)
        )

    def is_unit(self, column: exp.Column) -> bool:
        """Whether a column of the outer SELECT is the unit the query names.

        Another item's unit column equals it on inner-joined rows but may be NULL where an
        outer join found no match, so COUNT(DISTINCT) of it would not count units.
        """
        item = self.item_of(column, self.outer)
        return item is self.unit_item and self._is_unit(item, column.name)

    def _equalities(
        self, select: exp.Select
    ) -> Iterator[tuple[tuple[exp.Expr, str] | None, tuple[exp.Expr, str] | None]]:
        """Column pairs that every row of ``select``'s FROM has equal."""
        conditions = [j.args.get("on") for j in select.args.get("joins") or []]
        where = select.args.get("where")
        conditions.append(where.this if where is not None else None)
        for condition in conditions:
            for conjunct in _conjuncts(condition):
                if isinstance(conjunct, exp.EQ) and all(
                    isinstance(side, exp.Column) for side in (conjunct.this, conjunct.expression)
                ):
                    yield self._side(conjunct.this, select), self._side(conjunct.expression, select)
        previous = items(select)[:1]
        for join in select.args.get("joins") or []:
            for column in join.args.get("using") or []:
                name = column.name
                for item in previous:
                    if name.lower() in {c.lower() for c in self.columns(item)}:
                        yield (item, name), (join.this, name)
            previous.append(join.this)

    def _side(self, column: exp.Column, select: exp.Select) -> tuple[exp.Expr, str] | None:
        item = self.item_of(column, select)
        return None if item is None else (item, column.name)

    def refuse_outside_from(self) -> None:
        """Refuse a subquery over private data anywhere but as a FROM item (or a CTE)."""
        for query in self.outer.find_all(exp.Select):
            parent = query.parent
            if (
                query is self.outer
                or isinstance(parent, (exp.CTE, exp.SetOperation))
                or (isinstance(parent, exp.Subquery) and self._is_from_item(parent))
            ):
                continue
            if any(self.is_private(t) for t in query.find_all(exp.Table)):
                raise UnsupportedQuery(
                    "private data may only be read in FROM: a subquery over private data in "
                    "WHERE, SELECT, HAVING, ORDER BY or LIMIT is not allowed"
                )

    def refuse_private_rereads(self) -> None:
        """Refuse a CTE over private data that would run more than MAX_READINGS times.

        A CTE runs again wherever it is read, so one read twice by a CTE that is itself
        read twice runs four times, and k such levels 2^k times — while the checks that
        bound a query's work per private row (``growth``, ``fanout``, the join cap) see its
        body once. A condition on one unit's rows inside it then decided whether a query
        took 2 s or 126 s (red team 7). A body's runs are the sum, over the places that read
        it, of the runs of the CTE each place is in (the outer query runs once); at most
        MAX_READINGS, the work bounds hold up to that factor.
        """
        readers: dict[str, list[str | None]] = {}
        for table in self.outer.find_all(exp.Table):
            body = self.body(table)
            if body is None or isinstance(table.parent, exp.CTE) or not self.is_private(table):
                continue
            cte = table.find_ancestor(exp.CTE)
            readers.setdefault(table.name.lower(), []).append(
                cte.alias_or_name.lower() if cte is not None else None
            )
        runs: dict[str | None, int] = {None: 1}

        def runs_of(name: str | None) -> int:
            if name not in runs:
                runs[name] = 0  # a CTE read by itself: the recursion is refused elsewhere
                runs[name] = sum(runs_of(reader) for reader in readers.get(name, []))
                if runs[name] > MAX_READINGS:
                    raise UnsupportedQuery(
                        "a CTE over private data would run more than "
                        f"{MAX_READINGS} times (each reading runs it again, and a CTE read "
                        "by a CTE read twice runs four times): read it fewer times"
                    )
            return runs[name]

        for name in readers:
            runs_of(name)

    def _is_from_item(self, node: exp.Expr) -> bool:
        return isinstance(node.parent, (exp.From, exp.Join)) and node.parent.this is node

    def check_reached(self) -> None:
        """Refuse private data read anywhere but as a FROM item resolved from the unit."""
        for node in self.outer.find_all(exp.Table, exp.Subquery):
            if self.is_private(node) and id(node) not in self.reached:
                raise UnsupportedQuery(
                    "private data may only be read as a FROM item joined on the privacy unit: "
                    "not in a subquery in WHERE, SELECT, HAVING, ORDER BY or LIMIT, nor in an "
                    "unused CTE"
                )

    def _refuse_body_shapes(self, body: exp.Select) -> None:
        """What no derived table or CTE over private data may do: mix rows of several units."""
        distinct = body.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            raise UnsupportedQuery("DISTINCT ON inside a subquery over private data mixes units")
        if any(body.find_all(exp.Window)) or body.args.get("qualify"):
            raise UnsupportedQuery("window functions over private data are not allowed")
        if any(body.args.get(m) is not None for m in ("limit", "offset", "order", "fetch")):
            raise UnsupportedQuery(
                "ORDER BY, LIMIT and OFFSET inside a subquery over private data are not "
                "allowed: the rows a LIMIT keeps depend on other units' rows"
            )
        if body.args.get("sample") or any(body.find_all(exp.TableSample)):
            raise UnsupportedQuery("sampling private data is not allowed")

    def _aggregates(self, node: exp.Expr) -> bool:
        return any(
            isinstance(f, exp.AggFunc)
            or (isinstance(f, exp.Anonymous) and f.name.lower() in self.catalog.aggregates)
            for f in node.find_all(exp.Func)
        )

    # -- where a column comes from --------------------------------------------------------

    def origin(self, column: exp.Column, select: exp.Select | None = None) -> Origin | None:
        """The base column a column of ``select`` (the outer one by default) passes through."""
        select = select or self.outer
        item = self.item_of(column, select)
        if item is None:
            return None
        body = self.body(item)
        if body is None:
            return Origin(item, column.name) if isinstance(item, exp.Table) else None
        if not isinstance(body, exp.Select):
            return None
        passed = self._output(body, column.name)
        if passed is None:
            return None
        inner, name = passed
        return self.origin(exp.column(name, table=_label(inner)), body)


def _label(item: exp.Expr) -> str:
    return item.alias_or_name


def _merges_columns(select: exp.Select) -> bool:
    """Whether a RIGHT or FULL join of ``select`` merges same-named columns (USING, NATURAL)."""
    return any(
        (join.side or "").upper() in ("RIGHT", "FULL")
        and (join.args.get("using") or (join.method or "").upper() == "NATURAL")
        for join in select.args.get("joins") or []
    )


def _star_of(output: exp.Expr) -> exp.Expr | None:
    """The star node when a select item is ``*`` or ``t.*`` (with EXCLUDE/REPLACE)."""
    if isinstance(output, exp.Star):
        return output
    if isinstance(output, exp.Column) and isinstance(output.this, exp.Star):
        return output
    return None
