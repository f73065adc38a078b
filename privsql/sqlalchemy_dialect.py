"""SQLAlchemy dialects for privsql, so SQLAlchemy, pandas, jupysql and BI tools can use it.

    from sqlalchemy import create_engine, inspect
    engine = create_engine("privsql:///flights.duckdb")       # in this process
    pandas.read_sql("SELECT origin, COUNT(*) AS n FROM flights GROUP BY origin "
                    "PRIVACY_UNIT tailnum BOUND ROWS 100 EPSILON 0.5", engine)
    inspect(engine).get_table_names(); inspect(engine).get_columns("flights")

``privsql:///PATH`` runs privsql in this process through ``privsql.dbapi``; the URL's
query string sets ``privsql.connect`` options (``privsql:///new.duckdb?budget=3``,
see ``privsql.dbapi.OPTIONS``; never the ledger or a seed, ``privsql.dbapi.NOT_IN_URLS``).
Table and column listings come from the catalogue (a schema is not private); they never
read data.

``privsql+server://alice@host:5433/db`` reaches a ``privsql serve`` server: it is
SQLAlchemy's own PostgreSQL dialect over psycopg, with privsql's default port, since the
server speaks the PostgreSQL protocol (plain ``postgresql+psycopg://`` works as well).

Both are registered as SQLAlchemy dialects by the package's entry points
(``[project.entry-points."sqlalchemy.dialects"]`` in pyproject.toml).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from sqlalchemy import types as sqltypes
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import URL, Connection, default
from sqlalchemy.pool import Pool, StaticPool

import privsql
from privsql import dbapi
from privsql.remote import SERVER_PORT
from privsql.repl import catalog

TYPES: Mapping[str, type[sqltypes.TypeEngine]] = {
    "BOOLEAN": sqltypes.Boolean,
    "TINYINT": sqltypes.SmallInteger,
    "SMALLINT": sqltypes.SmallInteger,
    "UTINYINT": sqltypes.SmallInteger,
    "INTEGER": sqltypes.Integer,
    "USMALLINT": sqltypes.Integer,
    "BIGINT": sqltypes.BigInteger,
    "UINTEGER": sqltypes.BigInteger,
    "UBIGINT": sqltypes.Numeric,
    "HUGEINT": sqltypes.Numeric,
    "UHUGEINT": sqltypes.Numeric,
    "FLOAT": sqltypes.Float,
    "DOUBLE": sqltypes.Double,
    "VARCHAR": sqltypes.String,
    "BLOB": sqltypes.LargeBinary,
    "DATE": sqltypes.Date,
    "TIME": sqltypes.Time,
    "TIMESTAMP": sqltypes.DateTime,
    "TIMESTAMP_S": sqltypes.DateTime,
    "TIMESTAMP_MS": sqltypes.DateTime,
    "TIMESTAMP_NS": sqltypes.DateTime,
    "INTERVAL": sqltypes.Interval,
    "UUID": sqltypes.Uuid,
}
"""SQLAlchemy's generic type for each DuckDB type name (others reflect as NullType)."""


def column_type(name: str) -> sqltypes.TypeEngine:
    """The SQLAlchemy type of a column of DuckDB type ``name`` (e.g. ``DECIMAL(10,2)``)."""
    decimal = re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", name)
    if decimal:
        return sqltypes.Numeric(int(decimal[1]), int(decimal[2]))
    if name == "TIMESTAMP WITH TIME ZONE":
        return sqltypes.DateTime(timezone=True)
    kind = TYPES.get(name)
    return kind() if kind is not None else sqltypes.NullType()


class PrivsqlDialect(default.DefaultDialect):
    """``privsql:///PATH``: privsql in this process, through ``privsql.dbapi``."""

    name = "privsql"
    driver = "privsql"
    supports_statement_cache = True
    supports_alter = False
    supports_sequences = False
    supports_native_boolean = True
    supports_native_decimal = True
    supports_sane_rowcount = False
    supports_sane_multi_rowcount = False
    default_paramstyle = "qmark"
    max_identifier_length = 255

    @classmethod
    def import_dbapi(cls) -> ModuleType:
        return dbapi

    def create_connect_args(self, url: URL) -> tuple[list[Any], dict[str, Any]]:
        database, options = dbapi.parse_url(url.render_as_string(hide_password=False))
        return [database], options

    @classmethod
    def get_pool_class(cls, url: URL) -> type[Pool]:
        """One shared session for ``:memory:``: a new in-memory session per pooled
        connection would come with a fresh budget. A file's sessions share its ledger."""
        if (url.database or ":memory:") == ":memory:":
            return StaticPool
        return super().get_pool_class(url)

    def _get_default_schema_name(self, connection: Connection) -> str:
        return "main"

    # -- reflection: the catalogue, never data -------------------------------------------

    def get_schema_names(self, connection: Connection, **kw: Any) -> list[str]:
        schemas = {self._split(name)[0] for name in self._catalog(connection)}
        return sorted(schemas | {"main"})

    def get_table_names(
        self, connection: Connection, schema: str | None = None, **kw: Any
    ) -> list[str]:
        wanted = schema or "main"
        return [
            table for owner, table in map(self._split, self._catalog(connection)) if owner == wanted
        ]

    def get_view_names(
        self, connection: Connection, schema: str | None = None, **kw: Any
    ) -> list[str]:
        return []  # the catalogue lists views among the tables

    def has_table(
        self, connection: Connection, table_name: str, schema: str | None = None, **kw: Any
    ) -> bool:
        return self._columns(connection, table_name, schema) is not None

    def get_columns(
        self, connection: Connection, table_name: str, schema: str | None = None, **kw: Any
    ) -> list[dict[str, Any]]:
        from sqlalchemy.exc import NoSuchTableError

        columns = self._columns(connection, table_name, schema)
        if columns is None:
            raise NoSuchTableError(table_name)
        return [
            {"name": name, "type": column_type(kind), "nullable": True, "default": None}
            for name, kind in columns
        ]

    def get_pk_constraint(
        self, connection: Connection, table_name: str, schema: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        return {"constrained_columns": [], "name": None}

    def get_foreign_keys(
        self, connection: Connection, table_name: str, schema: str | None = None, **kw: Any
    ) -> list[dict[str, Any]]:
        return []

    def get_indexes(
        self, connection: Connection, table_name: str, schema: str | None = None, **kw: Any
    ) -> list[dict[str, Any]]:
        return []

    @staticmethod
    def _split(name: str) -> tuple[str, str]:
        schema, dot, table = name.rpartition(".")
        return (schema if dot else "main"), table

    @staticmethod
    def _catalog(connection: Connection) -> dict[str, list[tuple[str, str]]]:
        session: privsql.Session = connection.connection.dbapi_connection.session
        return catalog(session)

    def _columns(
        self, connection: Connection, table_name: str, schema: str | None
    ) -> list[tuple[str, str]] | None:
        wanted = (schema or "main", table_name)
        for name, columns in self._catalog(connection).items():
            if self._split(name) == wanted:
                return columns
        return None


class PrivsqlServerDialect(PGDialect_psycopg):
    """``privsql+server://alice@host:5433/db``: a ``privsql serve`` server, spoken to as
    PostgreSQL through psycopg; the port defaults to privsql's."""

    supports_statement_cache = True

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("use_native_hstore", False)  # the server has no hstore type
        super().__init__(**kwargs)

    def create_connect_args(self, url: URL) -> Any:
        if url.port is None:
            url = url.set(port=SERVER_PORT)
        return super().create_connect_args(url)
