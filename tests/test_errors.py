"""Errors by kind, decided from the SQL and the schema alone, before anything is charged.

A query is checked in this order, and the first failure is the one reported: syntax
(``[syntax]``), names (``[unknown-name]``, with the catalogue's closest names as
candidates), types (``[type]``), the privacy rules, and last the budget (``[budget]``).
Every error leaves the ledger untouched and quotes no value from the data: the data here
carries distinctive values (``SECRET_4417``, ids 770000.., an ENUM whose members are
secret) and no message may contain any of them.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import duckdb
import pytest

import privsql
import rewriter.binding
from privsql import (
    BudgetExceeded,
    MissingBounds,
    MissingPrivacyUnit,
    NonPrivateOutput,
    PrivacyError,
    QuerySyntaxError,
    StatementNotAllowed,
    TypeMismatch,
    UnknownName,
)

SECRET = "SECRET_4417"
UNITS = 30
ROWS = 300
SETUP = f"""
CREATE TYPE mood AS ENUM ('{SECRET}_calm', '{SECRET}_cross');
CREATE TABLE visits AS
SELECT 770000 + (i % {UNITS}) AS user_id,
       DATE '2029-03-11' + CAST(i % 7 AS INTEGER) AS day,
       6613.5 + i AS amount,
       '{SECRET}_' || CAST(i AS VARCHAR) AS note,
       CAST(['{SECRET}_calm', '{SECRET}_cross'][(i % 2) + 1] AS mood) AS mood
FROM range({ROWS}) AS r(i);
CREATE TABLE sites AS SELECT * FROM (VALUES ('a', 'north'), ('b', 'south')) AS v(site, region);
"""
PRIVATE_VALUES = (
    SECRET,
    "2029-03",
    *(str(770000 + u) for u in range(UNITS)),
    *(f"{6613.5 + i:g}" for i in range(ROWS)),
)
UNIT = "PRIVACY_UNIT user_id"


@pytest.fixture
def db() -> privsql.Session:
    con = duckdb.connect()
    con.execute(SETUP)
    session = privsql.connect(con, budget=1.0)
    session.protect("visits", privacy_unit="user_id", bounds={"amount": (0, 10_000)})
    session.public("sites")
    yield session
    session.close()


def refused(db: privsql.Session, sql: str, kind: type[PrivacyError]) -> str:
    """The message of the refusal, checked: its kind, no private value, nothing charged."""
    with pytest.raises(PrivacyError) as info:
        db.sql(sql)
    error = info.value
    assert type(error) is kind, f"expected {kind.__name__}, got {type(error).__name__}: {error}"
    message = str(error)
    assert message.startswith(f"[{kind.rule}] "), message
    for value in PRIVATE_VALUES:
        assert value not in message, f"{message!r} quotes the private value {value!r}"
    assert db.budget.spent == 0
    assert list(db.budget.history) == []
    return message


# Each kind -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "near"),
    [
        ("SELEC 1", "SELEC"),
        (f"SELEC COUNT(*) FROM visits {UNIT}", "SELEC"),
        ("SELECT COUNT(* FROM visits", "FROM"),
        (f"SELECT COUNT(*) FROM visits {UNIT} EPSILON", "EPSILON"),
        ("FOO BAR", "FOO"),
    ],
)
def test_text_that_is_not_sql_is_a_syntax_error(db: privsql.Session, sql: str, near: str) -> None:
    assert f'syntax error at or near "{near}"' in refused(db, sql, QuerySyntaxError)


@pytest.mark.parametrize("sql", ["DROP TABLE visits", "CALL duckdb_tables()", "SUMMARIZE visits"])
def test_well_formed_statements_other_than_select_are_not_syntax_errors(
    db: privsql.Session, sql: str
) -> None:
    refused(db, sql, StatementNotAllowed)


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        (
            f"SELECT COUNT(*) FROM visitz {UNIT}",
            "table visitz does not exist; did you mean visits?",
        ),
        (
            f"SELECT COUNT(*) FROM visits WHERE amout > 0 {UNIT}",
            "column amout does not exist; did you mean amount?",
        ),
        (
            f"SELECT COUNT(*) FROM visits v WHERE v.amout > 0 {UNIT}",
            "column amout does not exist; did you mean amount?",
        ),
        (
            f"SELECT COUNT(*) FROM visits {UNIT[:-1]}",
            "column user_i does not exist; did you mean user_id?",
        ),
        (
            f"SELECT COUNTT(*) FROM visits {UNIT}",
            "function countt does not exist; did you mean count?",
        ),
        (
            f"SELECT COUNT(*) FROM visits WHERE CAST(note AS TXT) = 'a' {UNIT}",
            "type TXT does not exist",
        ),
    ],
)
def test_unknown_names_are_said_with_candidates_from_the_catalogue(
    db: privsql.Session, sql: str, said: str
) -> None:
    assert refused(db, sql, UnknownName) == f"[unknown-name] {said}"


def test_a_parquet_path_that_names_no_file_is_an_unknown_name(
    db: privsql.Session, tmp_path
) -> None:
    missing = tmp_path / "visitz.parquet"
    for source in (f"read_parquet('{missing}')", f"'{missing}'"):
        message = refused(db, f"SELECT COUNT(*) FROM {source} {UNIT}", UnknownName)
        assert message == f"[unknown-name] no file matches '{missing}'"
    (tmp_path / "notes.parquet").write_text("not parquet")
    with pytest.raises(PrivacyError) as info:
        db.sql(f"SELECT COUNT(*) FROM read_parquet('{tmp_path}/notes.parquet') {UNIT}")
    assert not isinstance(info.value, UnknownName)


def test_candidates_never_include_privsqls_own_tables(db: privsql.Session) -> None:
    message = refused(db, f"SELECT COUNT(*) FROM budgett {UNIT}", UnknownName)
    assert "privsql" not in message


@pytest.mark.parametrize(
    ("condition", "said"),
    [
        ("amount > 'abc'", "'abc' is not a DECIMAL(21,1)"),
        ("note > 3", "cannot compare VARCHAR with INTEGER"),
        ("CAST(amount AS DOUBLE) + 'x' > 0", "'x' is not a DOUBLE"),
        ("day > DATE '2013-13-01'", "'2013-13-01' is not a valid DATE"),
        ("amount IN (1, 'two')", "'two' is not a DECIMAL(21,1)"),
        ("mood > 3", "cannot compare VARCHAR with INTEGER"),
    ],
)
def test_types_that_do_not_fit_are_a_type_error_not_a_silent_null(
    db: privsql.Session, condition: str, said: str
) -> None:
    """Under TRY these became NULL and the query was answered as a count of nothing,
    and charged; now they are refused from the schema, naming only types and constants."""
    message = refused(db, f"SELECT COUNT(*) FROM visits WHERE {condition} {UNIT}", TypeMismatch)
    assert message.startswith(f"[type] {said}"), message


@pytest.mark.parametrize(
    "aggregate",
    [
        "SUM(note CLAMPED BETWEEN 0 AND 1)",
        "SUM(day CLAMPED BETWEEN 0 AND 1)",
        "COUNT_IF(note)",
    ],
)
def test_aggregates_of_the_wrong_type_are_type_errors(db: privsql.Session, aggregate: str) -> None:
    refused(db, f"SELECT {aggregate} FROM visits {UNIT}", TypeMismatch)


def test_errors_that_depend_on_a_value_are_not_reported(db: privsql.Session) -> None:
    """A cast that fails on some rows (every note is text) is the data's business: it
    becomes NULL under TRY, exactly as before, and is never a refusal quoting a row."""
    result = db.sql(
        f"SELECT COUNT(*) FROM visits WHERE CAST(note AS INTEGER) > 0 {UNIT} EPSILON 0.5"
    )
    assert result.epsilon == 0.5


def test_the_outcome_depends_on_the_schema_only(db: privsql.Session) -> None:
    """The same query over the same schema with no rows at all fails the same way."""
    sql = f"SELECT COUNT(*) FROM visits WHERE amount > 'abc' {UNIT}"
    full = refused(db, sql, TypeMismatch)
    con = duckdb.connect()
    con.execute(SETUP)
    con.execute("DELETE FROM visits")
    empty = privsql.connect(con, budget=1.0)
    empty.protect("visits", privacy_unit="user_id")
    assert refused(empty, sql, TypeMismatch) == full


# Order of precedence ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        # syntax before everything
        ("SELEC COUNT(*) FROM visitz WHERE amount > 'abc'", QuerySyntaxError),
        # unknown names before types and privacy rules
        ("SELECT COUNT(*) FROM visits WHERE amout > 'abc'", UnknownName),
        (f"SELECT note, COUNT(*) FROM visits WHERE amout > 0 {UNIT}", UnknownName),
        (f"SELECT COUNT(*) FROM visits WHERE amount > 0 {UNIT} EPSILON 50", BudgetExceeded),
        (f"SELECT COUNT(*) FROM visits WHERE amout > 0 {UNIT} EPSILON 50", UnknownName),
        # types before privacy rules and the budget
        ("SELECT COUNT(*) FROM visits WHERE amount > 'abc'", TypeMismatch),
        (f"SELECT MAX(amount) FROM visits WHERE amount > 'abc' {UNIT}", TypeMismatch),
        (f"SELECT SUM(note) FROM visits WHERE amount > 0 {UNIT}", TypeMismatch),
        (f"SELECT COUNT(*) FROM visits WHERE amount > 'abc' {UNIT} EPSILON 50", TypeMismatch),
        # privacy rules before the budget
        ("SELECT COUNT(*) FROM visits WHERE amount > 0", MissingPrivacyUnit),
        (f"SELECT note, COUNT(*) FROM visits {UNIT} EPSILON 50", NonPrivateOutput),
        (f"SELECT SUM(user_id) FROM visits {UNIT} BOUND ROWS 1 EPSILON 50", MissingBounds),
    ],
)
def test_the_first_failure_in_order_is_reported(
    db: privsql.Session, sql: str, kind: type[PrivacyError]
) -> None:
    refused(db, sql, kind)


def test_public_tables_in_a_private_query_are_checked_too(db: privsql.Session) -> None:
    refused(db, "SELECT regoin FROM sites", UnknownName)
    refused(
        db,
        f"SELECT COUNT(*) FROM visits v JOIN sites s ON s.region > 3 {UNIT}",
        TypeMismatch,
    )


def test_a_huge_table_function_stands_in_as_one_row(db: privsql.Session) -> None:
    start = time.monotonic()
    refused(
        db,
        f"SELECT COUNT(*) FROM visits, range(10000000000) AS r(i) WHERE i > 'x' {UNIT}",
        TypeMismatch,
    )
    assert time.monotonic() - start < rewriter.binding.TIME_LIMIT


def test_a_slow_check_is_given_up_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scratch run that takes long (here: a long scan of a table function, which
    queries never reach: they stand in as one row) is interrupted past the time limit and
    finds nothing, so the query goes on to the privacy rules as before."""
    monkeypatch.setattr(rewriter.binding, "TIME_LIMIT", 0.2)
    start = time.monotonic()
    slow = "SELECT count(*) FROM range(10000000000) AS r(i) WHERE hash(i) % 7 = 1"
    assert rewriter.binding._scratch.run(slow, [], {}, OrderedDict()) is None
    assert time.monotonic() - start < 3


def test_a_type_check_is_remembered_by_the_session_that_ran_it_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A query asked again in one session skips its type check; the same query from
    another session (another analyst of a server) runs it anew, so the time a check takes
    never tells one analyst what another has asked."""
    runs = []
    scratch = rewriter.binding._scratch
    connected = scratch._connected
    monkeypatch.setattr(scratch, "_connected", lambda kept: runs.append(1) or connected(kept))
    con = duckdb.connect()
    con.execute(SETUP)
    sql = f"SELECT COUNT(*) FROM visits WHERE amount > 7000 {UNIT} EPSILON 0.01"
    with privsql.connect(con, budget=1.0) as one:
        one.protect("visits", privacy_unit="user_id")
        one.sql(sql)
        one.sql(sql.replace("0.01", "0.02"))
        assert len(runs) == 1
        with privsql.connect(con, budget=1.0) as other:
            other.sql(sql)
    assert len(runs) == 2
