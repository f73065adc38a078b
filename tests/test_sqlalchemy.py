"""The SQLAlchemy dialects: ``privsql:///PATH`` with pandas, the inspector and jupysql;
``privsql+server://`` as SQLAlchemy's PostgreSQL dialect (its server is tested elsewhere)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

import privsql

sqlalchemy = pytest.importorskip("sqlalchemy")
pd = pytest.importorskip("pandas")
from sqlalchemy.dialects import registry  # noqa: E402

from privsql import dbapi  # noqa: E402
from privsql.sqlalchemy_dialect import PrivsqlDialect, PrivsqlServerDialect  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# What the package's entry points declare (test_the_entry_points_name_the_dialects), for
# a checkout whose package metadata was installed before they were added.
registry.register("privsql", "privsql.sqlalchemy_dialect", "PrivsqlDialect")
registry.register("privsql.server", "privsql.sqlalchemy_dialect", "PrivsqlServerDialect")

BY_ORIGIN = (
    "SELECT origin, COUNT(*) AS flights, AVG(dep_delay CLAMPED BETWEEN -30 AND 180) AS delay "
    "FROM flights GROUP BY origin PRIVACY_UNIT tailnum BOUND ROWS 100 EPSILON 0.5 "
    "ORDER BY origin"
)
NOT_DP = "SELECT MAX(dep_delay) AS m FROM flights PRIVACY_UNIT tailnum"


@pytest.fixture
def database(tmp_path, flights_frame) -> Path:
    """A database file holding ``flights`` (private, per aircraft) and ``s.planes``."""
    path = tmp_path / "flights.duckdb"
    with privsql.connect(path, budget=3.0) as owner:
        owner._con.register("frame", flights_frame)
        owner._con.execute("CREATE TABLE flights AS SELECT * FROM frame")
        owner._con.execute("CREATE SCHEMA s; CREATE TABLE s.planes (tailnum VARCHAR, seats INT)")
        owner.protect("flights", privacy_unit="tailnum", keys={"origin": ["EWR", "JFK", "LGA"]})
    return path


@pytest.fixture
def engine(database):
    engine = sqlalchemy.create_engine(f"privsql:///{database}")
    yield engine
    engine.dispose()


def spent(engine) -> float:
    with engine.connect() as connection:
        return connection.connection.dbapi_connection.budget.spent


def test_the_entry_points_name_the_dialects():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"]["sqlalchemy.dialects"]
    assert declared == {
        "privsql": "privsql.sqlalchemy_dialect:PrivsqlDialect",
        "privsql.server": "privsql.sqlalchemy_dialect:PrivsqlServerDialect",
    }
    assert registry.load("privsql") is PrivsqlDialect
    assert registry.load("privsql.server") is PrivsqlServerDialect


def test_pandas_reads_a_grouped_dp_query(engine):
    frame = pd.read_sql(BY_ORIGIN, engine)
    assert list(frame.columns) == ["origin", "flights", "delay"]
    assert frame["origin"].tolist() == ["EWR", "JFK", "LGA"]
    assert (frame["flights"] > 0).all()
    assert spent(engine) == 0.5
    # the same query again is the stored answer: same values, nothing more spent
    assert pd.read_sql(BY_ORIGIN, engine).equals(frame)
    assert spent(engine) == 0.5


def test_bound_parameters_through_sqlalchemy(engine):
    query = sqlalchemy.text(
        "SELECT COUNT(*) AS n FROM flights WHERE carrier = :carrier AND month = :month "
        "PRIVACY_UNIT tailnum BOUND ROWS 100 EPSILON 0.25"
    )
    frame = pd.read_sql(query, engine, params={"carrier": "'; DROP TABLE flights; --", "month": 7})
    assert len(frame) == 1
    assert spent(engine) == 0.25
    assert sqlalchemy.inspect(engine).has_table("flights")


def test_the_inspector_lists_tables_and_columns_from_the_catalogue(engine, flights_frame):
    inspector = sqlalchemy.inspect(engine)
    assert inspector.get_table_names() == ["flights"]
    assert inspector.get_schema_names() == ["main", "s"]
    assert inspector.get_table_names(schema="s") == ["planes"]
    columns = inspector.get_columns("flights")
    assert [c["name"] for c in columns] == list(flights_frame.columns)
    types = {c["name"]: c["type"] for c in columns}
    assert isinstance(types["year"], sqlalchemy.BigInteger)
    assert isinstance(types["dep_delay"], sqlalchemy.Double)
    assert isinstance(types["carrier"], sqlalchemy.String)
    planes = {c["name"]: c["type"] for c in inspector.get_columns("planes", schema="s")}
    assert isinstance(planes["seats"], sqlalchemy.Integer)
    assert inspector.has_table("flights") and not inspector.has_table("nope")
    with pytest.raises(sqlalchemy.exc.NoSuchTableError):
        inspector.get_columns("nope")
    assert inspector.get_pk_constraint("flights")["constrained_columns"] == []
    assert spent(engine) == 0  # listing reads no data


def test_a_refusal_raises_with_its_rule_and_charges_nothing(engine):
    with engine.connect() as connection:
        with pytest.raises(sqlalchemy.exc.ProgrammingError) as refused:
            connection.exec_driver_sql(
                "SELECT MAX(dep_delay) AS m FROM flights PRIVACY_UNIT tailnum"
            )
    assert isinstance(refused.value.orig, dbapi.PrivacyRefusal)
    assert refused.value.orig.rule == "aggregate"
    with pytest.raises(Exception, match=r"\[aggregate\]"):
        pd.read_sql(NOT_DP, engine)
    assert spent(engine) == 0


@pytest.mark.parametrize("query", ["seed=424242&insecure=true", "ledger=fresh.duckdb&budget=1e9"])
def test_a_url_cannot_seed_the_noise_or_choose_the_ledger(database, tmp_path, query):
    """As in red team 34: a seeded URL gave predictable noise on the real database, and a
    ledger in the URL opened it with a fresh budget and no declarations."""
    with pytest.raises(dbapi.InterfaceError, match="not taken from a URL"):
        engine = sqlalchemy.create_engine(f"privsql:///{database}?{query}")
        with engine.connect():
            pass
    assert not (tmp_path / "fresh.duckdb").exists()
    engine = sqlalchemy.create_engine(f"privsql:///{database}")
    assert spent(engine) == 0
    engine.dispose()


def test_another_ledger_given_in_code_is_refused_for_a_database_with_its_own(database, tmp_path):
    fresh = tmp_path / "fresh.duckdb"
    engine = sqlalchemy.create_engine(
        f"privsql:///{database}", connect_args={"ledger": fresh, "budget": 1e9}
    )
    with pytest.raises(sqlalchemy.exc.DBAPIError, match="ledger of its own"):
        engine.connect()
    engine.dispose()
    assert not fresh.exists()


def test_in_memory_engines_share_one_session():
    """A fresh in-memory session per pooled connection would bring a fresh budget."""
    engine = sqlalchemy.create_engine("privsql://?budget=2")
    with engine.connect() as first, engine.connect() as second:
        one = first.connection.dbapi_connection.session
        assert one is second.connection.dbapi_connection.session
        assert one.budget.total == 2
    engine.dispose()


def test_the_server_dialect_is_postgres_over_psycopg_on_privsql_port():
    pytest.importorskip("psycopg")
    engine = sqlalchemy.create_engine("privsql+server://alice:secret@localhost/flights")
    assert isinstance(engine.dialect, PrivsqlServerDialect)
    _, arguments = engine.dialect.create_connect_args(engine.url)
    assert arguments["port"] == 5433 and arguments["user"] == "alice"
    assert arguments["dbname"] == "flights"
    other = sqlalchemy.create_engine("privsql+server://alice@localhost:6000/flights")
    assert other.dialect.create_connect_args(other.url)[1]["port"] == 6000


def privsql_command(*args: str, stdin: str = "", **options) -> subprocess.Popen | str:
    """``privsql ARGS`` of this checkout in a subprocess: its output, or with
    ``background=True`` the running process."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    argv = [sys.executable, "-m", "privsql.cli", *args]
    if options.get("background"):
        return subprocess.Popen(
            argv, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    done = subprocess.run(argv, env=environment, input=stdin, capture_output=True, text=True)
    return done.stdout + done.stderr


@pytest.fixture
def server(database):
    """``privsql serve`` on a free loopback port, with analyst alice (password ``pw``)."""
    pytest.importorskip("psycopg")
    if "usage: privsql serve" not in privsql_command("serve", "--help"):
        pytest.skip("this checkout has no privsql serve")
    privsql_command("analysts", str(database), "add", "alice", "--budget", "2", stdin="pw\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = privsql_command("serve", str(database), "--port", str(port), background=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    yield port
    process.terminate()
    process.wait(30)


def test_the_server_dialect_reaches_privsql_serve(server):
    engine = sqlalchemy.create_engine(
        f"privsql+server://alice:pw@127.0.0.1:{server}/flights?sslmode=disable"
    )
    assert "flights" in sqlalchemy.inspect(engine).get_table_names()
    frame = pd.read_sql(BY_ORIGIN, engine)
    assert frame["origin"].tolist() == ["EWR", "JFK", "LGA"]
    with pytest.raises(Exception, match=r"\[aggregate\]"):
        pd.read_sql(NOT_DP, engine)
    with engine.connect() as connection:
        (cost,) = connection.exec_driver_sql("SHOW privsql.last_cost").fetchone()
    assert float(cost) == 0.5
    engine.dispose()


def test_the_magic_connects_to_privsql_serve(server, capsys):
    pytest.importorskip("IPython")
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "privsql")
    url = f"privsql+server://alice:pw@127.0.0.1:{server}/flights?sslmode=disable"
    run = shell.run_cell(f"%privsql {url}")
    assert run.success, run.error_in_exec
    assert f"connected to 127.0.0.1:{server} as alice" in capsys.readouterr().out
    shell.user_ns["month"] = 7
    run = shell.run_cell(
        "%privsql SELECT COUNT(*) AS n FROM flights WHERE month = {month} "
        "PRIVACY_UNIT tailnum BOUND ROWS 10 EPSILON 0.25"
    )
    assert run.success and list(run.result.columns) == ["n"] and len(run.result) == 1
    assert "ε = 0.25" in capsys.readouterr().out  # the server's notice
    run = shell.run_cell(f"%privsql {NOT_DP}")
    assert run.success and run.result is None
    assert capsys.readouterr().err.startswith("refused: [aggregate]")
    run = shell.run_cell("%privsql -k origin=JFK SELECT 1 AS one")
    assert not run.success and "in-process" in str(run.error_in_exec)
    shell.run_cell("%privsql privsql://")  # the magic's current session: in memory again
    shell.user_ns.pop("month")


# -- jupysql ---------------------------------------------------------------------------------


@pytest.fixture
def jupysql_shell(monkeypatch):
    pytest.importorskip("IPython")
    monkeypatch.setenv("PLOOMBER_STATS_ENABLED", "false")  # no telemetry from tests
    pytest.importorskip("sql.magic")
    from IPython.testing.globalipapp import get_ipython
    from sql.connection import ConnectionManager

    shell = get_ipython()
    shell.run_line_magic("load_ext", "sql")
    yield shell
    ConnectionManager.close_all()


def test_jupysql_runs_dp_queries_lists_tables_and_shows_refusals(jupysql_shell, database):
    shell = jupysql_shell
    run = shell.run_cell(f"%sql privsql:///{database}")
    assert run.success, run.error_in_exec
    run = shell.run_cell(f"%sql {BY_ORIGIN}")
    assert run.success, run.error_in_exec
    frame = run.result.DataFrame()
    assert frame["origin"].tolist() == ["EWR", "JFK", "LGA"]
    assert list(frame.columns) == ["origin", "flights", "delay"]
    run = shell.run_cell("%sqlcmd tables")
    assert run.success and "flights" in str(run.result)
    run = shell.run_cell(f"%sql {NOT_DP}")
    assert not run.success and "[aggregate]" in str(run.error_in_exec)
    with privsql.connect(database, lock_timeout=5) as owner:
        assert owner.budget.spent == 0.5
