"""privsql.dbapi: PEP 249 conformance, client-side parameters, errors keeping rule names."""

from __future__ import annotations

import datetime
import decimal
import uuid

import pytest

import privsql
from privsql import dbapi

BY_ORIGIN = (
    "SELECT origin, COUNT(*) AS flights, AVG(dep_delay CLAMPED BETWEEN -30 AND 180) AS delay "
    "FROM flights WHERE month = ? GROUP BY origin "
    "PRIVACY_UNIT tailnum BOUND ROWS 100 EPSILON 0.5 ORDER BY origin"
)


@pytest.fixture
def con(flights_db):
    connection = dbapi.connect(flights_db)
    yield connection
    connection.close()


@pytest.fixture
def small(flights_con):
    """A connection whose session has a budget of ε = 1."""
    db = privsql.connect(flights_con, budget=1.0, seed=3, insecure=True)
    db.protect("flights", privacy_unit="tailnum", keys={"origin": ["EWR", "JFK", "LGA"]})
    return dbapi.connect(db)


def test_module_globals_and_exception_hierarchy():
    assert dbapi.apilevel == "2.0"
    assert dbapi.threadsafety in (1, 2, 3)
    assert dbapi.paramstyle == "qmark"
    assert issubclass(dbapi.Warning, Exception) and issubclass(dbapi.Error, Exception)
    assert issubclass(dbapi.InterfaceError, dbapi.Error)
    assert issubclass(dbapi.DatabaseError, dbapi.Error)
    for name in (
        "DataError",
        "OperationalError",
        "IntegrityError",
        "InternalError",
        "ProgrammingError",
        "NotSupportedError",
    ):
        kind = getattr(dbapi, name)
        assert issubclass(kind, dbapi.DatabaseError)
        assert getattr(dbapi.Connection, name) is kind  # the optional extension
    assert issubclass(dbapi.PrivacyRefusal, dbapi.ProgrammingError)
    assert issubclass(dbapi.UnsupportedRefusal, dbapi.NotSupportedError)
    assert issubclass(dbapi.BudgetRefusal, dbapi.OperationalError)


def test_a_grouped_query_is_charged_and_described(con, flights_db):
    cur = con.cursor()
    assert cur.arraysize == 1 and cur.description is None and cur.rowcount == -1
    assert cur.execute(BY_ORIGIN, [7]) is cur
    names = [d[0] for d in cur.description]
    codes = [d[1] for d in cur.description]
    assert names == ["origin", "flights", "delay"]
    assert codes == ["VARCHAR", "BIGINT", "DOUBLE"]
    assert codes[0] == dbapi.STRING and codes[1] == dbapi.NUMBER and codes[2] == dbapi.NUMBER
    assert codes[0] != dbapi.NUMBER and codes[1] != dbapi.DATETIME
    assert all(len(d) == 7 for d in cur.description)
    assert cur.rowcount == 3
    assert cur.last_cost == 0.5 and flights_db.budget.spent == 0.5
    rows = cur.last_result.fetchall()
    assert cur.fetchone() == rows[0]
    assert cur.fetchmany() == rows[1:2]  # arraysize rows
    assert cur.fetchmany(5) == rows[2:]
    assert cur.fetchone() is None and cur.fetchall() == []
    assert [r[0] for r in rows] == ["EWR", "JFK", "LGA"]
    widths = cur.last_result.accuracy(0.05)
    assert all(w > 0 for w in widths.column("flights").to_pylist())
    # the same question again: the stored answer, at no cost
    again = con.execute(BY_ORIGIN, [7])
    assert again.fetchall() == rows and again.last_cost == 0
    assert flights_db.budget.spent == 0.5
    # another parameter is another question
    con.execute(BY_ORIGIN, [8])
    assert flights_db.budget.spent == 1.0


def test_description_types_of_decimals_dates_and_booleans(con):
    cur = con.execute(
        "SELECT CAST(1.25 AS DECIMAL(10, 2)) AS d, DATE '2013-01-02' AS day, "
        "TIMESTAMP '2013-01-02 03:04:05' AS at, TRUE AS yes, 'x'::BLOB AS raw"
    )
    d, day, at, yes, raw = cur.description
    assert d == ("d", "DECIMAL(10,2)", None, None, 10, 2, True)
    assert d[1] == dbapi.NUMBER
    assert day[1] == "DATE" and day[1] == dbapi.DATETIME
    assert at[1] == "TIMESTAMP" and at[1] == dbapi.DATETIME
    assert yes[1] == "BOOLEAN"
    assert raw[1] == "BLOB" and raw[1] == dbapi.BINARY
    assert cur.fetchone() == (
        decimal.Decimal("1.25"),
        datetime.date(2013, 1, 2),
        datetime.datetime(2013, 1, 2, 3, 4, 5),
        True,
        b"x",
    )
    assert cur.last_cost == 0  # public data: exact, no cost


HOSTILE = [
    "'; DROP TABLE flights; --",
    "' OR 1=1 --",
    "x' || (SELECT tailnum FROM flights LIMIT 1) || '",
    "back\\slash\\",
    "quote''s and \"double\"",
    "$privsql_secret",
    "? and $1 and {name}",
    "/* not a comment */ -- nor this",
    "line\nbreak\ttab",
    "ünïcödé ✈",
    "",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_strings_are_values_never_sql(con, value):
    cur = con.execute("SELECT ? AS s, length(?) AS n", [value, value])
    assert cur.fetchall() == [(value, len(value))]


def test_a_hostile_parameter_in_a_private_query_stays_a_value(con, flights_db, flights_con):
    before = flights_con.execute("SELECT COUNT(*) FROM flights").fetchone()
    cur = con.execute(
        "SELECT COUNT(*) AS n FROM flights WHERE carrier = ? "
        "PRIVACY_UNIT tailnum BOUND ROWS 10 EPSILON 0.5",
        ["'; DROP TABLE flights; --"],
    )
    assert cur.rowcount == 1 and cur.last_cost == 0.5
    assert flights_con.execute("SELECT COUNT(*) FROM flights").fetchone() == before


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -(2**62),
        1.5,
        0.1,
        1e-300,
        -2.5e300,
        decimal.Decimal("12345.678"),
        datetime.date(2013, 7, 4),
        datetime.datetime(2013, 7, 4, 12, 30, 1, 250),
        datetime.time(23, 59, 58),
        b"\x00\x01'\xff",
    ],
)
def test_parameters_of_each_type_come_back_equal(con, value):
    (got,) = con.execute("SELECT ? AS v", [value]).fetchone()
    if isinstance(value, float):  # a decimal literal when it is one (as DuckDB reads 1.5)
        assert float(got) == value
    else:
        assert got == value and type(got) is type(value)


def test_a_uuid_parameter_is_a_uuid_in_sql(con):
    value = uuid.UUID("1234abcd-1234-5678-1234-567812345678")
    upper = str(value).upper()  # equal to the UUID, not to its lower-case text
    cur = con.execute(f"SELECT ? AS v, ? = '{upper}' AS t", [value, value])
    assert cur.fetchall() == [(str(value), True)]  # Arrow, hence the result, has no UUID


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_infinite_floats_are_doubles(con, value):
    assert con.execute("SELECT ? AS v", [value]).fetchall() == [(value,)]


def test_placeholder_styles_and_text_that_looks_like_one(con):
    sql = "SELECT '?' AS q, ? AS a, '$1' AS p, ? AS b -- ? and $2\n/* ? */"
    assert con.execute(sql, [1, "two"]).fetchall() == [("?", 1, "$1", "two")]
    assert con.execute("SELECT $2 AS a, $1 AS b, $2 AS c", ["x", "y"]).fetchall() == [
        ("y", "x", "y")
    ]
    named = con.execute("SELECT $who AS who, $n + 1 AS n", {"who": "it's", "n": 41})
    assert named.fetchall() == [("it's", 42)]
    assert con.execute("SELECT ?::INTEGER AS v", ["7"]).fetchall() == [(7,)]
    # a value never joins its neighbours: ``-`` then ``-5`` is not the comment ``--5``
    assert con.execute("SELECT -? AS v, 1-$1 AS w", [-5]).fetchall() == [(5, 6)]


SECRET = "s3cr3t-value"


@pytest.mark.parametrize(
    ("sql", "parameters"),
    [
        ("SELECT ? AS a, ? AS b", [SECRET]),
        ("SELECT ? AS a", [SECRET, SECRET]),
        ("SELECT $who AS a", {"who": SECRET, "extra": SECRET}),
        ("SELECT $who AS a", {"someone": SECRET}),
        ("SELECT ? AS a", {"a": SECRET}),
        ("SELECT $a AS a", [SECRET]),
        ("SELECT $0 AS a", [SECRET]),
        ("SELECT ? AS a", SECRET),
    ],
)
def test_parameters_that_do_not_fit_their_placeholders(con, flights_db, sql, parameters):
    with pytest.raises(dbapi.ProgrammingError) as error:
        con.execute(sql, parameters)
    assert SECRET not in str(error.value)  # counts and names, never values
    assert flights_db.budget.spent == 0


def test_sql_that_does_not_tokenize_is_a_syntax_error(con):
    with pytest.raises(dbapi.ProgrammingError) as error:
        con.execute("SELECT 'unterminated")
    assert error.value.rule == "syntax"


def test_unsupported_parameter_types(con):
    with pytest.raises(dbapi.NotSupportedError, match="timedelta"):
        con.execute("SELECT ? AS v", [datetime.timedelta(days=1)])
    with pytest.raises(dbapi.NotSupportedError, match="list"):
        con.execute("SELECT ? AS v", [[1, 2]])


def test_refusals_keep_their_rule_and_charge_nothing(small):
    cur = small.cursor()
    with pytest.raises(dbapi.PrivacyRefusal) as refused:
        cur.execute("SELECT MAX(dep_delay) AS m FROM flights PRIVACY_UNIT tailnum")
    assert refused.value.rule == "aggregate" and "[aggregate]" in str(refused.value)
    assert isinstance(refused.value, dbapi.ProgrammingError)
    assert isinstance(refused.value.__cause__, privsql.NonDPAggregate)
    with pytest.raises(dbapi.UnsupportedRefusal) as refused:
        cur.execute("DROP TABLE flights")
    assert refused.value.rule == "select-only"
    assert isinstance(refused.value, dbapi.NotSupportedError)
    with pytest.raises(dbapi.BudgetRefusal) as refused:
        cur.execute("SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum EPSILON 2")
    assert refused.value.rule == "budget"
    assert isinstance(refused.value, dbapi.OperationalError)
    with pytest.raises(dbapi.ProgrammingError) as refused:
        cur.execute("SELECT nope FROM flights PRIVACY_UNIT tailnum")
    assert refused.value.rule == "unknown-name"
    assert small.budget.spent == 0
    assert cur.description is None and cur.last_result is None and cur.last_cost == 0


def test_commit_and_rollback_give_no_epsilon_back(small):
    small.execute("SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum EPSILON 0.25")
    small.rollback()
    small.commit()
    assert small.budget.spent == 0.25


def test_executemany_runs_each_and_keeps_the_last(con, flights_db):
    cur = con.cursor()
    cur.executemany(BY_ORIGIN, [[1], [2], [3]])
    assert flights_db.budget.spent == 1.5
    assert cur.fetchall() == con.execute(BY_ORIGIN, [3]).fetchall()


def test_closed_objects_and_fetching_too_early(con):
    cur = con.cursor()
    with pytest.raises(dbapi.InterfaceError):
        cur.fetchone()
    cur.close()
    with pytest.raises(dbapi.InterfaceError):
        cur.execute("SELECT 1 AS one")
    other = con.cursor()
    con.close()
    con.close()  # harmless
    with pytest.raises(dbapi.InterfaceError):
        other.execute("SELECT 1 AS one")
    with pytest.raises(dbapi.InterfaceError):
        con.cursor().execute("SELECT 1 AS one")
    with pytest.raises(dbapi.InterfaceError):
        con.commit()


@pytest.fixture
def protected(tmp_path, flights_frame):
    """A database file with its own ledger (ε = 2) and ``flights`` private per plane."""
    path = tmp_path / "flights.duckdb"
    with privsql.connect(path, budget=2.0) as owner:
        owner._con.register("frame", flights_frame.head(5000))
        owner._con.execute("CREATE TABLE flights AS SELECT * FROM frame")
        owner.protect("flights", privacy_unit="tailnum")
    return path


def test_a_file_database_keeps_its_ledger(protected):
    path = protected
    with dbapi.connect(path) as first:
        first.execute("SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum EPSILON 0.5")
    database, settings = dbapi.parse_url(f"privsql:///{path}?lock_timeout=5")
    with dbapi.connect(database, **settings) as second:
        assert second.budget.spent == 0.5 and second.budget.total == 2.0
    with pytest.raises(dbapi.InterfaceError):
        dbapi.connect(path, no_such_option=1)


def test_urls():
    assert dbapi.parse_url("privsql:///flights.duckdb") == ("flights.duckdb", {})
    assert dbapi.parse_url("privsql:////data/flights.duckdb")[0] == "/data/flights.duckdb"
    assert dbapi.parse_url("privsql://") == (":memory:", {})
    url = "privsql:///f.duckdb?budget=3&epsilon=0.5&declared_files_only=true&lock_timeout=2"
    assert dbapi.parse_url(url) == (
        "f.duckdb",
        {"budget": 3.0, "epsilon": 0.5, "declared_files_only": True, "lock_timeout": 2.0},
    )
    for bad in (
        "privsql:///f.duckdb?budget=lots",
        "privsql:///f.duckdb?colour=red",
        "privsql:///f.duckdb?declared_files_only=maybe",
        "privsql://alice@host:5433/db",
        "postgresql:///db",
    ):
        with pytest.raises(dbapi.InterfaceError):
            dbapi.parse_url(bad)


@pytest.mark.parametrize(
    "value", [decimal.Decimal("NaN"), decimal.Decimal("sNaN123"), decimal.Decimal("-Infinity")]
)
def test_non_finite_decimals_are_values_not_names(value: decimal.Decimal) -> None:
    """``exp.convert`` writes a non-finite Decimal as a bare word, which would read as a
    column name; a parameter is always a value."""
    from privsql.dbapi import literal_text

    assert "CAST(" in literal_text(value) and "DOUBLE" in literal_text(value)


# -- what a URL may not choose (red team 34) ---------------------------------------------


def state(path) -> tuple[bytes, float, float]:
    """The key file's bytes and the ledger's total and spent."""
    with privsql.connect(path) as db:
        return (
            (path.parent / f"{path.name}.privsql-key").read_bytes(),
            db.budget.total,
            db.budget.spent,
        )


@pytest.mark.parametrize(
    "query",
    [
        "ledger=fresh.duckdb&budget=1e9",  # a fresh ledger: a fresh budget, no declarations
        "ledger=:memory:",
        "seed=424242&insecure=true",  # predictable noise: exact answers recovered
        "seed=1",
        "insecure=1",
        "budget=2&seed=3&insecure=yes",
    ],
)
def test_a_url_cannot_choose_the_ledger_or_seed_the_noise(protected, tmp_path, monkeypatch, query):
    monkeypatch.chdir(tmp_path)
    before = state(protected)
    with pytest.raises(dbapi.InterfaceError, match="not taken from a URL"):
        dbapi.parse_url(f"privsql:///{protected}?{query}")
    assert not (tmp_path / "fresh.duckdb").exists()
    assert state(protected) == before


def test_connect_refuses_another_ledger_or_a_seed_on_a_protected_file(protected, tmp_path):
    """``dbapi.connect``'s options go to ``privsql.connect``, which refuses both."""
    before = state(protected)
    fresh = tmp_path / "fresh.duckdb"
    with pytest.raises(dbapi.PrivacyRefusal, match="ledger of its own"):
        dbapi.connect(protected, ledger=fresh, budget=1e9)
    with pytest.raises(dbapi.PrivacyRefusal, match="seed"):
        dbapi.connect(protected, seed=424242, insecure=True)
    assert not fresh.exists()
    assert state(protected) == before
