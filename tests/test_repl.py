"""The REPL, driven through a pseudo-terminal (pexpect) as a person would use it.

The REPL runs as ``python -m privsql.cli DATABASE`` in a pty with ``TERM`` set, so
prompt_toolkit draws its real interface; the tests type into it and read the screen
output (ANSI escapes stripped). The completer and the progress bar are also tested
directly, without a terminal.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
import time
from pathlib import Path

import duckdb
import pytest

import privsql
from privsql.ledger import KEY_SUFFIX

pexpect = pytest.importorskip("pexpect")
pytest.importorskip("prompt_toolkit")

from privsql import repl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\x1b[=>]")
QUERY = (
    "SELECT origin, COUNT(*) AS flights\n"
    "FROM flights GROUP BY origin\n"
    "PRIVACY_UNIT tailnum BOUND ROWS 50 EPSILON 0.25;"
)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, flights_frame) -> Path:
    path = tmp_path_factory.mktemp("repl") / "flights.duckdb"
    con = duckdb.connect(str(path))
    con.register("f", flights_frame)
    con.execute("CREATE TABLE flights AS SELECT * FROM f")
    con.execute("CREATE TABLE airports AS SELECT DISTINCT origin AS faa FROM f")
    con.unregister("f")
    with privsql.connect(con, budget=2.0) as db:
        db.protect("flights", privacy_unit="tailnum", keys={"origin": ["EWR", "JFK", "LGA"]})
        db.public("airports")
    return path


@pytest.fixture
def database(template: Path, tmp_path: Path) -> Path:
    path = tmp_path / "flights.duckdb"
    shutil.copy(template, path)
    shutil.copy(f"{template}{KEY_SUFFIX}", f"{path}{KEY_SUFFIX}")  # the ledger's key
    return path


class Terminal:
    """A REPL in a pty; ``read_until`` waits for text on the screen (escapes removed)."""

    def __init__(self, database: Path, history: Path) -> None:
        env = dict(
            os.environ,
            TERM="xterm-256color",
            PROMPT_TOOLKIT_NO_CPR="1",  # the pty answers no cursor-position requests
            PRIVSQL_HISTORY=str(history),
            PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        )
        env.pop("NO_COLOR", None)
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "privsql.cli", str(database)],
            env=env,
            encoding="utf-8",
            dimensions=(50, 140),
            timeout=30,
        )
        self.seen = ""

    def read_until(self, text: str, timeout: float = 30) -> str:
        """Everything shown until ``text`` appears (and ``text``); fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            clean = ANSI.sub("", self.seen)
            at = clean.find(text)
            if at >= 0:
                self.seen = clean[at + len(text) :]  # later reads start after the match
                return clean[: at + len(text)]
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{text!r} never appeared; the screen showed:\n{clean[-3000:]}"
                )
            try:
                self.seen += self.child.read_nonblocking(4096, timeout=0.2)
            except pexpect.TIMEOUT:
                continue

    def type(self, text: str) -> None:
        """Type ``text``; newlines press Enter."""
        for line in text.split("\n")[:-1]:
            self.child.send(line + "\r")
        self.child.send(text.split("\n")[-1])

    def enter(self, text: str = "") -> None:
        self.type(text)
        self.child.send("\r")

    def close(self) -> int:
        self.child.expect(pexpect.EOF, timeout=30)
        self.child.close()
        return self.child.exitstatus


@pytest.fixture
def terminal(database: Path, tmp_path: Path):
    term = Terminal(database, tmp_path / "history")
    term.read_until("privsql>")
    yield term
    if term.child.isalive():
        term.child.terminate(force=True)


def test_a_session_query_budget_refusal_exit(terminal: Terminal, tmp_path: Path, database: Path):
    # a query typed over three lines: Enter continues it until the ;
    first, *rest = QUERY.split("\n")
    terminal.enter(first)
    terminal.read_until("...>")
    terminal.enter("\n".join(rest))
    shown = terminal.read_until("ε remaining 1.75 of 2")
    assert "┌" in shown and "│ origin" in shown
    assert re.search(r"EWR\s+│\s+\d+ ± \d+", shown), shown  # each noisy cell with its interval
    assert "ε = 0.25 charged" in shown

    terminal.enter(".budget")
    shown = terminal.read_until("SELECT origin, COUNT(*) AS flights")
    assert "ε budget 2: spent 0.25, remaining 1.75" in shown

    # a refusal is one line, and the REPL carries on
    terminal.enter("SELECT tailnum FROM flights;")
    shown = terminal.read_until("(no ε charged)")
    assert "refused: [" in shown and "Traceback" not in shown
    terminal.read_until("privsql>")
    terminal.enter("SELECT COUNT(*) AS airports FROM airports;")
    shown = terminal.read_until("public data: exact, no cost")
    assert re.search(r"│\s+3 │", shown)

    terminal.enter(".exit")
    assert terminal.close() == 0
    # the history persists, multi-line statements whole
    history = (tmp_path / "history").read_text()
    assert "+FROM flights GROUP BY origin" in history and "+.budget" in history
    with privsql.connect(database) as db:
        assert db.budget.spent == pytest.approx(0.25)


def test_dot_commands_and_completion(terminal: Terminal):
    terminal.enter(".help")
    terminal.read_until("describes the whole language.")
    terminal.enter(".tables")
    shown = terminal.read_until("┘")
    assert "tailnum" in shown and "public" in shown and "__privsql" not in shown
    terminal.enter(".schema flights")
    shown = terminal.read_until("EWR, JFK, LGA")
    assert "private, privacy unit tailnum" in shown
    terminal.enter(".explain SELECT COUNT(*) FROM flights PRIVACY_UNIT tailnum BOUND ROWS 5")
    shown = terminal.read_until("spends nothing")
    assert "Laplace" in shown
    # Tab completes table and column names: "fli" becomes flights, "tailn" tailnum
    terminal.type("SELECT COUNT(*) AS n FROM fli")
    terminal.read_until("table")  # the menu of candidates, as you type
    terminal.type("\t")
    time.sleep(0.3)  # screen updates are diffs: check the outcome, the query running
    terminal.type(" PRIVACY_UNIT tailn")
    terminal.read_until("varchar · flights")
    terminal.type("\t")
    time.sleep(0.3)
    terminal.enter(" BOUND ROWS 5 EPSILON 0.1;")
    terminal.read_until("ε = 0.1 charged", timeout=10)
    terminal.read_until("privsql>")  # control keys only once the prompt reads raw keys
    terminal.child.sendcontrol("d")  # Ctrl-D leaves too
    assert terminal.close() == 0


def test_duckdb_habits_schemas_and_the_owners_declarations(terminal: Terminal, tmp_path: Path):
    # the owner declares a Parquet file private, with a bound, from the REPL
    planes = tmp_path / "planes.parquet"
    duckdb.execute(
        "COPY (SELECT 'N' || (range % 50) AS tailnum, range % 7 AS seats FROM range(500)) "
        f"TO '{planes}'"
    )
    terminal.enter(f".protect read_parquet('{planes}') tailnum seats BETWEEN 0 AND 6")
    shown = terminal.read_until("CLAMPED BETWEEN 0 AND 6")
    assert "private, privacy unit tailnum" in shown and re.search(r"seats\s+│ BIGINT", shown)
    # schemas, private ones included, from the catalogue and the footer, for free
    terminal.enter("SHOW TABLES;")
    shown = terminal.read_until("schemas are not private: no cost")
    assert re.search(r"airports\s+│ public", shown) and re.search(r"flights\s+│ private", shown)
    assert re.search(r"read_parquet\('/\S+\s+│ private\s+│ tailnum", shown)  # a long path is cut
    terminal.enter("DESCRIBE flights;")
    shown = terminal.read_until("schemas are not private: no cost")
    assert re.search(r"tailnum\s+│ VARCHAR\s+│ privacy unit", shown)
    assert re.search(r"dep_delay\s+│ DOUBLE\s+│ private", shown)
    # output modes; CSV keeps the intervals as <column>_pm columns when asked
    terminal.enter(".mode markdown")
    terminal.enter("SELECT faa FROM airports ORDER BY faa;")
    shown = terminal.read_until("| LGA |")
    assert "| faa |\r\n|---|\r\n| EWR |" in shown
    terminal.enter(".mode line")
    terminal.enter("SELECT faa, 1 AS one FROM airports ORDER BY faa LIMIT 1;")
    assert re.search(r"faa = EWR\s+one = 1", terminal.read_until("one = 1"))
    terminal.enter(".mode csv")
    terminal.enter(".intervals on")
    terminal.enter(".timer on")
    private = f"SELECT SUM(seats) AS seats FROM read_parquet('{planes}') PRIVACY_UNIT tailnum"
    terminal.enter(f"{private} BOUND ROWS 10 EPSILON 0.1;")
    shown = terminal.read_until("Run Time (s): real")
    assert re.search(r"seats,seats_pm\r\n-?[\d.]+,[\d.]+\r\n", shown)
    assert "<column>_pm: half-width of the 95% noise interval" in shown
    # .output sends results to a file, messages stay on the screen
    answers = tmp_path / "answers.csv"
    terminal.enter(f".output {answers}")
    terminal.enter("SELECT COUNT(*) AS n FROM airports;")
    shown = terminal.read_until("public data: exact, no cost")
    terminal.enter(".output")
    assert answers.read_text() == "n\n3\n" and "n\r\n3" not in shown
    # .read runs each command of a file and says where a failure was
    script = tmp_path / "script.sql"
    script.write_text(".mode table\nSELECT tailnum FROM flights;\nSELECT 6 * 7 AS answer;\n")
    terminal.enter(f".read {script}")
    shown = terminal.read_until("3 commands: 2 ran, 1 refused, 0 failed")
    assert f"{script}:2: refused: [" in shown and re.search(r"│\s+42 │", shown)
    terminal.enter(".exit")
    assert terminal.close() == 0


def test_ctrl_c_cancels_a_long_query_after_its_progress_bar(terminal: Terminal):
    # public data (range) runs exactly: a long scan that shows DuckDB's progress
    terminal.enter("SELECT COUNT(*) FROM range(20000000000) t(i) WHERE hash(i) % 7 = 1;")
    terminal.read_until("(Ctrl-C cancels)")
    terminal.child.sendintr()
    shown = terminal.read_until("nothing was charged")
    assert "interrupted" in shown
    terminal.read_until("privsql>")
    terminal.enter("SELECT 7 * 6 AS answer;")
    assert "42" in terminal.read_until("no cost")
    terminal.enter(".quit")
    assert terminal.close() == 0


# -- without a terminal ---------------------------------------------------------------------


@pytest.fixture
def session(database: Path):
    with privsql.connect(database) as db:
        yield db


def completions(completer, text: str) -> list[str]:
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]


def test_completer_offers_tables_columns_keywords_and_commands(session):
    completer = repl.make_completer(session)
    completer.refresh()
    assert set(completer.tables) == {"flights", "airports"}  # privsql's own schema hidden
    assert completions(completer, "SELECT COUNT(*) FROM fl")[0] == "flights"
    assert {"dep_delay", "dep_time"} <= set(completions(completer, "SELECT AVG(dep_"))
    assert "PRIVACY_UNIT" in completions(completer, "SELECT COUNT(*) FROM flights PRIVACY_")
    assert "CLAMPED BETWEEN" in completions(completer, "SELECT SUM(x CLAMP")
    assert "select" in completions(completer, "sel")  # keywords follow the typed case
    assert completions(completer, ".sch") == [".schema"]
    assert completions(completer, ".schema ai") == ["airports"]
    assert completions(completer, ".format j") == ["json"]
    assert completions(completer, ".mode m") == ["markdown"]
    assert completions(completer, ".ti") == [".timer"]
    assert completions(completer, ".public fl") == ["flights"]


def test_protect_arguments_are_read_as_sql():
    assert repl.parse_protect("flights tailnum") == ("flights", "tailnum", {}, {})
    assert repl.parse_protect(
        "read_parquet(['a.parquet', 'b (1).parquet']) \"tail num\" "
        "delay BETWEEN -30 AND 180.5, month IN (1, 2), origin IN ('EWR')"
    ) == (
        "read_parquet(['a.parquet', 'b (1).parquet'])",
        "tail num",
        {"delay": (-30, 180.5)},
        {"month": [1, 2], "origin": ["EWR"]},
    )
    assert repl.parse_protect("main.ratings user") == ("main.ratings", "user", {}, {})
    for wrong in (
        "",
        "flights",
        "read_parquet('a.parquet' tailnum",
        "flights tailnum distance BETWEEN 'a' AND 5",
        "flights tailnum distance BETWEEN 0 AND 5 origin IN ('EWR')",  # no comma
        "flights tailnum origin IN (SELECT 'EWR')",
        "flights tailnum distance > 5",
        "flights tailnum LOWER(origin) IN ('ewr')",
    ):
        with pytest.raises(ValueError, match="protect TABLE UNIT"):
            repl.parse_protect(wrong)


def test_progress_bar_draws_while_waiting_and_clears_after():
    class FakeConnection:
        def query_progress(self) -> float:
            return 40.0

        def interrupt(self) -> None:  # pragma: no cover - not interrupted here
            raise AssertionError

    screen = io.StringIO()
    value = repl.run_with_progress(
        FakeConnection(), lambda: time.sleep(0.35) or 42, stream=screen, delay=0.05, interval=0.05
    )
    assert value == 42
    drawn = screen.getvalue()
    assert "40%" in drawn and "█" in drawn and "░" in drawn
    assert drawn.endswith("\r\x1b[2K")  # the bar is erased before the result is printed
    assert "…" in repl.progress_line(-1.0, 1.0)  # DuckDB cannot always tell the progress
    assert duckdb.connect().query_progress() == -1  # the API the bar polls exists


def test_errors_raised_by_the_work_reach_the_caller():
    class Connection:
        def query_progress(self) -> float:
            return -1.0

    def fail() -> None:
        raise privsql.PrivacyError("nope")

    with pytest.raises(privsql.PrivacyError):
        repl.run_with_progress(Connection(), fail, stream=None)


def test_the_repl_writes_none_of_the_database_s_own_files(database: Path, tmp_path: Path):
    """A history file (``PRIVSQL_HISTORY``) or ``.output`` naming the key would append to it
    or truncate it, and the database would refuse service for good (red team 34)."""
    key = Path(f"{database}{KEY_SUFFIX}")
    before = key.read_bytes()
    terminal = Terminal(database, key)
    terminal.read_until("privsql>")
    terminal.enter(f".output {key}")
    assert ".output refuses" in terminal.read_until("own file")
    terminal.enter(f".read {key}")
    assert ".read refuses" in terminal.read_until("own file")
    terminal.enter("SELECT COUNT(*) AS airports FROM airports;")
    assert re.search(r"│\s+3 │", terminal.read_until("public data: exact, no cost"))
    terminal.enter(".exit")
    assert terminal.close() == 0
    assert key.read_bytes() == before
    with privsql.connect(database) as db:
        assert db.budget.spent == 0


def test_output_checks_the_file_it_opens(tmp_path, monkeypatch):
    """``.output ~/name`` was checked as ``$HOME/name`` and written as ``./~/name``: with
    ``./~`` a link to the database's directory, the ledger's key was emptied (red team 35).
    The file opened is the file checked, truncated only then."""
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    db = privsql.connect(tmp_path / "d.duckdb", budget=1)
    key = tmp_path / f"d.duckdb{KEY_SUFFIX}"
    before = key.read_bytes()
    (tmp_path / "~").mkdir()
    (tmp_path / "~" / "out.txt").symlink_to(key)
    shell = repl.Shell(db, out=io.StringIO(), err=io.StringIO())
    assert shell.run(".output ~/out.txt") == 0
    shell.close()
    assert key.read_bytes() == before
    assert (home / "out.txt").exists()
    db.close()
