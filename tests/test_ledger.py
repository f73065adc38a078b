"""The ledger under tampering, races and crashes.

A ledger edited without its key refuses service instead of starting afresh; 8 threads,
8 sessions and 8 processes racing for one budget spend at most it, and exactly what was
answered; a process killed at any point never leaves an answer without its charge.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import duckdb
import pytest

import privsql
from privsql import dbapi
from privsql.ledger import KEY_SUFFIX, Ledger, LedgerCorrupted

EPSILON = 0.1
BUDGET = 1.2
"""Twelve answers of ε = 0.1 fit; every race below asks for 24."""


FORKSERVER = multiprocessing.get_context("forkserver")
FORKSERVER.set_forkserver_preload(["privsql"])


def start(target: Callable, *args: object) -> tuple[BaseProcess, Connection]:
    """Run ``target(*args, pipe)`` in a fresh process and return it with the pipe's other
    end. The process comes from a fork server that imported privsql once: no import cost,
    and no DuckDB instance of this process inherited."""
    receiving, sending = FORKSERVER.Pipe(duplex=False)
    process = FORKSERVER.Process(target=target, args=(*args, sending))
    process.start()
    sending.close()
    return process, receiving


def query(i: int, epsilon: float = EPSILON) -> str:
    """A distinct query per i, so none is answered from a stored answer."""
    return f"SELECT COUNT(*) FROM t WHERE v <> {i} PRIVACY_UNIT u BOUND ROWS 3 EPSILON {epsilon}"


def make_database(path: Path, budget: float = BUDGET) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT range % 50 AS u, range AS v FROM range(500)")
    con.close()
    with privsql.connect(path, budget=budget) as db:
        db.protect("t", privacy_unit="u")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file with two charges (each with a stored answer) and one declaration."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.duckdb"
    make_database(path)
    with privsql.connect(path) as db:
        db.sql(query(1))
        db.sql(query(2))
    return path


@pytest.fixture
def database(template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the template, with its key."""
    path = tmp_path / template.name
    for suffix in ["", KEY_SUFFIX]:
        shutil.copy(f"{template}{suffix}", f"{path}{suffix}")
    return path


def raw(path: Path, *statements: str) -> None:
    """Edit the file with plain DuckDB: what anyone without the key can do."""
    con = duckdb.connect(str(path))
    for statement in statements:
        con.execute(statement)
    con.close()


def snapshot(path: Path) -> dict[str, list]:
    """Every row of every ledger table."""
    con = duckdb.connect(str(path))
    tables = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = '__privsql'"
    ).fetchall()
    rows = {t: sorted(map(repr, con.execute(f"FROM __privsql.{t}").fetchall())) for (t,) in tables}
    con.close()
    return rows


def spent(path: Path) -> float:
    con = duckdb.connect(str(path))
    try:
        return con.execute("SELECT spent FROM __privsql.budget").fetchall()[0][0]
    finally:
        con.close()


# -- tampering ------------------------------------------------------------------------------

TAMPERING = {
    "spent lowered": ["UPDATE __privsql.budget SET spent = 0"],
    "total raised": ["UPDATE __privsql.budget SET total = 100"],
    "delta lowered": ["UPDATE __privsql.budget SET delta = -1"],
    "delta total raised": ["UPDATE __privsql.budget SET delta_total = 0.5"],
    "delta cap raised": ["UPDATE __privsql.budget SET delta_cap = 0.5"],
    "delta budget removed": [  # would pass for a ledger from before δ was budgeted
        "ALTER TABLE __privsql.budget DROP COLUMN delta_total",
        "ALTER TABLE __privsql.budget DROP COLUMN delta_cap",
    ],
    "last charge deleted": ["DELETE FROM __privsql.history WHERE seq = 2"],
    "first charge deleted": ["DELETE FROM __privsql.history WHERE seq = 1"],
    "history emptied": ["DELETE FROM __privsql.history"],
    "charge edited": ["UPDATE __privsql.history SET epsilon = 0.0001 WHERE seq = 1"],
    "charge relabelled": ["UPDATE __privsql.history SET query = 'nothing' WHERE seq = 2"],
    "charges reordered": ["UPDATE __privsql.history SET seq = 3 - seq"],
    "charge duplicated": [
        "INSERT INTO __privsql.history SELECT 3, charged_at, query, epsilon, delta, mac, analyst "
        "FROM __privsql.history WHERE seq = 2"
    ],
    "private table made public": [
        "UPDATE __privsql.sources SET public = true, privacy_unit = NULL"
    ],
    "declaration deleted": ["DELETE FROM __privsql.sources"],
    "declaration added": ["INSERT INTO __privsql.sources (name, public) VALUES ('other', true)"],
    "budget row duplicated": [
        "INSERT INTO __privsql.budget SELECT 2, * EXCLUDE (id) FROM __privsql.budget"
    ],
    "budget row deleted": ["DELETE FROM __privsql.budget"],
    "history dropped": ["DROP TABLE __privsql.history"],
    "ledger dropped": ["DROP SCHEMA __privsql CASCADE"],
}


@pytest.mark.parametrize("edits", TAMPERING.values(), ids=TAMPERING.keys())
def test_a_ledger_edited_without_the_key_refuses_service(database, edits):
    raw(database, *edits)
    edited = snapshot(database)
    with pytest.raises(LedgerCorrupted) as refused:
        privsql.connect(database)
    assert isinstance(refused.value, privsql.PrivacyError)
    assert snapshot(database) == edited  # refused as it was: nothing reset or re-created
    with pytest.raises(LedgerCorrupted):
        privsql.connect(database)


def test_a_restored_budget_row_does_not_match_a_longer_history(database):
    con = duckdb.connect(str(database))
    old = con.execute("SELECT * FROM __privsql.budget").fetchall()[0]
    con.close()
    with privsql.connect(database) as db:
        db.sql(query(3))
    values = ", ".join("?" for _ in old)
    con = duckdb.connect(str(database))
    con.execute("DELETE FROM __privsql.budget")
    con.execute(f"INSERT INTO __privsql.budget VALUES ({values})", list(old))
    con.close()
    with pytest.raises(LedgerCorrupted, match="history"):
        privsql.connect(database)


LAST = "(SELECT max(seq) FROM __privsql.history)"


HISTORY_CHANGES = [
    f"DELETE FROM __privsql.history WHERE seq = {LAST}",
    f"UPDATE __privsql.history SET mac = 'x' WHERE seq = {LAST}",
    f"UPDATE __privsql.history SET seq = seq + 10 WHERE seq = {LAST}",
    f"INSERT INTO __privsql.history (seq, mac) SELECT {LAST} + 1, 'x'",
    "UPDATE __privsql.history SET mac = 'x' WHERE seq = 1",
]


@pytest.mark.parametrize("damage", HISTORY_CHANGES)
def test_a_history_changed_under_an_open_session_is_refused_before_its_next_charge(
    database, damage
):
    """The history's tail is checked by the next charge, in the transaction that extends
    it, against the entry the budget row names (its length, last number and that entry's
    MAC): no answer is returned or charged; a change deeper in the chain, which the tail
    does not see, is the full check's (the ``history`` property)."""
    with privsql.connect(database) as db:
        db.sql(query(3))
        spent_before = db.budget.spent
        duckdb.connect(str(database)).execute(damage).close()
        with pytest.raises(LedgerCorrupted, match="history"):
            if "seq = 1" in damage:
                list(db.budget.history)
            else:
                db.sql(query(4))
        assert db.budget.spent == spent_before


@pytest.mark.parametrize("damage", HISTORY_CHANGES[:4])
def test_a_history_changed_while_a_query_runs_is_refused_at_its_charge(
    database, damage, monkeypatch
):
    """The tail is checked again as the charge adds its entry (in the same statement):
    a history changed after the query's start, while it ran, is no charge."""
    with privsql.connect(database) as db:
        db.sql(query(3))
        spent_before = db.budget.spent
        engine = type(db._engine)
        release = engine.release

        def damaged(self, *args):
            duckdb.connect(str(database)).execute(damage).close()
            return release(self, *args)

        monkeypatch.setattr(engine, "release", damaged)
        with pytest.raises(LedgerCorrupted, match="history"):
            db.sql(query(4))
        assert db.budget.spent == spent_before


@pytest.mark.parametrize("damage", ["deleted", "replaced", "garbled"])
def test_the_key_file_is_required(database, damage):
    key = Path(f"{database}{KEY_SUFFIX}")
    if damage == "deleted":
        key.unlink()
    else:
        key.write_text(os.urandom(32).hex() if damage == "replaced" else "not a key")
    with pytest.raises(LedgerCorrupted):
        privsql.connect(database)
    assert spent(database) == pytest.approx(2 * EPSILON)


def test_a_new_database_under_an_old_key_is_refused_until_the_key_is_removed(database):
    key = Path(f"{database}{KEY_SUFFIX}")
    database.unlink()
    with pytest.raises(LedgerCorrupted, match="delete the key file"):
        make_database(database)
    key.unlink()
    with privsql.connect(database, budget=1.0) as db:
        assert db.budget.spent == 0


def test_a_stored_answer_edited_is_detected_when_it_would_be_returned(database):
    raw(database, "UPDATE __privsql.answers SET answer = answer || '\\x00'::BLOB")
    with privsql.connect(database) as db:
        with pytest.raises(LedgerCorrupted, match="stored answer"):
            db.sql(query(1))
        assert db.budget.spent == pytest.approx(2 * EPSILON)


def test_edits_while_a_session_is_open_are_caught_before_the_next_charge(database):
    with privsql.connect(database) as db:
        # Another connection in the same process shares DuckDB's database instance.
        other = duckdb.connect(str(database))
        other.execute("UPDATE __privsql.budget SET spent = 0")
        other.close()
        with pytest.raises(LedgerCorrupted):
            db.sql(query(3))
        with pytest.raises(LedgerCorrupted):
            db.budget.spent  # noqa: B018
    assert spent(database) == 0  # the edit stands; privsql charged nothing on top of it


def test_the_key_table_of_an_in_memory_ledger_is_out_of_analyst_reach():
    with privsql.connect() as db:
        for sql in ["SELECT * FROM __privsql.key", 'SELECT * FROM "__privsql"."key"']:
            with pytest.raises(privsql.StatementNotAllowed):
                db.sql(sql)


def test_the_key_file_is_private_to_its_owner(database):
    assert Path(f"{database}{KEY_SUFFIX}").stat().st_mode & 0o077 == 0


# -- a database's own ledger, and noise from a seed (red team 34) -------------------------------


def ledger_files(path: Path) -> dict[str, bytes]:
    """The key file's bytes and, by table, the ledger's rows: what a refusal must leave."""
    return {"key": Path(f"{path}{KEY_SUFFIX}").read_bytes(), **snapshot(path)}


OTHER_LEDGERS = {
    "a fresh file": lambda folder: folder / "fresh.duckdb",
    "in memory": lambda folder: ":memory:",
}


@pytest.mark.parametrize("other", OTHER_LEDGERS.values(), ids=OTHER_LEDGERS.keys())
@pytest.mark.parametrize("given", [False, True], ids=["path", "connection"])
def test_a_database_with_its_own_ledger_is_refused_another(database, tmp_path, other, given):
    """``ledger=`` would open the owner's data with a fresh budget and no declarations
    (``public`` on the private table, then its raw rows)."""
    before = ledger_files(database)
    ledger = other(tmp_path)
    data = duckdb.connect(str(database)) if given else database
    with pytest.raises(privsql.PrivacyError, match="ledger of its own") as refused:
        privsql.connect(data, budget=1e9, ledger=ledger)
    assert before["key"].hex() not in str(refused.value)
    if given:
        data.execute("SELECT 1")  # a connection passed in stays open for its owner
        data.close()
    assert ledger == ":memory:" or not Path(ledger).exists()  # no fresh ledger was made
    assert ledger_files(database) == before
    with privsql.connect(database) as db:  # the database's own ledger, as it was
        assert db.budget.total == BUDGET and db.budget.spent == pytest.approx(2 * EPSILON)


def test_a_database_whose_ledger_was_removed_is_refused_another_too(database, tmp_path):
    """The key file alone says a ledger existed (``Ledger._create`` refuses to start afresh
    beside it); another ledger would be the fresh one it refuses."""
    raw(database, "DROP SCHEMA __privsql CASCADE")
    with pytest.raises(privsql.PrivacyError, match="ledger of its own"):
        privsql.connect(database, budget=1e9, ledger=tmp_path / "fresh.duckdb")
    assert not (tmp_path / "fresh.duckdb").exists()


def test_an_in_memory_database_with_a_ledger_is_refused_another(tmp_path):
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range % 5 AS u FROM range(50)")
    privsql.connect(con, budget=1.0).protect("t", privacy_unit="u")
    with pytest.raises(privsql.PrivacyError, match="ledger of its own"):
        privsql.connect(con, budget=1e9, ledger=tmp_path / "fresh.duckdb")


def test_a_ledger_of_its_own_named_as_ledger_is_its_own(database, monkeypatch):
    """``ledger=`` spelling the database's own file opens the ledger it holds."""
    monkeypatch.chdir(database.parent)
    with privsql.connect(database, ledger=f"./{database.name}") as db:
        assert db.budget.total == BUDGET and db.budget.spent == pytest.approx(2 * EPSILON)


def test_a_database_without_a_ledger_takes_one_in_another_file(tmp_path):
    """What ``ledger=`` is for: the ledger kept apart from data that has none."""
    path, ledger = tmp_path / "data.duckdb", tmp_path / "ledger.duckdb"
    raw(path, "CREATE TABLE t AS SELECT range % 50 AS u, range AS v FROM range(500)")
    with privsql.connect(path, budget=1.0, ledger=ledger) as db:
        db.protect("t", privacy_unit="u")
        db.sql(query(1))
    with privsql.connect(path, ledger=ledger) as db:
        assert db.budget.spent == pytest.approx(EPSILON)
    assert not Path(f"{path}{KEY_SUFFIX}").exists() and Path(f"{ledger}{KEY_SUFFIX}").exists()


def from_url(url: str) -> dbapi.Connection:
    database, options = dbapi.parse_url(url)
    return dbapi.connect(database, **options)


def test_a_database_whose_ledger_is_elsewhere_gets_no_fresh_one(tmp_path):
    """Its ledger kept in another file, a database opened without it — or with another,
    or through a URL — started a fresh ledger in the data file: a fresh budget, any
    PRIVACY_UNIT, and the owner locked out of his own (red team 35). The database's file
    now names its ledger (``mark_ledger``): each is refused, nothing is created, and the
    owner's ledger opens as it was."""
    path, ledger = tmp_path / "data.duckdb", tmp_path / "ledger.duckdb"
    raw(path, "CREATE TABLE t AS SELECT range % 50 AS u, range AS v FROM range(500)")
    with privsql.connect(path, budget=1.0, ledger=ledger) as db:
        db.protect("t", privacy_unit="u")
        db.sql(query(1))
    attempts = [
        lambda: privsql.connect(path, budget=100),
        lambda: privsql.connect(path, budget=100, ledger=tmp_path / "other.duckdb"),
        lambda: privsql.connect(duckdb.connect(str(path)), budget=100),
        lambda: from_url(f"privsql:///{path}?budget=100"),
    ]
    for attempt in attempts:
        with pytest.raises((privsql.PrivacyError, dbapi.Error), match="ledger"):
            attempt()
    assert not (tmp_path / "other.duckdb").exists()
    assert not Path(f"{path}{KEY_SUFFIX}").exists()
    copy, link = tmp_path / "copy.duckdb", tmp_path / "link.duckdb"
    shutil.copy(path, copy)
    os.link(path, link)  # a copy or hard link names no file next to it (red team 36)
    for other in (copy, link):
        with pytest.raises(privsql.PrivacyError, match="ledger"):
            privsql.connect(other, budget=100, ledger=tmp_path / "mine.duckdb")
    with privsql.connect(path, ledger=tmp_path / "." / "ledger.duckdb") as db:
        assert db.budget.spent == pytest.approx(EPSILON)
        assert db.budget.total == 1.0


SEEDED_DURABLE = {
    "file database": lambda folder, path: {"database": path},
    "connection to a file": lambda folder, path: {"database": duckdb.connect(str(path))},
    "ledger in a file": lambda folder, path: {
        "database": duckdb.connect(),
        "ledger": folder / "other-ledger.duckdb",
        "budget": 1.0,
    },
}


@pytest.mark.parametrize("where", SEEDED_DURABLE.values(), ids=SEEDED_DURABLE.keys())
def test_a_seed_is_refused_on_a_durable_ledger(database, tmp_path, where):
    """Seeded noise is predictable: the same query under the same seed on an empty copy
    gives the noise alone, and subtracting it the exact answer, charged as if private."""
    before = ledger_files(database)
    options = where(tmp_path, database)
    with pytest.raises(privsql.PrivacyError, match="seed") as refused:
        privsql.connect(**options, seed=424242, insecure=True)
    assert before["key"].hex() not in str(refused.value)
    if isinstance(options["database"], duckdb.DuckDBPyConnection):
        options["database"].close()
    assert "ledger" not in options or not options["ledger"].exists()
    assert ledger_files(database) == before


def test_a_seed_on_data_in_memory_is_reproducible():
    """What seeds are for: tests, on throwaway data in memory."""

    def answer() -> list:
        con = duckdb.connect()
        con.execute("CREATE TABLE t AS SELECT range % 50 AS u, range AS v FROM range(500)")
        with privsql.connect(con, budget=1.0, seed=5, insecure=True) as db:
            db.protect("t", privacy_unit="u")
            return db.sql(query(1)).fetchall()

    assert answer() == answer()


# -- races ----------------------------------------------------------------------------------


def race(ask: Callable[[int], None], requests: int) -> tuple[int, int]:
    """Run ``ask(i)`` for every i on 8 threads; count answers and budget refusals."""
    outcomes: list[str] = []

    def one(i: int) -> None:
        try:
            ask(i)
            outcomes.append("answer")
        except privsql.BudgetExceeded:
            outcomes.append("refused")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(requests)))
    return outcomes.count("answer"), outcomes.count("refused")


def assert_charged_exactly(path: Path, answers: int, requests: int) -> None:
    """Never past the budget, each answer charged once, and (twice the budget having been
    asked for) the budget spent."""
    with privsql.connect(path) as db:
        budget = db.budget.total
        assert db.budget.spent <= budget * (1 + 1e-9)
        assert db.budget.spent == pytest.approx(answers * EPSILON)
        assert len(db.budget.history) == answers
    assert requests == 2 * round(budget / EPSILON) and answers == round(budget / EPSILON)


def test_eight_threads_on_one_session(tmp_path):
    path = tmp_path / "threads.duckdb"
    make_database(path)
    requests = 2 * round(BUDGET / EPSILON)
    with privsql.connect(path) as db:
        answers, refused = race(lambda i: db.sql(query(i)), requests)
    assert answers + refused == requests
    assert_charged_exactly(path, answers, requests)


def test_eight_sessions_on_cursors_of_one_connection(tmp_path):
    """Each session has its own DuckDB connection to one database: charges really race,
    and DuckDB's write-write conflicts send the losers round again."""
    path = tmp_path / "sessions.duckdb"
    make_database(path)
    requests = 2 * round(BUDGET / EPSILON)
    con = duckdb.connect(str(path))
    sessions = [privsql.connect(con.cursor()) for _ in range(8)]
    answers, refused = race(lambda i: sessions[i % 8].sql(query(i)), requests)
    for session in sessions:
        session.close()
    con.close()
    assert answers + refused == requests
    assert_charged_exactly(path, answers, requests)


def racer(path: str, first: int, turns: int) -> list[str]:
    """One process's turns: each opens the file, asks once, closes."""
    outcomes = []
    for i in range(first, first + turns):
        with privsql.connect(path, lock_timeout=120) as db:
            try:
                db.sql(query(i))
                outcomes.append("answer")
            except privsql.BudgetExceeded:
                outcomes.append("refused")
    return outcomes


@pytest.mark.parametrize(
    "turns", [1, pytest.param(3, marks=pytest.mark.slow)], ids=["1 turn", "3 turns"]
)
def test_eight_processes_take_turns_on_the_file_lock(tmp_path, turns):
    """DuckDB lets one process open a file at a time: ``connect`` waits for the lock, so
    processes that open, query and close share the budget and never overspend it."""
    path = tmp_path / "processes.duckdb"
    make_database(path, budget=8 * turns * EPSILON / 2)
    with FORKSERVER.Pool(8) as pool:
        outcomes = pool.starmap(racer, [(str(path), turns * p, turns) for p in range(8)])
    flat = [o for per_process in outcomes for o in per_process]
    assert_charged_exactly(path, flat.count("answer"), len(flat))


def holder(path: str, seconds: float, ready: Connection) -> None:
    """Hold the file open (and so locked) for a while."""
    con = duckdb.connect(path)
    ready.send("holding")
    time.sleep(seconds)
    con.close()


def test_connect_waits_for_the_lock_only_as_long_as_it_is_told(tmp_path):
    path = tmp_path / "locked.duckdb"
    make_database(path)
    process, messages = start(holder, str(path), 2.0)
    assert messages.recv() == "holding"
    started = time.monotonic()
    with pytest.raises(duckdb.IOException, match="lock"):
        privsql.connect(path, lock_timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 1.5
    with privsql.connect(path, lock_timeout=60) as db:  # waits for the holder to finish
        assert db.budget.total == BUDGET
    process.join(timeout=60)


# -- crashes --------------------------------------------------------------------------------


def crasher(path: str, when: str, answers: Connection) -> None:
    """Answer queries until killed: by a signal from outside (``when`` is "anywhere"), or
    by itself just before or just after the COMMIT of its first charge."""
    execute = Ledger._execute
    charging = False

    def crashing(self: Ledger, statement: str, parameters: list | None = None):
        nonlocal charging
        charging = charging or statement.startswith("INSERT INTO __privsql.history")
        if charging and statement == "COMMIT" and when == "before commit":
            os.kill(os.getpid(), signal.SIGKILL)
        result = execute(self, statement, parameters)
        if charging and statement == "COMMIT" and when == "after commit":
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    if when != "anywhere":
        Ledger._execute = crashing  # only in this throw-away process
    db = privsql.connect(path)
    answers.send("ready")
    for i in range(1000):
        answers.send(db.sql(query(i, epsilon=0.001)).fetchall())


def received(messages: Connection) -> list:
    """Everything sent before the sender died."""
    out = []
    while messages.poll(1):
        try:
            out.append(messages.recv())
        except EOFError:
            break
    return out


def history_length(path: Path) -> int:
    with privsql.connect(path) as db:  # also verifies the ledger after the crash
        return len(db.budget.history)


@pytest.mark.parametrize("when", ["before commit", "after commit"])
def test_a_kill_around_the_commit(tmp_path, when):
    """Killed after the charge committed but before the answer was returned, the charge
    persists; killed just before, neither charge nor answer exists."""
    path = tmp_path / "crash.duckdb"
    make_database(path, budget=10)
    process, messages = start(crasher, str(path), when)
    process.join(timeout=120)
    assert process.exitcode == -signal.SIGKILL
    assert received(messages) == ["ready"]  # no answer was ever returned
    assert history_length(path) == (1 if when == "after commit" else 0)


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.7])
def test_a_kill_anywhere_never_leaves_an_answer_without_its_charge(tmp_path, delay):
    path = tmp_path / "crash.duckdb"
    make_database(path, budget=10)
    process, messages = start(crasher, str(path), "anywhere")
    assert messages.recv() == "ready"
    time.sleep(delay)
    process.kill()
    process.join(timeout=60)
    answers = len(received(messages))
    charges = history_length(path)
    assert answers <= charges <= answers + 1


# -- one read per query -----------------------------------------------------------------------


def two_ledgers(path: Path) -> tuple[duckdb.DuckDBPyConnection, Ledger, Ledger]:
    """Two ledgers of one database on cursors of one connection: they really race."""
    con = duckdb.connect(str(path))
    return con, Ledger(con.cursor(), None), Ledger(con.cursor(), None)


def test_a_charge_on_a_row_read_before_another_sessions_charge_starts_again(database):
    """A query reads the budget row once, at its start; a charge made meanwhile by another
    session is no corruption: the compare-and-set misses and the charge is made anew
    on the row as committed, both charges counted."""
    con, mine, other = two_ledgers(database)
    before = mine.read()
    other.charge("theirs", 0.2, 0.0)
    mine.charge("mine", 0.3, 0.0, known=before)
    assert mine.spent == pytest.approx(before.spent + 0.5)
    assert [c.query for c in mine.history[-2:]] == ["theirs", "mine"]
    con.close()


def test_a_row_read_before_the_budget_ran_out_does_not_let_a_charge_past_it(database):
    con, mine, other = two_ledgers(database)
    before = mine.read()
    mine.check_affordable(0.5, known=before)  # affordable when read ...
    other.charge("theirs", before.total - before.spent - 0.1, 0.0)
    with pytest.raises(privsql.BudgetExceeded):  # ... but no longer when charged
        mine.charge("mine", 0.5, 0.0, known=before)
    assert mine.spent == pytest.approx(before.total - 0.1)
    con.close()


def test_the_budget_check_on_a_row_read_refuses_what_it_cannot_afford(database):
    con, mine, _ = two_ledgers(database)
    before = mine.read()
    with pytest.raises(privsql.BudgetExceeded):
        mine.check_affordable(before.total - before.spent + 0.01, known=before)
    con.close()


def test_history_edited_between_the_read_and_the_charge_is_caught_by_the_charge(database):
    con, mine, _ = two_ledgers(database)
    before = mine.read()
    con.execute("DELETE FROM __privsql.history WHERE seq = 2")  # the budget row untouched
    with pytest.raises(LedgerCorrupted):
        mine.charge("mine", 0.1, 0.0, known=before)
    con.close()
    assert spent(database) == pytest.approx(before.spent)  # nothing charged
