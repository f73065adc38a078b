"""``privsql serve`` with real PostgreSQL clients: psql (a subprocess), psycopg, SQLAlchemy
with pandas, and jupysql's ``%sql`` in an IPython shell, against a server started on a
free loopback port.

Each client runs a grouped DP query, gets a refusal as an error with its SQLSTATE, reads
``SHOW privsql.last_cost`` and lists tables and columns."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import privsql
import privsql.server
from tests.serve_support import ANALYSTS, BY_ORIGIN, by_origin, dsn, ledger_of, make_database

psycopg = pytest.importorskip("psycopg")

REFUSED = "SELECT * FROM flights"  # reads private rows: PRIVACY_UNIT required


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_database(tmp_path_factory.mktemp("serve") / "flights.duckdb")


@pytest.fixture(scope="module")
def server(database: Path):
    running = privsql.server.start(database)
    yield running
    running.stop()


def spent(database: Path, analyst: str) -> float:
    ledger, con = ledger_of(database)
    try:
        found = ledger.analyst(analyst)
        assert found is not None
        return found.spent
    finally:
        ledger.close()
        con.close()


def connect(server, user: str = "alice", **options):
    return psycopg.connect(dsn(server.host, server.port, user), autocommit=True, **options)


# -- psql ----------------------------------------------------------------------------------


def psql(server, *commands: str, user: str = "alice") -> subprocess.CompletedProcess[str]:
    arguments = ["psql", "-X", "-v", "VERBOSITY=verbose", "-A", "-F", "|"]
    for command in commands:
        arguments += ["-c", command]
    env = {"PGPASSWORD": ANALYSTS[user], "PATH": "/usr/bin:/bin"}
    target = f"host={server.host} port={server.port} user={user} dbname=flights sslmode=prefer"
    return subprocess.run([*arguments, target], capture_output=True, text=True, env=env, timeout=60)


needs_psql = pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed")


@needs_psql
def test_psql_runs_a_grouped_query_with_its_cost_in_a_notice(server):
    done = psql(server, BY_ORIGIN.replace("COUNT(*)", "COUNT(*) + 0"), "SHOW privsql.last_cost")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "origin|n"
    assert sorted(line.split("|")[0] for line in lines[1:4]) == ["EWR", "JFK", "LGA"]
    assert all(int(line.split("|")[1]) > 50_000 for line in lines[1:4])
    assert "NOTICE:  00000: privsql: ε = 1, δ = 1e-06 charged" in done.stderr
    assert lines[5:7] == ["privsql.last_cost", "1.0"]


@needs_psql
def test_psql_shows_a_refusal_as_an_error_with_its_sqlstate(server):
    done = psql(server, REFUSED)
    assert done.returncode == 1
    assert "ERROR:  PV001: [privacy-unit-required]" in done.stderr
    assert done.stdout == ""


@needs_psql
def test_psql_lists_tables_and_columns(server):
    done = psql(server, r"\dt", r"\d flights")
    assert done.returncode == 0, done.stderr
    assert "main|airlines|table|privsql" in done.stdout
    assert "main|flights|table|privsql" in done.stdout
    assert "dep_delay|double precision|||" in done.stdout
    assert "tailnum|character varying|||" in done.stdout



@needs_psql
def test_psql_meta_commands_answer_from_the_mirror(server):
    """psql's everyday meta-commands work: one database (the served one), one role that is
    neither superuser nor unable to log in (booleans written as PostgreSQL writes them),
    no functions of the database's own, tables with their sizes and details."""
    done = psql(server, r"\l", r"\du", r"\df", r"\dt+", r"\d+ flights")
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stderr
    listed = [line.split("|")[0] for line in done.stdout.splitlines() if "|UTF8|" in line]
    assert len(listed) == 1
    assert "privsql||{}" in done.stdout  # \du: no attributes (not "Cannot login")
    assert "Cannot login" not in done.stdout
    assert "main|flights|table|privsql|permanent" in done.stdout
    assert "tailnum|character varying|" in done.stdout


@needs_psql
def test_psql_show_tables_and_describe(server):
    done = psql(server, "SHOW TABLES", "SHOW ALL TABLES", "DESCRIBE flights")
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stderr
    assert done.stdout.count("flights") >= 2
    assert "tailnum|" in done.stdout

# -- psycopg -------------------------------------------------------------------------------


def test_psycopg_query_notice_and_last_cost(server, database):
    notices: list[str] = []
    before = spent(database, "bob")
    with connect(server, "bob") as con:
        con.add_notice_handler(lambda d: notices.append(d.message_primary))
        cursor = con.cursor()
        cursor.execute(by_origin(0.5))
        assert [c.name for c in cursor.description] == ["origin", "n"]
        rows = cursor.fetchall()
        assert sorted(origin for origin, _ in rows) == ["EWR", "JFK", "LGA"]
        cursor.execute("SHOW privsql.last_cost")
        assert cursor.fetchall() == [("0.5",)]
    # then a warning where the bounding check flagged cells (its noise is the server's own)
    assert notices[0] == "privsql: ε = 0.5, δ = 1e-06 charged"
    assert all(notice.startswith("privsql: ⚠ ") for notice in notices[1:])
    assert spent(database, "bob") == pytest.approx(before + 0.5)


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        (REFUSED, "PV001"),
        ("SELECT MAX(dep_delay) FROM flights PRIVACY_UNIT tailnum", "PV004"),
        ("SELECT COUNT(*) FROM flightz PRIVACY_UNIT tailnum", "42P01"),
        ("SELECT COUNT(nocol) FROM flights PRIVACY_UNIT tailnum", "42703"),
        ("SELECT FROM", "42601"),
        ("DROP TABLE flights", "42501"),
        ("SELECT COUNT(*) FROM flights PRIVACY_UNIT origin", "PV002"),
        ("SELECT COUNT(*) FROM flights PRIVACY_UNIT tailnum EPSILON 1e9", "53000"),
    ],
)
def test_psycopg_refusals_carry_their_sqlstate_and_charge_nothing(server, database, sql, code):
    before = spent(database, "alice")
    with connect(server) as con:
        with pytest.raises(psycopg.Error) as refused:
            con.execute(sql)
        assert refused.value.sqlstate == code
        assert str(refused.value).startswith("[")  # the one-line reason, rule first
        assert con.execute("SELECT 42 AS answer").fetchall() == [(42,)]  # still serving
    assert spent(database, "alice") == before


def test_psycopg_lists_tables(server):
    with connect(server) as con:
        rows = con.execute(
            "SELECT table_name FROM information_schema.tables ORDER BY table_name"
        ).fetchall()
    assert rows == [("airlines",), ("flights",)]


def test_public_tables_are_read_exactly_and_free(server, database):
    before = spent(database, "alice")
    with connect(server) as con:
        rows = con.execute("SELECT COUNT(*) FROM airlines").fetchall()
    assert rows == [(16,)]
    assert spent(database, "alice") == before


def test_bound_parameters_are_written_into_the_query(server):
    with connect(server) as con:
        rows = con.execute(
            "SELECT name FROM airlines WHERE carrier = %s AND %s > 1", ["UA", 2]
        ).fetchall()
    assert rows == [("United Air Lines Inc.",)]


def test_privsql_intervals_adds_half_width_columns(server, database):
    query = by_origin(0.25)
    with connect(server) as con:
        con.execute("SET privsql_intervals = on")
        cursor = con.execute(query)
        names = [c.name for c in cursor.description]
        rows = sorted(cursor.fetchall())
        assert con.execute("SHOW privsql_intervals").fetchall() == [("on",)]
    assert names == ["origin", "n", "n_pm"]
    # The same answer in process (alice's stored answer): its 95% half-widths.
    with privsql.connect(database, analyst="alice") as db:
        result = db.sql(query)
    assert result.cached
    origins, half_widths = result.arrow()["origin"], result.accuracy()["n"]
    widths = dict(zip(origins.to_pylist(), half_widths.to_pylist(), strict=True))
    assert [(o, n) for o, n, _ in rows] == sorted(result.fetchall())
    assert [w for _, _, w in rows] == [pytest.approx(widths[o]) for o, _, _ in rows]
    assert all(w > 0 for _, _, w in rows)


def test_stored_answers_are_each_analysts_own(server, database):
    query = by_origin(0.125)
    spent_before = {name: spent(database, name) for name in ANALYSTS}
    answers = {}
    for name in ["alice", "alice", "bob"]:
        notices: list[str] = []
        with connect(server, name) as con:
            con.add_notice_handler(lambda d, seen=notices: seen.append(d.message_primary))
            answers.setdefault(name, []).append(sorted(con.execute(query).fetchall()))
        answers.setdefault(name + " notices", []).append(notices)
    assert answers["alice"][0] == answers["alice"][1]  # alice's second ask: her stored answer
    assert "stored answer" in answers["alice notices"][1][0]
    assert spent(database, "alice") == pytest.approx(spent_before["alice"] + 0.125)
    assert spent(database, "bob") == pytest.approx(spent_before["bob"] + 0.125)  # bob pays
    ledger, con = ledger_of(database)
    try:
        who = [(c.analyst, c.epsilon) for c in ledger.history[-2:]]
    finally:
        ledger.close()
        con.close()
    assert who == [("alice", 0.125), ("bob", 0.125)]  # the history records who asked


def test_each_query_runs_on_its_own_cursor_in_a_non_autocommit_transaction(server):
    with psycopg.connect(dsn(server.host, server.port)) as con:
        first, second = con.cursor(), con.cursor()
        first.execute("SELECT COUNT(*) FROM airlines")
        second.execute("SELECT carrier FROM airlines ORDER BY carrier LIMIT 1")
        assert first.fetchall() == [(16,)]
        assert second.fetchall() == [("9E",)]
        con.commit()


# -- SQLAlchemy and pandas -----------------------------------------------------------------


def test_sqlalchemy_and_pandas(server, database):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pandas = pytest.importorskip("pandas")
    password = ANALYSTS["alice"]
    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://alice:{password}@{server.host}:{server.port}/flights"
    )
    try:
        frame = pandas.read_sql(by_origin(0.75), engine)
        assert list(frame.columns) == ["origin", "n"]
        assert sorted(frame["origin"]) == ["EWR", "JFK", "LGA"]
        with engine.connect() as connection:
            assert connection.exec_driver_sql("SHOW privsql.last_cost").scalar() == "0.75"
            with pytest.raises(sqlalchemy.exc.DBAPIError) as refused:
                connection.exec_driver_sql(REFUSED)
            assert refused.value.orig.sqlstate == "PV001"
        inspector = sqlalchemy.inspect(engine)
        assert sorted(inspector.get_table_names()) == ["airlines", "flights"]
        columns = {c["name"]: c["type"] for c in inspector.get_columns("flights")}
        assert isinstance(columns["dep_delay"], sqlalchemy.Float)
        assert isinstance(columns["year"], sqlalchemy.BigInteger)
    finally:
        engine.dispose()


def test_the_owner_can_share_stored_answers_between_analysts(server, database):
    query = by_origin(0.375)
    with connect(server, "alice") as con:
        first = sorted(con.execute(query).fetchall())
    shared = privsql.server.start(database, share_answers=True)
    try:
        before = spent(database, "bob")
        notices: list[str] = []
        with connect(shared, "bob") as con:
            con.add_notice_handler(lambda d: notices.append(d.message_primary))
            assert sorted(con.execute(query).fetchall()) == first  # alice's answer
        assert spent(database, "bob") == before
        assert "stored answer" in notices[0]
    finally:
        shared.stop()


def test_jupysql_in_an_ipython_shell(server):
    pytest.importorskip("sql.magic")  # jupysql
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "sql")
        shell.run_line_magic("config", "SqlMagic.displaylimit = 0")
        url = f"postgresql+psycopg://alice:{ANALYSTS['alice']}@{server.host}:{server.port}/flights"
        shell.run_line_magic("sql", url)
        frame = shell.run_line_magic("sql", by_origin(0.875)).DataFrame()
        assert sorted(frame["origin"]) == ["EWR", "JFK", "LGA"]
        assert shell.run_line_magic("sql", "SHOW privsql.last_cost").dict() == {
            "privsql.last_cost": ("0.875",)
        }
        with pytest.raises(Exception, match=r"\[privacy-unit-required\]"):
            shell.run_line_magic("sql", REFUSED)
        tables = shell.run_line_magic("sqlcmd", "tables")
        assert {"flights", "airlines"} <= {row[0] for row in tables._table.rows}
    finally:
        from sql.connection import ConnectionManager

        ConnectionManager.close_all()
        InteractiveShell.clear_instance()
