"""Bounded work per row: no query may build values much larger than the row it reads.

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

One value's bound is not enough: a query with a hundred items, each under the bound, built
64 MB per row and failed for want of memory only when one unit's rows met a condition. So
the values a row's evaluation creates are also *summed* over the whole query (each node
once, as DuckDB evaluates it once per row) and held to ``MAX_TOTAL_FACTOR`` and
``MAX_CONSTANT``. Size is not the only cost: a regular expression's run time is its text's
length times its compiled program's, and a counted repetition (``(?:[0-9a-f]){1000}``)
makes a short pattern a large program — a condition that sends one unit's rows through it
made a query seconds slower. Patterns over private data are constants; the work they may
cost, ``size(text) · program(pattern)``, is summed over the query and held to
``MAX_WORK_FACTOR`` and ``MAX_WORK``. A nested value (LIST, STRUCT, MAP, ...) cast to text
repeats its field names once per element — a list of 200 000 booleans under a long field
name grew a thousandfold — so printing one (a cast to text, or concatenation, which
prints a STRUCT or a list given to ``concat_ws``) is refused; the columns it reads are
followed to the sources that hold them, whose types the catalogue gives.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, build_scope

from rewriter.catalog import Catalog
from rewriter.errors import UnsupportedQuery
from rewriter.expressions import Clamped
from rewriter.functions import duckdb_name
from rewriter.relations import source_sql

MAX_FACTOR = 8
"""The largest multiple of a row's own size that one value may reach. DuckDB's strings stop
at 4 GB with an error no TRY catches, so a stored value of more than 4 GB / MAX_FACTOR
could still reach it: docs/privacy.md §8 names this limit."""

MAX_CONSTANT = 100_000
"""The largest size, in characters, one value — or all the values one row creates together —
may reach beyond their multiple of the row's size. DuckDB works on vectors of 2 048 rows,
so a vector of one unit's rows holds at most about 200 MB of created values per thread."""

MAX_TOTAL_FACTOR = 64
"""The largest multiple of a row's own size all the values one row creates may reach."""

MAX_WORK = 2_000_000
"""The largest regular-expression work per row, in characters times program steps, beyond
its multiple of the row's size (about 3 ms of RE2 time on this machine's kind)."""

MAX_WORK_FACTOR = 2_048
"""The largest multiple of a row's own size its pattern-matching work may reach over all
the query's statements: a pattern of about 500 steps over the row's own text in each of
PRIVATE_STATEMENTS (10⁴ in one let a 9 000-character LIKE pattern cost 0.55 s on each
150 000-character row of one unit, red team 11)."""

PRIVATE_STATEMENTS = 4
"""How many statements of one query read the private rows, at most (the bounds search, the
group-cap search, the row-cap search and the release): each evaluates the WHERE, the keys,
the joins and the DP aggregates' arguments again, so their work counts this many times (red
team 11: 85× slower on one unit's rows under BOUND AUTO, where one statement was counted).
Within one statement each node runs once per row: an argument the statement clamps,
squares, counts and buckets is projected once and read as a column (``generate._rows``,
``tests/test_evaluated_once.py``; red team 9 had timed a VARIANCE of a regex at 7–9× one
pass when each use spelled it again). Memory is not multiplied: the statements run one
after another."""

MAX_PROGRAM = 10_000
"""The largest program (``program``) one pattern over private data may compile to."""

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

PATTERNS: tuple[type[exp.Expr], ...] = (
    exp.RegexpLike, exp.RegexpFullMatch, exp.RegexpExtract, exp.RegexpReplace, exp.SimilarTo,
)  # fmt: skip
"""Nodes whose ``expression`` is a regular expression run over their ``this``."""

WILDCARDS: tuple[type[exp.Expr], ...] = (exp.Like, exp.ILike, exp.Glob)
"""Nodes whose ``expression`` is a wildcard pattern matched against their ``this``: DuckDB's
matcher costs up to the text's length times the pattern's (red team 10: a 150 000-character
text against a pattern of 50 000 took seconds per row), so the pattern is a constant and
that product counts as work, like a regular expression's."""

CREATES_NOTHING: tuple[type[exp.Expr], ...] = (
    exp.Column, exp.Literal, exp.Identifier, exp.Var, exp.DataType, exp.Boolean, exp.Null,
    exp.Alias, exp.Paren, exp.Distinct, exp.Ordered, exp.Case, exp.If, exp.Coalesce,
)  # fmt: skip
"""Nodes that name a value or a type, or pass on one their children made, rather than
build one per row."""

SCALAR_RESULTS: tuple[type[exp.Expr], ...] = (
    exp.Predicate, exp.Connector, exp.Not, exp.AggFunc, exp.Add, exp.Sub, exp.Mul, exp.Div,
    exp.IntDiv, exp.Mod, exp.Neg, Clamped,
)  # fmt: skip
"""Operators that build a number or a boolean (``SCALAR``), however large what they read
(functions: ``SCALAR_FUNCTIONS``)."""


def refuse_growth(query: exp.Query, catalog: Catalog) -> None:
    """Refuse a query in which some value, or all a row creates, or its regular-expression
    work, may grow beyond the limits, or that casts a nested value to text (module
    docstring)."""
    root = build_scope(query)
    if root is None:
        return
    sizes = _Sizes({id(scope.expression): scope for scope in root.traverse()}, catalog)
    runs = _cte_runs(query)
    for scope in root.traverse():
        for part in _parts(scope.expression):
            sizes.of(part, scope)
        again = runs.get(id(scope.expression), 1) - 1
        for part in _parts(scope.expression) if again > 0 else []:
            sizes.work[("runs", id(part))] = sizes.subtree(part, scope)[1].times(again)
    created = sum(sizes.created.values(), NOTHING)
    work = sum(sizes.work.values(), NOTHING).times(PRIVATE_STATEMENTS)
    if created.factor > MAX_TOTAL_FACTOR or created.constant > MAX_CONSTANT:
        raise UnsupportedQuery(
            "the query could build far more per row than the rows it reads; privsql bounds "
            f"what one row may create to {MAX_TOTAL_FACTOR} times its size plus "
            f"{MAX_CONSTANT:,} characters"
        )
    if work.factor > MAX_WORK_FACTOR or work.constant > MAX_WORK:
        raise UnsupportedQuery(
            "the query's regular expressions and LIKE/GLOB patterns could cost far more per "
            "row than the rows they read; use shorter texts or patterns"
        )


SCALAR_FUNCTIONS = frozenset(
    {
        "abs", "acos", "ascii", "asin", "atan", "atan2", "bit_count", "bit_length", "cbrt",
        "ceil", "contains", "cos", "date_diff", "date_part", "date_sub", "date_trunc",
        "datepart", "datesub", "day", "dayofmonth", "dayofweek", "dayofyear", "degrees",
        "ends_with", "epoch", "even", "exp", "extract", "floor", "gcd", "hash",
        "hour", "isfinite", "isinf", "isnan", "isodow", "last_day", "lcm", "length", "ln",
        "log", "make_date", "make_timestamp", "millisecond", "minute", "month", "pi", "power",
        "prefix", "quarter", "radians", "regexp_full_match", "regexp_matches", "round",
        "second", "sign", "sin", "sqrt", "starts_with", "strlen", "strpos", "strptime",
        "suffix", "tan", "to_timestamp", "trunc", "year",
    }
)  # fmt: skip
"""The allow-listed functions (``rewriter.functions``) that return a number, a date or a
boolean, however large what they read. A function not named here (every text function,
and any added to the allow-list later) is sized as what it reads."""


def _scalar_function(node: exp.Expr) -> bool:
    """A function named in SCALAR_FUNCTIONS."""
    return isinstance(node, exp.Func) and duckdb_name(node) in SCALAR_FUNCTIONS


def _cast_to_scalar(node: exp.Expr) -> bool:
    """A cast that builds a number, a date or a boolean, not text."""
    return isinstance(node, (exp.Cast, exp.TryCast)) and not node.to.is_type(
        *exp.DataType.TEXT_TYPES
    )


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

    def __init__(self, scopes: dict[int, Scope], catalog: Catalog) -> None:
        self._scopes = scopes
        self._catalog = catalog
        self._columns: dict[tuple[int, str], Size] = {}
        self._costs: dict[tuple[int, str], tuple[Size, Size]] = {}
        self.created: dict[object, Size] = {}
        """The size of each value a row's evaluation creates, by node (and by each further
        reference to a derived table's column: ``_column``)."""
        self.work: dict[object, Size] = {}
        """The regular-expression work of each pattern match, likewise."""

    def of(self, node: exp.Expr, scope: Scope) -> Size:
        size = self._size(node, scope)
        if isinstance(node, SCALAR_RESULTS) or _cast_to_scalar(node) or _scalar_function(node):
            self.created[id(node)] = Size(0, SCALAR)
        elif not isinstance(node, CREATES_NOTHING):
            self.created[id(node)] = size
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
        repeated, times = _evaluated_again(node)
        if repeated is not None:
            created, work = self.subtree(repeated, scope)
            self.created[("again", id(node))] = created.times(times)
            self.work[("again", id(node))] = work.times(times)
        if isinstance(node, PATTERNS):
            self.work[id(node)] = sizes[0].times(_program(node.expression))
        if isinstance(node, WILDCARDS):
            self.work[id(node)] = sizes[0].times(_wildcards(node.expression))
        if isinstance(node, exp.Pad):
            return Size(0, _constant_length(node))
        if isinstance(node, exp.TimeToStr):
            return _formatted(node)
        if isinstance(node, (exp.Cast, exp.TryCast)) and node.to.is_type(*exp.DataType.TEXT_TYPES):
            self._refuse_nested(node.this, scope, set())
        if isinstance(node, (exp.DPipe, exp.Concat, exp.ConcatWs)):  # print STRUCTs and lists
            for child in children:
                self._refuse_nested(child, scope, set())
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
        else:
            # Each further reference may evaluate the column's definition again: DuckDB
            # copies a derived table's expression into every filter that reads it, so 150
            # references in WHERE ran one pattern match 150 times (red team 13).
            created, work = self._cost(source, column.name)
            self.created[("reference", id(column))] = created
            self.work[("reference", id(column))] = work
        return self._columns[key]

    def subtree(self, node: exp.Expr, scope: Scope) -> tuple[Size, Size]:
        """What evaluating ``node`` once creates, and its pattern work: its nodes' (and what
        they evaluate again), and through the derived columns it reads, theirs."""
        created, work = NOTHING, NOTHING
        for inner in node.walk():
            for key in (id(inner), ("again", id(inner)), ("reference", id(inner))):
                created += self.created.get(key, NOTHING)
                work += self.work.get(key, NOTHING)
            source = scope.sources.get(inner.table) if isinstance(inner, exp.Column) else None
            if isinstance(source, Scope):
                deeper = self._cost(source, inner.name)
                created, work = created + deeper[0], work + deeper[1]
        return created, work

    def _cost(self, source: Scope, name: str) -> tuple[Size, Size]:
        """What evaluating a derived table's column once creates, and its pattern work:
        its definition's nodes and, through the derived columns it reads, theirs."""
        key = (id(source.expression), name)
        if key not in self._costs:
            self._costs[key] = (NOTHING, NOTHING)  # a cycle adds nothing more
            created, work = NOTHING, NOTHING
            for definition in self._definitions(source, name):
                more = self.subtree(definition, self._scope_of(source, definition))
                created, work = created + more[0], work + more[1]
            self._costs[key] = (created, work)
        return self._costs[key]

    def _refuse_nested(self, value: exp.Expr, scope: Scope, seen: set[tuple[int, str]]) -> None:
        """Refuse if a column ``value`` reads holds a nested value at its source."""
        for column in value.find_all(exp.Column):
            source = scope.sources.get(column.table)
            key = (id(source), column.name.lower())
            if key in seen:
                continue
            seen.add(key)
            if isinstance(source, Scope):
                for definition in self._definitions(source, column.name):
                    self._refuse_nested(definition, self._scope_of(source, definition), seen)
            elif isinstance(source, exp.Table) and self._nested(source, column.name):
                raise UnsupportedQuery(
                    f"{column.name} would be printed as text: a nested value (LIST, STRUCT, "
                    "MAP) printed as text repeats its field names per element, which "
                    "privsql cannot bound"
                )

    def _definitions(self, source: Scope, name: str) -> list[exp.Expr]:
        """The expressions that define a derived table's column ``name`` (one per branch
        of a set operation); the whole body where a star or an unknown name passes it."""
        query = source.expression
        selects = (
            [self._scopes[id(b)].expression for b in _branches(query) if id(b) in self._scopes]
            if isinstance(query, exp.SetOperation)
            else [query]
        )
        found = []
        for select in selects:
            if not isinstance(select, exp.Select):
                continue
            named = [i.unalias() for i in select.expressions if i.alias_or_name == name]
            found += named or [select]
        return found

    def _scope_of(self, source: Scope, definition: exp.Expr) -> Scope:
        select = definition if isinstance(definition, exp.Select) else definition.parent_select
        return self._scopes.get(id(select), source) if select is not None else source

    def _nested(self, source: exp.Table, name: str) -> bool:
        sql = source_sql(source)
        columns = [c.lower() for c in self._catalog.columns(sql)]
        kinds = self._catalog.types(f"SELECT * FROM {sql}")
        if name.lower() not in columns or len(kinds) != len(columns):
            return False
        kind = kinds[columns.index(name.lower())].upper()
        return kind.endswith("]") or kind.startswith(("STRUCT", "MAP", "UNION", "LIST"))

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


def _cte_runs(query: exp.Query) -> dict[int, int]:
    """How many times each CTE's body runs, by the body's node: the generated SQL inlines a
    private CTE wherever it is read, so one read in two places, by a CTE read in two, runs
    four times (``Relations.refuse_private_rereads`` allows four) — and its pattern work
    with it (red team 14). A shadowed name counts for every CTE of that name: more, not
    less."""
    ctes = {cte.alias_or_name.lower(): cte for cte in query.find_all(exp.CTE)}
    readers: dict[str, list[str | None]] = {}
    for table in query.find_all(exp.Table):
        name = table.name.lower()
        if name in ctes and not table.db and not isinstance(table.parent, exp.CTE):
            outer = table.find_ancestor(exp.CTE)
            readers.setdefault(name, []).append(outer.alias_or_name.lower() if outer else None)
    found: dict[str | None, int] = {None: 1}

    def runs(name: str | None) -> int:
        if name not in found:
            found[name] = 0  # a CTE read by itself: recursion is refused elsewhere
            found[name] = sum(runs(reader) for reader in readers.get(name, []))
        return found[name]

    return {id(cte.this): runs(name) for name, cte in ctes.items()}


def _evaluated_again(node: exp.Expr) -> tuple[exp.Expr | None, int]:
    """A child DuckDB evaluates more than once for ``node``, and how many more times: it
    binds ``NULLIF(a, b)`` as ``CASE WHEN a = b THEN NULL ELSE a END``, ``x BETWEEN a AND
    b`` as ``x >= a AND x <= b`` and ``CASE x WHEN w1 … WHEN wn`` as ``x = w1``, …, ``x =
    wn`` (red team 14: ten nested NULLIFs ran a pattern 2¹⁰ times, 15× one unit's time)."""
    if isinstance(node, exp.Nullif):
        return node.this, 1
    if isinstance(node, exp.Between):
        return node.this, 1
    if isinstance(node, exp.Case) and node.this is not None:
        return node.this, max(len(node.args.get("ifs") or []) - 1, 0)
    return None, 0


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


def _wildcards(pattern: exp.Expr) -> int:
    """A constant LIKE/ILIKE/GLOB pattern's length (its matching cost per text character)."""
    text = _text(pattern)
    if text is None:
        raise UnsupportedQuery("a LIKE, ILIKE or GLOB pattern over private data must be a constant")
    return max(len(text), 1)


def _program(pattern: exp.Expr) -> int:
    """A bound on the program RE2 compiles a constant pattern to: its length (and
    UNICODE_CLASS per Unicode class), times each
    counted repetition's largest count (``x{3,50}`` repeats ``x`` up to 50 times; nested
    counts multiply, and this bound multiplies every count, so it covers them)."""
    text = _text(pattern)
    if text is None:
        raise UnsupportedQuery("a regular expression over private data must be a constant")
    program = max(len(text), 1) + UNICODE_CLASS * len(_UNICODE_CLASS.findall(text))
    for low, high in _COUNTED.findall(text):
        program *= max(int(high or low), 1)
        if program > MAX_PROGRAM:
            raise UnsupportedQuery(
                "a regular expression over private data may compile to at most "
                f"{MAX_PROGRAM:,} steps; this one repeats too much"
            )
    return program


UNICODE_CLASS = 256
"""What a Unicode class (``\\pL``, ``\\p{Greek}``) adds to a program: RE2 compiles it to
hundreds of ranges, not the three characters it is written in (red team 8)."""

_UNICODE_CLASS = re.compile(r"\\[pP]")

_COUNTED = re.compile(r"\{(\d+)(?:,(\d*))?\}")
"""A counted repetition ``{n}``, ``{n,}`` or ``{n,m}`` (``{n,}`` counted as ``n``: RE2
compiles it as ``n`` copies and a star)."""


def _formatted(node: exp.TimeToStr) -> Size:
    """``strftime(t, format)``: each format character may become up to FORMAT_GROWTH
    characters (``%c`` is 19 for its 2)."""
    fmt = _text(node.args.get("format"))
    if fmt is None:
        raise UnsupportedQuery("strftime over private data needs a constant format")
    return Size(0, FORMAT_GROWTH * len(fmt) + SCALAR)


FORMAT_GROWTH = 16
"""How many characters one character of a strftime format may print, at most."""


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
