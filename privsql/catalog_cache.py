"""The session's ``Catalog``, rebuilt only when what it is made of changes.

Building a catalogue per query — the owner's declarations from the ledger, every table and
view from the engine, each source's columns — costs more than answering a query on a small
table. What does not change between two queries is kept: the declarations while the
ledger's declarations MAC (in the budget row: ``Ledger.read``) is the same, the tables,
views and table columns and column types while the engine lists the same catalogue
(``Engine.tables`` returns the very same list while nothing changed; its listing includes
each table's definition, so a renamed, added or retyped column is a change). A query
never sees a stale identity: both versions are read for every query, before anything
cached is used.

Which declared views are public is decided at each rebuild, from their definitions as they
are then (``rewriter.analyze.public_sources``): a view replaced after it was declared public
is a change of the listing, and is public only if it still reads public tables alone.

What depends on files rather than on the catalogue is never kept from one query to the
next: the columns of a file reader, the files a glob names, the identity (device and inode)
of the files a query may not read.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache, partial

import duckdb
import sqlglot
from sqlglot import exp

from privsql.engines import Engine, builtin_functions
from privsql.footers import file_state
from privsql.ledger import Ledger, database_path
from rewriter.analyze import public_sources
from rewriter.catalog import ENUM, FILE, Catalog, identity, public_type
from rewriter.errors import InvalidOption, PrivacyError, UnsupportedQuery
from rewriter.files import FileGroup, Schema, conformed_read, reader_schema
from rewriter.relations import source_sql

PLAIN_NAME = re.compile(r'(?:"[^"]*"|\w+)(?:\.(?:"[^"]*"|\w+)){0,2}')
"""A table or view named by (at most three) identifiers: its columns are the catalogue's."""
WHOLE_TABLE = "SELECT * FROM "
READER = re.compile(r"\b(?:read_parquet|parquet_scan)\s*\(", re.IGNORECASE)
"""A file reader call in a statement's SQL (``rewriter.resolve.FILE_READERS``)."""
"""How the type check asks for a source's column types (``rewriter.binding``)."""


@dataclass(frozen=True)
class _Version:
    declared: str
    listing: object


class CatalogCache:
    """The catalogue of one session's queries (``current``)."""

    def __init__(
        self,
        engine: Engine,
        ledger: Ledger,
        connection: duckdb.DuckDBPyConnection,
        *,
        aggregates: frozenset[str],
        database: str,
        declared_files_only: bool,
    ) -> None:
        self._engine = engine
        self._ledger = ledger
        self._con = connection
        self._template = Catalog(
            protected={},
            public=frozenset(),
            columns=engine.columns,
            aggregates=aggregates,
            database=database,
            types=engine.types,
            evaluate=partial(_evaluate, connection),  # no reference back to the cache
            count_rows=partial(_count_rows, engine),
            declared_files_only=declared_files_only,
            builtins=builtin_functions(),
        )
        self._unreadable = ledger.files | _files_of(connection)  # paths: fixed for a session
        self._version: _Version | None = None
        self._catalog = self._template
        self._table_columns: dict[str, list[str]] = {}
        self._table_types: dict[str, list[str]] = {}
        self._names_table: dict[str, bool] = {}
        self._named: dict[str, exp.Table] = {}
        """Each listed source, fully qualified, by identity."""
        self._groups: dict[str, tuple[FileGroup, ...]] = {}
        """Each file reader's groups as the current catalogue reads them (``_file_reading``),
        for its fingerprint: found again for each catalogue, never kept past it."""

    def is_own_file(self, path: str) -> bool:
        """Whether ``path``, however spelt (``file_identity``), is one of the session's own
        files: the data's database and write-ahead log, the ledger's, and the ledger's key."""
        return file_identity(path) in {file_identity(p) for p in self._unreadable}

    def current(self, declared: str | None = None) -> Catalog:
        """The catalogue as it is now: declarations, tables and views, forbidden files.

        ``declared`` is the declarations' MAC as the caller has just read it from the
        ledger (``Ledger.read``), else it is read here."""
        if declared is None:
            declared = self._ledger.declared  # read before the declarations it versions
        listing = self._engine.tables()
        version = _Version(declared, listing)
        rebuilt = self._version is None or not (
            declared == self._version.declared and listing is self._version.listing
        )
        if rebuilt:
            self._rebuild(listing)
        catalog = replace(
            self._catalog,
            files=lru_cache(maxsize=None)(self._files),
            forbidden=frozenset(file_identity(p) for p in self._unreadable),
        )
        self._groups = {}
        reading = lru_cache(maxsize=None)(partial(self._file_reading, catalog))
        catalog = replace(
            catalog,
            columns=lambda source: self._columns(source, reading),
            types=lambda statement: [public_type(k) for k in self._types(statement, reading)],
            evaluate=lambda statement: _evaluate(self._con, _conformed(statement, reading)),
            read=lambda source: self._read(source, reading),
        )
        if rebuilt:  # a view is public while it reads public tables alone
            public = self._bound_public(public_sources(catalog))
            self._catalog = replace(self._catalog, public=public)
            self._version = version  # only now: the declared set is not what is public
        return replace(catalog, public=self._catalog.public)

    def _bound_public(self, public: frozenset[str]) -> frozenset[str]:
        """``public`` without the views the engine binds to any source that is not a public
        table. The analyser reads a view's names by the session's lookup; DuckDB binds them
        by the view's own schema first, so a private table made later in that schema, named
        like the public table the view read, was read as public data: its values released
        exactly as group keys (red team 39). Checked whenever the catalogue changes."""
        views = {name for name in public if name in self._catalog.views}
        tables = public - views
        bound = set(tables)
        for name in views:
            try:
                self._engine.check_public(exp.select("*").from_(self._named[name].copy()), tables)
            except PrivacyError:
                continue
            bound.add(name)
        return frozenset(bound)

    def _rebuild(self, listing: list[tuple[exp.Table, str | None]]) -> None:
        declared = self._ledger.declarations()
        database = self._template.database
        names = [identity(t, database) for t, _ in listing]
        self._named = dict(zip(names, (t for t, _ in listing), strict=True))
        self._table_columns = {}
        self._table_types = {}
        self._names_table = {}
        self._catalog = replace(
            self._template,
            protected={n: p for n, (p, _) in declared.items() if p is not None},
            public=frozenset(n for n, (_, public) in declared.items() if public),
            tables=frozenset(names),
            search_path=self._engine.search_path(),
            ambiguous=frozenset(name for name, n in Counter(names).items() if n > 1),
            views={identity(t, database): sql for t, sql in listing if sql},
            defined=self._engine.defined_functions(),
            memo={},
        )

    def _columns(self, source: str, reading: Reading) -> list[str]:
        """A table's columns from the cache; a file reader's its schema (anew per query)."""
        if READER.match(source):
            return [name for name, _ in reading(source)[0]]
        if not self._is_table(source):
            return self._engine.columns(source)
        if source not in self._table_columns:
            self._table_columns[source] = self._engine.columns(source)
        return self._table_columns[source]

    def _types(self, statement: str, reading: Reading) -> list[str]:
        """The column types of a statement, its file readers read to their schemas; those
        of a whole table from the cache."""
        source = statement.removeprefix(WHOLE_TABLE)
        if source != statement and READER.match(source):
            return [kind for _, kind in reading(source)[0]]
        if READER.search(statement):
            return self._engine.types(_conformed(statement, reading))
        if source == statement or not self._is_table(source):
            return self._engine.types(statement)
        if source not in self._table_types:
            self._table_types[source] = self._engine.types(statement)
        return self._table_types[source]

    def _read(self, source: exp.Table, reading: Reading) -> exp.Expr:
        """How the generated SQL reads a base source: a file reader's files to its schema,
        a table with each ENUM column as VARCHAR. The rewriter knows an ENUM only as VARCHAR
        (``public_type``: its members are data), and so must the engine: on an ENUM,
        ``hash``, ``<`` and ``least`` work on the members' positions, so ``hash(k) =
        hash(0)`` counted the units holding the first member, which one unit's value could
        change (red team 13)."""
        if isinstance(source.this, exp.Func):
            return _read(source, reading)
        text = source_sql(source)
        kinds = self._types(WHOLE_TABLE + text, reading)
        if not any(ENUM.search(kind) for kind in kinds):
            return source.copy()
        columns = []
        for name, kind in zip(self._columns(text, reading), kinds, strict=True):
            column: exp.Expr = exp.column(name, quoted=True)
            if ENUM.search(kind):
                shown = exp.DataType.build(public_type(kind), dialect="duckdb")
                column = exp.Cast(this=column, to=shown)
            columns.append(exp.alias_(column, name, quoted=True))
        bare = source.copy()
        bare.set("alias", None)
        return exp.Subquery(this=exp.select(*columns).from_(bare))

    def _file_reading(self, catalog: Catalog, reader_sql: str) -> tuple[Schema, exp.Expr]:
        """A file reader's schema (its declaration's, else its files' one) and the read
        that gives its files that schema (``rewriter.files``)."""
        reader = _parsed_reader(reader_sql)
        groups = self._groups[reader_sql] = self._engine.file_groups(reader)
        protection = catalog.protection(reader)
        schema = reader_schema(protection.columns if protection else (), groups)
        unit = protection.privacy_unit if protection else ""
        return schema, conformed_read(reader, schema, groups, unit, self._engine.convert)

    def file_fingerprint(self, catalog: Catalog, source: exp.Table) -> str | None:
        """What identifies the data a file reader reads, without reading it: how it is read
        (its files' groups, declared schema and conversions: ``Catalog.read``) and each
        file's device, inode, size, modification and change times, as the footers' verdicts
        are kept (``privsql.footers``). None for a table, or when a file is not on the local
        file system (``fingerprint_sql`` then reads its rows)."""
        if not isinstance(source.this, exp.Func):
            return None
        bare = source.copy()
        bare.set("alias", None)
        read = catalog.read(bare)  # and its groups, read once for the catalogue
        text = source_sql(source)
        groups = self._groups.get(text) or self._engine.file_groups(_parsed_reader(text))
        states = [file_state(file) for group in groups for file in group.files]
        if any(state is None for state in states):
            return None
        return repr((read.sql(dialect="duckdb"), sorted(map(repr, states))))

    def _is_table(self, source: str) -> bool:
        """Whether ``source`` (a source's SQL) names a table: kept while the catalogue is."""
        if source not in self._names_table:
            tables = self._catalog.tables or frozenset()
            self._names_table[source] = bool(PLAIN_NAME.fullmatch(source)) and (
                identity(exp.to_table(source, dialect="duckdb"), self._template.database) in tables
            )
        return self._names_table[source]

    def _files(self, name: str) -> frozenset[str]:
        """The files a file identity names (``file_identity`` each), its globs expanded by
        DuckDB's own ``glob``: the files a reader of those paths would read."""
        found = set()
        for path in name.removeprefix(FILE).split("\n"):
            try:
                listed = self._con.execute(
                    f"SELECT file FROM glob({exp.Literal.string(path).sql(dialect='duckdb')})"
                ).fetchall()
            except duckdb.Error:
                listed = []
            found |= {file_identity(file) for (file,) in listed} or {file_identity(path)}
        return frozenset(found)


Reading = Callable[[str], tuple[Schema, exp.Expr]]
"""A query's file readers, by their SQL: schema and read (``CatalogCache._file_reading``)."""


def _parsed_reader(reader_sql: str) -> exp.Table:
    table = sqlglot.parse_one(f"SELECT * FROM {reader_sql}", read="duckdb").find(exp.Table)
    assert table is not None
    return table


def _read(source: exp.Table, reading: Reading) -> exp.Expr:
    """How the generated SQL reads a file reader: its files to its schema."""
    return reading(source_sql(source))[1].copy()


def _conformed(statement: str, reading: Reading) -> str:
    """``statement`` with each file reader reading its files to its schema."""
    if not READER.search(statement):
        return statement
    tree = sqlglot.parse_one(statement, read="duckdb")
    for table in list(tree.find_all(exp.Table)):
        if isinstance(table.this, exp.Func):
            read = _read(table, reading)
            read.set("alias", table.args.get("alias"))
            table.replace(read)
    return tree.sql(dialect="duckdb")


def _count_rows(engine: Engine, query: exp.Query) -> int:
    """The count a query over public data computes (how many rows a public item can join
    to a private one: ``rewriter.fanout``). Public data only: a failure is the public
    item's own, and refuses the query as one."""
    try:
        value = engine.public(query).column(0)[0].as_py()
    except duckdb.Error:
        raise UnsupportedQuery(
            "a public table joined to private rows could not be read to count its rows"
        ) from None
    return int(value or 0)


def _evaluate(connection: duckdb.DuckDBPyConnection, statement: str) -> list[tuple]:
    """A statement over the query's constants (a key list's casts, date bounds), reading no
    row: a key list's collation comes from its key over the query's FROM under WHERE false."""
    try:
        return connection.execute(statement).fetchall()
    except duckdb.Error:
        raise InvalidOption(
            "a constant of the query (a listed key or a bound) does not cast to its type"
        ) from None


def _files_of(connection: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """The data's own database file, and its write-ahead log."""
    path = database_path(connection)
    if path is None:
        return frozenset()
    return frozenset(str(p) for p in (path, path.with_name(path.name + ".wal")))


def file_identity(path: str) -> str:
    """One name per file, however its path is spelt: its device and inode (symbolic and
    hard links, ``~``, ``..`` and ``/proc/self/root`` are all one file), else its real path.

    Decided anew for each query: a file that did not exist (a write-ahead log) may since
    have been created, and has a device and inode from then on."""
    expanded = os.path.expanduser(path)
    try:
        status = os.stat(expanded)
    except OSError:
        return os.path.realpath(expanded)
    return f"{status.st_dev}:{status.st_ino}"
