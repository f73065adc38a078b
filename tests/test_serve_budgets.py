"""Budgets under load: analysts' clients racing each other never overspend an analyst's
budget or the database's total, and every answer a client received is charged on disk,
even when the server is killed with SIGKILL mid-load."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from pathlib import Path

import pytest

import privsql.server
from tests.serve_support import ANALYSTS, ServerProcess, dsn, make_database, read_ledger

psycopg = pytest.importorskip("psycopg")

CLIENTS = 8
"""Concurrent clients per analyst."""
_fresh = itertools.count(1)
_fresh_lock = threading.Lock()


def fresh_query(epsilon: float) -> str:
    """A query never asked before (so never a stored answer) costing ``epsilon``."""
    with _fresh_lock:
        rows = next(_fresh)
    return (
        f"SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum BOUND ROWS {rows} "
        f"EPSILON {epsilon:g}"
    )


def hammer(host: str, port: int, epsilon: float, attempts: int | None, stop: threading.Event):
    """CLIENTS clients per analyst, each asking fresh queries; what each analyst was
    answered, and the SQLSTATEs of what was refused."""
    answered: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    lock = threading.Lock()

    def client(analyst: str) -> None:
        try:
            with psycopg.connect(dsn(host, port, analyst), autocommit=True) as con:
                for _ in itertools.count() if attempts is None else range(attempts):
                    if stop.is_set():
                        return
                    try:
                        con.execute(fresh_query(epsilon)).fetchall()
                    except psycopg.errors.DatabaseError as error:
                        if error.sqlstate is None:
                            raise
                        with lock:
                            refused[error.sqlstate] += 1
                        continue
                    with lock:
                        answered[analyst] += 1
        except psycopg.OperationalError:
            return  # the server went away (killed)

    threads = [
        threading.Thread(target=client, args=(analyst,))
        for analyst in ANALYSTS
        for _ in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    return threads, answered, refused


def test_concurrent_analysts_never_overspend(tmp_path: Path):
    database = make_database(
        tmp_path / "flights.duckdb", total=1.5, budgets={"alice": 1.0, "bob": 1.0}
    )
    running = privsql.server.start(database)
    try:
        threads, answered, refused = hammer(
            running.host, running.port, 0.1, attempts=4, stop=threading.Event()
        )
        for thread in threads:
            thread.join(timeout=600)
    finally:
        running.stop()
    analysts, history, total_spent = read_ledger(database)
    # 64 asks of ε = 0.1 against budgets of 1.0 each and a database total of 1.5.
    assert sum(answered.values()) + sum(refused.values()) == 2 * CLIENTS * 4
    assert set(refused) == {"53000"}
    assert sum(answered.values()) == 15  # the database's total binds: 15 × 0.1 = 1.5
    for name in ANALYSTS:
        assert answered[name] <= 10
        assert analysts[name].spent == pytest.approx(0.1 * answered[name])
        assert sum(1 for c in history if c.analyst == name) == answered[name]
    assert total_spent == pytest.approx(1.5)


def test_every_answer_is_charged_on_disk_when_the_server_is_killed(tmp_path: Path):
    database = make_database(tmp_path / "flights.duckdb")
    server = ServerProcess(database)
    stop = threading.Event()
    threads, answered, _ = hammer(server.host, server.port, 0.01, attempts=None, stop=stop)
    try:
        while sum(answered.values()) < 24 and any(t.is_alive() for t in threads):
            stop.wait(0.05)
        server.kill()  # SIGKILL, mid-load: clients are waiting for answers
    finally:
        stop.set()
        server.kill()
        for thread in threads:
            thread.join(timeout=120)
    assert sum(answered.values()) >= 24
    restarted = ServerProcess(database)  # the killed server's files open again
    restarted.kill()
    analysts, history, total_spent = read_ledger(
        database
    )  # and the ledger verifies, every link of its history
    for name in ANALYSTS:
        charged = [c for c in history if c.analyst == name]
        assert len(charged) >= answered[name]  # answered ⇒ charged (some charged, unsent)
        assert analysts[name].spent == pytest.approx(sum(c.epsilon for c in charged))
    assert total_spent == pytest.approx(sum(c.epsilon for c in history))
