"""A query over public data scans only what the public sources scan, as DuckDB binds it
(``privsql.bound_reads``): the second check behind the analyser's reading of the text.

The first check (the function allow-list, defined functions refused) already refuses each
query below; these tests switch it off to show the second holds by itself."""

from __future__ import annotations

import importlib

import duckdb
import pytest

import privsql
from privsql import session as session_module
from privsql.bound_reads import check_public_reads


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE pub AS SELECT i AS k, i % 3 AS g FROM range(10) r(i)")
    con.execute("CREATE TABLE priv AS SELECT i AS u, i * 2 AS v FROM range(10) r(i)")
    con.execute("CREATE VIEW shown AS SELECT DISTINCT g FROM pub")
    con.execute("CREATE VIEW groups AS SELECT DISTINCT v % 2 AS parity FROM priv")
    con.execute("CREATE MACRO total() AS (SELECT sum(v) FROM priv)")
    con.execute("CREATE MACRO rows_of() AS TABLE SELECT * FROM priv")
    return con


HIDDEN_READS = [
    "SELECT total() AS t FROM pub",
    "SELECT * FROM rows_of()",
    "SELECT k FROM pub WHERE k IN (SELECT u FROM rows_of())",
    "SELECT * FROM duckdb_tables()",
    "SELECT k, (SELECT max(v) FROM priv) AS m FROM pub",
]


@pytest.mark.parametrize("statement", HIDDEN_READS)
def test_what_the_plan_scans_beyond_the_public_sources_is_refused(con, statement):
    with pytest.raises(privsql.PrivacyError, match="as the database binds it"):
        check_public_reads(con, statement, ["pub"], "memory")


def test_a_public_view_makes_none_of_what_it_reads_public(con):
    """A view declared public over a private table read its rows exactly, for free (red
    team 34): what it scans must be public itself."""
    with pytest.raises(privsql.PrivacyError, match="as the database binds it"):
        check_public_reads(con, "SELECT parity FROM groups", ["pub", "shown", "groups"], "memory")


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT g, count(*) AS n FROM pub GROUP BY g",
        "SELECT * FROM shown JOIN pub USING (g)",
        "WITH c AS (SELECT * FROM pub) SELECT * FROM c, range(3) r(i)",
        "SELECT * FROM unnest([1, 2]), generate_series(1, 2)",
    ],
)
def test_what_the_public_sources_scan_is_read(con, statement):
    check_public_reads(con, statement, ["pub", "shown", "groups"], "memory")


def test_a_statement_that_does_not_bind_is_refused(con):
    with pytest.raises(privsql.PrivacyError, match="does not bind"):
        check_public_reads(con, "SELECT nope FROM pub", ["pub"], "memory")


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT total() AS t FROM pub",
        "SELECT k FROM pub WHERE k < total() / 100",
        "SELECT g, count(*) AS n FROM pub GROUP BY g HAVING count(*) < total()",
    ],
)
def test_a_session_refuses_them_without_the_first_check(con, monkeypatch, statement):
    analyze = importlib.import_module("rewriter.analyze")  # the module, not its function
    monkeypatch.setattr(analyze, "refuse_unsafe_public", lambda *args: None)
    monkeypatch.setattr(analyze, "refuse_defined", lambda *args: None)
    monkeypatch.setattr(session_module, "refuse_defined", lambda *args: None)
    db = privsql.connect(con, budget=1.0, insecure=True)
    db.protect("priv", privacy_unit="u")
    db.public("pub")
    with pytest.raises(privsql.PrivacyError, match="as the database binds it"):
        db.sql(statement)
    assert db.budget.spent == 0
