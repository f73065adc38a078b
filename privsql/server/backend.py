"""What the server does with each statement a client sends, for one served database.

``Backend`` holds the database (one DuckDB connection), its ledger (for analysts'
password verifiers), the schema mirror, and a pool of privsql sessions per analyst:
a client borrows one of its analyst's sessions for as long as it is connected, so
clients of one analyst run queries side by side, each on its own cursor, while every
charge goes through the one ledger. ``ClientSession`` (buenavista's per-connection
session) sorts each statement into

- client chatter: transactions (no-ops: analysts only read), ``SET`` / ``SHOW``, with
  privsql's own settings ``privsql_intervals`` and ``privsql.last_cost``;
- catalog queries (``privsql.server.catalog``), answered from the schema mirror;
- everything else: ``Session.sql``, the same analysis as in-process; its refusals are
  raised as ``Refusal`` with an SQLSTATE (``privsql.server.sqlstate``).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from buenavista.backends.duckdb import to_bvtype
from buenavista.core import BVType, QueryResult
from buenavista.core import Session as WireSession

import privsql
from privsql.ledger import Analyst, Ledger, open_database
from privsql.plot import noisy_columns
from privsql.result import Result
from privsql.server import sqlstate
from privsql.server.catalog import MirrorError, SchemaMirror, is_catalog_query, parse_postgres
from privsql.server.parameters import bind
from privsql.session import Session
from rewriter.errors import PrivacyError

log = logging.getLogger(__name__)

SERVER_VERSION = "15.0"
"""The PostgreSQL version the server reports (clients pick their catalog queries by it)."""
INTERVALS = "privsql_intervals"
ALPHA = 0.05
"""The half-width columns are 95% intervals, as ``Result.accuracy()``'s default."""
PARAMETERS = {
    "server_version": SERVER_VERSION,
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "TimeZone": "UTC",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "IntervalStyle": "postgres",
    "application_name": "",
    "is_superuser": "off",
}
"""Parameters reported to every client after authentication (ParameterStatus)."""
_SHOWN = {
    "transaction isolation level": "read committed",
    "transaction_isolation": "read committed",
    "search_path": '"$user", public, main',
    "max_identifier_length": "63",
    "lc_collate": "C",
    "lc_ctype": "C",
    INTERVALS: "off",
}
_TRANSACTION = {
    "begin": "BEGIN",
    "start": "BEGIN",
    "commit": "COMMIT",
    "end": "COMMIT",
    "rollback": "ROLLBACK",
    "abort": "ROLLBACK",
}
_QUIET = {
    "deallocate",
    "discard",
    "reset",
    "listen",
    "unlisten",
    "close",
    "savepoint",
    "release",
}
_SET = re.compile(
    r"^set\s+(?:session\s+|local\s+)?([\w.\"]+)\s*(?:=|\bto\b)\s*(.+?)\s*$",
    re.IGNORECASE | re.DOTALL,
)
_SHOW = re.compile(r"^show\s+(.+?)\s*$", re.IGNORECASE | re.DOTALL)


BATCH_ROWS = 10_000
"""Rows converted to Python objects at a time as an answer is sent: the whole answer at
once took the server to 1.1 GB for ten million rows of one free query (red team 33)."""


class Refusal(Exception):
    """A statement refused or failed, with its SQLSTATE and a one-line message that
    never contains private values."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Answer(QueryResult):
    """A result set (or just a command tag) for buenavista, with notices to send along."""

    def __init__(
        self,
        table: pa.Table | None = None,
        *,
        status: str = "",
        notices: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        if table is not None:
            table = pa.table(
                [_sendable(column) for column in table.columns], names=table.column_names
            )
        self._table = table
        self._status = status
        self._types = [] if table is None else [_bvtype(t) for t in table.schema.types]
        self.notices = notices

    def has_results(self) -> bool:
        return self._table is not None

    def column_count(self) -> int:
        return 0 if self._table is None else self._table.num_columns

    def column(self, index: int) -> tuple[str, BVType]:
        assert self._table is not None
        return self._table.column_names[index], self._types[index]

    def rows(self) -> Iterator[list]:
        if self._table is None:
            return
        for batch in self._table.to_batches(max_chunksize=BATCH_ROWS):
            columns = [column.to_pylist() for column in batch.columns]
            yield from (list(row) for row in zip(*columns, strict=True))

    def status(self) -> str:
        return self._status


def _sendable(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The column, or DuckDB's text of it where it holds structs, maps or lists other than
    of strings, or values Python cannot hold (a date past the year 9999):
    converting them raised while the answer was sent, which ended the client's connection
    after the charge, and again for the stored answer (red teams 31 and 33)."""
    if pa.types.is_nested(column.type) and not _string_array(column):
        return _text(column)  # buenavista would write them as JSON, which fails on most
    if pa.types.is_temporal(column.type) and column.null_count < len(column):
        extremes = pc.min_max(column)
        try:
            extremes["min"].as_py(), extremes["max"].as_py()
        except (ValueError, OverflowError, pa.ArrowException):
            return _text(column)
    return column


def _string_array(column: pa.ChunkedArray) -> bool:
    """Whether buenavista writes the column as a PostgreSQL array (``{a,b}``, as psql's
    ``\\du`` reads): lists of strings without NULLs (its integer arrays fail)."""
    if _bvtype(column.type) != BVType.STRINGARRAY:
        return False
    return all(pc.list_flatten(chunk).null_count == 0 for chunk in column.chunks)


def _text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """DuckDB's text of each value: '2013000-01-01', 'infinity', '[1, 2]', {'a': 1}."""
    with duckdb.connect() as con:
        con.register("answer", pa.table({"c": column}))
        return con.sql("SELECT CAST(c AS VARCHAR) AS c FROM answer").to_arrow_table()["c"]


def _bvtype(data_type: pa.DataType) -> BVType:
    if pa.types.is_null(data_type):
        return BVType.TEXT
    if pa.types.is_dictionary(data_type):
        return _bvtype(data_type.value_type)
    try:
        return to_bvtype(data_type)
    except Exception:
        return BVType.TEXT


def one_row(name: str, value: object) -> Answer:
    return Answer(pa.table({name: pa.array([None if value is None else str(value)])}))


@dataclass
class Settings:
    """One client's settings (``SET``) and the cost of its last answer."""

    values: dict[str, str] = field(default_factory=dict)
    last_epsilon: float | None = None
    last_delta: float | None = None

    @property
    def intervals(self) -> bool:
        return self.values.get(INTERVALS, "off").lower() in {"on", "true", "1", "yes"}


class Backend:
    """The served database: its connection, ledger, schema mirror and sessions."""

    def __init__(self, database: str | Path, *, share_answers: bool = False) -> None:
        path = Path(database)
        if not path.exists():
            raise PrivacyError(f"{path} does not exist")
        self._con = open_database(path)
        for setting in ("autoinstall_known_extensions", "autoload_known_extensions"):
            self._con.execute(f"SET {setting} = false")  # analysts' SQL downloads nothing
        self._share_answers = share_answers
        self._ledger = Ledger(self._con.cursor(), None)
        self.name = path.stem
        self.mirror = SchemaMirror(self._con, self.name)
        self._pools: dict[str, list[Session]] = {}
        self._closed = False
        self._lock = threading.Lock()

    def verifier(self, analyst: str) -> str | None:
        """Analyst ``analyst``'s password verifier, or None if there is no such analyst."""
        return self._ledger.verifier(analyst)

    def analyst_budget(self, analyst: str) -> Analyst | None:
        return self._ledger.analyst(analyst)

    def open(self, analyst: str) -> ClientSession:
        """A client session for ``analyst`` (already authenticated)."""
        with self._lock:
            pool = self._pools.setdefault(analyst, [])
            session = pool.pop() if pool else None
        if session is None:
            session = privsql.connect(
                self._con.cursor(),
                declared_files_only=True,
                analyst=analyst,
                share_answers=self._share_answers,
                progress=False,  # a server's standard error is not the analyst's screen
            )
        return ClientSession(self, analyst, session)

    def give_back(self, analyst: str, session: Session) -> None:
        """Return a borrowed session to its analyst's pool (closed, once the backend is)."""
        with self._lock:
            if not self._closed:
                self._pools.setdefault(analyst, []).append(session)
                return
        session.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sessions = [s for pool in self._pools.values() for s in pool]
            self._pools.clear()
        for session in sessions:
            session.close()
        self._ledger.close()
        self.mirror.close()
        self._con.close()


class ClientSession(WireSession):
    """One client connection: its analyst's borrowed privsql session and its settings."""

    def __init__(self, backend: Backend, analyst: str, session: Session) -> None:
        super().__init__()
        self._backend = backend
        self.analyst = analyst
        self._session: Session | None = session
        self._settings = Settings()
        self._in_transaction = False

    def in_transaction(self) -> bool:
        return self._in_transaction

    def close(self) -> None:
        if self._session is not None:
            self._backend.give_back(self.analyst, self._session)
            self._session = None

    def cursor(self) -> None:
        raise NotImplementedError("privsql sessions have no cursors of their own")

    def public_started(self) -> float | None:
        """When (``time.monotonic()``) this client's statement over public data only
        started, if one runs."""
        session = self._session
        return None if session is None else session.public_statement.started

    def interrupt(self, reason: str) -> bool:
        """Interrupt this client's statement over public data only, if one runs (answered
        with SQLSTATE 57014 and ``reason``); a private one runs on to its charge."""
        session = self._session
        return session is not None and session.public_statement.interrupt(reason)

    def execute_sql(self, sql: str, params: list | None = None) -> Answer:
        """Answer one statement, its parameters (``$n``) written in as literals."""
        if params:
            try:
                sql = bind(sql, params)
            except ValueError as error:
                raise Refusal(sqlstate.PROTOCOL_VIOLATION, str(error)) from None
        text = sql.strip().rstrip(";").strip()
        words = text.split(None, 1)
        first = words[0].lower() if words else ""
        if first in _TRANSACTION:
            tag = _TRANSACTION[first]
            if " to " not in f" {text.lower()} ":  # ROLLBACK TO SAVEPOINT stays inside
                self._in_transaction = tag == "BEGIN"
            return Answer(status=tag)
        if first in _QUIET:
            return Answer(status=first.upper())
        if first == "set":
            return self._set(text)
        if first == "show":
            return self._show(text)
        parsed = parse_postgres(text)
        if parsed is not None and is_catalog_query(parsed):
            try:
                return Answer(self._backend.mirror.query(parsed, self.analyst))
            except MirrorError as error:  # the mirror holds no data: its messages show none
                raise Refusal(sqlstate.INTERNAL, str(error)) from None
        return self._private(text)

    def _private(self, text: str) -> Answer:
        assert self._session is not None
        try:
            with self._session.public_statement.request():
                result = self._session.sql(text)
        except PrivacyError as error:
            raise Refusal(sqlstate.sqlstate(error), str(error)) from None
        except Exception:
            log.exception("a query failed")
            raise Refusal(
                sqlstate.INTERNAL, "the query failed inside privsql; nothing was released"
            ) from None
        self._settings.last_epsilon, self._settings.last_delta = result.epsilon, result.delta
        return Answer(self._table(result), notices=_notices(result))

    def _table(self, result: Result) -> pa.Table:
        table = result.arrow()
        if not self._settings.intervals:
            return table
        widths = result.accuracy(ALPHA)
        for name in noisy_columns(result, ALPHA):
            table = table.append_column(f"{name}_pm", widths.column(name).cast(pa.float64()))
        return table

    def _set(self, text: str) -> Answer:
        match = _SET.match(text)
        if match is None:
            raise Refusal(sqlstate.BY_RULE["syntax"], "[syntax] SET name = value")
        name = match.group(1).strip('"').lower()
        value = match.group(2).strip().strip("'\"")
        self._settings.values[name] = value
        return Answer(status="SET")

    def _show(self, text: str) -> Answer:
        match = _SHOW.match(text)
        assert match is not None
        name = match.group(1).strip('"').lower()
        settings = self._settings
        if " ".join(name.split()) in ("tables", "all tables"):
            return self._private(text)  # answered from the schema, as in process
        if name == "privsql.remaining":
            mine = self._backend.analyst_budget(self.analyst)
            return one_row(name, None if mine is None else max(0.0, mine.total - mine.spent))
        privsql_values = {
            "privsql.last_cost": settings.last_epsilon,
            "privsql.last_delta": settings.last_delta,
            "privsql.analyst": self.analyst,
        }
        if name in privsql_values:
            return one_row(name, privsql_values[name])
        if name in settings.values:
            return one_row(name, settings.values[name])
        lower = {key.lower(): value for key, value in PARAMETERS.items()}
        if name in lower or name in _SHOWN:
            return one_row(name.split()[-1], lower.get(name, _SHOWN.get(name)))
        raise Refusal(
            sqlstate.UNRECOGNIZED_PARAMETER, f'unrecognized configuration parameter "{name}"'
        )


def _notices(result: Result) -> tuple[str, ...]:
    """One notice per answer: what it cost (and the bounding check's warning, if any)."""
    if result.cached:
        cost = "privsql: a stored answer, returned again; nothing was charged"
    elif result.epsilon == 0:
        cost = "privsql: public data only; nothing was charged"
    else:
        cost = f"privsql: ε = {result.epsilon:g}, δ = {result.delta:g} charged"
    warning = result.warning(ALPHA)
    return (cost,) if warning is None else (cost, f"privsql: {warning}")
