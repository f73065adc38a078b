"""Analysis: which sources are private, which columns reach which aggregate, what is refused.

Every refusal of SPEC section 2 that can be decided from the SQL text and the
catalogue happens here, before any private data is read. The result is an
``Analysis``: the private source and its unit, the GROUP BY keys (and the public
domain of each key where one is known), and the DP aggregates the query uses.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from rewriter.aggregates import SPECS, AggregateKind, of_node
from rewriter.binding import check_binding
from rewriter.catalog import Bounds, Catalog
from rewriter.dialect import PrivSQL, output_name, to_sql
from rewriter.errors import (
    InvalidOption,
    InvalidPrivacyUnit,
    MissingBounds,
    MissingPrivacyUnit,
    NonDPAggregate,
    NonPrivateOutput,
    PrivacyError,
    StatementNotAllowed,
    UnsupportedQuery,
)
from rewriter.expressions import Clamped, PrivacyUnit
from rewriter.fanout import check_fan_out
from rewriter.functions import refuse_defined, refuse_unlisted, refuse_unsafe_public
from rewriter.growth import refuse_growth
from rewriter.ir import Relation, build, public_ctes
from rewriter.options import PrivacyOptions, read_options
from rewriter.relations import PRIVATE_BODY, Relations, over_from
from rewriter.resolve import IDENTITY, check_source, resolve
from rewriter.sqlbuild import CANONICAL_KEYS
from rewriter.statements import unparsed
from rewriter.temporal import measure_as_numbers

FORBIDDEN_FUNCTIONS = frozenset(
    {"getvariable", "current_setting", "error", "query", "query_table", "read_text", "read_blob"}
    | {"enum_range", "enum_range_boundary", "enum_first", "enum_last", "enum_code", "typeof"}
)
"""Scalar functions that read session state or data behind the analyser's back — an ENUM
type's member list is data (``CREATE TYPE … AS ENUM (SELECT DISTINCT …)``), and these
print it or a member's position, from any value of the type (red team 14)."""


@dataclass(frozen=True)
class Aggregate:
    """One DP aggregate as the analyst wrote it, with its row-level argument and bounds."""

    node: exp.Expr
    kind: str
    argument: exp.Expr | None = None
    bounds: Bounds | None = None
    p: float | None = None
    """The quantile a QUANTILE, MEDIAN or PERCENTILE_CONT asks for."""


@dataclass(frozen=True)
class Key:
    """A GROUP BY key and, when its values are public, the query listing them."""

    expression: exp.Expr
    domain: exp.Query | None
    size: int | None = None
    """How many public values the domain lists, when it is a list."""
    kind: exp.DataType | None = None
    """The key's type when the keys are released from the data (partition selection: one
    of them has no public values): one value per group, so ``generate`` writes each in the
    one form its group has (``canonical_key``)."""


@dataclass(frozen=True)
class Analysis:
    """A query that passed every check, described for the planner."""

    select: exp.Select
    options: PrivacyOptions
    source: exp.Expr
    """The FROM item of the outermost SELECT that carries the unit."""
    unit: exp.Column
    keys: tuple[Key, ...]
    aggregates: tuple[Aggregate, ...]
    sources: tuple[exp.Table, ...]
    written: str = ""
    """The query as the analyst wrote it (normalised, without its clause): its label."""
    temporal: Mapping[str, str] = field(default_factory=dict)
    """The DuckDB type of each output that is a date or timestamp aggregate, measured as a
    number (``rewriter.temporal``), by output name."""
    rows: Relation | None = None
    """The FROM side (items, joins, WHERE) as the IR generation compiles (``rewriter.ir``)."""
    ctes: tuple[exp.CTE, ...] = ()
    """The public CTEs the FROM side may name (private ones are inlined in ``rows``)."""

    @property
    def unbounded(self) -> tuple[Aggregate, ...]:
        """Aggregates whose bounds BOUND AUTO must estimate privately."""
        return tuple(
            a
            for a in self.aggregates
            if a.argument is not None and a.bounds is None and SPECS[a.kind].bounded
        )

    def with_bounds(self, bounds: Mapping[str, Bounds]) -> Analysis:
        """This analysis with estimated bounds, by aggregate text, filled in."""
        aggregates = tuple(
            replace(a, bounds=bounds[to_sql(a.node)]) if to_sql(a.node) in bounds else a
            for a in self.aggregates
        )
        return replace(self, aggregates=aggregates)


SOURCE_PARTS = frozenset({"this", "db", "catalog", "alias"})
"""What a source named on its own (``protect``, ``DESCRIBE``) may be made of: its name, or
a Parquet reader call (checked by ``check_source``), and an alias."""


@dataclass(frozen=True)
class PublicQuery:
    """A query that reads only public data: it runs exactly as written, for free."""

    select: exp.Query


def parse(sql: str) -> exp.Query:
    """Parse one privsql statement, refusing anything that is not a single query."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=PrivSQL) if s is not None]
    except ParseError as error:
        raise unparsed(sql, error) from None
    if len(statements) != 1:
        raise StatementNotAllowed("send exactly one SELECT statement")
    statement = statements[0]
    for func in statement.find_all(exp.Func):
        start, end = func.meta.get("start"), func.meta.get("end")
        if start is not None and end is not None:
            func.meta["name"] = sql[start : end + 1]
    if not isinstance(statement, exp.Query):
        kind = statement.key.upper() if not isinstance(statement, exp.Command) else statement.name
        raise unparsed(sql, None, kind)
    _refuse_deep(statement)
    _refuse_unreadable(statement)
    return statement


MAX_DEPTH = 500
"""The deepest tree a query may parse to. sqlglot parses a flat chain (``a + a + … + a``,
``p OR p OR …``) without recursion but its scope analysis walks each column up the whole
chain: 20 000 terms (60 kB, a free query refused at the end) held a CPU for 130 s
(red team 28); 400 terms are answered in 0.7 s."""


def _refuse_deep(statement: exp.Query) -> None:
    stack = [(statement, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UnsupportedQuery("the query is nested too deeply")
        stack.extend((child, depth + 1) for child in node.iter_expressions())


PLAIN_WORDS = re.compile(r"\w+(?:\.\w+){0,2}")
"""What sqlglot may print without quotes: a word, or up to three dotted (a type's schema)."""


def _type_name(node: exp.Expr) -> str | None:
    """A user-defined type's name, which sqlglot prints as it was quoted, without quotes."""
    if isinstance(node, exp.DataType) and node.this == exp.DType.USERDEFINED:
        return str(node.args.get("kind") or "")
    return None


def _refuse_unreadable(statement: exp.Query) -> None:
    """Refuse a query whose SQL as privsql writes it does not read back as the same SQL.

    Everything privsql runs is written from the parsed tree, and a few of sqlglot's nodes
    print text the analyst quoted without its quotes: ``CAST(1 AS "oid) AS v, x FROM priv
    … --")`` became ``CAST(1 AS oid) AS v, x FROM priv …`` — a second query, run unchecked
    on the session's connection, that returned private rows for free (red team 19);
    ``EXTRACT("year) …" FROM ts)`` likewise. So the nodes sqlglot prints raw (a word, a
    user-defined type's name) must be plain words, and, as a second wall, the SQL privsql
    writes must read back as the same SQL."""
    for node in statement.walk():
        raw = node.name if isinstance(node, exp.Var) else _type_name(node)
        if raw is not None and not PLAIN_WORDS.fullmatch(raw):
            raise StatementNotAllowed(f"{raw!r} is not a plain name: it is not allowed here")
    written = statement.sql(dialect=PrivSQL)
    try:
        again = sqlglot.parse_one(written, read=PrivSQL).sql(dialect=PrivSQL)
    except ParseError:
        again = None
    if again != written:  # sqlglot may rewrite a node once (COUNT(DISTINCT a, b)), not twice
        raise StatementNotAllowed(
            "the query does not read back as written: a quoted name or type holds SQL"
        )


def analyze_source(source: str) -> exp.Table:
    """A source as the data owner names it (a table, a view or a Parquet reader), checked."""
    try:
        query = parse(f"SELECT * FROM {source}")
    except PrivacyError:
        raise StatementNotAllowed(f"{source} is not a source") from None
    tables = list(query.find_all(exp.Table))
    from_ = query.args.get("from_")
    if len(tables) != 1 or from_ is None or from_.this is not tables[0] or query.args.get(
        "joins"
    ):
        raise StatementNotAllowed(f"{source} is not a single source")
    if extra := sorted(k for k, v in tables[0].args.items() if v and k not in SOURCE_PARTS):
        # PIVOT's IN list, AT (VERSION => …), TABLESAMPLE: evaluated by DuckDB when the
        # source is described; DESCRIBE pub PIVOT (… IN (json_serialize_plan(…))) ran it
        # unchecked on the session's connection (red team 18)
        raise StatementNotAllowed(f"{source} is not a plain source ({extra[0]})")
    check_source(tables[0])
    return tables[0]


def analyze(
    sql: str,
    catalog: Catalog,
    keys: Mapping[str, Sequence[object]] | None = None,
) -> Analysis | PublicQuery:
    """Check a query against every rule and describe it for planning.

    ``keys`` lists public values for GROUP BY keys by output name, for this query.
    """
    try:
        return _analyze(sql, catalog, keys)
    except RecursionError:
        raise UnsupportedQuery("the query is nested too deeply") from None


def public_sources(catalog: Catalog) -> frozenset[str]:
    """The sources public as the catalogue is now: each one declared public that is no
    view, and each view declared public whose definition — every view in it read as the
    query it is — is a query over those alone (``analyze`` finds it public).

    A view is what it reads: one declared public over a private source, or replaced by one
    since, answered that source's rows exactly and for free (red team 34). Such a view is
    not public, so a query reads it as the query it is and is held to what it reads."""
    views = {name for name in catalog.public if name in catalog.views}
    tables = replace(catalog, public=catalog.public - views)
    return tables.public | {name for name in views if _over_public(catalog.views[name], tables)}


def _over_public(definition: str, catalog: Catalog) -> bool:
    """Whether a view's definition is a query over public data; one that cannot be read as
    a query, or is refused, is not."""
    try:
        create = sqlglot.parse_one(definition, read="duckdb")
        body = create.expression if isinstance(create, exp.Create) else None
        if not isinstance(body, exp.Query):
            return False
        return isinstance(analyze(body.sql(dialect="duckdb"), catalog), PublicQuery)
    except (PrivacyError, SqlglotError):
        return False


def _analyze(
    sql: str, catalog: Catalog, keys: Mapping[str, Sequence[object]] | None
) -> Analysis | PublicQuery:
    select = parse(sql)
    _refuse_forbidden(select, catalog)
    names = [output_name(item) for item in select.expressions] if isinstance(
        select, exp.Select
    ) else []
    text = select.copy()
    text.set("privacy", None)
    select = resolve(select, catalog, names)
    # before anything runs any part of it (type checks, fan-out counts): public parts run
    # as written, and a count of one's rows was an oracle on private data (red team 19)
    refuse_unsafe_public(select, catalog.builtins)
    private = _private_sources(select, catalog)
    if private:
        check_binding(select, catalog, sql)
    if not private:
        if any(select.find_all(PrivacyUnit)):
            raise InvalidPrivacyUnit("PRIVACY_UNIT names no private source: the query reads none")
        if any(select.find_all(Clamped)):
            raise InvalidOption("CLAMPED BETWEEN is only meaningful over private data")
        return PublicQuery(select)
    if not isinstance(select, exp.Select):
        raise StatementNotAllowed("set operations over private data are not allowed")
    temporal = measure_as_numbers(select, catalog)
    clause = select.args.get("privacy")
    for nested in select.find_all(PrivacyUnit):
        if nested is not clause:
            raise InvalidOption("PRIVACY_UNIT belongs to the outermost SELECT")
    if clause is None:
        raise MissingPrivacyUnit("the query reads private data: add PRIVACY_UNIT <column>")
    options = read_options(clause)
    _refuse_shapes(select)
    _refuse_duplicate_outputs(select)
    relations = Relations(select, catalog, private)
    relations.refuse_outside_from()
    relations.refuse_private_rereads()
    unit, source = relations.resolve(options.unit)
    relations.check_reached()
    rows = build(select, relations, catalog)  # refuses items that run per private row
    check_fan_out(select, relations, catalog)
    key_nodes = _group_keys(select)
    automatic = options.strategy in (None, "AUTO") or options.threshold == "AUTO"
    aggregates = _aggregates(select, relations, catalog, automatic)
    _refuse_raw_outputs(select, key_nodes)
    _refuse_unlisted_row_level(select, key_nodes, aggregates)
    refuse_growth(select, catalog)
    if not aggregates and not key_nodes:
        raise NonPrivateOutput("the query releases nothing private: add a DP aggregate")
    domains = _key_domains(select, key_nodes, relations, catalog, keys or {})
    kinds = _released_key_kinds(select, key_nodes, [d for d, _ in domains], catalog)
    query = select.copy()
    query.set("privacy", None)
    return Analysis(
        select=query,
        options=options,
        source=source,
        unit=unit,
        keys=tuple(
            Key(k, d, n, t) for k, (d, n), t in zip(key_nodes, domains, kinds, strict=True)
        ),
        aggregates=aggregates,
        sources=tuple(_sources(select)),
        written=to_sql(text, copy=False),  # text is a copy made to be printed
        temporal=temporal,
        rows=rows,
        ctes=tuple(public_ctes(select, relations)),
    )


def _function_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    return node.sql_name().lower() if isinstance(node, exp.Func) else node.key


def _refuse_forbidden(select: exp.Query, catalog: Catalog) -> None:
    for func in select.find_all(exp.Func):
        name = _function_name(func)
        if name in FORBIDDEN_FUNCTIONS:
            raise StatementNotAllowed(f"function {name} is not allowed in privsql queries")
    refuse_defined(select, catalog.defined, catalog.builtins)
    for kind in select.find_all(exp.DataType):
        if kind.this == exp.DType.USERDEFINED and _exists(kind, catalog):
            raise StatementNotAllowed(
                "casts to a user-defined type are not allowed: an ENUM type's members are "
                "data, and a cast to it tests whether a value is one"
            )
    reserved = catalog.reserved_schema.lower()
    for table in select.find_all(exp.Table):
        if reserved in (table.db.lower(), table.catalog.lower()):
            raise StatementNotAllowed(f"schema {catalog.reserved_schema} is privsql's own")


def _exists(kind: exp.DataType, catalog: Catalog) -> bool:
    """Whether a type the query names exists (else the type check says it does not)."""
    try:
        catalog.evaluate(f"SELECT CAST(NULL AS {kind.sql(dialect='duckdb')})")
    except PrivacyError:
        return False
    return True


def _sources(select: exp.Query) -> list[exp.Table]:
    """Every table or file the query reads: the resolved base sources."""
    return [t for t in select.find_all(exp.Table) if IDENTITY in t.meta]


def _private_sources(select: exp.Query, catalog: Catalog) -> list[exp.Table]:
    """Every source in the query that is not declared public."""
    return [table for table in _sources(select) if not catalog.is_public(table)]


def _refuse_shapes(select: exp.Select) -> None:
    if select.args.get("distinct"):
        raise UnsupportedQuery("SELECT DISTINCT over private data is not allowed")
    if any(select.find_all(exp.Window)) or select.args.get("qualify"):
        raise UnsupportedQuery("window functions over private data are not allowed")
    if select.args.get("sample") or any(select.find_all(exp.TableSample)):
        raise UnsupportedQuery("sampling private data is not allowed")
    outputs = _output_expressions(select)
    stars = [star for output in outputs for star in output.find_all(exp.Star)]
    if any(not isinstance(star.parent, exp.Count) for star in stars):
        raise NonPrivateOutput("SELECT * would output private rows; select aggregates instead")
    if any(output.find(exp.Columns) for output in outputs):
        raise NonPrivateOutput("COLUMNS(...) is not allowed over private data; name the columns")
    if any(select.find_all(exp.Pivot)):
        raise UnsupportedQuery("PIVOT and UNPIVOT are not allowed in a query over private data")
    if any(select.find_all(exp.Lateral)):
        raise UnsupportedQuery("LATERAL over private data is not allowed")
    group = select.args.get("group")
    if group and (
        group.args.get("rollup")
        or group.args.get("cube")
        or group.args.get("grouping_sets")
        or any(group.find_all(exp.Rollup, exp.Cube, exp.GroupingSets))
    ):
        raise UnsupportedQuery("GROUPING SETS, ROLLUP and CUBE are not allowed over private data")
    if group and group.args.get("all"):
        raise UnsupportedQuery("GROUP BY ALL is not allowed: name the keys")


def _refuse_unlisted_row_level(
    select: exp.Select, keys: list[exp.Expr], aggregates: tuple[Aggregate, ...]
) -> None:
    """Every expression evaluated on private rows uses only allow-listed SQL
    (``rewriter.functions``): the outer query's WHERE, join conditions, keys and aggregate
    arguments, and everything in the bodies of derived tables and CTEs over private data.
    What is computed from released values (outputs around aggregates, HAVING, ORDER BY)
    runs after the release and is not held to it."""
    bodies = [q for q in select.find_all(exp.Select) if q.meta.get(PRIVATE_BODY)]
    for query in (select, *bodies):
        where = query.args.get("where")
        parts = [where.this] if where is not None else []
        parts += [j.args["on"] for j in query.args.get("joins") or [] if j.args.get("on")]
        if query is not select:
            parts += [item.unalias() for item in query.expressions]
            group = query.args.get("group")
            parts += list(group.expressions) if group is not None else []
        for part in parts:
            refuse_unlisted(part)
    for node in [*keys, *(a.argument for a in aggregates if a.argument is not None)]:
        refuse_unlisted(node)


def _refuse_duplicate_outputs(select: exp.Select) -> None:
    """Two outputs of one name could not both be returned: refused before anything is spent."""
    seen: set[str] = set()
    for item in select.expressions:
        name = item.alias_or_name.lower()
        if name in seen:
            raise InvalidOption(f"two outputs are named {item.alias_or_name}: alias each one")
        seen.add(name)


def _group_keys(select: exp.Select) -> list[exp.Expr]:
    group = select.args.get("group")
    if not group:
        return []
    aliases = {s.alias.lower(): s.unalias() for s in select.expressions if s.alias}
    keys: list[exp.Expr] = []
    for node in group.expressions:
        if isinstance(node, exp.Literal) and not node.is_string:
            position = int(node.this)
            if not 1 <= position <= len(select.expressions):
                raise UnsupportedQuery(f"GROUP BY {position} is out of range")
            node = select.expressions[position - 1].unalias()
        elif isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases:
            node = aliases[node.name.lower()]
        if any(node.find_all(exp.AggFunc)) or any(node.find_all(exp.Subquery)):
            raise UnsupportedQuery("GROUP BY keys may not contain aggregates or subqueries")
        keys.append(node)
    return keys


def _output_expressions(select: exp.Select) -> list[exp.Expr]:
    outputs = list(select.expressions)
    for arg in ("having", "order"):
        if select.args.get(arg) is not None:
            outputs.append(select.args[arg])
    return outputs


def _is_aggregate(node: exp.Expr, catalog: Catalog) -> bool:
    if isinstance(node, exp.AggFunc):
        return True
    return isinstance(node, exp.Anonymous) and node.name.lower() in catalog.aggregates


def _aggregates(
    select: exp.Select, relations: Relations, catalog: Catalog, automatic: bool
) -> tuple[Aggregate, ...]:
    found: dict[str, Aggregate] = {}
    for output in _output_expressions(select):
        for node in output.find_all(exp.Func):
            if not _is_aggregate(node, catalog) or node.find_ancestor(exp.AggFunc):
                continue
            if isinstance(node.parent, exp.WithinGroup):
                node = node.parent
            aggregate = _classify(node, relations, catalog, automatic)
            found.setdefault(to_sql(node), aggregate)
    for where in (
        select.args.get("where"),
        *[j.args.get("on") for j in select.args.get("joins") or []],
    ):
        if where is not None and any(_is_aggregate(n, catalog) for n in where.find_all(exp.Func)):
            raise UnsupportedQuery("aggregates are not allowed in WHERE or ON")
    return tuple(found.values())


def _written_name(node: exp.Expr) -> str:
    """The function's name as the analyst typed it, where sqlglot kept it, else DuckDB's."""
    text = node.meta.get("name")
    return (text or node.sql(dialect=PrivSQL).split("(", 1)[0]).upper()


def _classify(node: exp.Expr, relations: Relations, catalog: Catalog, automatic: bool) -> Aggregate:
    name = _written_name(node)
    # PERCENTILE_CONT(p) WITHIN GROUP (...) holds its function: that is not nesting.
    own = node.this if isinstance(node, exp.WithinGroup) else node
    for inner in node.find_all(exp.Func):
        if inner is not node and inner is not own and _is_aggregate(inner, catalog):
            raise NonDPAggregate(f"aggregates nested inside {name} are not allowed")
    if any(node.find_all(exp.Subquery)):
        raise UnsupportedQuery(f"subqueries inside {name} are not allowed")
    if isinstance(node.parent, exp.Filter):
        raise UnsupportedQuery(f"{name} ... FILTER (WHERE ...) is not supported: use WHERE")
    if isinstance(node, exp.Count):
        return _classify_count(node, relations)
    if node.find(exp.Distinct) is not None:
        raise NonDPAggregate(f"{name} over DISTINCT values has no differentially private version")
    spec = of_node(node)
    if spec is not None and not spec.bounded:  # a count of rows its argument selects
        return Aggregate(node, spec.kind, argument=node.this)
    if spec is not None:
        argument, bounds = _bounded_argument(node.this, name, relations, catalog, automatic)
        return Aggregate(node, spec.kind, argument, bounds)
    if isinstance(node, (exp.Quantile, exp.Median, exp.PercentileCont, exp.PercentileDisc)) or (
        isinstance(node, exp.WithinGroup)
    ):
        return _classify_quantile(node, name, relations, catalog, automatic)
    raise NonDPAggregate(f"{name} has no differentially private version")


def _classify_quantile(
    node: exp.Expr, name: str, relations: Relations, catalog: Catalog, automatic: bool
) -> Aggregate:
    """QUANTILE(x, p), MEDIAN(x), QUANTILE_CONT(x, p), PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY x).

    ``CLAMPED BETWEEN`` may follow x or p (it bounds x either way); without it the owner's
    bounds for x apply.
    """
    if isinstance(node, exp.WithinGroup):
        order = node.expression.expressions if node.expression else []
        if len(order) != 1 or order[0].args.get("desc"):
            raise UnsupportedQuery(f"{name} needs WITHIN GROUP (ORDER BY one column, ascending)")
        value, fraction = order[0].this, node.this.this
    elif isinstance(node, exp.Median):
        value, fraction = node.this, exp.Literal.number(0.5)
    else:
        value, fraction = node.this, node.args.get("quantile") or node.args.get("expression")
    clamp = next((e for e in (value, fraction) if isinstance(e, Clamped)), None)
    if isinstance(fraction, Clamped):
        fraction = fraction.this
    p = _constant(fraction) if fraction is not None else None
    if p is None or not 0 <= p <= 1:
        raise InvalidOption(f"{name} needs a constant quantile between 0 and 1")
    if clamp is not None and clamp is not value:
        value = Clamped(this=value, low=clamp.args["low"], high=clamp.args["high"])
    argument, bounds = _bounded_argument(value, name, relations, catalog, automatic)
    return Aggregate(node, AggregateKind.QUANTILE, argument, bounds, p)


def _classify_count(node: exp.Count, relations: Relations) -> Aggregate:
    this = node.this
    if isinstance(this, Clamped):
        raise InvalidOption("COUNT takes no CLAMPED bounds")
    if isinstance(this, exp.Star) or this is None:
        return Aggregate(node, AggregateKind.COUNT_ROWS)
    if isinstance(this, exp.Distinct):
        targets = this.expressions
        if (
            len(targets) == 1
            and isinstance(targets[0], exp.Column)
            and relations.is_unit(targets[0])
        ):
            return Aggregate(node, AggregateKind.COUNT_UNITS)
        raise NonDPAggregate("COUNT(DISTINCT ...) is only allowed on the privacy unit")
    return Aggregate(node, AggregateKind.COUNT_VALUES, argument=this)


def _bounded_argument(
    argument: exp.Expr, name: str, relations: Relations, catalog: Catalog, automatic: bool
) -> tuple[exp.Expr, Bounds | None]:
    """The aggregated expression and its bounds: CLAMPED, else the owner's, else — under
    BOUND AUTO — None, for a private estimate; otherwise a refusal."""
    if isinstance(argument, Clamped):
        low, high = _constant(argument.args["low"]), _constant(argument.args["high"])
        if low is None or high is None:
            raise InvalidOption(f"the bounds of {name} must be numeric constants")
        if not (math.isfinite(low) and math.isfinite(high)) or low > high:
            raise InvalidOption(f"the bounds of {name} must be finite with low <= high")
        return argument.this, (low, high)
    declared = _declared(argument, relations, catalog, "bounds")
    if declared is not None:
        return argument, declared
    if automatic:
        return argument, None
    raise MissingBounds(
        f"{name} needs bounds: write {name}(x CLAMPED BETWEEN low AND high), "
        "or leave BOUND AUTO to estimate them privately"
    )


def _constant(node: exp.Expr) -> float | None:
    if isinstance(node, exp.Paren):
        return _constant(node.this)
    if isinstance(node, exp.Neg):
        value = _constant(node.this)
        return None if value is None else -value
    if isinstance(node, exp.Literal) and not node.is_string:
        return float(node.this)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        left, right = _constant(node.this), _constant(node.expression)
        if left is None or right is None:
            return None
        if isinstance(node, exp.Add):
            return left + right
        if isinstance(node, exp.Sub):
            return left - right
        if isinstance(node, exp.Mul):
            return left * right
        return left / right if right else None
    return None


def _refuse_raw_outputs(select: exp.Select, keys: list[exp.Expr]) -> None:
    """Every column read outside a DP aggregate must be (part of) a GROUP BY key."""
    aliases = {s.alias.lower() for s in select.expressions if s.alias}
    for position, output in enumerate(_output_expressions(select)):
        may_use_aliases = position >= len(select.expressions)
        for column in _exposed_columns(output.unalias(), keys):
            if may_use_aliases and not column.table and column.name.lower() in aliases:
                continue
            raise NonPrivateOutput(
                f"{column.sql(dialect='duckdb')} is read outside a DP aggregate and is not "
                "a GROUP BY key"
            )


def _exposed_columns(node: exp.Expr, keys: list[exp.Expr]) -> Iterator[exp.Column]:
    """Columns of ``node`` that are neither inside an aggregate nor part of a key."""
    if isinstance(node, (exp.AggFunc, exp.WithinGroup)) or any(node == key for key in keys):
        return
    if isinstance(node, exp.Column):
        yield node
        return
    for child in node.iter_expressions():
        yield from _exposed_columns(child, keys)


def _key_domains(
    select: exp.Select,
    keys: list[exp.Expr],
    relations: Relations,
    catalog: Catalog,
    query_keys: Mapping[str, Sequence[object]],
) -> list[tuple[exp.Query | None, int | None]]:
    """The public values of each key (a query, and their number when listed): from this
    query's key list, the owner's declaration, or a public table."""
    names = _key_names(select, keys)
    given = {c.lower(): v for c, v in query_keys.items()}
    public_tables = _public_tables(select, catalog)
    domains: list[tuple[exp.Query | None, int | None]] = []
    for key, name in zip(keys, names, strict=True):
        values = given.get(name) if name else None
        if values is None:
            values = _declared(key, relations, catalog, "keys")
        if values is not None:
            texts, kind = _typed_values(select, key, values, catalog)
            domains.append((_values_query(texts, kind), len(texts)))
            continue
        domains.append((_public_column_domain(key, public_tables, catalog), None))
    unknown = set(given) - {n for n in names if n}
    if unknown:
        raise InvalidOption(
            f"keys given for {', '.join(sorted(unknown))}, which is not a GROUP BY key"
        )
    return domains


UNRELEASABLE_KEYS = (exp.DType.TIMETZ,)
"""Key types whose values DuckDB hands over without part of them: a TIMETZ's offset
(``'12:00+01'`` and ``'12:00+02'``, two groups, both released as 12:00, and tied in the
order of rows — which then told whether a unit held a listed key; red team 45)."""


RELEASED_FROM_DATA = (
    *exp.DataType.INTEGER_TYPES,
    exp.DType.BIGNUM,
    exp.DType.DECIMAL,
    exp.DType.BOOLEAN,
    exp.DType.UUID,
    exp.DType.VARBINARY,
    exp.DType.ENUM,
    exp.DType.DATE,
    exp.DType.TIME,
    exp.DType.TIMESTAMP,
    exp.DType.TIMESTAMPNTZ,
    exp.DType.TIMESTAMP_S,
    exp.DType.TIMESTAMP_MS,
    exp.DType.TIMESTAMP_NS,
    exp.DType.TIMESTAMPTZ,
    *CANONICAL_KEYS,
)
"""The key types released from the data (partition selection): those whose values DuckDB
finds equal only when they are identical, and those ``sqlbuild.canonical_key`` writes in
one form (``CANONICAL_KEYS``). Any other is refused there: what is not
known to show one form per group is not released."""


def _released_key_kinds(
    select: exp.Select,
    keys: list[exp.Expr],
    domains: list[exp.Query | None],
    catalog: Catalog,
) -> list[exp.DataType | None]:
    """Each key's type where the keys are released from the data — all of them once one is
    private: partition selection then releases every key from the groups, a listed one
    too (red team 46) — else None; after refusing keys no release can show as one value
    per group: the types of ``UNRELEASABLE_KEYS``, and keys released from the data of any
    type outside ``RELEASED_FROM_DATA`` (a nested or VARIANT value may hold -0.0 beside
    0.0, text under a collation, or an INTEGER beside an equal BIGINT: equal to DuckDB,
    released in whichever form its group's first row had)."""
    if not keys:
        return []
    named = over_from(select, keys).sql(dialect="duckdb")
    files = any(isinstance(t.this, exp.Func) for t in select.find_all(exp.Table))
    memo = ("key types", named)  # a file's schema may change without the catalogue knowing
    kinds = None if files else catalog.memo.get(memo)
    if kinds is None:
        try:
            kinds = [exp.DataType.build(k, dialect="duckdb") for k in catalog.types(named)]
        except SqlglotError:
            raise UnsupportedQuery("a GROUP BY key is of a type privsql does not read") from None
        if not files:
            catalog.memo[memo] = kinds
    selected = any(domain is None for domain in domains)
    for kind in kinds:
        if kind.is_type(*UNRELEASABLE_KEYS):
            raise UnsupportedQuery(
                f"a GROUP BY key of type {kind.sql(dialect='duckdb')} cannot be released: "
                "cast it (to TIME, or TIMESTAMPTZ with a date)"
            )
        if selected and not kind.is_type(*RELEASED_FROM_DATA):
            raise UnsupportedQuery(
                f"a GROUP BY key of type {kind.sql(dialect='duckdb')} needs public values "
                "(keys=, or the owner's declaration) for every key, or group by its parts"
            )
    return [kind.copy() if selected else None for kind in kinds]


def _key_names(select: exp.Select, keys: list[exp.Expr]) -> list[str | None]:
    names: list[str | None] = []
    for key in keys:
        name = None
        for item in select.expressions:
            if item.unalias() == key:
                name = item.alias_or_name.lower()
                break
        if name is None and isinstance(key, exp.Column):
            name = key.name.lower()
        names.append(name)
    return names


def _declared(node: exp.Expr, relations: Relations, catalog: Catalog, kind: str) -> object:
    """The owner's declared ``bounds`` or ``keys`` of a column that is a protected table's
    column passed through unchanged (directly, or by derived tables and CTEs)."""
    if not isinstance(node, exp.Column):
        return None
    origin = relations.origin(node)
    if origin is None:
        return None
    protection = catalog.protection(origin.source)
    if protection is None:
        return None
    declared = {c.lower(): v for c, v in getattr(protection, kind).items()}
    return declared.get(origin.column.lower())


def _public_tables(select: exp.Select, catalog: Catalog) -> dict[str, exp.Table]:
    tables = {}
    for table in select.find_all(exp.Table):
        if table.find_ancestor(exp.Select) is select and catalog.is_public(table):
            tables[table.alias_or_name.lower()] = table
    return tables


def _public_column_domain(
    key: exp.Expr, tables: dict[str, exp.Table], catalog: Catalog
) -> exp.Query | None:
    if not isinstance(key, exp.Column):
        return None
    named = {alias: _in_full(t) for alias, t in tables.items()}
    candidates = (
        [named[key.table.lower()]] if key.table and key.table.lower() in named else []
    ) or [
        t
        for t in named.values()
        if not key.table
        and key.name.lower() in {c.lower() for c in catalog.columns(t.sql(dialect="duckdb"))}
    ]
    if len(candidates) != 1:
        return None
    return exp.select(exp.column(key.name, quoted=True)).distinct().from_(candidates[0])


def _in_full(table: exp.Table) -> exp.Table:
    """A public source named as the query reads it, catalogue included: named by schema and
    table alone, its key values were read from whatever table of that name the connection's
    current database holds — a private one's, released exactly as keys (red team 40)."""
    return exp.table_(
        table.name, db=table.db or None, catalog=table.catalog or None, quoted=True
    )


def _typed_values(
    select: exp.Select, key: exp.Expr, values: Sequence[object], catalog: Catalog
) -> tuple[list[str | None], exp.DataType]:
    """A key list as distinct SQL values of the key's type: cast, then de-duplicated; each
    as the text that casts back to it, with the type.

    The key's type comes from binding the query's FROM (the schema, no rows); the list is
    cast on its own, so a value that does not cast is refused from the list alone. Values
    are de-duplicated by the very predicate that matches them to groups (``IS NOT DISTINCT
    FROM``): a value is kept only if no earlier one matches it, so every spelling of one
    group (``1``, ``'01'``, ``' 1'``; ``0.0`` and ``-0.0``; ``'35 days'`` and
    ``'1 month 5 days'``; ``'a'`` and ``'A'`` under ``COLLATE NOCASE``) is released once.
    """
    if not values:
        raise InvalidOption("a public key list must not be empty")
    typed_key = over_from(select, [key])
    key_sql = typed_key.sql(dialect="duckdb")
    # Public inputs only (the list, the key's type and collation): the same list over the
    # same FROM is cast once per catalogue — except over files, whose schema can change
    # without the catalogue knowing.
    memo = None
    if not any(isinstance(t.this, exp.Func) for t in typed_key.find_all(exp.Table)):
        memo = ("typed key list", key_sql, tuple((type(v).__name__, repr(v)) for v in values))
        if memo in catalog.memo:
            return catalog.memo[memo]
    kind = exp.DataType.build(catalog.types(key_sql)[0], dialect="duckdb")
    given = exp.Values(
        expressions=[
            exp.tuple_(exp.convert(i), exp.Cast(this=_literal(v), to=exp.DataType.build("VARCHAR")))
            for i, v in enumerate(values)
        ],
        alias=exp.TableAlias(
            this=exp.to_identifier("g"), columns=[exp.to_identifier("i"), exp.to_identifier("v")]
        ),
    )
    typed = exp.select("i", "v", exp.TryCast(this=exp.column("v"), to=kind).as_("c")).from_(given)
    # The key itself, over no rows, joins the list so that comparisons take its collation
    # (``VARCHAR COLLATE NOCASE``: 'a' and 'A' are one group), exactly as the release does.
    collated = typed_key.where(exp.false())
    collated.set("expressions", [exp.null(), exp.null(), key.copy()])
    try:
        rows = catalog.evaluate(_first_of_each(typed.union(collated, distinct=False)))
    except InvalidOption:  # the engine's sources are not DuckDB's (Spark): no collations
        rows = catalog.evaluate(_first_of_each(typed))
    canonical = []
    for value, text, first in rows:
        if text is None and value is not None:
            raise InvalidOption(f"key value {value!r} is not a {kind.sql(dialect='duckdb')}")
        if first:
            canonical.append(text)
    if memo is not None:
        catalog.memo[memo] = (canonical, kind)
    return canonical, kind


def _first_of_each(typed: exp.Query) -> str:
    """Each listed value, its cast text, and whether no earlier value matches it."""
    same = "b.i < a.i AND b.c IS NOT DISTINCT FROM a.c"
    earlier = exp.select("1").from_("typed AS b").where(same)
    return (
        exp.select(
            "a.v",
            exp.Cast(this=exp.column("c", "a"), to=exp.DataType.build("VARCHAR")),
            exp.Not(this=exp.Exists(this=earlier)),
        )
        .from_("typed AS a")
        .where("a.i IS NOT NULL")
        .order_by("a.i")
        .with_("typed", as_=typed)
        .sql(dialect="duckdb")
    )


def _literal(value: object) -> exp.Expr:
    """A key value as SQL; a non-finite float by its name (``exp.convert`` makes NaN NULL).
    Text that is not Unicode DuckDB can read (a lone surrogate) is refused here: DuckDB's
    Python client raised a bare ``RuntimeError`` on it (red team 45)."""
    if isinstance(value, float) and not math.isfinite(value):
        return exp.Literal.string(str(value))
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidOption("a key value is not valid Unicode text") from None
    return exp.convert(value)


def _values_query(texts: Sequence[str | None], kind: exp.DataType) -> exp.Query:
    """The typed key values as a query: the texts, cast as one column (one cast to print
    and for DuckDB to plan, not one per value: a tenth of a 50-key query's overhead)."""
    rows = [  # made directly: ``exp.tuple_`` copies each value (seconds for 10**5 keys)
        exp.Tuple(expressions=[exp.null() if text is None else exp.Literal.string(text)])
        for text in texts
    ]
    alias = exp.TableAlias(this=exp.to_identifier("v"), columns=[exp.to_identifier("text")])
    values = exp.Values(expressions=rows, alias=alias)
    typed = exp.Cast(this=exp.column("text", "v"), to=kind.copy())
    return exp.Select(expressions=[typed], from_=exp.From(this=values))
