"""Every allow-listed function, operator and cast holds inside TRY on hostile values.

``rewriter.functions`` lists the row-level SQL that may touch private rows. Here each entry
is called, exactly as the rewriter would generate it (parsed with the privsql dialect,
accepted by ``refuse_unlisted``, wrapped in ``TRY``), over hostile values read from table
columns - NULL, empty and malformed strings, ±inf, NaN, integer extremes, infinite and
extreme dates - and must return: no error may escape. Values come from columns because
DuckDB folds constants at bind time, where errors do not depend on data; constants appear
only where analysts write them (``round(x, 1000000)``, ``date_trunc('month', ts)``). A
coverage test keeps the table honest: every allowed name, node type and cast target has a
case. Memory is capped and each query is interrupted after a few seconds, so a pathological
call fails the test instead of hanging it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from rewriter.dialect import PrivSQL
from rewriter.errors import UnsupportedQuery
from rewriter.functions import (
    ALLOWED_CAST_TYPES,
    ALLOWED_FUNCTIONS,
    ALLOWED_NODES,
    REQUIRED_SETTINGS,
    duckdb_name,
    refuse_unlisted,
)

TIMEOUT = 10.0
"""Seconds before one query is interrupted (and the test fails)."""
LONG = "a" * 10_000
"""A long string, under the size guard: long enough to expose size-multiplying functions."""

HOSTILE: dict[str, tuple[str, list[str]]] = {
    "i": ("BIGINT", ["NULL", "0", "1", "-1", "2", "-2", "7", "100", "1000000", "1000000000",
                     str(2**31 - 1), str(-(2**31)), str(2**62), str(2**63 - 1), str(-(2**63))]),
    "int": ("INTEGER", ["NULL", "0", "1", "-1", "3", "-3", "100", "1000000", "1000000000",
                        str(2**31 - 1), str(-(2**31))]),
    "d": ("DOUBLE", ["NULL", "0", "-0.0", "1.5", "-1.5", "0.5", "1e308", "-1e308", "5e-324",
                     "'inf'", "'-inf'", "'nan'", "1e18", "1e9", "-1e9", "2.5"]),
    "h": ("HUGEINT", ["NULL", "0", "-1", str(2**127 - 1), str(-(2**127 - 1)), str(2**64)]),
    "n": ("DECIMAL(18, 3)", ["NULL", "0", "999999999999999.999", "-999999999999999.999",
                             "1.5", "-0.001"]),
    "s": ("VARCHAR", ["NULL", "''", "'abc'", "'%'", "'\\'", "'_'", "'ÿ'", "'2013-13-45'",
                      "'2020-01-01'", "'2020-01-01 12:00:00'", "'12'", "'-7'", "'1e400'",
                      "'NaN'", "'('", "'['", "'*'", "'a\\'", "'%Y-%m-%d'", "'%Q'", "'month'",
                      "'epoch'", "' 12 '", "'{}'", "'日本'", "chr(0)", "'🦆'", f"'{LONG}'",
                      "'true'", "'(?P<x'", "'\\1'", "'$1'", "'24:00:00'", "'infinity'"]),
    "dt": ("DATE", ["NULL", "'2020-01-01'", "'infinity'", "'-infinity'", "'5881580-07-10'",
                    "'5877642-06-25 (BC)'", "'0001-01-01'", "'1970-01-01'", "'2020-02-29'"]),
    "ts": ("TIMESTAMP", ["NULL", "'2020-01-01 12:34:56'", "'infinity'", "'-infinity'",
                         "'294247-01-10 04:00:54'", "'290309-12-22 (BC) 00:00:00'",
                         "'1970-01-01'", "'2020-02-29 23:59:59.999999'"]),
    "b": ("BOOLEAN", ["NULL", "true", "false"]),
}  # fmt: skip
"""Hostile values by column kind: (DuckDB type, SQL constants). Each becomes a table."""

CASES: list[tuple[str, str]] = [
    # arithmetic and comparison operators
    *[
        (f"c0 {op} c1", a)
        for op in ("+", "-", "*", "/", "//", "%")
        for a in ("i i", "d d", "n n", "int i", "i d", "h h", "h i")
    ],
    ("-c0", "i"), ("-c0", "int"), ("-c0", "n"), ("-(c0)", "d"),
    ("c0 + c1", "dt int"), ("c0 - c1", "dt int"), ("c0 - c1", "dt dt"), ("c0 - c1", "ts ts"),
    ("c0 + INTERVAL 1 DAY", "ts"), ("c0 - INTERVAL 1000000 YEAR", "dt"),
    ("c0 + INTERVAL (c1) DAY", "ts i"), ("c0 - INTERVAL (c1) YEAR", "dt d"),
    ("INTERVAL (c0) MICROSECOND", "i"),
    *[
        (f"c0 {op} c1", a)
        for op in ("=", "<>", "<", "<=", ">", ">=")
        for a in ("s s", "d i", "ts ts", "h d")
    ],
    ("c0 = c1", "s i"), ("c0 <> c1", "s d"), ("c0 IS DISTINCT FROM c1", "s s"),
    ("c0 IS NOT DISTINCT FROM c1", "d d"),
    ("c0 & c1", "i i"), ("c0 | c1", "i i"), ("c0 << c1", "i i"), ("c0 >> c1", "int int"),
    ("xor(c0, c1)", "i i"),
    # logic and structure
    ("c0 AND c1", "b s"), ("c0 OR c1", "s b"), ("NOT c0", "s"), ("c0 IS NULL", "s"),
    ("c0 IS NOT NULL", "d"), ("c0 IS TRUE", "s"),
    ("c0 BETWEEN c1 AND c2", "d d d"), ("c0 BETWEEN 1 AND 5", "i"), ("c0 BETWEEN '1' AND '5'", "s"),
    ("c0 NOT BETWEEN 1 AND 5", "d"),
    ("c0 IN (1, 2, 3)", "s"), ("c0 IN (1, 2, 3)", "d"), ("c0 NOT IN ('a', 'b')", "i"),
    ("c0 IN (DATE '2020-01-01', DATE '2020-01-02')", "s"), ("c0 IN (1.5, 'x')", "i"),
    ("c0 = 1 OR c0 = 2", "s"), ("CAST(c0 AS INT) * CAST(c0 AS INT)", "s"),
    ("CASE WHEN c0 > 0 THEN 1 ELSE 0 END", "d"), ("CASE WHEN c0 THEN c1 END", "s d"),
    ("CASE c0 WHEN 1 THEN 'a' WHEN 2 THEN 'b' END", "s"), ("IF(c0 > 0, c0, -c0)", "i"),
    ("COALESCE(c0, c1, 0)", "d i"), ("IFNULL(c0, c1)", "s s"), ("NULLIF(c0, c1)", "s i"),
    ("c0 || c1", "s s"), ("c0 || c1", "s d"),
    ("c0 LIKE c1", "s s"), ("c0 NOT LIKE c1", "s s"), ("c0 ILIKE c1", "s s"),
    ("lower(c0) LIKE 'a%'", "s"), ("c0 SIMILAR TO c1", "s s"), ("c0 GLOB c1", "s s"),
    # numbers
    ("abs(c0)", "i"), ("abs(c0)", "int"), ("abs(c0)", "d"), ("abs(c0)", "n"),
    ("abs(c0)", "h"), ("-c0", "h"),
    ("round(c0)", "d"), ("round(c0, c1)", "d int"), ("round(c0, c1)", "i int"),
    ("round(c0, 1000000)", "d"), ("round(c0, -1000000)", "n"), ("round(c0, 2)", "n"),
    ("floor(c0)", "d"), ("floor(c0)", "n"), ("ceil(c0)", "d"), ("ceiling(c0)", "n"),
    ("trunc(c0)", "d"), ("trunc(c0)", "n"), ("sign(c0)", "d"), ("sign(c0)", "i"),
    ("sqrt(c0)", "d"), ("sqrt(c0)", "i"), ("cbrt(c0)", "d"), ("ln(c0)", "d"), ("ln(c0)", "i"),
    ("log(c0)", "d"), ("log(c0, c1)", "d d"), ("log10(c0)", "d"), ("log2(c0)", "i"),
    ("exp(c0)", "d"), ("exp(c0)", "i"), ("power(c0, c1)", "d d"), ("power(c0, c1)", "i i"),
    ("pow(c0, c1)", "int d"), ("c0 ** c1", "d i"), ("c0 ^ 1e308", "d"),
    ("least(c0, c1)", "d d"), ("least(c0, c1, 0)", "i i"), ("greatest(c0, c1)", "s s"),
    ("greatest(c0, c1)", "ts ts"), ("isnan(c0)", "d"), ("isinf(c0)", "d"),
    ("isfinite(c0)", "d"), ("even(c0)", "d"), ("gcd(c0, c1)", "i i"), ("lcm(c0, c1)", "i i"),
    ("degrees(c0)", "d"), ("radians(c0)", "d"), ("sin(c0)", "d"), ("cos(c0)", "d"),
    ("tan(c0)", "d"), ("asin(c0)", "d"), ("acos(c0)", "d"), ("atan(c0)", "d"),
    ("atan2(c0, c1)", "d d"), ("pi() * c0", "d"), ("bit_count(c0)", "i"),
    # strings
    ("lower(c0)", "s"), ("upper(c0)", "s"), ("lcase(c0)", "s"), ("ucase(c0)", "s"),
    ("length(c0)", "s"), ("strlen(c0)", "s"), ("bit_length(c0)", "s"),
    ("substring(c0, c1)", "s i"), ("substring(c0, c1, c2)", "s i i"),
    ("substr(c0, c1, c2)", "s int int"), ("substring(c0, -9223372036854775808, c1)", "s i"),
    ("left(c0, c1)", "s i"), ("right(c0, c1)", "s i"), ("left(c0, 2000000000)", "s"),
    ("trim(c0)", "s"), ("trim(c0, c1)", "s s"), ("ltrim(c0, c1)", "s s"), ("rtrim(c0)", "s"),
    ("concat(c0, c1, c2)", "s i d"), ("concat(c0, c1, c0, c1)", "s s"),
    ("concat_ws(c0, c1, c2)", "s s ts"), ("replace(c0, c1, c2)", "s s s"),
    ("starts_with(c0, c1)", "s s"), ("ends_with(c0, c1)", "s s"), ("contains(c0, c1)", "s s"),
    ("strpos(c0, c1)", "s s"), ("instr(c0, c1)", "s s"), ("position(c0 IN c1)", "s s"),
    ("prefix(c0, c1)", "s s"), ("suffix(c0, c1)", "s s"), ("reverse(c0)", "s"),
    ("split_part(c0, c1, c2)", "s s i"), ("split_part(c0, ',', 1000000000)", "s"),
    ("lpad(c0, 10000, c1)", "s s"), ("rpad(c0, 0, c1)", "s s"), ("lpad(c0, 3, '🦆')", "s"),
    ("rpad(c0, 10000, '')", "s"),
    ("ascii(c0)", "s"), ("chr(c0)", "int"), ("md5(c0)", "s"), ("hash(c0)", "s"),
    ("hash(c0, c1)", "d ts"),
    ("regexp_matches(c0, c1)", "s s"), ("regexp_matches(c0, '^(a+)+$')", "s"),
    ("regexp_full_match(c0, c1)", "s s"), ("regexp_replace(c0, c1, 'x')", "s s"),
    ("regexp_replace(c0, 'a', c1)", "s s"),
    ("regexp_replace(c0, '(a*)*', 'bb', 'g')", "s"), ("regexp_extract(c0, c1)", "s s"),
    ("regexp_extract(c0, '(a)(b)?', 2)", "s"),
    # dates and times
    ("EXTRACT(month FROM c0)", "ts"), ("EXTRACT(epoch FROM c0)", "dt"),
    ("EXTRACT(year FROM c0)", "dt"), ("date_part('year', c0)", "ts"),
    ("date_part('dow', c0)", "dt"), ("date_part('epoch', c0)", "ts"),
    ("datepart('dow', c0)", "dt"), ("date_trunc('quarter', c0)", "ts"),
    ("date_trunc('millennium', c0)", "dt"), ("date_trunc('month', c0)", "ts"),
    ("datetrunc('day', c0)", "dt"), ("date_diff('hour', c0, c1)", "ts ts"),
    ("date_diff('month', c0, c1)", "dt dt"), ("datediff('day', c0, c1)", "dt dt"),
    ("date_sub('second', c0, c1)", "ts ts"), ("datesub('year', c0, c1)", "dt dt"),
    ("year(c0)", "ts"), ("year(c0)", "dt"), ("month(c0)", "dt"), ("day(c0)", "ts"),
    ("hour(c0)", "ts"), ("minute(c0)", "ts"), ("second(c0)", "ts"),
    ("millisecond(c0)", "ts"), ("dayofweek(c0)", "dt"), ("dayofweek(c0)", "ts"),
    ("dayofyear(c0)", "ts"), ("dayofmonth(c0)", "ts"), ("quarter(c0)", "ts"),
    ("isodow(c0)", "ts"), ("dayname(c0)", "ts"),
    ("monthname(c0)", "dt"), ("last_day(c0)", "ts"), ("last_day(c0)", "dt"),
    ("epoch(c0)", "ts"), ("epoch(c0)", "dt"),
    ("to_timestamp(c0)", "d"), ("make_date(c0, c1, c2)", "i i i"),
    ("make_date(c0, c1, c2)", "int int int"), ("make_date(c0, 1, 1)", "i"),
    ("make_timestamp(c0, c1, c2, 0, 0, 0)", "i i i"),
    ("make_timestamp(2020, 1, 1, c0, c1, c2)", "i i d"),
    ("strftime(c0, '%Y-%m-%d %H:%M:%S.%f')", "ts"), ("strftime(c0, '%Y-%m')", "dt"),
    ("strptime(c0, '%Y-%m-%d')", "s"), ("strptime(c0, '%Y-%m-%d %H:%M:%S')", "s"),
]  # fmt: skip
CASES += [(sql, "dt") for sql, kinds in CASES if kinds == "ts" and (sql, "dt") not in CASES]
"""(expression over columns c0, c1, ..., their kinds in HOSTILE) for every allowed entry;
every function of one timestamp is tried on dates too (their extremes differ)."""

CAST_TARGETS = [
    "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
    "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE", "DECIMAL(4, 2)", "DECIMAL(38, 10)", "VARCHAR",
    "TEXT", "DATE", "TIMESTAMP", "TIME",
]  # fmt: skip
CASTS = [
    (template.format(c="c0", t=target), kind)
    for target in CAST_TARGETS
    for kind in HOSTILE
    for template in ("CAST({c} AS {t})", "TRY_CAST({c} AS {t})", "{c}::{t}")
]
"""Every allowed cast target from every hostile kind, written each way analysts write it."""


def _parse(sql: str) -> exp.Expr:
    return sqlglot.parse_one(sql, dialect=PrivSQL)


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    for statement in (
        "SET memory_limit = '1GB'",
        "SET threads = 2",
        "SET enable_progress_bar = false",
        *REQUIRED_SETTINGS,
    ):
        connection.execute(statement)
    for kind, (sql_type, values) in HOSTILE.items():
        rows = ", ".join(f"(CAST({v} AS {sql_type}))" for v in values)
        connection.execute(f"CREATE TABLE v_{kind} (x {sql_type})")
        connection.execute(f"INSERT INTO v_{kind} VALUES {rows}")
        for i, value in enumerate(values):
            connection.execute(f"CREATE TABLE v_{kind}_{i} AS SELECT CAST({value} AS {sql_type}) x")
    yield connection
    connection.close()


POSITIONS = {
    "select": "SELECT count(r) FROM (SELECT {guarded} AS r FROM {source})",
    "where": "SELECT count(*) FROM {source} WHERE {guarded} IS NOT NULL",
    "group by": "SELECT count(*) FROM (SELECT {guarded} AS k, count(*) FROM {source} GROUP BY k)",
}
"""Where the rewriter puts guarded expressions: projections, filters, grouping keys (the
optimiser treats each differently)."""


def _run_guarded(con: duckdb.DuckDBPyConnection, expression: str, kinds: str) -> None:
    """``TRY(<expression>)`` as the rewriter generates it, over every combination of hostile
    values and (for one column) over each value alone, in every position; interrupted
    (raising) after ``TIMEOUT`` seconds."""
    tree = _parse(expression)
    refuse_unlisted(tree)
    guarded = exp.func("try", tree).sql(dialect=PrivSQL)
    columns = [f"v_{kind} AS t{k}(c{k})" for k, kind in enumerate(kinds.split())]
    sources = [" CROSS JOIN ".join(columns)]
    if " " not in kinds:  # each value alone too: DuckDB may take another path per vector
        sources += [f"v_{kinds}_{i} AS t0(c0)" for i in range(len(HOSTILE[kinds][1]))]
    for source in sources:
        for shape in POSITIONS.values():
            timer = threading.Timer(TIMEOUT, con.interrupt)
            timer.start()
            try:
                con.execute(shape.format(guarded=guarded, source=source)).fetchall()
            finally:
                timer.cancel()


@pytest.mark.parametrize(("expression", "kinds"), CASES + CASTS, ids=lambda v: v[:60])
def test_no_error_escapes_try(con: duckdb.DuckDBPyConnection, expression: str, kinds: str) -> None:
    _run_guarded(con, expression, kinds)


def test_cases_cover_the_allow_list() -> None:
    """Every allowed function name, node type and cast target is exercised above."""
    names, nodes, targets = set(), set(), set()
    for expression, _ in CASES + CASTS:
        for node in _parse(expression).walk():
            nodes.add(type(node))
            if isinstance(node, exp.Cast):
                targets.add(node.to.this)
            elif isinstance(node, exp.Func) and type(node) not in ALLOWED_NODES:
                names.add(duckdb_name(node))
    assert ALLOWED_FUNCTIONS - names == set()
    assert ALLOWED_NODES - nodes == set()
    assert ALLOWED_CAST_TYPES - targets == set()


@pytest.mark.parametrize(
    "expression",
    [
        "CAST(x AS INT) * CAST(x AS INT)",
        "x IN (1, 2, 3)",
        "x = 1 OR x = 2",
        "CASE x WHEN 1 THEN 'a' WHEN 2 THEN 'b' END",
    ],
)
def test_common_subexpressions_escape_try_without_the_required_settings(expression: str) -> None:
    """Why ``REQUIRED_SETTINGS`` exist: DuckDB hoists a repeated cast of a VARCHAR out of
    TRY, also the casts it repeats itself. If this starts failing, DuckDB has fixed it."""
    bare = duckdb.connect()
    bare.execute("CREATE TABLE v (x VARCHAR); INSERT INTO v VALUES ('1'), ('')")
    with pytest.raises(duckdb.ConversionException):
        bare.execute(f"SELECT TRY({expression}) FROM v").fetchall()


@pytest.mark.parametrize("settings", [(), REQUIRED_SETTINGS])
def test_statistics_propagation_moves_errors_out_of_try(settings: tuple[str, ...]) -> None:
    """Why ``statistics_propagation`` is in ``REQUIRED_SETTINGS``: it folds ``v <= 55`` to
    a constant where the column's statistics decide it, and the constant's error escapes
    TRY, so failing told whether any row's ``v`` exceeded 55 (red team 20)."""
    bare = duckdb.connect()
    bare.execute("SET disabled_optimizers = 'common_subexpressions'")
    for setting in settings:
        bare.execute(setting)
    bare.execute("CREATE TABLE t AS SELECT (i % 50)::BIGINT AS v FROM range(400) r(i)")
    folded = (
        "SELECT count(*) FROM t WHERE TRY(epoch_ms(make_timestamp("
        "9223372036854775806 * CAST(v <= 55 AS BIGINT))) > 0)"
    )
    if settings:
        bare.execute(folded).fetchall()
    else:
        with pytest.raises(duckdb.ConversionException):
            bare.execute(folded).fetchall()


ACCEPTED = [
    "dep_delay > 10 AND origin = 'JFK'",
    "EXTRACT(month FROM time_hour)",
    "date_trunc('month', ts)",
    "CASE WHEN x > 0 THEN 1 ELSE 0 END",
    "CAST(x AS DOUBLE)",
    "x::INT",
    "TRY_CAST(s AS DATE)",
    "lower(name) LIKE 'a%'",
    "COALESCE(x, 0)",
    "x BETWEEN 1 AND 5",
    "x IN (1, 2, 3)",
    "x NOT IN ('a', 'b')",
    "x IS NOT NULL",
    "round(x / 60.0, 1)",
    "year(d) * 100 + month(d)",
    "strftime(ts, '%Y-%m')",
    "lpad(CAST(x AS VARCHAR), 4, '0')",
    "SUM(x CLAMPED BETWEEN 0 AND 10)",
    "COUNT(*)",
    "COUNT(DISTINCT lower(name))",
    "ts + INTERVAL 1 DAY",
]


@pytest.mark.parametrize("expression", ACCEPTED)
def test_accepts_everyday_expressions(expression: str) -> None:
    refuse_unlisted(_parse(expression))


REFUSED = {
    "list_reduce(l, (a, b) -> a + b)": "list_reduce",
    "list_reduce([]::INT[], lambda a, b: a + b)": "list_reduce",
    "like_escape(s, 'a', '!!')": "like_escape",
    "s LIKE 'a!%' ESCAPE '!!'": "ESCAPE",
    "s ILIKE 'a!%' ESCAPE '!'": "ESCAPE",
    "getvariable('privsql_secret')": "getvariable",
    "current_setting('threads')": "current_setting",
    "$privsql_secret": "$privsql_secret",
    "x + $x": "$x",
    "x = ?": "?",
    "random()": "random",
    "x > random()": "random",
    "now()": "now",
    "age(ts)": "age",
    "read_text('/etc/passwd')": "read_text",
    "error('x')": "error",
    "query('SELECT 1')": "query",
    "x IN (SELECT y FROM t)": "IN",
    "(SELECT max(y) FROM t)": "subquery",
    "EXISTS (SELECT 1)": "subquery",
    "frobnicate(x)": "frobnicate",
    "epoch_ms(x)": "epoch_ms",
    "make_timestamp(x)": "make_timestamp",
    "lpad(s, 1000000000, 'x')": "lpad",
    "lpad(s, 10001, 'x')": "lpad",
    "week(dt)": "week", "isoyear(dt)": "isoyear", "yearweek(dt)": "yearweek",
    "weekofyear(dt)": "weekofyear", "date_part('week', dt)": "date part",
    "date_trunc('week', dt)": "date part", "EXTRACT(isoyear FROM dt)": "date part",
    "date_diff('w', dt, dt)": "date part", "date_part(s, dt)": "date part",
    "datesub(s, dt, dt)": "date part",
    "rpad(s, x, 'x')": "rpad",
    "rpad(s, -1, 'x')": "rpad",
    "rpad(s, 5.5, 'x')": "rpad",
    "repeat(s, x)": "repeat",
    "levenshtein(s, t)": "levenshtein",
    "printf('%d', s)": "printf",
    "x = ANY([1, 2])": "ANY",
    "CAST(x AS TIMESTAMPTZ)": "TIMESTAMPTZ",
    "CAST(x AS JSON)": "JSON",
    "CAST(x AS BLOB)": "BLOB",
    "CAST(x AS INT[])": "INT[]",
    "x::STRUCT(a INT)": "STRUCT",
    "s COLLATE nocase": "collate",
    "main.lower(x)": "DOT",
    "l[1]": "BRACKET",
    "sum(x) OVER ()": "WINDOW",
    "x ->> 'a'": "json",
    "COLUMNS('.*')": "columns",
    "SUM(random() CLAMPED BETWEEN 0 AND 1)": "random",
    "COUNT(DISTINCT getvariable('x'))": "getvariable",
    "abs(getvariable('x'))": "getvariable",
}
"""Known-dangerous shapes and a word the refusal must name."""


@pytest.mark.parametrize(("expression", "named"), REFUSED.items())
def test_refuses_dangerous_shapes(expression: str, named: str) -> None:
    with pytest.raises(UnsupportedQuery, match=re.escape(named)):
        refuse_unlisted(_parse(expression))


def test_functions_counted_as_scalars_are_allowed_and_return_no_text() -> None:
    """``growth.SCALAR_FUNCTIONS`` sizes these as a number whatever they read: each is on the
    allow-list, and no overload DuckDB has for it returns text, a list or a struct — but
    ``date_part``'s over a list of parts (a STRUCT), which the allow-list refuses (parts are
    single constant words, ``DATE_UNITS``)."""
    from rewriter.growth import SCALAR_FUNCTIONS

    assert SCALAR_FUNCTIONS <= ALLOWED_FUNCTIONS
    overloads = duckdb.connect().execute(
        "SELECT function_name, return_type FROM duckdb_functions() "
        "WHERE function_name IN (SELECT unnest(?))",
        [sorted(SCALAR_FUNCTIONS)],
    ).fetchall()
    assert {name for name, _ in overloads} >= SCALAR_FUNCTIONS - {"extract"}  # a keyword
    for name, returns in overloads:
        if name in ("date_part", "datepart") and returns == "STRUCT":
            continue
        assert returns is not None and not any(
            t in returns for t in ("VARCHAR", "[", "STRUCT", "MAP", "ANY", "BLOB")
        ), (name, returns)
    with pytest.raises(UnsupportedQuery):
        refuse_unlisted(_parse("date_part(['year', 'month'], c0)"))
