"""Answers to clients' catalog queries (``pg_catalog``, ``information_schema``) from a
schema mirror: an in-memory DuckDB database with an *empty* table of the same name and
column types for each table and view of the served database.

psql's ``\\dt`` and ``\\d t``, SQLAlchemy's and BI tools' introspection run against the
mirror with DuckDB's own ``pg_catalog`` emulation, plus the few functions psql calls that
DuckDB lacks. The mirror holds no rows, cannot read files and runs in a process of its
own (``mirror_worker``), so whatever a client sends it, it can only ever show schemas —
which tables exist and their columns' names and types, which are not private (privsql's
declarations are public too) — and a DuckDB bug it reaches cannot read or stop the
server's process.
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
from typing import BinaryIO

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

from privsql.ledger import SCHEMA
from privsql.server import mirror_worker
from rewriter.binding import NO_REACH
from rewriter.catalog import public_type

CATALOG_SCHEMAS = frozenset({"pg_catalog", "information_schema"})

_TYPE_NAMES = {
    "int8": "bigint",
    "int4": "integer",
    "int2": "smallint",
    "float8": "double precision",
    "float4": "real",
    "varchar": "character varying",
    "bool": "boolean",
    "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone",
}
"""DuckDB's ``format_type`` answers, as PostgreSQL spells them (clients map the latter)."""
_MACROS = {
    "pg_get_userbyid": "(oid) AS 'privsql'",
    "pg_encoding_to_char": "(e) AS 'UTF8'",
    "pg_get_indexdef": "(oid, c := 0, p := false) AS NULL",
    "pg_get_expr": "(e, r, p := false) AS NULL",
    "pg_get_serial_sequence": "(t, c) AS NULL",
    "format_type": "(t_oid, t_mod) AS CASE pg_catalog.format_type(t_oid, t_mod) "
    + " ".join(f"WHEN '{duck}' THEN '{pg}'" for duck, pg in _TYPE_NAMES.items())
    + " ELSE pg_catalog.format_type(t_oid, t_mod) END",
    "array_upper": "(a, d) AS len(a)",
    "pg_get_statisticsobjdef_columns": "(oid) AS NULL",
    "pg_get_partkeydef": "(oid) AS NULL",
    "pg_get_triggerdef": "(oid, p := false) AS NULL",
    "pg_relation_is_publishable": "(oid) AS false",
    "pg_get_function_result": "(oid) AS NULL",
    "pg_get_function_arguments": "(oid) AS NULL",
    "pg_total_relation_size": "(oid) AS 0",
    "pg_relation_size": "(oid) AS 0",
    "pg_table_size": "(oid) AS 0",
    "version": "() AS 'PostgreSQL 15.0 (privsql)'",
    "to_regtype": "(name) AS (SELECT oid FROM pg_catalog.pg_type WHERE typname = name LIMIT 1)",
    "to_regclass": "(name) AS (SELECT oid FROM pg_catalog.pg_class WHERE relname = name LIMIT 1)",
}
"""PostgreSQL functions clients call on the catalog that DuckDB does not have, with
answers that hold for the mirror (no indexes, triggers or partitions; one owner)."""


_OPERATORS: dict[str, type[exp.Expression]] = {
    "~": exp.RegexpLike,
    "=": exp.EQ,
    "<>": exp.NEQ,
    "~~": exp.Like,
}
"""psql's ``OPERATOR(pg_catalog.op)`` spellings, as the plain operators."""
_RENAMED = {"json_build_object": "json_object"}
"""PostgreSQL functions that DuckDB has under another name."""
_NAMED_OIDS = {"regclass": ("pg_class", "relname"), "regtype": ("pg_type", "typname")}
"""Casts of a name to an oid type, and where the oid is looked up."""


OVERRIDES_PREFIX = "privsql_catalog_"
_OVERRIDES = {
    # pg_class with the columns psql 15 reads that DuckDB's lacks (or types otherwise)
    "pg_class": "SELECT * REPLACE (NULL::VARCHAR[] AS reloptions), false AS "
    "relforcerowsecurity FROM pg_catalog.pg_class",
    "pg_collation": "SELECT *, NULL::BIGINT AS collnamespace FROM pg_catalog.pg_collation",
    # relations DuckDB does not have, empty: the mirror has no such objects
    "pg_policy": "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS polname, NULL::BIGINT AS "
    "polrelid, NULL::VARCHAR AS polcmd, NULL::BOOLEAN AS polpermissive, NULL::BIGINT[] AS "
    "polroles, NULL::VARCHAR AS polqual, NULL::VARCHAR AS polwithcheck WHERE false",
    "pg_statistic_ext": "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS stxrelid, NULL::VARCHAR "
    "AS stxname, NULL::BIGINT AS stxnamespace, NULL::INTEGER AS stxstattarget, "
    "NULL::VARCHAR[] AS stxkind, NULL::INTEGER[] AS stxkeys WHERE false",
    "pg_publication": "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS pubname, NULL::BOOLEAN "
    "AS puballtables WHERE false",
    "pg_publication_rel": "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS prpubid, NULL::BIGINT "
    "AS prrelid, NULL::VARCHAR AS prqual, NULL::INTEGER[] AS prattrs WHERE false",
    "pg_publication_namespace": "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS pnpubid, "
    "NULL::BIGINT AS pnnspid WHERE false",
    "pg_inherits": "SELECT NULL::BIGINT AS inhrelid, NULL::BIGINT AS inhparent, "
    "NULL::INTEGER AS inhseqno, NULL::BOOLEAN AS inhdetachpending WHERE false",
    "pg_trigger": "SELECT NULL::BIGINT AS oid, NULL::BIGINT AS tgrelid, NULL::VARCHAR AS "
    "tgname, NULL::BOOLEAN AS tgisinternal, NULL::VARCHAR AS tgenabled, NULL::BIGINT AS "
    "tgparentid WHERE false",
    "pg_rewrite": "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS rulename, NULL::BIGINT AS "
    "ev_class WHERE false",
    "pg_foreign_table": "SELECT NULL::BIGINT AS ftrelid, NULL::BIGINT AS ftserver, "
    "NULL::VARCHAR[] AS ftoptions WHERE false",
    "pg_partitioned_table": "SELECT NULL::BIGINT AS partrelid WHERE false",
    "pg_roles": "SELECT 1::BIGINT AS oid, 'privsql' AS rolname, false AS rolsuper, "
    "true AS rolinherit, false AS rolcreaterole, false AS rolcreatedb, true AS rolcanlogin, "
    "-1 AS rolconnlimit, NULL::TIMESTAMP AS rolvaliduntil, false AS rolreplication, "
    "false AS rolbypassrls",
    "pg_auth_members": "SELECT NULL::BIGINT AS roleid, NULL::BIGINT AS member WHERE false",
    # psql's \\l reads the locale columns; the served database is the mirror's only one
    "pg_database": "SELECT *, 1::BIGINT AS datdba, 6 AS encoding, 'C' AS datcollate, "
    "'C' AS datctype, NULL::VARCHAR AS daticulocale, 'c' AS datlocprovider, "
    "NULL::VARCHAR[] AS datacl FROM pg_catalog.pg_database WHERE datname = current_database()",
    # the served database has no functions of its own (the mirror's macros are not its)
    "pg_proc": "SELECT * FROM pg_catalog.pg_proc WHERE false",
    "pg_user": "SELECT 1::BIGINT AS usesysid, 'privsql' AS usename, false AS usesuper",
}
"""Catalog relations clients read that DuckDB's ``pg_catalog`` lacks or lacks columns of:
table macros of the mirror (``OVERRIDES_PREFIX`` + name, so no client sees them listed
as tables), which catalog queries are pointed to."""


class MirrorError(Exception):
    """A catalog query the mirror could not answer (its message shows no data: the mirror
    holds none)."""


class SchemaMirror:
    """The served database's schema, without its data, for catalog queries.

    The mirror is a DuckDB database in a process of its own (``mirror_worker``), one per
    analyst, started at their first catalog query and again after it dies, since catalog
    queries run as clients wrote them: a DuckDB bug one reaches reads or crashes that
    process, never the server's, which holds the data and other analysts' answers (red
    team 30). An analyst's catalog queries run one at a time in their process, each
    stopped with it past ``TIME_LIMIT`` seconds, so an endless one stalls only its own
    analyst (red team 31: four connections' endless queries held everyone's ``SELECT 1``
    for 40 s behind one shared process).
    """

    TIME_LIMIT = 5.0
    IDLE_LIMIT = 300.0
    """Seconds after which an analyst's idle mirror process is stopped (each holds some
    100 MB; the next catalog query starts it again)."""

    def __init__(self, source: duckdb.DuckDBPyConnection, name: str) -> None:
        columns = source.execute(
            "SELECT schema_name, table_name, column_name, data_type FROM duckdb_columns() "
            "WHERE database_name = current_database() AND schema_name <> ? "
            "AND NOT internal ORDER BY schema_name, table_name, column_index",
            [SCHEMA],
        ).fetchall()
        tables: dict[tuple[str, str], list[str]] = {}
        for schema, table, column, data_type in columns:
            kind = public_type(data_type)  # an ENUM's members are data
            tables.setdefault((schema, table), []).append(f"{_quote(column)} {kind}")
        quoted = _quote(name)
        self._set_up = [
            *(f"SET {setting} = {str(value).lower()}" for setting, value in NO_REACH.items()),
            *(f"SET {setting} = {value}" for setting, value in mirror_worker.LIMITS.items()),
            f"ATTACH ':memory:' AS {quoted}",
            f"USE {quoted}",
            *(
                statement
                for (schema, table), definitions in tables.items()
                for statement in (
                    f"CREATE SCHEMA IF NOT EXISTS {_quote(schema)}",
                    f"CREATE TABLE {_quote(schema)}.{_quote(table)} ({', '.join(definitions)})",
                )
            ),
            *(
                f"CREATE MACRO main.{OVERRIDES_PREFIX}{view}() AS TABLE {definition}"
                for view, definition in _OVERRIDES.items()
            ),
            *(f"CREATE OR REPLACE MACRO main.{m}{d}" for m, d in _MACROS.items()),
            "SET enable_external_access = false",
            "SET lock_configuration = true",
        ]
        self._lock = threading.Lock()
        self._processes: dict[str, _MirrorProcess] = {}

    def query(self, statement: exp.Expression, analyst: str = "") -> pa.Table:
        """Run a catalog query (parsed as PostgreSQL) on ``analyst``'s mirror."""
        request = _for_duckdb(statement).sql(dialect="duckdb")
        with self._lock:
            process = self._processes.setdefault(analyst, _MirrorProcess(self._set_up))
            others = [p for p in self._processes.values() if p is not process]
        for other in others:
            other.stop_if_idle(self.IDLE_LIMIT)
        return process.ask(request, self.TIME_LIMIT)

    def close(self) -> None:
        with self._lock:
            processes, self._processes = list(self._processes.values()), {}
        for process in processes:
            process.close()


class _MirrorProcess:
    """One mirror process, asked one query at a time."""

    def __init__(self, set_up: list[str]) -> None:
        self._set_up = set_up
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._used = time.monotonic()

    def ask(self, sql: str, limit: float) -> pa.Table:
        with self._lock:
            self._used = time.monotonic()
            process = self._started()
            try:
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write(mirror_worker.frame(sql.encode()))
                process.stdin.flush()
                status = _read(process.stdout, 1, limit)
                (length,) = struct.unpack(">I", _read(process.stdout, 4, limit))
                payload = _read(process.stdout, length, limit)
            except (OSError, TimeoutError):
                self._stop()
                raise MirrorError("the catalog query did not finish") from None
        if status != b"\x00":
            raise MirrorError(payload.decode(errors="replace"))
        return pa.ipc.open_stream(payload).read_all()

    def stop_if_idle(self, limit: float) -> None:
        """Stop the process if no query ran in it for ``limit`` seconds (and none runs)."""
        if self._lock.acquire(blocking=False):
            try:
                if time.monotonic() - self._used > limit:
                    self._stop()
            finally:
                self._lock.release()

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, mirror_worker.__file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            assert self._process.stdin is not None
            self._process.stdin.write(mirror_worker.frame(json.dumps(self._set_up).encode()))
            self._process.stdin.flush()
        return self._process

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                if stream is not None:
                    stream.close()
            self._process = None

    def close(self) -> None:
        with self._lock:
            self._stop()


def _read(stream: BinaryIO, size: int, limit: float) -> bytes:
    """Exactly ``size`` bytes of a process's output within ``limit`` seconds (``OSError``
    if it ended, ``TimeoutError`` if it was late)."""
    deadline = time.monotonic() + limit
    chunks, wanted = [], size
    while wanted:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([stream], [], [], remaining)[0]:
            raise TimeoutError
        chunk = os.read(stream.fileno(), wanted)
        if not chunk:
            raise OSError("the mirror's process ended")
        chunks.append(chunk)
        wanted -= len(chunk)
    return b"".join(chunks)


def is_catalog_query(statement: exp.Expression) -> bool:
    """Whether a parsed statement is a SELECT that reads only catalog relations (or none):
    one the mirror answers. Anything naming a table of the database, or reading from a
    function, goes to privsql's analysis instead."""
    if not isinstance(statement, exp.Query):
        return False
    ctes = {cte.alias_or_name.lower() for cte in statement.find_all(exp.CTE)}
    for table in statement.find_all(exp.Table):
        name, schema = table.name.lower(), table.db.lower()
        if not isinstance(table.this, exp.Identifier):
            # a table function: psql's generate_series is the catalog's, read_parquet not
            if schema == "pg_catalog" or isinstance(table.this, exp.GenerateSeries):
                continue
            return False
        if schema in CATALOG_SCHEMAS or (not schema and name.startswith("pg_")):
            continue
        if not schema and name in ctes:
            continue
        return False
    return True


def _for_duckdb(statement: exp.Expression) -> exp.Expression:
    """A PostgreSQL catalog query as the mirror's DuckDB can run it: ``pg_catalog.f(x)`` as
    ``f(x)`` (DuckDB finds its own and the mirror's macros unqualified), relations DuckDB
    lacks (or lacks columns of) as the mirror's table macros, ``OPERATOR(pg_catalog.~)``
    as the plain operator, casts to ``pg_catalog`` types as DuckDB's, ``'t'::regclass`` as
    a look-up of the oid, ``json_build_object`` as ``json_object``; collations
    (``COLLATE pg_catalog.default``) are dropped."""

    def strip(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Cast):
            name = _catalog_type(node.to)
            if name in _NAMED_OIDS and isinstance(node.this, exp.Literal):
                relation, column = _NAMED_OIDS[name]  # 'flights'::regclass: look it up
                return exp.paren(
                    exp.select("oid")
                    .from_(exp.table_(relation, db="pg_catalog"))
                    .where(exp.column(column).eq(node.this))
                    .limit(1)
                )
            if name is not None and name.startswith("reg"):
                return node.this  # c.oid::regclass: the mirror's oids as they are
            return node
        if isinstance(node, exp.DataType) and (name := _catalog_type(node)) is not None:
            return exp.DataType.build(name, dialect="postgres")  # pg_catalog.int2
        if isinstance(node, exp.Table) and node.db.lower() in ("", "pg_catalog"):
            if not isinstance(node.this, exp.Identifier):  # pg_catalog.generate_series(...)
                node.set("db", None)
            elif node.name.lower() in _OVERRIDES:
                # columns may say pg_class.relname: the table macro keeps the name as alias
                alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(node.name))
                function = exp.Anonymous(this=OVERRIDES_PREFIX + node.name.lower())
                return exp.Table(this=function, alias=alias)
            return node
        if isinstance(node, exp.Anonymous) and node.name.lower() in _RENAMED:
            return exp.Anonymous(this=_RENAMED[node.name.lower()], expressions=node.expressions)
        if isinstance(node, exp.Column) and node.args.get("db"):  # pg_catalog.pg_class.oid
            node.set("db", None)
            return node
        if isinstance(node, exp.Operator):
            operator = str(node.args.get("operator", "")).removeprefix("pg_catalog.")
            if operator in _OPERATORS:
                return _OPERATORS[operator](this=node.this, expression=node.expression)
        if (
            isinstance(node, exp.Dot)
            and isinstance(node.this, exp.Identifier | exp.Column)
            and node.this.name.lower() == "pg_catalog"
            and isinstance(node.expression, exp.Func)
        ):
            return node.expression
        return node

    def uncollated(node: exp.Expression) -> exp.Expression:
        return node.this if isinstance(node, exp.Collate) else node

    # A replaced node's children are not visited again: transform until nothing changes.
    before, after = None, statement.copy().transform(uncollated)
    while before != after:
        before, after = after, after.transform(strip)
    return after


def _catalog_type(data_type: exp.DataType) -> str | None:
    """``t`` for a cast to ``pg_catalog.t`` or to a type sqlglot does not know (``regclass``);
    None for the types DuckDB knows."""
    if data_type.this != exp.DataType.Type.USERDEFINED:
        name = data_type.sql(dialect="postgres").lower()
        return name if name.startswith("reg") else None
    kind = data_type.args.get("kind")
    if isinstance(kind, exp.Dot):
        return kind.expression.name.lower()
    return (kind.name if isinstance(kind, exp.Expression) else str(kind or "")).lower() or None


def parse_postgres(sql: str) -> exp.Expression | None:
    """``sql`` parsed as one PostgreSQL statement, or None if sqlglot cannot."""
    try:
        statements = sqlglot.parse(sql, dialect="postgres")
    except sqlglot.errors.SqlglotError:
        return None
    if len(statements) != 1 or statements[0] is None:
        return None
    return statements[0]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
