"""Type errors and unknown functions, found from the schema alone before anything is charged.

Over private data every row-level expression runs inside ``TRY``, so a comparison of a
number with text (``dep_delay > 'abc'``) would silently become NULL and the query would
be answered, and charged, as a count of nothing. So before any privacy rule is checked,
the resolved query is run in a scratch in-memory DuckDB against stand-ins of its sources:
tables with the sources' column names and types and one row of NULLs. The stand-ins hold
no data, so whether the query fails there — and what DuckDB says — is a function of the
query's text and the schema only; a failure is reported as ``UnknownName`` (a function or
type that does not exist) or ``TypeMismatch``, with a message privsql builds from names,
types and constants the analyst wrote (each checked to be in the query's text).

The single NULL row is what makes DuckDB evaluate the casts of constants (``'abc'`` read as
a DOUBLE), which it does not do over an empty table. Table functions (``range(10**10)``)
stand in as one row of their columns too, so the run stays one row long; a run that still
takes longer than ``TIME_LIMIT`` is given up. Queries that read only public data are not
checked: they run exactly as written, and DuckDB's own errors on public data are public.
ENUM columns stand in as VARCHAR: an enum's member list is drawn from data, and would be
quoted by DuckDB's messages.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb
from sqlglot import exp

from rewriter.catalog import Catalog, public_type
from rewriter.errors import PrivacyError, TypeMismatch, UnknownName
from rewriter.expressions import Clamped
from rewriter.resolve import IDENTITY

NO_REACH = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}
"""The scratch database reaches no file, network or extension: it runs analysts' SQL."""

STAND_IN = "__privsql_stand_in_"
TIME_LIMIT = 3.0
"""Seconds the scratch run may take (a cross join with ``range(10**9)`` would take long on
one row too): past it the check is skipped, and the query is checked as before. A run
takes milliseconds; at 1 s a machine loaded eight-fold skipped a check now and then, and a
query's refusal then came from a later rule (the neighbour fuzz test saw it: load, not data)."""

TYPE_NAME = r"[A-Z][A-Z0-9_]*(?: WITH(?:OUT)? TIME ZONE)?(?:\(\d+(?:, ?\d+)?\))?(?:\[\d*\])*"
"""A DuckDB type name as it appears in messages: ``DOUBLE``, ``DECIMAL(18,3)``, ``INTEGER[]``."""


@dataclass(frozen=True)
class _Pattern:
    """One kind of DuckDB message, and the refusal privsql says instead."""

    regex: re.Pattern[str]
    refusal: Callable[[re.Match[str], str], PrivacyError | None]


def _literal(value: str, written: str) -> bool:
    """Whether ``'value'`` is a string constant the analyst typed."""
    return f"'{value}'".lower() in written.lower()


def _type(name: str) -> str:
    """``INTEGER_LITERAL`` is how DuckDB names the type of a number constant."""
    return name.removesuffix("_LITERAL")


def _no_function(found: re.Match[str], written: str) -> PrivacyError | None:
    name, arguments = found["name"], found["arguments"]
    readable = name.isidentifier() and name.lower() in written.lower()
    if not (readable or re.fullmatch(r"[-+*/%<>=!~^|&]+", name)):
        return None
    if not re.fullmatch(rf"(?:{TYPE_NAME}(?:, )?)*", arguments):
        return None
    return TypeMismatch(
        f"{name} does not take ({', '.join(map(_type, arguments.split(', ')))}): "
        "cast an argument to the type it needs"
    )


def _compare(found: re.Match[str], written: str) -> PrivacyError:
    return TypeMismatch(
        f"cannot {found['verb'].lower()} {_type(found['left'])} with "
        f"{_type(found['right'])}: cast one side to the other's type"
    )


def _convert(found: re.Match[str], written: str) -> PrivacyError | None:
    if not _literal(found["value"], written):
        return None
    return TypeMismatch(f"'{found['value']}' is not a {found['type']}")


def _out_of_range(found: re.Match[str], written: str) -> PrivacyError | None:
    if not _literal(found["value"], written):
        return None
    return TypeMismatch(f"'{found['value']}' is not a valid {found['kind'].upper()}")


def _unknown_function(found: re.Match[str], written: str) -> PrivacyError | None:
    name = found["name"]
    if name.lower() not in written.lower():
        return None
    candidate = found["candidate"]
    hint = f"; did you mean {candidate}?" if candidate else ""
    return UnknownName(f"function {name} does not exist{hint}")


def _unknown_type(found: re.Match[str], written: str) -> PrivacyError | None:
    name = found["name"]
    return UnknownName(f"type {name} does not exist") if name.lower() in written.lower() else None


PATTERNS = (
    _Pattern(
        re.compile(
            r"No function matches the given name and argument types "
            r"'(?P<name>[^(']+)\((?P<arguments>[^']*)\)'"
        ),
        _no_function,
    ),
    _Pattern(
        re.compile(
            rf"Cannot (?P<verb>compare|mix|combine) (?:values|types) of (?:type )?"
            rf"(?P<left>{TYPE_NAME}) and (?:type )?(?P<right>{TYPE_NAME})"
        ),
        _compare,
    ),
    _Pattern(
        re.compile(
            rf"Could not convert string (?P<q>['\"])(?P<value>[^'\"\n]*)(?P=q) to "
            rf"(?P<type>{TYPE_NAME})"
        ),
        _convert,
    ),
    _Pattern(
        re.compile(
            r"(?P<kind>date|time|timestamp)\w* field value out of range: \"(?P<value>[^\"]*)\""
        ),
        _out_of_range,
    ),
    _Pattern(
        re.compile(
            r"(?:Scalar|Aggregate|Table) Function with name (?P<name>\w+) does not exist!"
            r"(?:\s*Did you mean \"(?P<candidate>\w+)\"\?)?"
        ),
        _unknown_function,
    ),
    _Pattern(re.compile(r"Type with name (?P<name>\w+) does not exist"), _unknown_type),
)

GENERIC = {
    duckdb.ConversionException: "a constant does not convert to the type it is used as",
}
"""What is said of a failure none of ``PATTERNS`` reads (its message is not passed on)."""


def check_binding(query: exp.Query, catalog: Catalog, written: str) -> None:
    """Refuse a resolved query whose types do not fit or that names an unknown function.

    ``written`` is the analyst's text: only constants and names found in it are quoted.
    A failure of another kind (a column outside GROUP BY, ...) is left to the privacy
    rules, which say it in their own terms.
    """
    stand_ins = _stand_ins(query, catalog)
    if stand_ins is None:
        return
    passed = catalog.memo.setdefault(PASSED, OrderedDict())
    failure = _scratch.run(stand_ins.statement, stand_ins.rows, stand_ins.kept, passed)
    if failure is None:
        return
    message = _first_line(failure)
    for pattern in PATTERNS:
        found = pattern.regex.search(message)
        refusal = pattern.refusal(found, written) if found else None
        if refusal is not None:
            raise refusal
    generic = GENERIC.get(type(failure))
    if generic is not None:
        raise TypeMismatch(generic)


def _stand_ins(query: exp.Query, catalog: Catalog) -> _StandIns | None:
    """The query over stand-in sources, and the statements creating them; None where a
    source's schema cannot be read or written as DuckDB types."""
    query = query.copy()
    query.set("privacy", None)
    for clamped in list(query.find_all(Clamped)):
        value = clamped.this
        if not any(value.find_all(exp.Column)):
            clamped.replace(value.copy())
            continue
        low, high = clamped.args["low"].copy(), clamped.args["high"].copy()
        clamped.replace(
            exp.Least(this=exp.Greatest(this=value.copy(), expressions=[low]), expressions=[high])
        )
    rows: list[str] = []
    kept: dict[str, str] = {}
    named: dict[str, str] = {}
    for source in list(query.find_all(exp.Table)):
        if IDENTITY not in source.meta:
            if isinstance(source.this, exp.Func):  # range(10**10): its columns, one row
                name = f"{STAND_IN}{len(rows) // 2}_rows"
                bare = source.copy()
                bare.set("alias", None)
                rows.append(
                    f"CREATE TABLE {name} AS SELECT * FROM {bare.sql(dialect='duckdb')} LIMIT 0"
                )
                rows.append(f"INSERT INTO {name} DEFAULT VALUES")
                source.set("this", exp.to_identifier(name))
            continue
        bare = source.copy()
        bare.set("alias", None)
        text = bare.sql(dialect="duckdb")
        if text not in named:
            try:
                names = list(catalog.columns(text))
                types = catalog.types(f"SELECT * FROM {text}")
            except PrivacyError:
                return None
            if len(names) != len(types):
                return None
            columns = ", ".join(
                f"CAST(NULL AS {public_type(kind)}) AS "
                + exp.to_identifier(name, quoted=True).sql(dialect="duckdb")
                for name, kind in zip(names, types, strict=True)
            )
            named[text] = f"{STAND_IN}{hashlib.sha256(columns.encode()).hexdigest()[:32]}"
            kept[named[text]] = f"CREATE TABLE {named[text]} AS SELECT {columns}"
        alias = source.alias_or_name
        source.replace(
            exp.Table(
                this=exp.to_identifier(named[text]),
                alias=exp.TableAlias(this=exp.to_identifier(alias)),
            )
        )
    return _StandIns(query.sql(dialect="duckdb", copy=False), kept, rows)  # query is a copy


@dataclass(frozen=True)
class _StandIns:
    """The query over stand-ins (``statement``); ``kept``: each stand-in of a source, by
    its name, and the statement creating it: the name is a digest of its columns and
    types, so a stand-in made once serves every later check of the same schema (the
    scratch keeps it); ``rows``: the statements making the stand-ins of table functions,
    made for this check alone."""

    statement: str
    kept: dict[str, str]
    rows: list[str]


class _Scratch:
    """The scratch database, its stand-ins kept between checks, and the watchdog that
    interrupts a run past ``TIME_LIMIT``. One check at a time (``lock``).

    A run's outcome is a function of its statement and its stand-ins' schemas alone (no
    data is there), and the statement names each kept stand-in by a digest of its schema,
    so the runs that passed are remembered in ``passed`` and a query asked again (with
    another ε, say) passes without running again. Failures are not remembered. ``passed``
    is the session's own (its catalogue's memo): a server's analysts share the scratch,
    and a shared memory would tell one of them, by the time a check takes, that another
    has asked a query of the same shape."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._connection: duckdb.DuckDBPyConnection | None = None
        self._kept: set[str] = set()
        self._deadline = _Deadline()

    def run(
        self,
        statement: str,
        rows: list[str],
        kept: dict[str, str],
        passed: OrderedDict[tuple[str, tuple[str, ...]], None],
    ) -> duckdb.Error | None:
        """DuckDB's error running ``statement`` over the stand-ins (``kept`` made once and
        kept, ``rows`` made for this run), or None: no error, a schema the scratch database
        cannot create, or a run past ``TIME_LIMIT``."""
        run = (statement, tuple(rows))
        with self.lock:
            if run in passed:
                passed.move_to_end(run)
                return None
            scratch = self._connected(kept)
            if scratch is None:
                return None
            scratch.execute("BEGIN TRANSACTION")
            try:
                try:
                    for table in rows:
                        scratch.execute(table)
                except duckdb.Error:
                    return None
                try:
                    with self._deadline.limit(scratch, TIME_LIMIT):
                        scratch.execute(statement).fetchall()
                except duckdb.InterruptException:
                    return None
                except duckdb.Error as error:
                    return error
                passed[run] = None
                if len(passed) > MAX_PASSED:
                    passed.popitem(last=False)
                return None
            finally:
                try:
                    scratch.execute("ROLLBACK")
                except duckdb.Error:  # a late interrupt: start the next check on a new scratch
                    self._connection = None

    def _connected(self, kept: dict[str, str]) -> duckdb.DuckDBPyConnection | None:
        """The scratch connection with every stand-in of ``kept`` made; None when one
        cannot be made (a schema the scratch database cannot create)."""
        if self._connection is None or len(self._kept) + len(kept) > MAX_KEPT:
            self._connection = duckdb.connect(config=NO_REACH)
            self._connection.execute("SET threads = 1")  # one row: parallel is overhead
            self._connection.execute("SET memory_limit = '256MB'")  # analysts' SQL
            self._kept = set()
        for name, statement in kept.items():
            if name not in self._kept:
                try:
                    self._connection.execute(statement)
                except duckdb.Error:
                    return None
                self._kept.add(name)
        return self._connection


class _Deadline:
    """One watchdog thread for every scratch run: ``limit`` interrupts the connection if
    the run inside it lasts past ``seconds`` (a thread started per run costs more than a
    check of a small query). A forked child starts its own thread when it first needs one.
    """

    def __init__(self) -> None:
        self._forget()
        os.register_at_fork(after_in_child=self._forget)
        atexit.register(self._stop)  # a thread left running keeps modules alive

    def _forget(self) -> None:
        self._changed = threading.Condition()
        self._armed: tuple[float, duckdb.DuckDBPyConnection] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    @contextmanager
    def limit(self, connection: duckdb.DuckDBPyConnection, seconds: float) -> Iterator[None]:
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="privsql-scratch-deadline", daemon=True
                )
                self._thread.start()
            self._armed = (time.monotonic() + seconds, connection)
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._armed = None

    def _stop(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        with self._changed:
            while not self._stopping:  # no reference to a connection is held while waiting
                if self._armed is None:
                    self._changed.wait()
                elif (left := self._armed[0] - time.monotonic()) > 0:
                    self._changed.wait(left)
                else:
                    self._armed[1].interrupt()
                    self._armed = None


MAX_KEPT = 256
"""Stand-ins the scratch keeps; past it the scratch starts again empty."""
MAX_PASSED = 1024
"""Runs that passed a session remembers, the least recently asked forgotten first."""
PASSED = "type checks passed"
"""The key of a session's passed runs in its catalogue's memo."""
_scratch = _Scratch()


def _first_line(error: duckdb.Error) -> str:
    return " ".join(str(error).strip().split("\n\n")[0].split())
