"""The session keeps its catalogue between queries, never past a change of what it is made
of: declarations (through this session or another on the same database), tables, views
and columns (DDL on the owner's own connection)."""

from __future__ import annotations

import gc
import weakref

import duckdb
import pytest

import privsql
import privsql.catalog_cache
import privsql.session
from rewriter.errors import PrivacyError, TypeMismatch

COUNT = "SELECT COUNT(*) AS n FROM {source} PRIVACY_UNIT {unit} BOUND ROWS 1 EPSILON 0.5"


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i AS uid, i AS other, i % 3 AS g FROM range(50) r(i)")
    return con


def test_a_declaration_made_after_a_query_governs_the_next_query(con):
    db = privsql.connect(con, budget=100)
    db.sql(COUNT.format(source="t", unit="other"))
    db.protect("t", privacy_unit="uid")
    with pytest.raises(PrivacyError, match="uid"):
        db.sql(COUNT.format(source="t", unit="other"))
    assert db.sql(COUNT.format(source="t", unit="uid")).epsilon == 0.5


def test_a_declaration_by_another_session_on_the_database_is_seen(tmp_path):
    path = tmp_path / "d.duckdb"
    owner = privsql.connect(path, budget=100)
    owner._con.execute("CREATE TABLE t AS SELECT i AS uid, i AS other FROM range(50) r(i)")
    second = privsql.connect(owner._con.cursor(), budget=100)
    second.sql(COUNT.format(source="t", unit="other"))
    owner.protect("t", privacy_unit="uid")
    with pytest.raises(PrivacyError, match="uid"):
        second.sql(COUNT.format(source="t", unit="other"))


def test_a_table_made_public_after_a_query_is_read_exactly(con):
    db = privsql.connect(con, budget=100)
    with pytest.raises(PrivacyError):
        db.sql("SELECT count(*) FROM t")  # private: needs a unit
    db.public("t")
    assert db.sql("SELECT count(*) AS n FROM t").fetchall() == [(50,)]


@pytest.mark.parametrize(
    "ddl",
    [
        "ALTER TABLE t RENAME uid TO person",
        "CREATE OR REPLACE TABLE t AS SELECT i AS person FROM range(50) r(i)",
        "ALTER TABLE t DROP COLUMN uid",
    ],
)
def test_a_column_changed_after_a_query_is_seen(con, ddl):
    db = privsql.connect(con, budget=100)
    db.sql(COUNT.format(source="t", unit="uid"))
    con.execute(ddl)
    with pytest.raises(PrivacyError):
        db.sql(COUNT.format(source="t", unit="uid"))
    if "person" in ddl:
        assert db.sql(COUNT.format(source="t", unit="person")).epsilon == 0.5


def test_a_view_replaced_after_a_query_is_read_as_it_is_now(con):
    db = privsql.connect(con, budget=100)
    con.execute("CREATE VIEW v AS SELECT uid FROM t")
    db.sql(COUNT.format(source="v", unit="uid"))
    con.execute("CREATE OR REPLACE VIEW v AS SELECT other AS uid2 FROM t")
    with pytest.raises(PrivacyError):
        db.sql(COUNT.format(source="v", unit="uid"))
    assert db.sql(COUNT.format(source="v", unit="uid2")).epsilon == 0.5


def test_a_view_renamed_after_a_query_is_read_as_it_is_now(con):
    db = privsql.connect(con, budget=100)
    con.execute("CREATE VIEW v AS SELECT uid FROM t")
    first = db.sql(COUNT.format(source="v", unit="uid")).fetchall()
    con.execute("ALTER VIEW v RENAME TO w")
    with pytest.raises(PrivacyError):
        db.sql(COUNT.format(source="v", unit="uid"))
    # w is what v was: the same question of the same rows, answered as before
    assert db.sql(COUNT.format(source="w", unit="uid")).fetchall() == first


def test_a_view_dropped_and_made_anew_under_its_name_is_read_as_it_is_now(con):
    db = privsql.connect(con, budget=100)
    con.execute("CREATE VIEW v AS SELECT uid FROM t")
    db.sql(COUNT.format(source="v", unit="uid"))
    con.execute("DROP VIEW v")
    con.execute("CREATE VIEW v AS SELECT other AS person FROM t")
    with pytest.raises(PrivacyError):
        db.sql(COUNT.format(source="v", unit="uid"))
    assert db.sql(COUNT.format(source="v", unit="person")).epsilon == 0.5


def test_a_view_of_a_database_attached_anew_is_read_as_it_is_now(con, tmp_path):
    """A database detached and attached again (here: another file under the same name,
    with the same table and a view of the same name defined otherwise) has its views
    listed anew."""
    for name, column in [("a", "uid"), ("b", "person")]:
        file = duckdb.connect(str(tmp_path / f"{name}.duckdb"))
        file.execute("CREATE TABLE t AS SELECT i AS uid FROM range(10) r(i)")
        file.execute(f"CREATE VIEW v AS SELECT uid AS {column} FROM t")
        file.close()
    db = privsql.connect(con, budget=100)
    con.execute(f"ATTACH '{tmp_path / 'a.duckdb'}' AS x")
    db.sql(COUNT.format(source="x.main.v", unit="uid"))
    con.execute("DETACH x")
    con.execute(f"ATTACH '{tmp_path / 'b.duckdb'}' AS x")
    with pytest.raises(PrivacyError):
        db.sql(COUNT.format(source="x.main.v", unit="uid"))
    assert db.sql(COUNT.format(source="x.main.v", unit="person")).epsilon == 0.5


def test_a_column_retyped_after_a_query_is_type_checked_as_it_is_now(con):
    """The type check's stand-ins are kept by schema: after a column changes type, the
    same query is checked against the new type (and a comparison that no longer fits is
    refused, charging nothing)."""
    con.execute("CREATE TABLE s AS SELECT i AS uid, i::VARCHAR AS x FROM range(10) r(i)")
    db = privsql.connect(con, budget=100)
    query = "SELECT COUNT(*) AS n FROM s WHERE x > 'abc' PRIVACY_UNIT uid BOUND ROWS 1 EPSILON 0.5"
    assert db.sql(query).epsilon == 0.5
    con.execute("ALTER TABLE s ALTER x TYPE INTEGER")
    spent = db.budget.spent
    with pytest.raises(TypeMismatch):
        db.sql(query.replace("0.5", "0.25"))
    assert db.budget.spent == spent


def test_a_table_made_after_a_query_can_be_read(con):
    db = privsql.connect(con, budget=100)
    db.sql(COUNT.format(source="t", unit="uid"))
    with pytest.raises(PrivacyError):
        db.sql(COUNT.format(source="fresh", unit="uid"))
    con.execute("CREATE TABLE fresh AS SELECT i AS uid FROM range(10) r(i)")
    assert db.sql(COUNT.format(source="fresh", unit="uid")).epsilon == 0.5


def test_a_parquet_file_rewritten_between_queries_is_read_as_it_is_now(con, tmp_path):
    path = tmp_path / "f.parquet"
    con.execute(f"COPY (SELECT i AS uid FROM range(10) r(i)) TO '{path}'")
    db = privsql.connect(con, budget=100)
    source = f"read_parquet('{path}')"
    db.sql(COUNT.format(source=source, unit="uid"))
    con.execute(f"COPY (SELECT i AS person FROM range(10) r(i)) TO '{path}'")
    with pytest.raises(PrivacyError):
        db.sql(COUNT.format(source=source, unit="uid"))
    assert db.sql(COUNT.format(source=source, unit="person")).epsilon == 0.5


def test_the_engine_lists_an_unchanged_catalogue_as_the_same_object(con):
    db = privsql.connect(con, budget=100)
    first = db._engine.tables()
    assert db._engine.tables() is first
    con.execute("ALTER TABLE t RENAME other TO renamed")
    assert db._engine.tables() is not first


def test_a_session_is_freed_without_the_garbage_collector(con):
    """No reference cycle through the cache: a connection dropped by its owner closes (and
    checkpoints its file) at once, as before the session existed."""
    db = privsql.connect(con, budget=100)
    db.sql(COUNT.format(source="t", unit="uid"))
    cache = weakref.ref(db._catalogs)
    session = weakref.ref(db)
    gc.disable()
    try:
        db.close()
        del db
        assert session() is None and cache() is None
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "retype",
    [
        "CREATE OR REPLACE TABLE t AS SELECT i % 30 AS uid, CAST(i % 3 AS VARCHAR) AS g "
        "FROM range(300) r(i)",
        "ALTER TABLE t ALTER g TYPE VARCHAR",
    ],
)
def test_a_cast_key_list_is_not_reused_after_the_key_is_retyped(retype: str) -> None:
    """Key lists are cast once per catalogue (``Catalog.memo``): after the key column turns
    from INTEGER to VARCHAR, '1' and '01' are two groups, not one."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 30 AS uid, i % 3 AS g FROM range(300) r(i)")
    db = privsql.connect(con, budget=1e6)
    db.protect("t", privacy_unit="uid")
    sql = "SELECT g, COUNT(*) AS n FROM t GROUP BY g PRIVACY_UNIT uid BOUND ROWS 5 EPSILON {}"
    keys = {"g": ["1", "01", "2"]}
    assert [row[0] for row in db.sql(sql.format(1), keys=keys).fetchall()] == [1, 2]
    assert [row[0] for row in db.sql(sql.format(1.5), keys=keys).fetchall()] == [1, 2]
    con.execute(retype)
    assert [row[0] for row in db.sql(sql.format(2), keys=keys).fetchall()] == ["01", "1", "2"]


@pytest.fixture
def statements(monkeypatch) -> list[str]:
    """The fingerprint statements the session runs, as it runs them."""
    found: list[str] = []
    original = privsql.session.fingerprint_sql
    monkeypatch.setattr(
        privsql.session,
        "fingerprint_sql",
        lambda *args: found.append(original(*args)) or found[-1],
    )
    return found


def test_a_stored_answer_on_local_files_is_found_without_reading_their_rows(
    con, tmp_path, statements
):
    """The fingerprint of a local Parquet reader is its files' identities and how they are
    read, not a scan of its rows (120 ms per re-run on 5M rows): the statement that checks
    for a stored answer names no file. An unchanged file finds the answer free; the same
    file rewritten (same size, other values), touched, or a file added to the glob is
    other data, and the query is charged again."""
    directory = tmp_path / "files"
    directory.mkdir()
    write = "COPY (SELECT i AS uid, i * {k} AS v FROM range(100) r(i)) TO '{path}'"
    con.execute(write.format(k=1, path=directory / "a.parquet"))
    db = privsql.connect(con, budget=100)
    query = COUNT.format(source=f"read_parquet('{directory}/*.parquet')", unit="uid")
    assert not db.sql(query).cached
    assert db.sql(query).cached
    assert statements and not any("count(*)" in s for s in statements)
    changes = [
        lambda: con.execute(write.format(k=2, path=directory / "a.parquet")),
        lambda: (directory / "a.parquet").touch(),
        lambda: con.execute(write.format(k=1, path=directory / "b.parquet")),
    ]
    for change in changes:
        change()
        assert not db.sql(query).cached
        assert db.sql(query).cached


def test_a_file_without_a_local_state_is_fingerprinted_by_its_rows(
    con, tmp_path, statements, monkeypatch
):
    """Where a file has no local state to read (a remote URL: ``footers.file_state`` gives
    None), its rows are hashed as before, and a table's always are."""
    monkeypatch.setattr(privsql.catalog_cache, "file_state", lambda file: None)
    path = tmp_path / "f.parquet"
    con.execute(f"COPY (SELECT i AS uid FROM range(10) r(i)) TO '{path}'")
    db = privsql.connect(con, budget=100)
    db.sql(COUNT.format(source=f"read_parquet('{path}')", unit="uid"))
    db.sql(COUNT.format(source="t", unit="uid"))
    assert "read_parquet" in statements[0].lower() and "hash(" in statements[1]
