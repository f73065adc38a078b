"""Resolution: the analyst's query rewritten so that every name means one thing.

The rest of the rewriter reads names — a CTE's, a column's, a source's. A name the
analyser reads one way and DuckDB another is how private data escapes (a CTE that
shadows a table in an inner scope, a star whose ``RENAME`` or ``REPLACE`` swaps the unit
column, a CTE column list, a ``USING`` join's merged column, ``t`` and ``main.t``). So
before anything is checked the query is *resolved*, with sqlglot's own scope machinery:

- every CTE gets a name of its own (``__cte_N``) and every reference to it is rewritten
  by scope, so no CTE name can shadow another name or a source;
- every base source is replaced, for the length of qualification, by a stand-in whose
  columns come from the catalogue (a table's schema or a Parquet footer, never rows), and
  carries one identity (``t``, ``main.t``, ``"T"`` and ``memory.main.t`` are one source);
- sqlglot's ``qualify`` expands stars (EXCLUDE, REPLACE, RENAME), moves CTE column lists
  into aliases, turns ``USING``/``NATURAL`` into explicit ``ON`` equalities, and qualifies
  every column with its FROM item, refusing what it cannot resolve.

What comes out is the query the analyst wrote, spelled so that the analyser's reading and
DuckDB's are the same tree: the analyser checks this tree and generation compiles it.
"""

from __future__ import annotations

import difflib
import glob
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope

from rewriter.catalog import Catalog, reader_paths
from rewriter.errors import (
    PrivacyError,
    QuerySyntaxError,
    StatementNotAllowed,
    UnknownName,
    UnsupportedQuery,
)
from rewriter.relations import source_sql

CTE_PREFIX = "__cte_"
SOURCE_PREFIX = "__source_"
IDENTITY = "privsql_identity"
"""Meta key on every base source of a resolved query: its catalogue identity."""

FILE_READERS = frozenset({"read_parquet", "parquet_scan"})
"""Table functions that may be read, as private sources. Parquet only: a Parquet file's
schema is in its footer, while a CSV or JSON file's columns and types are sniffed from its
rows — its schema is data, and errors binding a query over it would quote those rows."""

VIEW_DEPTH = 16
"""How deeply views defined over views are followed."""

URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
"""A path with a scheme (``file://``, ``s3://``, ``https:``): one file could be named in
many ways, so only plain local paths are read and identified."""

PARAMETERS = (exp.Placeholder, exp.Parameter, exp.SessionParameter)
"""``$name``, ``?``, ``$1`` and ``@@setting``: values from outside the query's text."""


@dataclass(frozen=True)
class _Stand:
    """A base source taken out of the tree while it is qualified."""

    source: exp.Table
    alias: str


def resolve(query: exp.Query, catalog: Catalog, names: list[str]) -> exp.Query:
    """The query with unique CTE names, identified sources and every column qualified.

    ``names`` are the output names of the outermost SELECT as DuckDB gives them; they are
    kept as explicit aliases so that qualification changes no output column's name.
    """
    for node in query.find_all(*PARAMETERS):
        raise StatementNotAllowed(
            f"parameters and variables ({node.sql(dialect='duckdb')}) are not allowed"
        )
    if any(query.find_all(exp.Pivot)):
        raise UnsupportedQuery("PIVOT and UNPIVOT are not supported: GROUP BY the key instead")
    if any(w.args.get("recursive") for w in query.find_all(exp.With)):
        raise UnsupportedQuery("recursive CTEs are not supported")
    query = query.copy()
    if isinstance(query, exp.Select):
        for item, name in zip(list(query.expressions), names, strict=True):
            if not item.alias and not item.is_star:  # a star's columns keep their names
                item.replace(exp.alias_(item.copy(), name, quoted=True))
    for _ in range(VIEW_DEPTH):
        scopes = _scopes(query)
        _rename_ctes(scopes)
        if not _expand_views(query, catalog):
            break
    else:
        raise UnsupportedQuery(f"views nested more than {VIEW_DEPTH} deep are not supported")
    stands = _stand_in(query, scopes, catalog)
    schema = {
        name: {column: "UNKNOWN" for column in _columns(stand.source, catalog)}
        for name, stand in stands.items()
    }
    for name, columns in schema.items():
        if not columns:
            raise UnknownName(f"{stands[name].alias} has no columns")
    try:
        query = qualify(
            query,
            schema=schema,
            dialect="duckdb",
            validate_qualify_columns=True,
            quote_identifiers=False,
            identify=False,
        )
    except OptimizeError as error:
        raise UnknownName(_unknown_column(error, query, schema)) from None
    except SqlglotError as error:
        raise QuerySyntaxError(_first_line(error)) from None
    _unmerge_unit(query)
    for table in list(query.find_all(exp.Table)):
        stand = stands.get(table.name)
        if stand is None or table.db:
            continue
        source = stand.source.copy()
        source.set("alias", table.args.get("alias"))
        source.meta[IDENTITY] = catalog.identity(stand.source)
        table.replace(source)
    return query


def _columns(source: exp.Table, catalog: Catalog) -> Sequence[str]:
    """A source's column names; a file reader none of whose paths names a file is an
    unknown name (the paths are the analyst's, and only local ones get this far)."""
    try:
        return catalog.columns(source_sql(source))
    except PrivacyError:
        if isinstance(source.this, exp.Func):
            paths = [p.name for p in reader_paths(source.this)]
            if not any(glob.glob(os.path.expanduser(p)) for p in paths):
                raise UnknownName(f"no file matches {', '.join(map(repr, paths))}") from None
        raise


def _unmerge_unit(query: exp.Query) -> None:
    """A unit named after a ``USING``/``NATURAL`` join is the merged COALESCE of both sides'
    columns; the unit is the left side's column. Where a RIGHT or FULL join leaves it NULL,
    the row has no unit and is dropped: it could only be counted for nobody."""
    clause = query.args.get("privacy")
    merged = clause.this if clause is not None else None
    if isinstance(merged, exp.Coalesce) and isinstance(merged.this, exp.Column):
        merged.replace(merged.this.copy())


def _scopes(query: exp.Query) -> list[Scope]:
    try:
        return traverse_scope(query)
    except (OptimizeError, SqlglotError) as error:
        raise UnsupportedQuery(f"cannot resolve the query's names: {_first_line(error)}") from None


def _rename_ctes(scopes: list[Scope]) -> None:
    """Give each CTE its own name and point each reference at the CTE its scope sees."""
    renamed: dict[int, str] = {}
    references: list[tuple[exp.Table, exp.Expr]] = []
    for scope in scopes:
        for table in scope.tables:
            source = scope.sources.get(table.alias_or_name)
            if isinstance(source, Scope) and isinstance(source.expression.parent, exp.CTE):
                references.append((table, source.expression.parent))
    for cte in {id(c): c for _, c in references}.values():
        renamed[id(cte)] = f"{CTE_PREFIX}{len(renamed)}"
    for scope in scopes:
        for cte in scope.expression.find_all(exp.CTE):
            if id(cte) not in renamed:
                renamed[id(cte)] = f"{CTE_PREFIX}{len(renamed)}"
    for table, cte in references:
        alias = table.alias_or_name
        table.set("this", exp.to_identifier(renamed[id(cte)]))
        table.set("db", None)
        table.set("catalog", None)
        table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    for scope in scopes:
        for cte in scope.expression.find_all(exp.CTE):
            columns = cte.args["alias"].columns if cte.args.get("alias") else []
            alias = exp.TableAlias(this=exp.to_identifier(renamed[id(cte)]))
            if columns:
                alias.set("columns", [c.copy() for c in columns])
            cte.set("alias", alias)


def _expand_views(query: exp.Query, catalog: Catalog) -> bool:
    """Replace each undeclared view by its definition, as a derived table of the same name;
    whether any was. A view is a query over its sources, so it is checked as one: a view
    that renames another column to the unit is the unit swap it would be written out."""
    expanded = False
    for table in list(query.find_all(exp.Table)):
        if table.name.startswith(CTE_PREFIX) or (definition := catalog.view(table)) is None:
            continue
        create = sqlglot.parse_one(definition, read="duckdb")
        body = create.expression if isinstance(create, exp.Create) else None
        if not isinstance(body, exp.Query):
            raise UnsupportedQuery(f"view {table.name} cannot be read as a query")
        alias = exp.TableAlias(this=exp.to_identifier(table.alias_or_name))
        if isinstance(create.this, exp.Schema):
            alias.set("columns", [c.copy() for c in create.this.expressions])
        table.replace(exp.Subquery(this=body, alias=alias))
        expanded = True
    return expanded


def _stand_in(query: exp.Query, scopes: list[Scope], catalog: Catalog) -> dict[str, _Stand]:
    """Replace every base source by a named stand-in; the stand-ins, by name."""
    ctes = {cte.alias_or_name for scope in scopes for cte in scope.expression.find_all(exp.CTE)}
    stands: dict[str, _Stand] = {}
    for table in list(query.find_all(exp.Table)):
        if isinstance(table.this, exp.GenerateSeries):
            continue
        if not isinstance(table.this, exp.Func) and not table.db and table.name in ctes:
            continue
        if isinstance(table.this, exp.Identifier) and table.name.lower().startswith(
            (CTE_PREFIX, SOURCE_PREFIX)
        ):
            raise StatementNotAllowed(f"names starting with {CTE_PREFIX} are privsql's own")
        if not isinstance(table.this, exp.Func) and catalog.tables is not None:
            table = _existing(table, catalog)
        if table.args.get("alias") is not None and table.args["alias"].columns:
            raise UnsupportedQuery(
                f"column lists in the alias of source {table.alias_or_name} are not supported"
            )
        alias = table.alias_or_name if not isinstance(table.this, exp.Func) else _reader(table)
        name = f"{SOURCE_PREFIX}{len(stands)}"
        check_source(table)
        catalog.check_readable(table)
        stands[name] = _Stand(table.copy(), alias)
        table.replace(
            exp.Table(
                this=exp.to_identifier(name),
                alias=exp.TableAlias(this=exp.to_identifier(alias)),
            )
        )
    return stands


def _existing(table: exp.Table, catalog: Catalog) -> exp.Table:
    """A named source that exists, or a quoted Parquet path read as ``read_parquet``.

    DuckDB reads ``FROM 'f.parquet'`` (and any name it cannot find that looks like a file)
    by a replacement scan: here such a name becomes an explicit reader, which the owner's
    declarations of files then govern, and any other unknown name is refused.
    """
    bound = catalog.bound(table)  # what runs reads the source that was checked
    if catalog.identity(bound) in catalog.tables:
        table.replace(bound)
        return bound
    path = table.name
    if not table.db and table.this.quoted and path.lower().endswith(".parquet"):
        stem = os.path.basename(path).split(".")[0] or "parquet"
        reader = exp.Table(
            this=exp.ReadParquet(expressions=[exp.Literal.string(path)]),
            alias=table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(stem)),
        )
        table.replace(reader)
        return reader
    known = [t for t in catalog.tables if not t.startswith(f"{catalog.reserved_schema}.")]
    raise UnknownName(
        f"table {table.sql(dialect='duckdb')} does not exist"
        + _suggestion(catalog.identity(table), known)
    )


def check_source(table: exp.Table) -> None:
    """Refuse, before its schema is read, a source whose schema could be data."""
    if not isinstance(table.this, exp.Func):
        return
    name = _function_name(table.this)
    if name not in FILE_READERS:
        raise StatementNotAllowed(
            f"table function {name} is not allowed: read tables, views or Parquet files"
        )
    reader = table.this
    arguments = [reader.this] if reader.this is not None else []
    arguments += [a for a in reader.expressions if not _allowed_option(a)]
    if len(arguments) != 1:
        raise StatementNotAllowed(
            f"{name} takes a path and at most hive_partitioning = true|false: other reader "
            "options (schema=, filename=, union_by_name=, ...) could rename, retype or add "
            "columns"
        )
    paths = reader_paths(reader)
    if not paths or not all(isinstance(p, exp.Literal) and p.is_string for p in paths):
        raise StatementNotAllowed(f"{name} takes a literal path or a list of literal paths")
    if any(URI.match(p.name) for p in paths):
        raise StatementNotAllowed(f"{name} reads local paths only, not URLs")
    _pin_partitioning(reader)


def _pin_partitioning(reader: exp.Func) -> None:
    """Make a reader's columns the same whatever its directories are named: DuckDB adds
    hive partition columns when every file's directories look like ``key=value`` and types
    them from the values, so one unit's directory could add, remove or retype a column
    (``u=ZQX`` turns ``u`` from BIGINT to VARCHAR). Partition columns are read only when
    the query says ``hive_partitioning = true``, and always as VARCHAR (CAST them)."""
    given = {a.this.name.lower() for a in reader.expressions if _allowed_option(a)}
    for option, value in (("hive_partitioning", False), ("hive_types_autocast", False)):
        if option not in given:
            pinned = exp.EQ(this=exp.column(option), expression=exp.Boolean(this=value))
            reader.append("expressions", pinned)


def _allowed_option(argument: exp.Expr) -> bool:
    """``hive_partitioning = true|false`` (the columns it adds are named by the owner's
    directories) or ``hive_types_autocast = false``; no other reader option is allowed."""
    if not (
        isinstance(argument, (exp.EQ, exp.PropertyEQ))
        and isinstance(argument.this, (exp.Column, exp.Identifier))
        and isinstance(argument.expression, exp.Boolean)
    ):
        return False
    option = argument.this.name.lower()
    return option == "hive_partitioning" or (
        option == "hive_types_autocast" and not argument.expression.this
    )


def _function_name(node: exp.Func) -> str:
    return (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()


def _reader(table: exp.Table) -> str:
    """A file reader's label: its alias, else its function's name, as DuckDB names it."""
    if table.alias:
        return table.alias
    return _function_name(table.this)


UNRESOLVED = re.compile(
    r"Column '(?P<column>[^']+)' could not be resolved(?: for table: '(?P<table>[^']+)')?"
    r"|Unknown column: (?P<qualified>\S+)"
)
"""sqlglot's messages for a column that no FROM item has."""


def _unknown_column(error: OptimizeError, query: exp.Query, schema: dict) -> str:
    """A column that does not exist, said as DuckDB would (with the names closest to it
    among the sources' columns and the query's own output names), else sqlglot's line."""
    text = _first_line(error)
    found = UNRESOLVED.search(text)
    if found is None:
        return text
    column = found["column"] or found["qualified"]
    name = f"{found['table']}.{column}" if found["table"] else column
    known = {c for columns in schema.values() for c in columns}
    outputs = set(map(id, query.expressions)) if isinstance(query, exp.Select) else set()
    known |= {a.alias for a in query.find_all(exp.Alias) if id(a) not in outputs} | {
        c.name for alias in query.find_all(exp.TableAlias) for c in alias.columns
    }
    return f"column {name} does not exist" + _suggestion(column, known)


def _suggestion(name: str, known: Iterable[str]) -> str:
    """``; did you mean x?`` with the known names closest to a misspelt one, if any is close:
    names from the catalogue and the query, never values."""
    spelled = {
        k.lower(): k
        for k in known
        if k and k.lower() != name.lower() and not k.startswith(("__", "_q_"))
    }
    close = difflib.get_close_matches(name.lower(), list(spelled), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(spelled[c] for c in close)}?" if close else ""


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0]
