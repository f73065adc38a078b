"""Schemas of what an analyst may query, for ``DESCRIBE`` and ``SHOW TABLES``: free, and exact.

Schemas are not private: a column's name and type say nothing about any privacy unit, so
privsql shows them for private sources too, and charges nothing. They come from the
catalogue (tables and views) or from a Parquet file's footer, never from a file whose
columns are sniffed from its rows (CSV, JSON): such a file's schema is data. The same
readers a query may use are the ones described here (``rewriter.analyze.analyze_source``),
and a view is described only when every source it reads could be queried.

Front ends (the REPL and CLI, a server) answer the statements with ``schema_statement``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from privsql.engines import Engine
from privsql.result import Result
from rewriter.analyze import analyze_source
from rewriter.catalog import FILE, Catalog, Protection, public_type
from rewriter.dialect import PrivSQL
from rewriter.errors import (
    InvalidPrivacyUnit,
    PrivacyError,
    StatementNotAllowed,
    UnknownName,
    UnsupportedQuery,
)
from rewriter.resolve import VIEW_DEPTH, check_source

if TYPE_CHECKING:
    from privsql.session import Session

SHOW_TABLES = re.compile(r"(?is)^show\s+(all\s+)?tables$")
DESCRIBE = re.compile(r"(?is)^(?:describe|desc|show)\s+(.+)$")
QUERY = re.compile(r"(?is)^\(?\s*(select|with|from|values)\b")
NAMED = re.compile(r"(?is)show|desc")
"""A word each of the statements above starts with: a statement without one is none of
them, told without tokenizing it (a tenth of a millisecond of every query)."""


def schema_statement(statement: str, session: Session) -> Result | None:
    """The answer to ``DESCRIBE source`` (or ``SHOW source``), ``SHOW TABLES`` or ``SHOW ALL
    TABLES``, like DuckDB's; None for any other statement. Comments around it and a
    trailing ``;`` are allowed."""
    if not NAMED.search(statement):
        return None
    try:
        tokens = PrivSQL().tokenize(statement)
    except TokenError:
        return None  # not a statement: the query's parser says why
    while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
        tokens.pop()
    if not tokens:
        return None
    statement = statement[tokens[0].start : tokens[-1].end + 1]
    shown = SHOW_TABLES.match(statement)
    if shown:
        listing = session.tables()
        if not shown.group(1):
            listing = listing.select(["name", "access", "privacy_unit"])
        return Result(listing)
    described = DESCRIBE.match(statement)
    if described is None:
        return None
    if QUERY.match(described.group(1)):
        raise StatementNotAllowed(
            "DESCRIBE takes a table, a view or a Parquet reader; EXPLAIN shows a query's plan"
        )
    return Result(session.describe(described.group(1)))


def describe(catalog: Catalog, source: str) -> pa.Table:
    """One row per column of ``source`` (a table, a view or ``read_parquet(...)``): its name,
    its DuckDB type and what the owner declared of it (``privacy``: ``public``, ``private``,
    ``privacy unit``, or ``private`` with the declared bounds and public keys)."""
    table = analyze_source(source)
    _refuse_reserved(table, catalog)
    catalog.check_readable(table)
    if not isinstance(table.this, exp.Func) and catalog.identity(table) not in (
        catalog.tables or frozenset()
    ):
        raise UnknownName(_no_such_table(source, catalog))
    columns = _columns(catalog, table)
    if catalog.is_public(table):
        privacy = ["public"] * len(columns)
    else:
        protection = catalog.protection(table)
        privacy = [_declared(name, protection) for name, _ in columns]
    return pa.table(
        {
            "column_name": [name for name, _ in columns],
            "column_type": [kind for _, kind in columns],
            "privacy": privacy,
        }
    )


def tables(catalog: Catalog, engine: Engine) -> pa.Table:
    """Every table and view (privsql's own schema hidden) and every Parquet reader the owner
    declared: schema, name, access (public or private), the declared privacy unit, and the
    column names and DuckDB types. A view that reads a source no query may read is listed
    without columns."""
    rows: list[tuple[str | None, str, exp.Table]] = []
    seen = set()
    for table, _ in engine.tables():
        name = catalog.identity(table)
        hidden = (table.db or "").lower() == catalog.reserved_schema or table.catalog == "temp"
        if name in seen or hidden:  # a temporary table is listed by its bare name
            continue
        seen.add(name)
        schema = table.db if table.db and table.db.lower() != "main" else "main"
        rows.append((schema, table.name, table))
    for name in sorted(catalog.protected):
        if name.startswith(FILE):
            rows.append((None, *_reader(name)))
    rows.sort(key=lambda row: (row[0] is None, row[0] != "main", row[0] or "", row[1]))
    listing: dict[str, list] = {
        key: [] for key in ("schema", "name", "access", "privacy_unit", "column_names")
    }
    listing["column_types"] = []
    for schema, name, table in rows:
        try:
            protection = None if catalog.is_public(table) else catalog.protection(table)
        except InvalidPrivacyUnit:  # a file of two declarations: its readers are refused
            protection = None
        try:
            columns = _columns(catalog, table)
        except PrivacyError:  # a view over a CSV file, a declared file since deleted
            columns = []
        listing["schema"].append(schema)
        listing["name"].append(name)
        listing["access"].append("public" if catalog.is_public(table) else "private")
        listing["privacy_unit"].append(protection.privacy_unit if protection else None)
        listing["column_names"].append([n for n, _ in columns])
        listing["column_types"].append([t for _, t in columns])
    return pa.table(
        listing,
        schema=pa.schema(
            [
                ("schema", pa.string()),
                ("name", pa.string()),
                ("access", pa.string()),
                ("privacy_unit", pa.string()),
                ("column_names", pa.list_(pa.string())),
                ("column_types", pa.list_(pa.string())),
            ]
        ),
    )


def _columns(catalog: Catalog, table: exp.Table) -> list[tuple[str, str]]:
    """Names and DuckDB types of a source's columns, read by binding it (no rows read); a
    file reader's are its schema (``rewriter.files``)."""
    _check_view_sources(table, catalog)
    sql = table.sql(dialect="duckdb")
    try:
        names = catalog.columns(sql)
        kinds = catalog.types(f"SELECT * FROM {sql}")
    except PrivacyError:
        raise UnknownName(f"cannot read the schema of {sql}: no such table or file") from None
    return [(name, public_type(kind)) for name, kind in zip(names, kinds, strict=True)]


def _check_view_sources(table: exp.Table, catalog: Catalog, depth: int = 0) -> None:
    """Refuse a view that reads, directly or through other views, a source whose schema
    could be data: binding it to read its columns would sniff that source."""
    definition = (
        None if isinstance(table.this, exp.Func) else catalog.views.get(catalog.identity(table))
    )
    if definition is None:
        return
    if depth >= VIEW_DEPTH:
        raise UnsupportedQuery(f"views nested more than {VIEW_DEPTH} deep are not supported")
    create = sqlglot.parse_one(definition, read="duckdb")
    body = create.expression if isinstance(create, exp.Create) else None
    if not isinstance(body, exp.Query):
        raise UnsupportedQuery(f"view {table.name} cannot be read as a query")
    for inner in body.find_all(exp.Table):
        check_source(inner)
        _refuse_reserved(inner, catalog)
        catalog.check_readable(inner)
        _check_view_sources(inner, catalog, depth + 1)


def _refuse_reserved(table: exp.Table, catalog: Catalog) -> None:
    """privsql's own schema (the ledger) is not described, as it is not queried."""
    if catalog.reserved_schema in (table.db.lower(), table.catalog.lower()):
        raise StatementNotAllowed(f"schema {catalog.reserved_schema} is privsql's own")


def _declared(column: str, protection: Protection | None) -> str:
    """What the owner declared of one column of a private source."""
    if protection is None:
        return "private"
    if column.lower() == protection.privacy_unit.lower():
        return "privacy unit"
    parts = ["private"]
    bounds = {name.lower(): b for name, b in protection.bounds.items()}
    keys = {name.lower(): k for name, k in protection.keys.items()}
    if column.lower() in bounds:
        low, high = bounds[column.lower()]
        parts.append(f"CLAMPED BETWEEN {low:g} AND {high:g}")
    if column.lower() in keys:
        parts.append("keys " + ", ".join(map(str, keys[column.lower()])))
    return ", ".join(parts)


def _reader(identity: str) -> tuple[str, exp.Table]:
    """The name (``read_parquet('...')``) and source of a declared file identity's files."""
    paths: Sequence[exp.Expr] = [exp.Literal.string(p) for p in identity[len(FILE) :].split("\n")]
    argument = paths[0] if len(paths) == 1 else exp.Array(expressions=list(paths))
    reader = exp.Table(this=exp.ReadParquet(expressions=[argument]))
    return f"read_parquet({argument.sql(dialect='duckdb')})", reader


def _no_such_table(source: str, catalog: Catalog) -> str:
    """DuckDB's wording for an unknown table, with the closest names as candidates."""
    names = sorted(n for n in catalog.tables or () if catalog.reserved_schema not in n)
    close = difflib.get_close_matches(source.lower(), names, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; SHOW TABLES lists them"
    return f"table {source} does not exist{hint}"
