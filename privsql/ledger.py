"""The privacy ledger: the database's ε budget, what was spent on what, and stored answers.

It lives in the database itself (schema ``__privsql``), so it is as durable as the
data: closing, crashing or restarting never resets it, and every session on the
same database shares it. A charge is committed before its answer is returned;
check-and-spend is one UPDATE of a single row, so concurrent sessions serialise on
it (DuckDB reports a conflict to the loser, which retries) and together never spend
past the total. Analyst SQL can neither read nor write the schema (the analyser
refuses it).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb
import pyarrow as pa

from rewriter.catalog import Protection
from rewriter.errors import PrivacyError

SCHEMA = "__privsql"
TOLERANCE = 1e-9
"""Relative slack when comparing float sums of ε against the total."""


class BudgetExceeded(PrivacyError):
    """The query's ε would take the ledger past the database's budget; nothing was charged."""

    rule = "budget"


@dataclass(frozen=True)
class Charge:
    """One line of the ledger."""

    at: datetime
    query: str
    epsilon: float
    delta: float


@dataclass(frozen=True)
class StoredAnswer:
    """A released answer, kept so a re-run of ``query`` on the same ``data`` returns it."""

    query: str
    data: str
    table: pa.Table


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class Ledger:
    """Budget, history, declarations and stored answers of one database."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, budget: float | None) -> None:
        self._con = connection
        self._secret: int | None = None
        self._create(budget)

    def _create(self, budget: float | None) -> None:
        con = self._con
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.budget (id INTEGER PRIMARY KEY, "
            "total DOUBLE NOT NULL, spent DOUBLE NOT NULL, delta DOUBLE NOT NULL, "
            "secret BIGINT NOT NULL)"
        )
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.history (charged_at TIMESTAMP, query VARCHAR, "
            "epsilon DOUBLE, delta DOUBLE)"
        )
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.answers (query VARCHAR, data VARCHAR, "
            "answer BLOB)"
        )
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.sources (name VARCHAR PRIMARY KEY, "
            "public BOOLEAN, privacy_unit VARCHAR, bounds VARCHAR, keys VARCHAR)"
        )
        row = con.execute(f"SELECT total FROM {SCHEMA}.budget").fetchall()
        if not row:
            total = 1.0 if budget is None else _checked_budget(budget)
            secret = secrets.randbits(63)
            con.execute(
                f"INSERT INTO {SCHEMA}.budget VALUES (1, ?, 0, 0, ?) ON CONFLICT DO NOTHING",
                [total, secret],
            )
        elif budget is not None and _checked_budget(budget) != row[0][0]:
            raise PrivacyError(
                f"this database's budget is fixed at ε = {row[0][0]:g}; it cannot be changed"
            )

    # -- the budget -------------------------------------------------------------------

    def _budget_row(self) -> tuple[float, float, float, int]:
        return self._con.execute(
            f"SELECT total, spent, delta, secret FROM {SCHEMA}.budget WHERE id = 1"
        ).fetchall()[0]

    @property
    def total(self) -> float:
        return self._budget_row()[0]

    @property
    def spent(self) -> float:
        return self._budget_row()[1]

    @property
    def delta_spent(self) -> float:
        return self._budget_row()[2]

    @property
    def remaining(self) -> float:
        total, spent, _, _ = self._budget_row()
        return max(0.0, total - spent)

    @property
    def secret(self) -> int:
        """The database's hashing secret: which rows and groups a unit keeps (fixed at
        creation, so read once)."""
        if self._secret is None:
            self._secret = self._budget_row()[3]
        return self._secret

    @property
    def history(self) -> list[Charge]:
        rows = self._con.execute(
            f"SELECT charged_at, query, epsilon, delta FROM {SCHEMA}.history ORDER BY charged_at"
        ).fetchall()
        return [Charge(*row) for row in rows]

    def affordable(self, epsilon: float) -> bool:
        total, spent, _, _ = self._budget_row()
        return spent + epsilon <= total * (1 + TOLERANCE)

    def charge(
        self, label: str, epsilon: float, delta: float, answer: StoredAnswer | None = None
    ) -> None:
        """Spend ε (and δ) for one answer, durably, or raise ``BudgetExceeded``.

        The answer, if given, is stored in the same transaction as the charge.
        """
        for attempt in range(50):
            try:
                self._charge_once(label, epsilon, delta, answer)
                return
            except duckdb.TransactionException:
                time.sleep(0.001 * (attempt + 1))
        raise PrivacyError("the ledger is busy; nothing was charged, try again")

    def _charge_once(
        self, label: str, epsilon: float, delta: float, answer: StoredAnswer | None
    ) -> None:
        con = self._con
        con.execute("BEGIN TRANSACTION")
        try:
            updated = con.execute(
                f"UPDATE {SCHEMA}.budget SET spent = spent + $eps, delta = delta + $delta "
                "WHERE id = 1 AND spent + $eps <= total * (1 + $tolerance) RETURNING spent",
                {"eps": epsilon, "delta": delta, "tolerance": TOLERANCE},
            ).fetchall()
            if not updated:
                raise BudgetExceeded(
                    f"this query needs ε = {epsilon:g} but only ε = {self.remaining:g} "
                    f"of {self.total:g} remains; nothing was charged"
                )
            con.execute(
                f"INSERT INTO {SCHEMA}.history VALUES (now(), ?, ?, ?)", [label, epsilon, delta]
            )
            if answer is not None:
                con.execute(
                    f"INSERT INTO {SCHEMA}.answers VALUES (?, ?, ?)",
                    [answer.query, answer.data, _ipc(answer.table)],
                )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    # -- stored answers -----------------------------------------------------------------

    @staticmethod
    def query_key(*parts: object) -> str:
        return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()

    def has_answers(self, query: str) -> bool:
        return bool(
            self._con.execute(
                f"SELECT 1 FROM {SCHEMA}.answers WHERE query = ? LIMIT 1", [query]
            ).fetchall()
        )

    def answer(self, query: str, data: str) -> pa.Table | None:
        rows = self._con.execute(
            f"SELECT answer FROM {SCHEMA}.answers WHERE query = ? AND data = ? LIMIT 1",
            [query, data],
        ).fetchall()
        if not rows:
            return None
        return pa.ipc.open_stream(pa.py_buffer(rows[0][0])).read_all()

    # -- the data owner's declarations -------------------------------------------------

    def declare(self, name: str, protection: Protection | None) -> None:
        """Record a private table (with its unit) or, with ``None``, a public one.

        Declarations only tighten: a table once private stays private with its unit.
        """
        key = name.lower()
        current = self.declarations().get(key)
        if current is not None and current[0] is not None:
            if protection is None:
                raise PrivacyError(f"{name} is private; it cannot be made public")
            if current[0].privacy_unit.lower() != protection.privacy_unit.lower():
                raise PrivacyError(
                    f"{name} is already protected with privacy unit {current[0].privacy_unit}"
                )
        row = (
            [key, True, None, None, None]
            if protection is None
            else [
                key,
                False,
                protection.privacy_unit,
                json.dumps({c: list(b) for c, b in protection.bounds.items()}),
                json.dumps({c: list(v) for c, v in protection.keys.items()}),
            ]
        )
        self._con.execute(f"INSERT OR REPLACE INTO {SCHEMA}.sources VALUES (?, ?, ?, ?, ?)", row)

    def declarations(self) -> dict[str, tuple[Protection | None, bool]]:
        """Declared sources by lower-case name: (protection or None, is public)."""
        rows = self._con.execute(
            f"SELECT name, public, privacy_unit, bounds, keys FROM {SCHEMA}.sources"
        ).fetchall()
        result: dict[str, tuple[Protection | None, bool]] = {}
        for name, public, unit, bounds, keys in rows:
            if public:
                result[name] = (None, True)
            else:
                result[name] = (
                    Protection(
                        unit,
                        {c: (b[0], b[1]) for c, b in json.loads(bounds).items()},
                        {c: tuple(v) for c, v in json.loads(keys).items()},
                    ),
                    False,
                )
        return result


def _checked_budget(budget: float) -> float:
    budget = float(budget)
    if not budget > 0 or budget == float("inf"):
        raise PrivacyError("the budget must be a finite ε greater than 0")
    return budget


def keys_fingerprint(keys: Mapping[str, Sequence[object]] | None) -> list:
    return sorted((k.lower(), [repr(v) for v in values]) for k, values in (keys or {}).items())
