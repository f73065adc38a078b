"""The privacy ledger: the database's ε and δ budgets, what was spent on what, and stored answers.

It lives in the database itself (schema ``__privsql``), so it is as durable as the
data: closing, crashing or restarting never resets it, and every session on the
same database shares it. A charge is committed before its answer is returned;
check-and-spend is one compare-and-set UPDATE of a single row, so concurrent sessions
serialise on it (DuckDB reports a conflict to the loser, which retries) and together
never spend past the total — of ε, and of δ, which also has a per-query cap. Analyst
SQL can neither read nor write the schema (the analyser refuses it).

Every row is authenticated with HMAC-SHA256 under a key kept *outside* the database
(next to its file, ``<database>.privsql-key``): the budget row covers the ε total and
spent, the δ total, per-query cap and spent, the declarations and the head of a hash
chain over the history. A ledger edited, truncated or dropped by anyone without the
key is detected when it is opened and before each charge, and privsql refuses service
rather than starting a fresh one (docs/privacy.md, "The ledger's threat model").

Ledgers written before δ was budgeted have no ``delta_total`` / ``delta_cap`` columns;
opening one with its key checks its budget row under the old MAC and migrates it in one
transaction, with the default δ total and cap (``Ledger._migrate``).

Analysts (``privsql serve``, docs/serving.md) each have a row in ``analysts``: a salted
SCRAM-SHA-256 verifier of their password (never the password), their own ε and δ totals
and what they spent, sealed by its own MAC. A charge made for an analyst spends from
their row and from the database's totals in the same transaction (analysts may collude:
the database's totals bound what all of them learn together); the history records who
asked, and stored answers are kept per analyst. Each analyst row also counts the analyst's
history entries, so an older copy of it (with less spent) put back is detected, as the
history itself cannot be shortened.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import astuple, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from rewriter.catalog import Protection
from rewriter.errors import InvalidOption, PrivacyError

T = TypeVar("T")
SCHEMA = "__privsql"
TABLES = ("budget", "history", "answers", "sources")
"""The tables every ledger has; ``analysts`` (and the ``analyst`` columns of ``history`` and
``answers``) are added to older ledgers when they are opened (``Ledger._add_analysts``)."""
KEY_SUFFIX = ".privsql-key"
"""The ledger key of a database file lives in a file of this name next to it."""
TOLERANCE = 1e-9
"""Relative slack when comparing float sums of ε (or δ) against the total."""
DELTA_BUDGET = 1e-5
"""The δ total of a ledger whose owner set none (SPEC section 1)."""
MAX_QUERY_DELTA = 1e-6
"""The per-query δ cap of a ledger whose owner set none (SPEC section 1)."""
BUSY_TIMEOUT = 10.0
"""Seconds a charge keeps retrying write-write conflicts with other sessions."""
LOCK_TIMEOUT = 5.0
"""Default seconds ``open_database`` waits for another process's lock (like sqlite3)."""
_CREATING = threading.Lock()
"""Sessions of one process open (and perhaps create) ledgers one at a time; other
processes are kept out by DuckDB's file lock."""
_WRITERS: dict[str, threading.Lock] = {}
"""One lock per database file: the ledgers of one process (a server's many sessions)
take turns to write instead of conflicting and retrying (DuckDB's file lock keeps other
processes out). Ledgers in memory have a lock of their own and rely on the retries."""


class BudgetExceeded(PrivacyError):
    """The query's ε or δ would take the ledger past the database's budget; nothing was
    charged."""

    rule = "budget"


class LedgerBusy(PrivacyError):
    """Other sessions kept the ledger busy for BUSY_TIMEOUT; nothing was changed."""

    rule = "busy"


class LedgerCorrupted(PrivacyError):
    """The ledger fails its authentication: edited, truncated, dropped or without its key.

    privsql refuses service on such a database instead of starting a fresh ledger.
    """

    rule = "ledger"


@dataclass(frozen=True)
class Charge:
    """One line of the ledger."""

    at: datetime
    query: str
    epsilon: float
    delta: float
    analyst: str | None = None
    """Who asked: an analyst's name, or None for the data owner's own sessions."""


@dataclass(frozen=True)
class Analyst:
    """One analyst's budget: totals set by the owner, and what the analyst spent."""

    name: str
    total: float
    spent: float
    delta_total: float
    delta_spent: float


@dataclass(frozen=True)
class StoredAnswer:
    """A released answer, kept so a re-run of ``query`` on the same ``data`` returns it."""

    query: str
    data: str
    table: pa.Table


@dataclass
class _StoredKeys:
    """The questions (``StoredAnswer.query``) of every stored answer a ledger may return,
    complete as of the history's length ``entries``.

    A stored answer is only ever added by a charge, in its transaction, and every charge
    lengthens the history (the budget row's ``entries``, under its MAC); none is ever
    removed. So while ``entries`` is what the budget row says, a question not in ``keys``
    has no stored answer, and ``Ledger.answer`` needs no statement to say so."""

    entries: int
    keys: set[str]


@dataclass(frozen=True)
class LedgerState:
    """The budget row as stored: what its MAC covers, and the MAC (``Ledger.read``)."""

    total: float
    spent: float
    delta: float
    """The δ spent."""
    delta_total: float
    delta_cap: float
    """The largest δ one query may spend."""
    secret: int
    entries: int
    head: str
    declared: str
    """The MAC of the declarations (``Ledger._declared``)."""
    mac: str


_STATE_COLUMNS = (
    "total",
    "spent",
    "delta",
    "delta_total",
    "delta_cap",
    "secret",
    "entries",
    "head",
    "declared",
    "mac",
)
"""The budget table's columns in ``LedgerState``'s order (after ``id``)."""
_TAIL_COLUMNS = ("tail.length", "tail.last", "coalesce(entry.mac, '')")
"""The history's length, last sequence number and the MAC of the entry the budget row
names as its head (``_refuse_unless_tail``), from ``_tail(entries)``."""


def _tail(entries: str) -> str:
    """The relation ``_TAIL_COLUMNS`` are read from, for the history's entry ``entries``.

    The length and last number come from the table's statistics and the entry from its
    key's index: reading the tail costs the same however long the history is (taking
    the last MAC by ``arg_max`` scanned it all, 10 ms per read at a million charges)."""
    return (
        f"(SELECT count(*) AS length, coalesce(max(seq), 0) AS last FROM {SCHEMA}.history) "
        f"AS tail LEFT JOIN {SCHEMA}.history AS entry ON entry.seq = {entries}"
    )


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def database_path(connection: duckdb.DuckDBPyConnection) -> Path | None:
    """The file of the connection's current database, or None when it lives in memory."""
    path = connection.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchall()[0][0]
    return None if path is None else Path(path)


LEDGER_SUFFIX = ".privsql-ledger"
"""The file next to a database whose ledger is kept in another file, naming that file."""

ELSEWHERE = f"{SCHEMA}.ledger_elsewhere"
"""The table in such a database naming that file too: it goes with the database's copies
and hard links, which the file next to it does not (red team 36)."""


def ledger_elsewhere(connection: duckdb.DuckDBPyConnection) -> str | None:
    """The ledger file the connection's database was opened with, when it is kept in
    another file (``mark_ledger``); None otherwise."""
    present = connection.execute(
        "SELECT 1 FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = ? AND table_name = ?",
        ELSEWHERE.split("."),
    ).fetchall()
    named = connection.execute(f"SELECT ledger FROM {ELSEWHERE}").fetchall() if present else []
    if named:
        return str(named[0][0])
    path = database_path(connection)
    marker = None if path is None else path.with_name(path.name + LEDGER_SUFFIX)
    return marker.read_text() if marker is not None and marker.exists() else None


def mark_ledger(connection: duckdb.DuckDBPyConnection, ledger: str | Path) -> None:
    """Name the ledger file kept elsewhere for the connection's database, in it and next to
    its file: opened without it, or with another, the database would get a fresh ledger —
    a fresh budget and none of the owner's declarations (red team 35). Nothing where the
    database is in memory; only next to it where it is read-only, and only in it where
    its directory cannot be written (docs/privacy.md §7.1)."""
    path = database_path(connection)
    if path is None:
        return
    named = os.path.realpath(ledger)
    with contextlib.suppress(duckdb.Error):
        connection.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        connection.execute(f"CREATE TABLE IF NOT EXISTS {ELSEWHERE} AS SELECT ? AS ledger", [named])
    with contextlib.suppress(OSError):
        with path.with_name(path.name + LEDGER_SUFFIX).open("x") as marker:
            marker.write(named)


def has_ledger(connection: duckdb.DuckDBPyConnection) -> bool:
    """Whether the connection's current database holds a ledger, or has held one: a
    ``__privsql`` schema in it, or a key file next to its file (``Ledger._create`` refuses
    to start afresh where one exists, since the ledger was then removed), or the name of
    a ledger kept for it in another file (``mark_ledger``)."""
    path = database_path(connection)
    if path is not None and path.with_name(path.name + KEY_SUFFIX).exists():
        return True
    if ledger_elsewhere(connection) is not None:
        return True
    return bool(
        connection.execute(
            "SELECT 1 FROM duckdb_schemas() WHERE schema_name = ? "
            "AND database_name = current_database()",
            [SCHEMA],
        ).fetchall()
    )


def open_database(path: str | Path, timeout: float = LOCK_TIMEOUT) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect(path)``, waiting up to ``timeout`` seconds (with backoff) while
    another process holds the file's lock.

    DuckDB lets one process at a time open a file for writing; processes that each open,
    query and close take turns through this wait, as sqlite3's ``timeout`` lets them.
    """
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            return duckdb.connect(str(path))
        except duckdb.IOException as error:
            if "lock" not in str(error).lower() or time.monotonic() >= deadline:
                raise
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.2)


class Ledger:
    """Budget, history, declarations and stored answers of one database.

    One ``Ledger`` may be used from many threads (its cursor is guarded by a lock);
    ledgers of other sessions on the same database synchronise through DuckDB.
    """

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        budget: float | None,
        delta_budget: float | None = None,
        max_query_delta: float | None = None,
        *,
        analyst: str | None = None,
        share_answers: bool = False,
    ) -> None:
        """Open (creating or migrating if need be) the ledger of ``connection``'s database.

        ``budget``, ``delta_budget`` and ``max_query_delta`` are the owner's ε total, δ
        total and per-query δ cap: set when the ledger is created, refused if they differ
        from those of an existing ledger. ``None`` takes the existing value; a ledger kept
        in a file cannot be created without an explicit ``budget`` (its total is fixed for
        good), one in memory takes ε = 1.

        With ``analyst`` every charge also spends from that analyst's budget, the history
        records the name, and stored answers are those this analyst was given (all
        analysts' with ``share_answers``).
        """
        self._con = connection
        self._lock = threading.RLock()
        self._secret: int | None = None
        self._analyst = analyst
        self._share_answers = share_answers
        self._stored: _StoredKeys | None = None
        with self._lock, _CREATING:
            path = database_path(connection)
            self._key_file = None if path is None else path.with_name(path.name + KEY_SUFFIX)
            self._writing = (
                threading.Lock()
                if path is None
                else _WRITERS.setdefault(os.path.realpath(path), threading.Lock())
            )
            present = set(self._tables())
            if not present:
                self._create(budget, *_delta_policy(delta_budget, max_query_delta))
            elif missing := ", ".join(sorted(set(TABLES) - present)):
                raise LedgerCorrupted(f"the ledger's tables {missing} are missing")
            self._key = self._read_key()
            with self._transaction():
                if not self._has_delta_budget():
                    self._migrate()
                if "analysts" not in self._tables():
                    self._add_analysts()
                if "columns" not in self._column_names("sources"):  # before files declared any
                    self._execute(f"ALTER TABLE {SCHEMA}.sources ADD COLUMN columns VARCHAR")
                state = self._state()
                self._check_tail(state)
                self._sources(state)
                self._history()
                self._stored = _StoredKeys(state.entries, self._stored_questions())
            if budget is not None and _checked_budget(budget) != state.total:
                raise PrivacyError(
                    f"this database's budget is fixed at ε = {state.total:g}; it cannot be changed"
                )
            if (
                delta_budget is not None
                and _checked_delta(delta_budget, "δ budget") != state.delta_total
            ):
                raise PrivacyError(
                    f"this database's δ budget is fixed at δ = {state.delta_total:g}; "
                    "it cannot be changed"
                )
            if (
                max_query_delta is not None
                and _checked_delta(max_query_delta, "per-query δ cap") != state.delta_cap
            ):
                raise PrivacyError(
                    f"this database's per-query δ cap is fixed at δ = {state.delta_cap:g}; "
                    "it cannot be changed"
                )
            if analyst is not None and self.analyst(analyst) is None:
                raise PrivacyError(f"there is no analyst {analyst!r} in this database")

    def close(self) -> None:
        """Close the ledger's cursor (the database file stays locked while any is open)."""
        with self._lock:
            self._con.close()

    # -- creation and the key -----------------------------------------------------------

    def _tables(self) -> list[str]:
        rows = self._con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? "
            "AND database_name = current_database()",
            [SCHEMA],
        ).fetchall()
        return [name for (name,) in rows if name != "key"]

    def _create(self, budget: float | None, delta_total: float, delta_cap: float) -> None:
        """A fresh ledger, refused if this database file has had one (its key exists)."""
        if self._key_file is not None and self._key_file.exists():
            raise LedgerCorrupted(
                f"this database has lost its ledger (the key {self._key_file} exists but the "
                "ledger does not); privsql will not start a fresh one. If the database file "
                "is really new, delete the key file"
            )
        if budget is None and self._key_file is not None:
            raise PrivacyError(
                "this database has no ledger yet: give its total ε (budget=, or --budget) "
                "to create one; it cannot be changed later except by the owner's "
                "`privsql budget`"
            )
        total = 1.0 if budget is None else _checked_budget(budget)
        key = secrets.token_bytes(32)
        if self._key_file is not None:
            _write_key(self._key_file, key)
        with self._transaction():
            con = self._con
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            con.execute(
                f"CREATE TABLE {SCHEMA}.budget (id INTEGER PRIMARY KEY, total DOUBLE NOT NULL, "
                "spent DOUBLE NOT NULL, delta DOUBLE NOT NULL, secret BIGINT NOT NULL, "
                "entries BIGINT NOT NULL, head VARCHAR NOT NULL, declared VARCHAR NOT NULL, "
                "mac VARCHAR NOT NULL, delta_total DOUBLE NOT NULL, delta_cap DOUBLE NOT NULL)"
            )
            con.execute(
                f"CREATE TABLE {SCHEMA}.history (seq BIGINT PRIMARY KEY, charged_at TIMESTAMP, "
                "query VARCHAR, epsilon DOUBLE, delta DOUBLE, mac VARCHAR)"
            )
            con.execute(
                f"CREATE TABLE {SCHEMA}.answers (query VARCHAR, data VARCHAR, answer BLOB, "
                "mac VARCHAR)"
            )
            con.execute(
                f"CREATE TABLE {SCHEMA}.sources (name VARCHAR PRIMARY KEY, public BOOLEAN, "
                "privacy_unit VARCHAR, bounds VARCHAR, keys VARCHAR, columns VARCHAR)"
            )
            self._add_analysts()
            if self._key_file is None:  # in memory: no file another tool could open
                con.execute(f"CREATE TABLE {SCHEMA}.key (key BLOB)")
                con.execute(f"INSERT INTO {SCHEMA}.key VALUES (?)", [key])
            self._key = key
            state = self._sealed(
                total,
                0.0,
                0.0,
                delta_total,
                delta_cap,
                secrets.randbits(63),
                0,
                "",
                self._declared([]),
            )
            con.execute(
                f"INSERT INTO {SCHEMA}.budget (id, {', '.join(_STATE_COLUMNS)}) "
                f"VALUES (1, {', '.join('?' * len(_STATE_COLUMNS))})",
                list(astuple(state)),
            )

    def _has_delta_budget(self) -> bool:
        """Whether the budget row has the δ total and cap (ledgers written before δ was
        budgeted do not)."""
        return {"delta_total", "delta_cap"} <= self._column_names("budget")

    def _column_names(self, table: str) -> set[str]:
        return {
            name
            for (name,) in self._con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE schema_name = ? "
                "AND table_name = ? AND database_name = current_database()",
                [SCHEMA, table],
            ).fetchall()
        }

    def _migrate(self) -> None:
        """Give a ledger written before δ was budgeted the default δ total and cap.

        The old budget row must pass its old MAC (which covers no δ total or cap); it is
        then re-sealed under the new MAC, inside the caller's transaction. A ledger
        whose δ already spent exceeds the default total keeps it: its remaining δ is 0.
        A row whose MAC is new-style cannot pass the old check (the MAC covers the field
        list), so removing the columns of a migrated ledger is detected, not re-migrated.
        """
        rows = self._con.execute(
            f"SELECT id, total, spent, delta, secret, entries, head, declared, mac "
            f"FROM {SCHEMA}.budget"
        ).fetchall()
        if len(rows) != 1 or rows[0][0] != 1:
            raise LedgerCorrupted("the ledger's budget row is missing or duplicated")
        total, spent, delta, secret, entries, head, declared, mac = rows[0][1:]
        old = self._mac("budget", total, spent, delta, secret, entries, head, declared)
        if not hmac.compare_digest(old, str(mac)):
            raise LedgerCorrupted(
                "the ledger's budget was changed outside privsql; refusing service"
            )
        new = self._sealed(
            total, spent, delta, DELTA_BUDGET, MAX_QUERY_DELTA, secret, entries, head, declared
        )
        self._execute(f"ALTER TABLE {SCHEMA}.budget ADD COLUMN delta_total DOUBLE")
        self._execute(f"ALTER TABLE {SCHEMA}.budget ADD COLUMN delta_cap DOUBLE")
        self._execute(
            f"UPDATE {SCHEMA}.budget SET delta_total = ?, delta_cap = ?, mac = ? WHERE id = 1",
            [new.delta_total, new.delta_cap, new.mac],
        )

    def _add_analysts(self) -> None:
        """The analysts' table, and who asked in the history and stored answers (in the
        caller's transaction; ledgers written before analysts existed lack them)."""
        self._execute(
            f"CREATE TABLE {SCHEMA}.analysts (name VARCHAR PRIMARY KEY, verifier VARCHAR, "
            "total DOUBLE, spent DOUBLE, delta_total DOUBLE, delta_spent DOUBLE, "
            "entries BIGINT, mac VARCHAR)"
        )
        for table in ("history", "answers"):
            self._execute(f"ALTER TABLE {SCHEMA}.{table} ADD COLUMN IF NOT EXISTS analyst VARCHAR")

    def _read_key(self) -> bytes:
        if self._key_file is None:
            rows = self._con.execute(f"SELECT key FROM {SCHEMA}.key").fetchall()
            if len(rows) != 1:
                raise LedgerCorrupted("the in-memory ledger's key is missing")
            return rows[0][0]
        try:
            return bytes.fromhex(self._key_file.read_text().strip())
        except (OSError, ValueError):
            raise LedgerCorrupted(
                f"the ledger key {self._key_file} is missing or unreadable; privsql cannot "
                "verify this database's budget and refuses to use it (a database file must "
                "be copied or moved together with its key file)"
            ) from None

    # -- authentication -------------------------------------------------------------------

    def _mac(self, *fields: object) -> str:
        message = json.dumps(fields, separators=(",", ":")).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def _sealed(
        self,
        total: float,
        spent: float,
        delta: float,
        delta_total: float,
        delta_cap: float,
        secret: int,
        entries: int,
        head: str,
        declared: str,
    ) -> LedgerState:
        fields = (total, spent, delta, delta_total, delta_cap, secret, entries, head, declared)
        mac = self._mac("budget/2", *fields)
        return LedgerState(*fields, mac)

    def _declared(self, sources: list[list]) -> str:
        return self._mac("sources", sources)

    def _entry_mac(
        self,
        seq: int,
        at: datetime,
        query: str,
        eps: float,
        delta: float,
        prev: str,
        analyst: str | None,
    ) -> str:
        fields = (seq, at.isoformat(), query, eps, delta, prev)
        if analyst is None:  # the owner's entries, as before analysts existed
            return self._mac("history", *fields)
        return self._mac("history", *fields, analyst)

    def _read_sources(self) -> list[list]:
        """Each declaration's row, a file's columns last where it has them (a row without
        is the one its MAC covered before files had declared columns)."""
        rows = self._con.execute(
            f"SELECT name, public, privacy_unit, bounds, keys, columns FROM {SCHEMA}.sources "
            "ORDER BY name"
        ).fetchall()
        return [list(row) if row[-1] is not None else list(row[:-1]) for row in rows]

    def _sources(self, state: LedgerState) -> list[list]:
        """The declarations, sorted by name, after checking them against ``state``."""
        sources = self._read_sources()
        if not hmac.compare_digest(self._declared(sources), state.declared):
            raise LedgerCorrupted("the declarations were changed outside privsql; refusing service")
        return sources

    def _state(self) -> LedgerState:
        """The budget row, after checking its MAC."""
        rows = self._con.execute(
            f"SELECT id, {', '.join(_STATE_COLUMNS)} FROM {SCHEMA}.budget"
        ).fetchall()
        return self._checked(rows)

    def _checked(self, rows: list[tuple]) -> LedgerState:
        """The budget row from the rows of its table (id first), after checking its MAC."""
        if len(rows) != 1 or rows[0][0] != 1:
            raise LedgerCorrupted("the ledger's budget row is missing or duplicated")
        state = LedgerState(*rows[0][1:])
        if not hmac.compare_digest(self._sealed(*rows[0][1:-1]).mac, str(state.mac)):
            raise LedgerCorrupted(
                "the ledger's budget was changed outside privsql; refusing service"
            )
        return state

    def _check_tail(self, state: LedgerState) -> None:
        """The history ends where ``state`` says (``_history`` checks every link)."""
        tail = f"SELECT {', '.join(_TAIL_COLUMNS)} FROM {_tail('?')}"
        _refuse_unless_tail(state, self._con.execute(tail, [state.entries]).fetchall()[0])

    def _history(self) -> list[Charge]:
        rows = self._con.execute(
            f"SELECT seq, charged_at, query, epsilon, delta, mac, analyst FROM {SCHEMA}.history "
            "ORDER BY seq"
        ).fetchall()
        previous = ""
        for expected, (seq, at, query, eps, delta, mac, analyst) in enumerate(rows, start=1):
            link = self._entry_mac(seq, at, query, eps, delta, previous, analyst)
            if seq != expected or not hmac.compare_digest(link, str(mac)):
                raise LedgerCorrupted("the ledger's history was changed outside privsql")
            previous = mac
        return [Charge(at, query, eps, delta, who) for _, at, query, eps, delta, _, who in rows]

    # -- the budget -------------------------------------------------------------------

    @property
    def total(self) -> float:
        with self._lock:
            return self._state().total

    @property
    def spent(self) -> float:
        with self._lock:
            return self._state().spent

    @property
    def delta_spent(self) -> float:
        with self._lock:
            return self._state().delta

    @property
    def delta_total(self) -> float:
        """The database's δ total, set by its owner when the ledger was created."""
        with self._lock:
            return self._state().delta_total

    @property
    def delta_remaining(self) -> float:
        with self._lock:
            state = self._state()
        return max(0.0, state.delta_total - state.delta)

    @property
    def max_query_delta(self) -> float:
        """The largest δ one query may spend (fixed when the ledger was created)."""
        with self._lock:
            return self._state().delta_cap

    @property
    def remaining(self) -> float:
        with self._lock:
            state = self._state()
        return max(0.0, state.total - state.spent)

    @property
    def secret(self) -> int:
        """The database's hashing secret: which rows and groups a unit keeps (fixed at
        creation, so read once)."""
        if self._secret is None:
            with self._lock:
                self._secret = self._state().secret
        return self._secret

    def read(self) -> LedgerState:
        """The budget row, after checking its MAC.

        A query reads it once, at its start, and uses it for its catalogue (the
        declarations' MAC), for the budget check before its release and for the first
        try of its charge, whose compare-and-set replaces exactly this row or starts
        again from the row as then committed (``charge``). The history's tail is checked
        where it matters, by the charge, in the transaction that extends the history
        (``_charge_once``): an answer on a ledger whose history was changed outside
        privsql is neither returned nor charged. Read here too, the tail's subqueries
        cost three times the row."""
        with self._lock:
            return self._state()

    @property
    def history(self) -> list[Charge]:
        """Every charge, oldest first, after checking the whole chain."""
        with self._snapshot():
            self._check_tail(self._state())
            return self._history()

    @property
    def declared(self) -> str:
        """The MAC of the declarations: it changes with every declaration, so a reader can
        keep ``declarations()`` for as long as it is the same (``privsql.catalog_cache``)."""
        with self._lock:
            return self._state().declared

    @property
    def files(self) -> frozenset[str]:
        """The ledger's files on disk: its database (and write-ahead log) and its key."""
        path = database_path(self._con)
        if path is None:
            return frozenset()
        names = [path, path.with_name(path.name + ".wal"), self._key_file]
        return frozenset(os.path.normpath(os.path.abspath(p)) for p in names if p is not None)

    def affordable(self, epsilon: float, delta: float = 0.0) -> bool:
        """Whether ε and δ both fit in what remains, of the database's and of the session's
        analyst's budget (``_charge_once`` checks again)."""
        try:
            self.check_affordable(epsilon, delta)
        except BudgetExceeded:
            return False
        return True

    def check_affordable(
        self, epsilon: float, delta: float = 0.0, known: LedgerState | None = None
    ) -> None:
        """Raise ``BudgetExceeded`` (saying whose budget) unless ε and δ both fit in what
        remains of the database's and of the session's analyst's budget.

        ``known`` (from ``read``) spares reading the budget row again; an analyst's row
        is always read anew. ``charge`` checks again against the row it replaces."""
        if known is not None and self._analyst is None:
            self._affordable_for(known, epsilon, delta)
            return
        with self._snapshot():
            state = self._state()
            self._check_tail(state)
            self._affordable_for(state, epsilon, delta)

    def _affordable_for(
        self, state: LedgerState, epsilon: float, delta: float
    ) -> tuple[Analyst, str, str] | None:
        """Refuse ε or δ that does not fit ``state`` or the analyst's budget; the analyst's
        row (budget, verifier, MAC) when the ledger charges an analyst."""
        _refuse_unless_database_fits(state, epsilon, delta)
        return self._analyst_affordable(state, epsilon, delta)

    def _analyst_affordable(
        self, state: LedgerState, epsilon: float, delta: float
    ) -> tuple[Analyst, str, str] | None:
        """Refuse ε or δ that does not fit the analyst's budget; the analyst's row
        (budget, verifier, MAC), or None when the ledger charges no analyst."""
        if self._analyst is None:
            return None
        found = self._analyst_row(self._analyst, state)
        if found is None:
            raise PrivacyError(f"there is no analyst {self._analyst!r} in this database")
        mine = found[0]
        _refuse_unless_fits("ε", epsilon, mine.spent, mine.total, "your ")
        _refuse_unless_fits("δ", delta, mine.delta_spent, mine.delta_total, "your ")
        return found

    def charge(
        self,
        label: str,
        epsilon: float,
        delta: float,
        answer: StoredAnswer | None = None,
        known: LedgerState | None = None,
    ) -> None:
        """Spend ε and δ for one answer, durably, or raise ``BudgetExceeded`` (either would
        pass its total) or ``InvalidOption`` (δ above the per-query cap).

        The answer, if given, is stored in the same transaction as the charge. A
        write-write conflict with another session is retried for up to BUSY_TIMEOUT.
        ``known`` (from ``read``) is the budget row the first try expects to replace; a
        retry reads the row anew.
        """
        first = iter([known])  # the first try only
        replaced = self._write(
            lambda: self._charge_once(label, epsilon, delta, answer, next(first, None))
        )
        self._stored_after(replaced, answer)

    def _write(self, change: Callable[[], T]) -> T:
        """``change()``, run in one transaction, retrying write-write conflicts with other
        sessions (with jittered backoff) for up to BUSY_TIMEOUT; a retry starts afresh
        from the budget row as then committed."""
        deadline = time.monotonic() + BUSY_TIMEOUT
        pause = 0.001
        while True:
            try:
                with self._writing, self._snapshot():
                    done = change()
                return done
            except duckdb.TransactionException:
                if time.monotonic() >= deadline:
                    raise LedgerBusy("the ledger is busy; nothing was changed, try again") from None
            time.sleep(pause * (1 + secrets.randbelow(1000) / 1000))
            pause = min(pause * 2, 0.05)

    def _charge_once(
        self,
        label: str,
        epsilon: float,
        delta: float,
        answer: StoredAnswer | None,
        known: LedgerState | None,
    ) -> int:
        """One try of ``charge`` in the caller's transaction; the history's length before
        it (the replaced budget row's ``entries``). Without ``known`` it reads and
        checks the budget row and the history's tail first. With it, the checks on the
        row are made on ``known`` (whose MAC ``read`` checked), and those reading other
        rows (the history's tail, the analyst's row) right after the compare-and-set has
        shown that ``known`` is the row this transaction sees: checked against a row
        another session has since replaced, they would report a corruption."""
        state = known
        if state is None:
            state = self._state()
            self._check_tail(state)
        if delta > state.delta_cap:
            raise InvalidOption(
                f"δ = {delta:g} is above this database's per-query cap of δ = "
                f"{state.delta_cap:g}; nothing was charged"
            )
        _refuse_unless_database_fits(state, epsilon, delta)
        spent = state.spent + epsilon
        seq = state.entries + 1
        at = datetime.now(UTC).replace(tzinfo=None)
        link = self._entry_mac(seq, at, label, epsilon, delta, state.head, self._analyst)
        new = self._sealed(
            state.total,
            spent,
            state.delta + delta,
            state.delta_total,
            state.delta_cap,
            state.secret,
            seq,
            link,
            state.declared,
        )
        self._compare_and_set(state, new)
        if known is not None:
            self._check_tail(state)
        mine = self._analyst_affordable(state, epsilon, delta)
        if mine is not None:
            self._spend_analyst(mine, epsilon, delta)
        self._execute(
            f"INSERT INTO {SCHEMA}.history (seq, charged_at, query, epsilon, delta, mac, "
            "analyst) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [seq, at, label, epsilon, delta, link, self._analyst],
        )
        if answer is not None:
            blob = _ipc(answer.table)
            self._execute(
                f"INSERT INTO {SCHEMA}.answers (query, data, answer, mac, analyst) "
                "VALUES (?, ?, ?, ?, ?)",
                [
                    answer.query,
                    answer.data,
                    blob,
                    self._answer_mac(answer.query, answer.data, blob, self._analyst),
                    self._analyst,
                ],
            )
        return state.entries

    def _spend_analyst(self, mine: tuple[Analyst, str, str], epsilon: float, delta: float) -> None:
        """Spend ε and δ from the analyst's row ``mine`` (checked by ``_affordable_for``), in
        the caller's transaction, which also changes the budget row: charges of one
        database serialise on it."""
        budget, verifier, old_mac = mine
        name = budget.name
        entries = self._analyst_entries(name) + 1
        spent, delta_spent = budget.spent + epsilon, budget.delta_spent + delta
        mac = self._analyst_mac(
            name, verifier, budget.total, spent, budget.delta_total, delta_spent, entries
        )
        updated = self._execute(  # the count of rows changed
            f"UPDATE {SCHEMA}.analysts SET spent = ?, delta_spent = ?, entries = ?, mac = ? "
            "WHERE name = ? AND mac = ?",
            [spent, delta_spent, entries, mac, name, old_mac],
        ).fetchall()
        if updated != [(1,)]:
            raise duckdb.TransactionException("the analyst's row changed meanwhile")

    def _compare_and_set(self, old: LedgerState, new: LedgerState) -> None:
        """Replace the budget row ``old`` by ``new``; a concurrent change is a conflict."""
        updated = self._execute(  # DuckDB answers an UPDATE with the count of rows changed
            f"UPDATE {SCHEMA}.budget SET spent = ?, delta = ?, entries = ?, head = ?, "
            "declared = ?, mac = ? WHERE id = 1 AND mac = ?",
            [new.spent, new.delta, new.entries, new.head, new.declared, new.mac, old.mac],
        ).fetchall()
        if updated != [(1,)]:
            raise duckdb.TransactionException("the budget row changed meanwhile")

    def _execute(self, statement: str, parameters: list | None = None) -> duckdb.DuckDBPyConnection:
        """Every write of the ledger goes through here (the crash tests interpose on it)."""
        return self._con.execute(statement, parameters)

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """This thread alone on the cursor, reading one consistent state of the ledger."""
        with self._lock, self._transaction():
            yield

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            try:
                self._con.execute("ROLLBACK")
            except duckdb.TransactionException:
                pass  # DuckDB already ended the failed transaction
            raise
        self._execute("COMMIT")

    # -- stored answers -----------------------------------------------------------------

    @staticmethod
    def query_key(*parts: object) -> str:
        return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()

    def _answer_mac(self, query: str, data: str, blob: bytes, analyst: str | None) -> str:
        fields = (query, data, hashlib.sha256(blob).hexdigest())
        if analyst is None:  # the owner's answers, as before analysts existed
            return self._mac("answer", *fields)
        return self._mac("answer", *fields, analyst)

    def _whose_answers(self) -> tuple[str, list]:
        """The condition (and its parameters) on the ``analyst`` column selecting the stored
        answers this ledger may return: its own analyst's (the owner's own for none), or all
        with ``share_answers``."""
        if self._share_answers:
            return "TRUE", []
        return "analyst IS NOT DISTINCT FROM ?", [self._analyst]

    def has_answers(self, query: str) -> bool:
        whose, parameters = self._whose_answers()
        with self._lock:
            return bool(
                self._con.execute(
                    f"SELECT 1 FROM {SCHEMA}.answers WHERE query = ? AND {whose} LIMIT 1",
                    [query, *parameters],
                ).fetchall()
            )

    def _stored_questions(self) -> set[str]:
        """The questions of the stored answers this ledger may return (``_StoredKeys``)."""
        whose, parameters = self._whose_answers()
        rows = self._con.execute(
            f"SELECT DISTINCT query FROM {SCHEMA}.answers WHERE {whose}", parameters
        ).fetchall()
        return {query for (query,) in rows}

    def _stored_after(self, replaced: int, answer: StoredAnswer | None) -> None:
        """Keep ``_stored`` complete after a charge that replaced the budget row of a
        history ``replaced`` entries long; if anyone else charged since it was complete,
        their answers are unknown here: it is dropped (every lookup then reads the table)."""
        with self._lock:
            stored = self._stored
            if stored is None:
                return
            if stored.entries != replaced:
                self._stored = None
                return
            stored.entries = replaced + 1
            if answer is not None:
                stored.keys.add(answer.query)

    def _none_stored(self, query: str, known: LedgerState) -> bool:
        """Whether ``query`` certainly has no stored answer in the ledger state ``known``
        (``_StoredKeys``: a question this ledger has not seen stored, and nobody charged
        since it last looked)."""
        with self._lock:
            stored = self._stored
            if stored is not None and stored.entries != known.entries:
                self._stored = stored = None  # another session charged: no longer complete
            return stored is not None and query not in stored.keys

    def answer(self, query: str, data: str, known: LedgerState | None = None) -> pa.Table | None:
        """The stored answer of ``query`` on ``data``, if its MAC holds. ``known`` (from
        ``read``) lets a question never stored be told without reading the table."""
        if known is not None and self._none_stored(query, known):
            return None
        whose, parameters = self._whose_answers()
        with self._lock:
            rows = self._con.execute(
                f"SELECT answer, mac, analyst FROM {SCHEMA}.answers "
                f"WHERE query = ? AND data = ? AND {whose} LIMIT 1",
                [query, data, *parameters],
            ).fetchall()
        if not rows:
            return None
        blob, mac, analyst = rows[0]
        if not hmac.compare_digest(self._answer_mac(query, data, blob, analyst), str(mac)):
            raise LedgerCorrupted("a stored answer was changed outside privsql")
        return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()

    # -- the owner's administration: totals and analysts ---------------------------------

    def set_total(self, epsilon: float | None = None, delta: float | None = None) -> None:
        """Change the database's ε total (and/or δ total): the owner may raise a total, or
        lower it, but never below what was already spent."""
        self._write(lambda: self._set_total_once(epsilon, delta))

    def _set_total_once(self, epsilon: float | None, delta: float | None) -> None:
        state = self._state()
        self._check_tail(state)
        total = state.total if epsilon is None else _checked_budget(epsilon)
        delta_total = state.delta_total if delta is None else _checked_delta(delta, "δ budget")
        if total < state.spent * (1 - TOLERANCE) or delta_total < state.delta * (1 - TOLERANCE):
            raise PrivacyError(
                f"a total cannot be set below what was spent (ε = {state.spent:g}, "
                f"δ = {state.delta:g})"
            )
        if delta_total < state.delta_cap:
            raise PrivacyError(
                f"the δ total cannot be set below the per-query cap of δ = {state.delta_cap:g}"
            )
        fields = astuple(state)[4:-1]  # the δ cap, secret, entries, head, declarations
        new = self._sealed(total, state.spent, state.delta, delta_total, *fields)
        updated = self._execute(
            f"UPDATE {SCHEMA}.budget SET total = ?, delta_total = ?, mac = ? "
            "WHERE id = 1 AND mac = ? RETURNING id",
            [new.total, new.delta_total, new.mac, state.mac],
        ).fetchall()
        if not updated:
            raise duckdb.TransactionException("the budget row changed meanwhile")

    def _analyst_mac(
        self,
        name: str,
        verifier: str,
        total: float,
        spent: float,
        delta_total: float,
        delta_spent: float,
        entries: int,
    ) -> str:
        return self._mac("analyst", name, verifier, total, spent, delta_total, delta_spent, entries)

    def _analyst_entries(self, name: str) -> int:
        return self._con.execute(
            f"SELECT count(*) FROM {SCHEMA}.history WHERE analyst = ?", [name]
        ).fetchall()[0][0]

    def _analyst_row(self, name: str, state: LedgerState) -> tuple[Analyst, str, str] | None:
        """Analyst ``name``'s budget, verifier and MAC, after checking the MAC and that the
        row counts every history entry of the analyst (an older copy put back would not);
        None if there is no such analyst."""
        self._check_tail(state)
        rows = self._con.execute(
            f"SELECT name, verifier, total, spent, delta_total, delta_spent, entries, mac "
            f"FROM {SCHEMA}.analysts WHERE name = ?",
            [name],
        ).fetchall()
        if not rows:
            return None
        name, verifier, total, spent, delta_total, delta_spent, entries, mac = rows[0]
        expected = self._analyst_mac(
            name, verifier, total, spent, delta_total, delta_spent, entries
        )
        if not hmac.compare_digest(expected, str(mac)) or entries != self._analyst_entries(name):
            raise LedgerCorrupted(f"analyst {name!r}'s budget was changed outside privsql")
        return Analyst(name, total, spent, delta_total, delta_spent), verifier, mac

    def analyst(self, name: str) -> Analyst | None:
        """Analyst ``name``'s budget, or None if there is no such analyst."""
        with self._snapshot():
            found = self._analyst_row(name, self._state())
        return None if found is None else found[0]

    def verifier(self, name: str) -> str | None:
        """The stored password verifier of analyst ``name`` (privsql.server.auth), or None."""
        with self._snapshot():
            found = self._analyst_row(name, self._state())
        return None if found is None else found[1]

    def analysts(self) -> list[Analyst]:
        """Every analyst's budget, by name."""
        with self._snapshot():
            state = self._state()
            names = self._con.execute(
                f"SELECT name FROM {SCHEMA}.analysts ORDER BY name"
            ).fetchall()
            found = [self._analyst_row(name, state) for (name,) in names]
        return [row[0] for row in found if row is not None]

    def add_analyst(
        self, name: str, verifier: str, epsilon: float, delta: float | None = None
    ) -> None:
        """A new analyst with password ``verifier`` and ε (δ: the database's δ total if
        None) budgets. A name that asked before (and was removed) keeps what it spent."""
        epsilon = _checked_budget(epsilon)
        if not name or not name.isprintable():
            raise PrivacyError("an analyst's name must be printable and not empty")

        def add() -> None:
            state = self._state()
            if self._analyst_row(name, state) is not None:
                raise PrivacyError(f"analyst {name!r} already exists")
            delta_total = state.delta_total if delta is None else _checked_delta(delta, "δ budget")
            spent, delta_spent, entries = self._con.execute(
                f"SELECT coalesce(sum(epsilon), 0), coalesce(sum(delta), 0), count(*) "
                f"FROM {SCHEMA}.history WHERE analyst = ?",
                [name],
            ).fetchall()[0]
            mac = self._analyst_mac(
                name, verifier, epsilon, spent, delta_total, delta_spent, entries
            )
            self._execute(
                f"INSERT INTO {SCHEMA}.analysts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [name, verifier, epsilon, spent, delta_total, delta_spent, entries, mac],
            )

        self._write(add)

    def set_analyst(
        self,
        name: str,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        verifier: str | None = None,
    ) -> None:
        """Change analyst ``name``'s ε or δ budget (never below what they spent) or password."""

        def change() -> None:
            found = self._analyst_row(name, self._state())
            if found is None:
                raise PrivacyError(f"there is no analyst {name!r} in this database")
            mine, old_verifier, old_mac = found
            total = mine.total if epsilon is None else _checked_budget(epsilon)
            delta_total = mine.delta_total if delta is None else _checked_delta(delta, "δ budget")
            if total < mine.spent * (1 - TOLERANCE) or delta_total < mine.delta_spent * (
                1 - TOLERANCE
            ):
                raise PrivacyError(
                    f"analyst {name!r} already spent ε = {mine.spent:g}, δ = "
                    f"{mine.delta_spent:g}: a budget cannot be set below that"
                )
            new_verifier = old_verifier if verifier is None else verifier
            entries = self._analyst_entries(name)
            mac = self._analyst_mac(
                name, new_verifier, total, mine.spent, delta_total, mine.delta_spent, entries
            )
            self._execute(
                f"UPDATE {SCHEMA}.analysts SET verifier = ?, total = ?, delta_total = ?, "
                "mac = ? WHERE name = ? AND mac = ?",
                [new_verifier, total, delta_total, mac, name, old_mac],
            )

        self._write(change)

    def remove_analyst(self, name: str) -> None:
        """Remove analyst ``name`` (who can then no longer sign in); the history keeps what
        they asked, and adding the name again restores what they spent."""

        def remove() -> None:
            if self._analyst_row(name, self._state()) is None:
                raise PrivacyError(f"there is no analyst {name!r} in this database")
            self._execute(f"DELETE FROM {SCHEMA}.analysts WHERE name = ?", [name])

        self._write(remove)

    # -- the data owner's declarations -------------------------------------------------

    def declare(self, name: str, protection: Protection | None) -> None:
        """Record a private table (with its unit) or, with ``None``, a public one.

        Declarations only tighten: a table once private stays private with its unit.
        ``name`` is the source's catalogue identity (``rewriter.catalog.identity``); the
        ledger compares identities, so another reader of declared files (another identity)
        is refused by ``Session.protect``, which knows the files each one names.
        """
        key = name
        current = self.declarations().get(key)
        if current is not None and current[0] is not None:
            if protection is None:
                raise PrivacyError(f"{name} is private; it cannot be made public")
            if current[0].privacy_unit.lower() != protection.privacy_unit.lower():
                raise PrivacyError(
                    f"{name} is already protected with privacy unit {current[0].privacy_unit}"
                )
        row = (
            [key, True, None, None, None, None]
            if protection is None
            else [
                key,
                False,
                protection.privacy_unit,
                json.dumps({c: list(b) for c, b in protection.bounds.items()}),
                json.dumps({c: list(v) for c, v in protection.keys.items()}),
                json.dumps([list(c) for c in protection.columns]) if protection.columns else None,
            ]
        )
        self._write(lambda: self._declare_once(row))

    def _declare_once(self, row: list) -> None:
        state = self._state()
        self._sources(state)  # never re-seal declarations changed outside privsql
        self._execute(f"INSERT OR REPLACE INTO {SCHEMA}.sources VALUES (?, ?, ?, ?, ?, ?)", row)
        fields = astuple(state)[:-2]  # all but declared and mac
        self._compare_and_set(state, self._sealed(*fields, self._declared(self._read_sources())))

    def declarations(self) -> dict[str, tuple[Protection | None, bool]]:
        """Declared sources by lower-case name: (protection or None, is public)."""
        with self._snapshot():
            rows = self._sources(self._state())
        result: dict[str, tuple[Protection | None, bool]] = {}
        for name, public, unit, bounds, keys, *columns in rows:
            if public:
                result[name] = (None, True)
            else:
                result[name] = (
                    Protection(
                        unit,
                        {c: (b[0], b[1]) for c, b in json.loads(bounds).items()},
                        {c: tuple(v) for c, v in json.loads(keys).items()},
                        tuple((n, t) for n, t in json.loads(columns[0])) if columns else (),
                    ),
                    False,
                )
        return result


def _write_key(path: Path, key: bytes) -> None:
    """Create the key file (owner-only), durably, failing if it already exists."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(descriptor, key.hex().encode() + b"\n")
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _refuse_unless_fits(symbol: str, cost: float, spent: float, total: float, whose: str) -> None:
    """Raise ``BudgetExceeded`` unless spending ``cost`` of ε or δ (``symbol``) more keeps
    ``spent`` within ``total``; ``whose`` says whose total it is ("your " or "")."""
    if not _fits(spent, cost, total):
        raise BudgetExceeded(
            f"this query needs {symbol} = {cost:g} but only "
            f"{symbol} = {max(0.0, total - spent):g} of {whose}{total:g} remains; "
            "nothing was charged"
        )


def _refuse_unless_tail(state: LedgerState, tail: tuple) -> None:
    """Raise ``LedgerCorrupted`` unless the history ends where ``state`` says: ``tail`` is
    ``_TAIL_COLUMNS`` at the head ``state`` names (``Ledger._history`` checks every link)."""
    if tuple(tail) != (state.entries, state.entries, state.head):
        raise LedgerCorrupted("the ledger's history was changed outside privsql")


def _refuse_unless_database_fits(state: LedgerState, epsilon: float, delta: float) -> None:
    """Raise ``BudgetExceeded`` unless ε and δ both fit in what remains of the database's
    budget as ``state`` has it."""
    _refuse_unless_fits("ε", epsilon, state.spent, state.total, "")
    _refuse_unless_fits("δ", delta, state.delta, state.delta_total, "")


def _fits(spent: float, cost: float, total: float) -> bool:
    """Whether spending ``cost`` more keeps ``spent`` within ``total`` (up to TOLERANCE);
    spending nothing always fits, even in a ledger already past its total (a migrated one)."""
    return cost == 0 or spent + cost <= total * (1 + TOLERANCE)


def _checked_delta(value: float, what: str) -> float:
    value = float(value)
    if not 0 < value < 1:
        raise PrivacyError(f"the {what} must be greater than 0 and smaller than 1")
    return value


def _delta_policy(delta_budget: float | None, max_query_delta: float | None) -> tuple[float, float]:
    """The δ total and per-query cap of a new ledger: the owner's, else the defaults
    (the default cap is lowered to a smaller total; an explicit cap above it is refused)."""
    total = DELTA_BUDGET if delta_budget is None else _checked_delta(delta_budget, "δ budget")
    if max_query_delta is None:
        return total, min(MAX_QUERY_DELTA, total)
    cap = _checked_delta(max_query_delta, "per-query δ cap")
    if cap > total:
        raise PrivacyError(f"the per-query δ cap ({cap:g}) cannot exceed the δ budget ({total:g})")
    return total, cap


def _checked_budget(budget: float) -> float:
    budget = float(budget)
    if not budget > 0 or budget == float("inf"):
        raise PrivacyError("the budget must be a finite ε greater than 0")
    return budget
