"""δ is budgeted like ε: an owner-set total, a per-query cap, δ ≥ 1 refused (SPEC §1).

A query spends δ only when it releases group keys that are not public (partition
selection); it is refused before anything runs, charging nothing, when its δ is ≥ 1,
above the cap, or more than remains. The totals are sealed by the ledger's MAC, survive
reopening, and ledgers from before δ was budgeted are migrated with the defaults.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pytest

import privsql
from privsql.ledger import DELTA_BUDGET, KEY_SUFFIX, MAX_QUERY_DELTA, LedgerCorrupted
from rewriter.errors import InvalidOption

TABLE = "CREATE TABLE t AS SELECT range % 200 AS u, range % 5 AS g, range AS v FROM range(2000)"


def grouped(i: int, delta: float | None = None) -> str:
    """A distinct query per i whose group keys are private: it uses partition selection."""
    option = "" if delta is None else f" DELTA {delta}"
    return (
        f"SELECT g, COUNT(*) FROM t WHERE v <> {i} GROUP BY g "
        f"PRIVACY_UNIT u BOUND ROWS 3 EPSILON 0.001{option}"
    )


def scalar(i: int, delta: float | None = None) -> str:
    """A distinct query per i without group keys: it spends no δ."""
    option = "" if delta is None else f" DELTA {delta}"
    return (
        f"SELECT COUNT(*) FROM t WHERE v <> {i} PRIVACY_UNIT u BOUND ROWS 3 EPSILON 0.001{option}"
    )


def session(con: duckdb.DuckDBPyConnection | None = None, **settings: object) -> privsql.Session:
    if con is None:
        con = duckdb.connect()
        con.execute(TABLE)
    db = privsql.connect(con, budget=10.0, **settings)
    db.protect("t", privacy_unit="u")
    return db


def spending(db: privsql.Session) -> tuple[float, float, int]:
    return db.budget.spent, db.budget.delta_spent, len(db.budget.history)


def test_defaults_follow_the_spec():
    with session() as db:
        assert db.budget.delta_total == DELTA_BUDGET == 1e-5
        assert db.budget.max_query_delta == MAX_QUERY_DELTA == 1e-6
        assert db.delta == 1e-6
        assert db.budget.delta_spent == 0 and db.budget.delta_remaining == 1e-5
        assert "delta_total=1e-05" in repr(db.budget)
        assert "delta_remaining=1e-05" in repr(db.budget)


@pytest.mark.parametrize("delta", [0.99, 0.5, 1e-3, 2e-6])
def test_a_delta_above_the_cap_is_refused_and_charges_nothing(delta):
    with session() as db:
        db.sql(grouped(0))
        before = spending(db)
        for sql in [grouped(1, delta), scalar(1, delta)]:  # with or without private keys
            with pytest.raises(InvalidOption, match="cap") as refused:
                db.sql(sql)
            assert isinstance(refused.value, privsql.PrivacyError)
            assert spending(db) == before


@pytest.mark.parametrize("delta", ["1", "1.5", "0"])
def test_a_delta_of_one_or_more_is_refused_by_the_options(delta):
    with session() as db:
        with pytest.raises(InvalidOption):
            db.sql(f"SELECT g, COUNT(*) FROM t GROUP BY g PRIVACY_UNIT u DELTA {delta}")
        assert spending(db) == (0.0, 0.0, 0)


def test_a_delta_at_the_cap_is_answered_and_charged():
    with session() as db:
        result = db.sql(grouped(0, 1e-6))
        assert result.delta == 1e-6
        assert db.budget.delta_spent == pytest.approx(1e-6)
        assert db.budget.delta_remaining == pytest.approx(9e-6)


def test_partition_selection_stops_when_delta_runs_out():
    with session(delta_budget=3e-6) as db:
        for i in range(3):
            db.sql(grouped(i))
        assert db.budget.delta_spent == pytest.approx(3e-6)
        before = spending(db)
        with pytest.raises(privsql.BudgetExceeded, match="δ") as refused:
            db.sql(grouped(3))
        assert "nothing was charged" in str(refused.value)
        assert spending(db) == before
        assert db.budget.delta_remaining == pytest.approx(0.0, abs=1e-18)
        # A smaller δ does not fit either; a query without private keys spends none.
        with pytest.raises(privsql.BudgetExceeded):
            db.sql(grouped(4, 1e-9))
        assert db.sql(scalar(5)).delta == 0
        assert db.budget.delta_spent == pytest.approx(3e-6)
        # A stored answer is returned again at no cost.
        assert db.sql(grouped(0)).cached


def test_only_the_delta_a_query_charges_is_budgeted():
    """Public keys need no partition selection: such a query charges (and needs) no δ."""
    con = duckdb.connect()
    con.execute(TABLE)
    with privsql.connect(con, budget=10.0, delta_budget=1e-6) as db:
        db.protect("t", privacy_unit="u", keys={"g": list(range(5))})
        for i in range(3):
            assert db.sql(grouped(i)).delta == 0
        assert db.budget.delta_spent == 0


def test_the_charge_rechecks_delta():
    """``_charge_once`` refuses δ past the total or above the cap, whatever was checked before."""
    with session(delta_budget=2e-6) as db:
        ledger = db._ledger
        ledger.charge("a", 0.01, 1e-6)
        ledger.charge("b", 0.01, 1e-6)
        with pytest.raises(privsql.BudgetExceeded):
            ledger.charge("c", 0.01, 1e-6)
        with pytest.raises(InvalidOption):
            ledger.charge("d", 0.01, 1e-5)
        assert spending(db) == (pytest.approx(0.02), pytest.approx(2e-6), 2)


def test_racing_sessions_never_overspend_delta(tmp_path):
    path = tmp_path / "race.duckdb"
    con = duckdb.connect(str(path))
    con.execute(TABLE)
    session(con, delta_budget=4e-6).close()
    sessions = [privsql.connect(con.cursor()) for _ in range(4)]

    def ask(i: int) -> str:
        try:
            sessions[i % 4].sql(grouped(i))
            return "answer"
        except privsql.BudgetExceeded:
            return "refused"

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(ask, range(8)))
    for db in sessions:
        db.close()
    with privsql.connect(con) as db:
        assert outcomes.count("answer") == 4
        assert db.budget.delta_spent == pytest.approx(4e-6)
        assert len(db.budget.history) == 4
    con.close()


def test_the_session_default_delta_must_be_within_the_cap():
    con = duckdb.connect()
    with pytest.raises(privsql.PrivacyError, match="cap"):
        privsql.connect(con, delta=2e-6)
    with pytest.raises(privsql.PrivacyError, match="cap"):
        privsql.connect(con, delta=0.99)
    with privsql.connect(con, delta=5e-7) as db:
        assert db.delta == 5e-7
    con.close()


def test_owner_settings_are_checked():
    for settings in [
        {"delta_budget": 1.0},
        {"delta_budget": 0.0},
        {"max_query_delta": 1.5},
        {"delta_budget": 1e-6, "max_query_delta": 1e-5},  # cap above the total
    ]:
        with pytest.raises(privsql.PrivacyError):
            privsql.connect(**settings)
    with privsql.connect(delta_budget=1e-7) as db:  # the default cap and δ follow a small total
        assert db.budget.max_query_delta == 1e-7 and db.delta == 1e-7


def test_delta_total_and_cap_survive_reopen_and_cannot_change(tmp_path):
    path = tmp_path / "reopen.duckdb"
    con = duckdb.connect(str(path))
    con.execute(TABLE)
    con.close()
    with privsql.connect(path, budget=5.0, delta_budget=2e-5, max_query_delta=4e-6) as db:
        db.protect("t", privacy_unit="u")
        db.sql(grouped(0, 4e-6))
    with privsql.connect(path) as db:
        assert db.budget.delta_total == 2e-5
        assert db.budget.max_query_delta == 4e-6
        assert db.budget.delta_spent == pytest.approx(4e-6)
        assert db.delta == 1e-6
    with privsql.connect(path, delta_budget=2e-5, max_query_delta=4e-6):
        pass
    for settings in [{"delta_budget": 1e-3}, {"max_query_delta": 1e-5}]:
        with pytest.raises(privsql.PrivacyError, match="cannot be changed"):
            privsql.connect(path, **settings)


@pytest.mark.parametrize("column", ["delta_total", "delta_cap"])
def test_tampering_with_the_delta_total_or_cap_is_detected(tmp_path, column):
    path = tmp_path / "tampered.duckdb"
    with privsql.connect(path, budget=1.0):
        pass
    con = duckdb.connect(str(path))
    con.execute(f"UPDATE __privsql.budget SET {column} = 0.9")
    con.close()
    with pytest.raises(LedgerCorrupted):
        privsql.connect(path)


# -- ledgers from before δ was budgeted -------------------------------------------------------


def make_old_ledger(path: Path, delta_spent: float = 0.0, *, forge: bool = False) -> None:
    """A ledger as privsql wrote it before δ was budgeted: no δ total or cap columns, and
    the budget row sealed under the old MAC (which covered no δ total or cap)."""
    con = duckdb.connect(str(path))
    con.execute(TABLE)
    con.close()
    with privsql.connect(path, budget=2.0) as db:
        db.protect("t", privacy_unit="u")
        db.sql(grouped(0))
    key = bytes.fromhex(Path(f"{path}{KEY_SUFFIX}").read_text().strip())
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE __privsql.budget DROP COLUMN delta_total")
    con.execute("ALTER TABLE __privsql.budget DROP COLUMN delta_cap")
    con.execute("UPDATE __privsql.budget SET delta = ?", [delta_spent])
    row = con.execute(
        "SELECT total, spent, delta, secret, entries, head, declared FROM __privsql.budget"
    ).fetchall()[0]
    message = json.dumps(["budget", *row], separators=(",", ":")).encode()
    mac = hmac.new(os.urandom(32) if forge else key, message, hashlib.sha256).hexdigest()
    con.execute("UPDATE __privsql.budget SET mac = ?", [mac])
    con.close()


def test_an_old_ledger_is_migrated_with_the_defaults(tmp_path):
    path = tmp_path / "old.duckdb"
    make_old_ledger(path, delta_spent=1e-6)
    with privsql.connect(path) as db:
        assert db.budget.total == 2.0
        assert db.budget.spent == pytest.approx(0.001)
        assert db.budget.delta_total == DELTA_BUDGET
        assert db.budget.max_query_delta == MAX_QUERY_DELTA
        assert db.budget.delta_spent == pytest.approx(1e-6)
        assert len(db.budget.history) == 1
        assert db.sql(grouped(0)).cached  # stored answers and declarations carried over
        db.sql(grouped(1))
        assert db.budget.delta_spent == pytest.approx(2e-6)
    with privsql.connect(path) as db:  # migrated once, then sealed like any new ledger
        assert db.budget.delta_spent == pytest.approx(2e-6)
    raw = duckdb.connect(str(path))
    raw.execute("UPDATE __privsql.budget SET delta_total = 0.5")
    raw.close()
    with pytest.raises(LedgerCorrupted):
        privsql.connect(path)


def test_an_old_ledger_that_overspent_delta_has_none_left(tmp_path):
    path = tmp_path / "overspent.duckdb"
    make_old_ledger(path, delta_spent=0.99)
    with privsql.connect(path) as db:
        assert db.budget.delta_remaining == 0
        with pytest.raises(privsql.BudgetExceeded):
            db.sql(grouped(1))
        assert db.sql(scalar(1)).delta == 0


def test_an_old_ledger_is_migrated_only_with_the_default_delta_policy(tmp_path):
    path = tmp_path / "old.duckdb"
    make_old_ledger(path)
    with pytest.raises(privsql.PrivacyError, match="cannot be changed"):
        privsql.connect(path, delta_budget=0.5)


def test_an_old_ledger_that_fails_its_mac_is_refused_not_migrated(tmp_path):
    path = tmp_path / "forged.duckdb"
    make_old_ledger(path, forge=True)
    with pytest.raises(LedgerCorrupted):
        privsql.connect(path)
    con = duckdb.connect(str(path))
    columns = con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'budget'"
    ).fetchall()
    con.close()
    assert ("delta_total",) not in columns
