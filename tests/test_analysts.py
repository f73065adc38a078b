"""Analysts and budgets: ``privsql analysts`` / ``privsql budget``, per-analyst charging in
the ledger, and the budget traps (a ledger needs an explicit budget; a missing database
is not created by accident; the owner can change a total, never below what was spent)."""

from __future__ import annotations

import io
from pathlib import Path

import duckdb
import pytest

import privsql
from privsql import admin, cli
from privsql.ledger import KEY_SUFFIX, BudgetExceeded, LedgerCorrupted
from privsql.server.auth import Exchange, Failed, make_verifier
from tests.serve_support import ledger_of


def count(epsilon: float, rows: int = 1) -> str:
    """A count costing ``epsilon``; another ``rows`` makes it another question (a repeat
    would be a stored answer, charged nothing)."""
    return f"SELECT COUNT(*) AS n FROM t PRIVACY_UNIT u BOUND ROWS {rows} EPSILON {epsilon}"


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "t.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT i % 50 AS u, i AS v FROM range(1000) r(i)")
    con.close()
    with privsql.connect(path, budget=2.0) as db:
        db.protect("t", privacy_unit="u")
    return path


def run(capsys, monkeypatch, *argv: str, stdin: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_analysts_are_added_listed_changed_and_removed(capsys, monkeypatch, database):
    db = str(database)
    assert (
        run(capsys, monkeypatch, "analysts", db, "add", "alice", "--budget", "1.5", stdin="pw-1\n")[
            0
        ]
        == 0
    )
    code, out, _ = run(capsys, monkeypatch, "analysts", db, "list")
    assert code == 0 and "alice\t0\t1.5\t0\t1e-05" in out
    assert (
        run(capsys, monkeypatch, "analysts", db, "set-budget", "alice", "--budget", "0.5")[0] == 0
    )
    code, out, _ = run(capsys, monkeypatch, "analysts", db, "list")
    assert "alice\t0\t0.5\t" in out
    code, _, err = run(
        capsys, monkeypatch, "analysts", db, "add", "alice", "--budget", "1", stdin="pw\n"
    )
    assert code == 2 and "already exists" in err
    assert run(capsys, monkeypatch, "analysts", db, "remove", "alice")[0] == 0
    code, out, _ = run(capsys, monkeypatch, "analysts", db, "list")
    assert "alice" not in out


def test_only_a_salted_verifier_is_stored_and_it_checks_the_password(capsys, monkeypatch, database):
    run(
        capsys,
        monkeypatch,
        "analysts",
        str(database),
        "add",
        "alice",
        "--budget",
        "1",
        stdin="correct horse\n",
    )
    con = duckdb.connect(str(database))
    (verifier,) = con.execute("SELECT verifier FROM __privsql.analysts").fetchall()[0]
    raw = con.execute("SELECT * FROM __privsql.analysts").fetchall()
    con.close()
    assert "correct horse" not in repr(raw)
    assert verifier.startswith("SCRAM-SHA-256$4096:")
    assert make_verifier("correct horse") != verifier  # salted: a new salt each time
    scramp = pytest.importorskip("scramp")
    for password, accepted in (("correct horse", True), ("wrong", False)):
        client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", password)
        exchange = Exchange(verifier, "alice")
        first = client.get_client_first()
        # the server checks the message as sent; scramp's client insists on a user name
        client.set_server_first(exchange.first(first))
        try:
            exchange.final(client.get_client_final())
            assert accepted
        except Failed:
            assert not accepted


def test_an_analyst_spends_from_their_budget_and_the_databases(database):
    ledger, con = ledger_of(database)
    ledger.add_analyst("alice", make_verifier("a"), 0.5)
    ledger.add_analyst("bob", make_verifier("b"), 5.0)
    ledger.close()
    con.close()
    with privsql.connect(database, analyst="alice") as alice:
        alice.sql(count(0.25, 1))
        alice.sql(count(0.25, 2))
        with pytest.raises(BudgetExceeded, match=r"of your 0\.5"):
            alice.sql(count(0.125, 3))
    with privsql.connect(database, analyst="bob") as bob:
        bob.sql(count(1.0, 4))
        with pytest.raises(BudgetExceeded, match=r"of 2 remains"):  # the database's total
            bob.sql(count(0.75, 5))
    ledger, con = ledger_of(database)
    try:
        spent = {a.name: a.spent for a in ledger.analysts()}
        assert spent == {"alice": 0.5, "bob": 1.0}
        assert ledger.spent == pytest.approx(1.5)
        assert [c.analyst for c in ledger.history] == ["alice", "alice", "bob"]
    finally:
        ledger.close()
        con.close()


def test_removing_and_adding_an_analyst_again_keeps_what_they_spent(database):
    ledger, con = ledger_of(database)
    ledger.add_analyst("alice", make_verifier("a"), 1.0)
    ledger.close()
    con.close()
    with privsql.connect(database, analyst="alice") as alice:
        alice.sql(count(0.75, 6))
    ledger, con = ledger_of(database)
    try:
        ledger.remove_analyst("alice")
        ledger.add_analyst("alice", make_verifier("a"), 1.0)
        found = ledger.analyst("alice")
        assert found is not None and found.spent == pytest.approx(0.75)
        with pytest.raises(privsql.PrivacyError, match="below that"):
            ledger.set_analyst("alice", epsilon=0.5)
    finally:
        ledger.close()
        con.close()


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE __privsql.analysts SET spent = 0",
        "UPDATE __privsql.analysts SET total = 100",
        "UPDATE __privsql.analysts SET verifier = 'SCRAM-SHA-256$4096:AA==$AA==:AA=='",
        # an older copy of the row (before the charge), put back: it counts fewer entries
        "UPDATE __privsql.analysts SET spent = 0, entries = 0, mac = (SELECT mac FROM old)",
    ],
)
def test_an_analyst_row_edited_without_the_key_is_detected(database, edit):
    ledger, con = ledger_of(database)
    ledger.add_analyst("alice", make_verifier("a"), 1.0)
    ledger.close()
    con.close()
    raw = duckdb.connect(str(database))
    raw.execute("CREATE TABLE old AS SELECT mac FROM __privsql.analysts")
    raw.close()
    with privsql.connect(database, analyst="alice") as alice:
        alice.sql(count(0.5, 7))
    raw = duckdb.connect(str(database))
    raw.execute(edit)
    raw.close()
    with pytest.raises(LedgerCorrupted):
        with privsql.connect(database, analyst="alice") as alice:
            alice.sql(count(0.25, 8))


def test_the_owner_raises_a_total_but_never_below_what_was_spent(capsys, monkeypatch, database):
    with privsql.connect(database) as db:
        db.sql(count(1.5, 9))
        with pytest.raises(BudgetExceeded):
            db.sql(count(1.0, 10))
    code, out, _ = run(capsys, monkeypatch, "budget", str(database), "--total", "5")
    assert code == 0 and "ε spent 1.5 of 5" in out
    with privsql.connect(database) as db:
        db.sql(count(1.0, 11))
        assert db.budget.total == 5
    code, _, err = run(capsys, monkeypatch, "budget", str(database), "--total", "2")
    assert code == 2 and "below what was spent" in err
    code, out, _ = run(capsys, monkeypatch, "budget", str(database), "--total", "2.5")
    assert code == 0 and "ε spent 2.5 of 2.5" in out


def test_changing_a_total_needs_the_key(capsys, monkeypatch, database):
    Path(f"{database}{KEY_SUFFIX}").unlink()
    code, _, err = run(capsys, monkeypatch, "budget", str(database), "--total", "50")
    assert code == 2 and "key" in err


def test_a_ledger_in_a_file_needs_an_explicit_budget(tmp_path):
    path = tmp_path / "new.duckdb"
    with pytest.raises(privsql.PrivacyError, match="no ledger yet"):
        privsql.connect(path)
    assert not Path(f"{path}{KEY_SUFFIX}").exists()  # nothing fixed for good
    with privsql.connect(path, budget=3) as db:
        assert db.budget.total == 3
    with privsql.connect(path) as db:  # an existing ledger: its own total
        assert db.budget.total == 3


def test_a_missing_database_is_not_created_by_accident(capsys, monkeypatch, tmp_path):
    path = tmp_path / "typo.duckdb"
    code, _, err = run(capsys, monkeypatch, str(path), "-c", "SELECT 1")
    assert code == 2 and "no such database" in err and "--create" in err
    assert not path.exists() and not Path(f"{path}{KEY_SUFFIX}").exists()
    code, _, err = run(capsys, monkeypatch, str(path), "--create", "-c", "SELECT 1")
    assert code == 2 and "no ledger yet" in err
    code, out, _ = run(
        capsys, monkeypatch, str(path), "--create", "--budget", "2", "-c", "SELECT 1 AS one"
    )
    assert code == 0 and "one" in out
    for command in ("analysts", "budget", "serve"):
        argv = [command, str(tmp_path / "nope.duckdb")] + (
            ["list"] if command == "analysts" else []
        )
        code, _, err = run(capsys, monkeypatch, *argv)
        assert code == 2 and "no such database" in err
    assert not (tmp_path / "nope.duckdb").exists()


def test_the_password_is_read_without_echo_on_a_terminal(monkeypatch):
    asked = []

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr(admin.getpass, "getpass", lambda prompt: asked.append(prompt) or "s3")
    assert admin.read_password() == "s3"
    assert len(asked) == 2  # asked twice, through getpass (no echo)
    answers = iter(["one", "two"])
    monkeypatch.setattr(admin.getpass, "getpass", lambda prompt: next(answers))
    with pytest.raises(ValueError, match="differ"):
        admin.read_password()
