"""privsql as a PEP 249 (DB-API 2.0) driver, for code and tools that speak DB-API.

    import privsql.dbapi

    con = privsql.dbapi.connect("flights.duckdb", budget=3.0)
    cur = con.cursor()
    cur.execute(
        "SELECT origin, COUNT(*) AS n FROM flights WHERE month = ? GROUP BY origin "
        "PRIVACY_UNIT tailnum BOUND ROWS 100 EPSILON 0.5",
        [7],
    )
    cur.fetchall()          # noisy rows
    cur.last_cost           # ε this answer cost (0 for a stored answer or public data)
    cur.last_result         # the privsql Result: .accuracy(), .warning(), .plot()

A connection wraps a privsql ``Session`` (``connect`` opens one, or wraps one given);
every statement goes through the same analysis as ``Session.sql``. Parameters are bound
here, in the client, because privsql refuses parameters in SQL (a ``$name`` could reach
the statement's hashing secret): each value is rendered as a SQL literal by sqlglot and
spliced in place of its placeholder, found by privsql's own tokenizer (so a ``?`` inside a
string or comment is left alone). Placeholders are those of DuckDB's Python API: ``?`` and
``$1``, ``$2``, ... with a sequence, ``$name`` with a mapping.

``commit`` does nothing and ``rollback`` nothing either: privsql runs no transactions for
its analysts, and an answer's ε is charged, durably, before the answer is returned — it is
never given back. Refusals raise the PEP 249 exceptions below, keeping privsql's rule name
in ``error.rule``; a refused query charges nothing.
"""

from __future__ import annotations

import datetime
import decimal
import math
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import duckdb
import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

import privsql
from rewriter.dialect import PrivSQL

apilevel = "2.0"
threadsafety = 2
"""Threads may share the module and connections (a session runs one query at a time),
not cursors."""
paramstyle = "qmark"
"""``?`` with a sequence; ``$1`` (sequence) and ``$name`` (mapping) work too, as in DuckDB."""


# -- exceptions (PEP 249) --------------------------------------------------------------


class Warning(Exception):
    """Important warnings; privsql raises none (a bounding warning is on the Result)."""


class Error(Exception):
    """Every error this module raises. ``rule`` names privsql's rule for privsql's own
    errors (``"aggregate"``, ``"budget"``, ``"syntax"``, ...), else it is None."""

    def __init__(self, message: str, rule: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule


class InterfaceError(Error):
    """Misuse of this module: a closed connection or cursor, fetching before executing."""


class DatabaseError(Error):
    """An error of the database (privsql or DuckDB)."""


class DataError(DatabaseError):
    """Post-processing failed on released values (they were charged), or a bad value."""


class OperationalError(DatabaseError):
    """The database could not be opened, or its budget is spent."""


class IntegrityError(DatabaseError):
    """Not raised: analysts change nothing."""


class InternalError(DatabaseError):
    """The ledger failed its authentication: privsql refuses service on this database."""


class ProgrammingError(DatabaseError):
    """The query is wrong (syntax, unknown names, types, parameters) or refused."""


class NotSupportedError(DatabaseError):
    """A statement or query shape privsql does not run for analysts, or a parameter type
    it cannot render as a literal."""


class PrivacyRefusal(ProgrammingError):
    """privsql refused the query before reading any data, by the rule in ``rule``;
    nothing was charged."""


class UnsupportedRefusal(PrivacyRefusal, NotSupportedError):
    """Refused because it is not a SELECT, or a shape privsql cannot answer privately."""


class BudgetRefusal(PrivacyRefusal, OperationalError):
    """Refused because its ε or δ would take the ledger past the budget."""


ERRORS_BY_RULE: Mapping[str, type[Error]] = {
    "syntax": ProgrammingError,
    "unknown-name": ProgrammingError,
    "type": ProgrammingError,
    "select-only": UnsupportedRefusal,
    "unsupported": UnsupportedRefusal,
    "budget": BudgetRefusal,
    "post-processing": DataError,
    "ledger": InternalError,
}
"""The PEP 249 class of each privsql rule; any other rule is a ``PrivacyRefusal``."""


def _translated(error: Exception) -> Error:
    """The PEP 249 error for an exception raised by privsql or DuckDB.

    privsql's messages carry no private values (rewriter.errors); DuckDB's reach here only
    from queries over public data, since privsql withholds them for private statements.
    """
    if isinstance(error, privsql.PrivacyError):
        kind = ERRORS_BY_RULE.get(error.rule, PrivacyRefusal)
        return kind(str(error), error.rule)
    if isinstance(error, (duckdb.IOException, OSError)):
        return OperationalError(_first_line(error))
    if isinstance(error, (duckdb.ParserException, duckdb.BinderException)):
        return ProgrammingError(_first_line(error))
    if isinstance(error, duckdb.Error):
        return DatabaseError(_first_line(error))
    return InternalError(_first_line(error))


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


# -- types (PEP 249) -------------------------------------------------------------------


class DBAPITypeObject:
    """Equal to the type codes (DuckDB type names, as in ``description``) of one kind."""

    def __init__(self, *names: str) -> None:
        self.names = frozenset(names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.split("(")[0] in self.names

    def __hash__(self) -> int:
        return hash(self.names)

    def __repr__(self) -> str:
        return f"DBAPITypeObject{tuple(sorted(self.names))}"


STRING = DBAPITypeObject("VARCHAR", "UUID", "ENUM")
BINARY = DBAPITypeObject("BLOB", "BIT")
NUMBER = DBAPITypeObject(
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
    "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT",
    "FLOAT", "DOUBLE", "DECIMAL",
)  # fmt: skip
DATETIME = DBAPITypeObject(
    "DATE", "TIME", "TIME WITH TIME ZONE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE",
    "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS", "INTERVAL",
)  # fmt: skip
ROWID = DBAPITypeObject()

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> datetime.date:
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> datetime.time:
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> datetime.datetime:
    return Timestamp(*time.localtime(ticks)[:6])


# -- parameters ------------------------------------------------------------------------


def literal(value: object) -> exp.Expression:
    """``value`` as a SQL literal (sqlglot quotes strings): what a parameter becomes."""
    if isinstance(value, decimal.Decimal) and not value.is_finite():
        value = math.nan if value.is_nan() else math.copysign(math.inf, value)
    if isinstance(value, float) and not math.isfinite(value):
        # NaN and ±inf by name, as text cast to DOUBLE (exp.convert makes them identifiers)
        return exp.cast(exp.Literal.string(repr(value)), exp.DataType.Type.DOUBLE)
    if isinstance(value, float):
        return exp.Literal.number(repr(value))
    if isinstance(value, uuid.UUID):
        return exp.cast(exp.Literal.string(str(value)), exp.DataType.Type.UUID)
    scalars = (str, bytes, bool, int, decimal.Decimal, datetime.date, datetime.time)
    if value is None or isinstance(value, scalars):
        return exp.convert(value)
    raise NotSupportedError(f"a parameter of type {type(value).__name__} is not supported")


def literal_text(value: object) -> str:
    """``value`` as DuckDB SQL text, with a space either side so that it cannot join a
    neighbouring token (``-`` then ``-5`` would make ``--5``, a comment)."""
    return f" {literal(value).sql(dialect='duckdb')} "


def bind(operation: str, parameters: Sequence[object] | Mapping[str, object] | None) -> str:
    """``operation`` with each placeholder replaced by its parameter as a SQL literal.

    ``?`` takes the next value of a sequence, ``$n`` the n-th (from 1), ``$name`` the
    value of a mapping; placeholders inside strings and comments are text, not
    placeholders. A parameter left over or missing is an error (naming no value).
    """
    if parameters is None:
        parameters = ()
    try:
        tokens = PrivSQL().tokenize(operation)
    except TokenError:
        raise ProgrammingError("[syntax] the statement is not well-formed SQL", "syntax") from None
    named = isinstance(parameters, Mapping)
    if not named and isinstance(parameters, (str, bytes)):
        raise ProgrammingError("parameters are a sequence or a mapping, not a string")
    pieces: list[str] = []
    used: set[str | int] = set()
    following = 0  # the index of the next ``?``
    end = 0
    for position in range(len(tokens)):
        key, start, stop = _placeholder(tokens, position)
        if key is None or start < end:  # not a placeholder, or the name of one
            continue
        if key == "?":
            key, following = following, following + 1
        pieces += [operation[end:start], literal_text(_value(parameters, key, named))]
        used.add(key)
        end = stop
    pieces.append(operation[end:])
    given = set(parameters) if named else set(range(len(parameters)))
    if used != given:
        raise ProgrammingError(
            f"the statement's placeholders ({len(used)}) do not match the parameters given "
            f"({len(given)})"
        )
    return "".join(pieces)


def _placeholder(tokens: list[Token], position: int) -> tuple[str | int | None, int, int]:
    """The placeholder at ``tokens[position]``: its key (``"?"`` for the next value, an
    index for ``$n``, a name for ``$name``) and where it starts and ends in the text."""
    token = tokens[position]
    if token.token_type == TokenType.PLACEHOLDER and token.text == "?":
        return "?", token.start, token.end + 1
    if token.token_type == TokenType.QDCOLON:  # ``?::TYPE``
        return "?", token.start, token.start + 1
    if token.token_type != TokenType.PARAMETER or position + 1 >= len(tokens):
        return None, 0, 0
    name = tokens[position + 1]
    if name.start != token.end + 1:
        return None, 0, 0
    if name.token_type == TokenType.NUMBER and name.text.isdigit():
        return int(name.text) - 1, token.start, name.end + 1
    return name.text, token.start, name.end + 1


def _value(values: Sequence[object] | Mapping[str, object], key: str | int, named: bool) -> object:
    if named != isinstance(key, str):
        raise ProgrammingError(
            "use $name placeholders with a mapping of parameters, ? or $1 with a sequence"
        )
    try:
        if isinstance(key, int) and key < 0:
            raise IndexError(key)  # ``$0``: not the last value
        value = values[key]  # type: ignore[index]
    except (KeyError, IndexError):
        raise ProgrammingError(
            f"no parameter given for placeholder {f'${key}' if named else int(key) + 1}"
        ) from None
    return value


# -- connections and cursors -----------------------------------------------------------


OPTIONS: Mapping[str, type] = {
    "budget": float,
    "epsilon": float,
    "delta": float,
    "delta_budget": float,
    "max_query_delta": float,
    "lock_timeout": float,
    "declared_files_only": bool,
}
"""The ``privsql.connect`` options a URL's query string may set, with their types."""

_SEEDED = "a seed makes the noise predictable: it is for tests in code, on data in memory"
NOT_IN_URLS: Mapping[str, str] = {
    "ledger": "a URL opens a database with its own ledger; name another in code "
    "(connect(..., ledger=...))",
    "seed": _SEEDED,
    "insecure": _SEEDED,
}
"""``privsql.connect`` options a URL may not set, and why. A URL is often written where the
analyst can edit it (a notebook, a tool's settings): it must not choose the ledger that
holds the budget, nor noise that can be predicted."""


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """The database and ``connect`` options of ``privsql:///flights.duckdb?budget=3``.

    As in SQLAlchemy's SQLite URLs, ``privsql:///name`` is a path relative to the working
    directory and ``privsql:////abs/name`` an absolute one; no path is ``:memory:``.
    """
    parts = urlsplit(url)
    if parts.scheme.split("+")[0] != "privsql" or parts.netloc:
        raise InterfaceError(  # without the URL, which may hold a password
            f"not an in-process privsql URL (privsql:///PATH): {parts.scheme}://..."
        )
    database = unquote(parts.path[1:]) or ":memory:"
    return database, options(dict(parse_qsl(parts.query, keep_blank_values=True)))


def options(query: Mapping[str, str]) -> dict[str, Any]:
    """``privsql.connect`` keyword arguments from a URL's query string (text values)."""
    settings: dict[str, Any] = {}
    for name, text in query.items():
        kind = OPTIONS.get(name)
        if name in NOT_IN_URLS:
            raise InterfaceError(f"option {name} is not taken from a URL: {NOT_IN_URLS[name]}")
        if kind is None:
            raise InterfaceError(f"unknown option {name!r}; options: {', '.join(OPTIONS)}")
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                raise InterfaceError(f"option {name} is true or false")
            settings[name] = text.lower() in ("true", "1", "yes", "on")
            continue
        try:
            settings[name] = kind(text)
        except ValueError:
            raise InterfaceError(f"option {name} must be a {kind.__name__}") from None
    return settings


def connect(
    database: str | Path | duckdb.DuckDBPyConnection | privsql.Session = ":memory:",
    **kwargs: Any,
) -> Connection:
    """A DB-API connection to a privsql session: ``database`` and ``kwargs`` as for
    ``privsql.connect`` (``budget=``, ``epsilon=``, ...), or an open ``privsql.Session``
    to wrap (closing the connection then leaves the session open)."""
    if isinstance(database, privsql.Session):
        if kwargs:
            raise InterfaceError("options belong to privsql.connect, not to an open session")
        return Connection(database, owns_session=False)
    try:
        session = privsql.connect(database, **kwargs)
    except TypeError as error:
        raise InterfaceError(str(error)) from None
    except Exception as error:
        raise _translated(error) from error
    return Connection(session, owns_session=True)


class Connection:
    """A DB-API connection: a privsql session and a way to make cursors on it."""

    Warning = Warning
    Error = Error
    InterfaceError = InterfaceError
    DatabaseError = DatabaseError
    DataError = DataError
    OperationalError = OperationalError
    IntegrityError = IntegrityError
    InternalError = InternalError
    ProgrammingError = ProgrammingError
    NotSupportedError = NotSupportedError

    def __init__(self, session: privsql.Session, *, owns_session: bool) -> None:
        self._session: privsql.Session | None = session
        self._owns_session = owns_session
        self._types: duckdb.DuckDBPyConnection | None = None
        self._types_lock = threading.Lock()  # cursors of several threads name types

    @property
    def session(self) -> privsql.Session:
        """The privsql session (``.budget``, ``.explain``, ``.sql``)."""
        session = self._session
        if session is None:
            raise InterfaceError("the connection is closed")
        return session

    @property
    def budget(self) -> privsql.Budget:
        return self.session.budget

    def cursor(self) -> Cursor:
        return Cursor(self)

    def execute(self, operation: str, parameters: Any = None) -> Cursor:
        """A new cursor that has run ``operation`` (as sqlite3's and DuckDB's have)."""
        return self.cursor().execute(operation, parameters)

    def commit(self) -> None:
        """Nothing to commit: an answer's ε is charged before it is returned."""
        self.session  # noqa: B018 - raises on a closed connection

    def rollback(self) -> None:
        """Nothing to roll back: analysts change nothing, and ε once charged stays spent."""
        self.session  # noqa: B018 - raises on a closed connection

    def close(self) -> None:
        """Close the session, if this connection opened it; closing twice is harmless."""
        if self._session is not None and self._owns_session:
            self._session.close()
        with self._types_lock:
            if self._types is not None:
                self._types.close()
            self._session = self._types = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def type_names(self, schema: pa.Schema) -> list[str]:
        """The DuckDB type name of each column of an Arrow schema (``description``'s codes)."""
        with self._types_lock:
            if self._types is None:
                self._types = duckdb.connect()
            return [str(t) for t in self._types.from_arrow(schema.empty_table()).types]


Description = tuple[str, str, None, None, int | None, int | None, bool]


class Cursor:
    """A DB-API cursor. After ``execute``, ``last_result`` is the privsql Result (its
    intervals: ``last_result.accuracy()``) and ``last_cost`` the ε it cost."""

    def __init__(self, connection: Connection) -> None:
        self.connection: Connection | None = connection
        self.arraysize = 1
        self.description: list[Description] | None = None
        self.rowcount = -1
        self.last_result: privsql.Result | None = None
        self._rows: list[tuple] = []
        self._next = 0

    @property
    def last_cost(self) -> float:
        """ε charged for the last answer: 0 for a stored answer or public data."""
        result = self.last_result
        return 0.0 if result is None or result.cached else result.epsilon

    def execute(self, operation: str, parameters: Any = None) -> Cursor:
        """Run one privsql query, its placeholders bound to ``parameters`` (see ``bind``)."""
        session = self._connection().session
        query = bind(operation, parameters)
        self.last_result, self.description, self.rowcount = None, None, -1
        self._rows, self._next = [], 0
        try:
            result = session.sql(query)
        except Exception as error:
            raise _translated(error) from error
        self.last_result = result
        self._rows = result.fetchall()
        self.rowcount = len(self._rows)
        self.description = self._describe(result.arrow().schema)
        return self

    def executemany(self, operation: str, seq_of_parameters: Any) -> Cursor:
        """Run ``operation`` once per set of parameters (each charged); the cursor then
        holds the last answer."""
        for parameters in seq_of_parameters:
            self.execute(operation, parameters)
        return self

    def fetchone(self) -> tuple | None:
        rows = self.fetchmany(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int | None = None) -> list[tuple]:
        self._check_result()
        count = self.arraysize if size is None else size
        rows = self._rows[self._next : self._next + count]
        self._next += len(rows)
        return rows

    def fetchall(self) -> list[tuple]:
        self._check_result()
        rows = self._rows[self._next :]
        self._next = len(self._rows)
        return rows

    def __iter__(self) -> Iterator[tuple]:
        while (row := self.fetchone()) is not None:
            yield row

    def setinputsizes(self, sizes: object) -> None:
        """Ignored, as PEP 249 allows."""

    def setoutputsize(self, size: object, column: object = None) -> None:
        """Ignored, as PEP 249 allows."""

    def close(self) -> None:
        self.connection = None
        self._rows = []

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> Connection:
        if self.connection is None:
            raise InterfaceError("the cursor is closed")
        return self.connection

    def _check_result(self) -> None:
        self._connection()
        if self.description is None:
            raise InterfaceError("no result to fetch: execute a query first")

    def _describe(self, schema: pa.Schema) -> list[Description]:
        names = self._connection().type_names(schema)
        described = []
        for field, name in zip(schema, names, strict=True):
            decimal_type = pa.types.is_decimal(field.type)
            described.append(
                (
                    field.name,
                    name,
                    None,
                    None,
                    field.type.precision if decimal_type else None,
                    field.type.scale if decimal_type else None,
                    True,
                )
            )
        return described
