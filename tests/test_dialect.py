"""Round-trip tests of the privsql dialect, in the style of sqlglot's own dialect tests.

Every privsql query must survive parse → generate → parse unchanged (an equal tree),
and generating is a fixpoint: printing the re-parsed tree gives the same text. SQL
without the clause must read and print exactly as sqlglot's DuckDB dialect does.
Malformed clauses are parse errors, and through ``rewriter.analyze.parse`` they are
``QuerySyntaxError`` (a ``PrivacyError``).
"""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from rewriter.analyze import parse
from rewriter.dialect import PrivSQL, to_sql
from rewriter.errors import PrivacyError, QuerySyntaxError, StatementNotAllowed
from rewriter.expressions import Bound, Clamped, PrivacyUnit


def read(sql: str) -> exp.Expr:
    return sqlglot.parse_one(sql, read=PrivSQL)


# -- round trips ------------------------------------------------------------------------

AGG = "SELECT a, COUNT(*) AS n FROM t"

POSITIONS = [
    # right after FROM
    "SELECT COUNT(*) FROM t PRIVACY_UNIT u",
    "SELECT COUNT(*) FROM t PRIVACY_UNIT u WHERE x > 1",
    f"{AGG} PRIVACY_UNIT u GROUP BY a",
    f"{AGG} PRIVACY_UNIT u WHERE x > 1 GROUP BY a HAVING COUNT(*) > 1 ORDER BY n LIMIT 3",
    # after WHERE
    "SELECT COUNT(*) FROM t WHERE x > 1 PRIVACY_UNIT u",
    f"{AGG} WHERE x > 1 AND y IS NOT NULL PRIVACY_UNIT u GROUP BY a",
    # after GROUP BY
    f"{AGG} GROUP BY a PRIVACY_UNIT u",
    f"{AGG} GROUP BY a PRIVACY_UNIT u HAVING COUNT(*) > 1",
    f"{AGG} WHERE x > 1 GROUP BY a PRIVACY_UNIT u ORDER BY n DESC",
    f"{AGG} GROUP BY 1 PRIVACY_UNIT u",
    f"{AGG} GROUP BY ALL PRIVACY_UNIT u",
    f"{AGG} PRIVACY_UNIT u GROUP BY ALL",
    f"{AGG} GROUP BY ALL HAVING COUNT(*) > 1 PRIVACY_UNIT u",
    # after HAVING
    f"{AGG} GROUP BY a HAVING COUNT(*) > 1 PRIVACY_UNIT u",
    f"{AGG} GROUP BY a HAVING n > 1 PRIVACY_UNIT u ORDER BY a",
    # after ORDER BY
    f"{AGG} GROUP BY a ORDER BY n DESC PRIVACY_UNIT u",
    f"{AGG} GROUP BY a ORDER BY 2 DESC NULLS LAST PRIVACY_UNIT u LIMIT 5",
    f"{AGG} GROUP BY a ORDER BY ALL PRIVACY_UNIT u",
    # after LIMIT / OFFSET
    f"{AGG} GROUP BY a LIMIT 5 PRIVACY_UNIT u",
    f"{AGG} GROUP BY a ORDER BY n LIMIT 5 OFFSET 2 PRIVACY_UNIT u",
    f"{AGG} GROUP BY a LIMIT 5 PRIVACY_UNIT u OFFSET 2",
    f"{AGG} GROUP BY a OFFSET 2 PRIVACY_UNIT u",
    # between other modifiers (QUALIFY / WINDOW / SAMPLE parse; analysis refuses them)
    f"{AGG} GROUP BY a QUALIFY n > 1 PRIVACY_UNIT u",
    "SELECT COUNT(*) OVER w FROM t WINDOW w AS (PARTITION BY a) PRIVACY_UNIT u",
    "SELECT COUNT(*) FROM t USING SAMPLE 10% PRIVACY_UNIT u",
    "SELECT COUNT(*) FROM t TABLESAMPLE 10% PRIVACY_UNIT u",
    # DuckDB's FROM-first syntax
    "FROM t PRIVACY_UNIT u",
    "FROM t SELECT COUNT(*) WHERE x > 1 PRIVACY_UNIT u",
    "FROM t SELECT a, COUNT(*) GROUP BY a PRIVACY_UNIT u",
    "FROM t SELECT COUNT(*) PRIVACY_UNIT u",
    # keywords in any case
    "select count(*) from t where x > 1 privacy_unit u bound rows 5 epsilon 0.5",
    "Select Count(*) From t Privacy_Unit u Bound Weights Auto Max_Groups 2",
]

OPTIONS = [
    "",
    "BOUND ROWS 5",
    "BOUND ROWS AUTO",
    "BOUND WEIGHTS 3",
    "BOUND WEIGHTS AUTO",
    "BOUND CLIP",
    "BOUND AUTO",
    "MAX_GROUPS 1",
    "MAX_GROUPS 4",
    "EPSILON 0.5",
    "EPSILON 1",
    "EPSILON 2e-1",
    "EPSILON 1E-3",
    "DELTA 1e-6",
    "DELTA 0.0001",
    "BOUND ROWS 50 MAX_GROUPS 1",
    "BOUND ROWS 50 EPSILON 0.5",
    "BOUND ROWS 50 DELTA 1e-6",
    "MAX_GROUPS 2 EPSILON 0.5",
    "MAX_GROUPS 2 DELTA 1e-6",
    "EPSILON 0.5 DELTA 1e-6",
    "BOUND WEIGHTS 3 MAX_GROUPS 2 EPSILON 0.5",
    "BOUND CLIP MAX_GROUPS 2 DELTA 1e-7",
    "BOUND AUTO EPSILON 0.25 DELTA 1e-6",
    "BOUND ROWS 50 MAX_GROUPS 1 EPSILON 0.5 DELTA 1e-6",
    "BOUND WEIGHTS AUTO MAX_GROUPS 3 EPSILON 1.5 DELTA 1e-9",
    # any order, printed in canonical order
    "EPSILON 0.5 BOUND ROWS 5",
    "DELTA 1e-6 EPSILON 0.5 MAX_GROUPS 2 BOUND CLIP",
    "MAX_GROUPS 3 BOUND WEIGHTS AUTO",
    # values that parse (``read_options`` refuses them, not the parser)
    "EPSILON 0",
    "EPSILON -1",
    "EPSILON 1e999",
    "DELTA 1",
    "BOUND ROWS 2.5",
    "BOUND ROWS -3",
    "MAX_GROUPS 0",
]

SOURCES = [
    "SELECT COUNT(*) FROM t AS x PRIVACY_UNIT x.u",
    "SELECT COUNT(*) FROM t x PRIVACY_UNIT x.u",
    "SELECT COUNT(*) FROM main.t PRIVACY_UNIT t.u",
    "SELECT COUNT(*) FROM db.main.t AS x PRIVACY_UNIT x.u BOUND ROWS 5",
    'SELECT COUNT(*) FROM t PRIVACY_UNIT "user id"',
    'SELECT COUNT(*) FROM "My Table" AS m PRIVACY_UNIT m."User"',
    "SELECT COUNT(*) FROM read_parquet('flights.parquet') PRIVACY_UNIT tailnum",
    "SELECT COUNT(*) FROM read_parquet('flights.parquet') AS f PRIVACY_UNIT f.tailnum",
    "SELECT COUNT(*) FROM read_parquet('flights.parquet') f PRIVACY_UNIT f.tailnum BOUND ROWS 5",
    "SELECT COUNT(*) FROM read_parquet(['a.parquet', 'b.parquet']) AS f PRIVACY_UNIT f.tailnum",
    "SELECT COUNT(*) FROM read_parquet('data/*.parquet', hive_partitioning = true) AS f "
    "PRIVACY_UNIT f.u",
    "SELECT COUNT(*) FROM read_csv('x.csv', header = true, delim = ';') AS c PRIVACY_UNIT c.u",
    "SELECT COUNT(*) FROM 'flights.parquet' PRIVACY_UNIT tailnum",
    "SELECT COUNT(*) FROM t AS bound PRIVACY_UNIT bound.u",
    "SELECT COUNT(*) FROM t AS epsilon PRIVACY_UNIT epsilon.u EPSILON 1",
    # joins
    "SELECT COUNT(*) FROM f JOIN p ON f.k = p.k PRIVACY_UNIT f.u",
    "SELECT p.r, COUNT(*) FROM f JOIN p ON f.k = p.k GROUP BY p.r PRIVACY_UNIT f.u BOUND ROWS 5",
    "SELECT COUNT(*) FROM f LEFT JOIN p ON f.k = p.k WHERE p.r = 'x' PRIVACY_UNIT f.u",
    "SELECT COUNT(*) FROM f JOIN p USING (k) PRIVACY_UNIT u",
    "SELECT COUNT(*) FROM f, p PRIVACY_UNIT f.u",
    "SELECT COUNT(*) FROM f CROSS JOIN p PRIVACY_UNIT f.u",
    "SELECT COUNT(*) FROM f AS a JOIN f AS b ON a.u = b.u PRIVACY_UNIT a.u",
    "SELECT f.origin, COUNT(*) AS n FROM read_parquet('flights.parquet') AS f "
    "JOIN read_parquet('airports.parquet') AS a ON f.origin = a.faa "
    "WHERE f.year = 2013 GROUP BY f.origin PRIVACY_UNIT f.tailnum BOUND ROWS 50",
    "SELECT f.origin, COUNT(*) FROM read_parquet('flights.parquet') AS f JOIN airports AS a "
    "ON f.origin = a.faa GROUP BY f.origin PRIVACY_UNIT f.tailnum BOUND WEIGHTS 3 MAX_GROUPS 2",
]

CLAMPS = [
    "SELECT SUM(x CLAMPED BETWEEN 0 AND 10) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN -10 AND 10) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN -1.5 AND 2.25) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN -0.5 AND 0.5) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN -.5 AND .5) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN 1e-3 AND 2e3) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN -1E-3 AND 1.5E+2) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN 1_000 AND 2_000) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN 1 + 2 AND 10 * 3) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN (1 + 2) * 3 AND 100 - 1) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN -(2 * 3) AND 10 / 4) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN -(1) AND +5) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN 2 ^ 3 AND ABS(-4)) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN CAST(0 AS DOUBLE) AND 1::DOUBLE) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x + y CLAMPED BETWEEN 0 AND 10) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x * 2 - 1 CLAMPED BETWEEN -10 AND 10) FROM t PRIVACY_UNIT u",
    "SELECT SUM(CASE WHEN x BETWEEN 1 AND 2 THEN x ELSE 0 END CLAMPED BETWEEN 0 AND 2) "
    "FROM t PRIVACY_UNIT u",
    "SELECT AVG(CAST(x AS DOUBLE) CLAMPED BETWEEN 0.5 AND 1.5e2) FROM t PRIVACY_UNIT u",
    "SELECT AVG(distance CLAMPED BETWEEN 0 AND 5000) AS avg_distance FROM t PRIVACY_UNIT u",
    "SELECT SUM(f.x CLAMPED BETWEEN 0 AND 1) FROM t AS f PRIVACY_UNIT f.u",
    "SELECT QUANTILE(x, 0.9 CLAMPED BETWEEN 0 AND 700) FROM t PRIVACY_UNIT u",
    "SELECT QUANTILE(air_time, 0.9 CLAMPED BETWEEN 0 AND 700) AS p90 FROM t PRIVACY_UNIT u",
    "SELECT QUANTILE_CONT(x, 0.5 CLAMPED BETWEEN -1 AND 1) FROM t PRIVACY_UNIT u",
    "SELECT QUANTILE(x, [0.1, 0.9] CLAMPED BETWEEN 0 AND 10) FROM t PRIVACY_UNIT u",
    "SELECT MEDIAN(x CLAMPED BETWEEN 0 AND 10) FROM t PRIVACY_UNIT u",
    "SELECT VARIANCE(x CLAMPED BETWEEN 0 AND 10), STDDEV(x CLAMPED BETWEEN 0 AND 10) "
    "FROM t PRIVACY_UNIT u",
    "SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY x) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN 0 AND 10) FILTER (WHERE y > 1) FROM t PRIVACY_UNIT u",
    "SELECT SUM(x CLAMPED BETWEEN -1 AND 1) + 1 AS y, ROUND(AVG(x CLAMPED BETWEEN 0 AND 9), 2) "
    "FROM t PRIVACY_UNIT u",
    "SELECT COUNT(*) FROM t WHERE f(x CLAMPED BETWEEN 0 AND 1) PRIVACY_UNIT u",
]

SHAPES = [
    "SELECT COUNT(*), COUNT(x), COUNT(DISTINCT u) FROM t PRIVACY_UNIT u",
    "SELECT origin, COUNT(*) AS flights, SUM(dep_delay CLAMPED BETWEEN 0 AND 120) AS total_delay, "
    "AVG(distance CLAMPED BETWEEN 0 AND 5000) AS avg_distance, "
    "QUANTILE(air_time, 0.9 CLAMPED BETWEEN 0 AND 700) AS p90_air_time "
    "FROM read_parquet('flights.parquet') WHERE year = 2013 GROUP BY origin "
    "PRIVACY_UNIT tailnum BOUND ROWS 50 MAX_GROUPS 1 EPSILON 0.5 DELTA 1e-6",
    "SELECT a, COUNT(*) * 2 + 1 AS n, CASE WHEN COUNT(*) > 10 THEN 'many' ELSE 'few' END AS c "
    "FROM t GROUP BY a PRIVACY_UNIT u",
    "SELECT a AS k, COUNT(*) FROM t GROUP BY k HAVING COUNT(*) > 3 ORDER BY 2 DESC LIMIT 10 "
    "PRIVACY_UNIT u BOUND ROWS 5",
    "SELECT a, b, COUNT(*) FROM t GROUP BY a, b PRIVACY_UNIT u MAX_GROUPS 3",
    "SELECT DISTINCT a FROM t PRIVACY_UNIT u",
    "SELECT * FROM t PRIVACY_UNIT u",
    "SELECT a, COUNT(*) FROM t GROUP BY ROLLUP (a) PRIVACY_UNIT u",
    "SELECT a, COUNT(*) FROM t GROUP BY CUBE (a, b) PRIVACY_UNIT u",
    "SELECT a, COUNT(*) FROM t GROUP BY GROUPING SETS ((a), ()) PRIVACY_UNIT u",
    # CTEs
    "WITH c AS (SELECT * FROM t) SELECT COUNT(*) FROM c PRIVACY_UNIT u",
    "WITH c AS (SELECT u, x FROM t WHERE x > 0) SELECT COUNT(*) FROM c PRIVACY_UNIT c.u "
    "BOUND ROWS 5",
    "WITH p AS (SELECT k, r FROM pub) SELECT p.r, COUNT(*) FROM t JOIN p ON t.k = p.k "
    "GROUP BY p.r PRIVACY_UNIT t.u",
    "WITH c AS (SELECT u FROM t PRIVACY_UNIT u) SELECT COUNT(*) FROM c",
    # subqueries
    "SELECT COUNT(*) FROM (SELECT * FROM t) PRIVACY_UNIT u",
    "SELECT COUNT(*) FROM (SELECT u, x FROM t) AS s PRIVACY_UNIT s.u",
    "SELECT COUNT(*) FROM (SELECT u FROM t PRIVACY_UNIT u) AS s",
    "SELECT COUNT(*) FROM t WHERE k IN (SELECT k FROM pub) PRIVACY_UNIT u",
    "SELECT COUNT(*) FROM t WHERE EXISTS(SELECT 1 FROM pub WHERE pub.k = t.k) PRIVACY_UNIT u",
    "SELECT COUNT(*) FROM t WHERE k IN (SELECT k FROM s PRIVACY_UNIT k) PRIVACY_UNIT u",
    "SELECT COUNT(*), (SELECT MAX(x) FROM pub) FROM t PRIVACY_UNIT u",
    # set operations: each branch keeps its own clause
    "SELECT COUNT(*) FROM t PRIVACY_UNIT u UNION ALL SELECT COUNT(*) FROM s PRIVACY_UNIT v",
]

ROUND_TRIPS = POSITIONS + [f"SELECT COUNT(*) FROM t PRIVACY_UNIT u {o}" for o in OPTIONS]
ROUND_TRIPS += SOURCES + CLAMPS + SHAPES


@pytest.mark.parametrize("sql", ROUND_TRIPS)
def test_round_trip(sql: str) -> None:
    tree = read(sql)
    assert tree.find(PrivacyUnit) is not None, "the clause was not parsed as a clause"
    text = to_sql(tree)
    again = read(text)
    assert again == tree, f"{sql!r} printed as {text!r}, which reads back differently"
    assert to_sql(again) == text


@pytest.mark.parametrize("sql", ROUND_TRIPS)
def test_round_trip_through_analyze_parse(sql: str) -> None:
    """``rewriter.analyze.parse`` reads the same tree, or refuses a statement that is no query."""
    tree = read(sql)
    try:
        parsed = parse(sql)
    except StatementNotAllowed:
        assert not isinstance(tree, exp.Select)
        return
    assert parsed == tree
    assert parse(to_sql(tree)) == tree


def test_canonical_text_puts_the_clause_after_having() -> None:
    tree = read(
        "SELECT a, COUNT(*) FROM t PRIVACY_UNIT u BOUND ROWS 5 WHERE x > 1 GROUP BY a "
        "HAVING COUNT(*) > 1 ORDER BY 2 LIMIT 3"
    )
    assert to_sql(tree) == (
        "SELECT a, COUNT(*) FROM t WHERE x > 1 GROUP BY a HAVING COUNT(*) > 1 "
        "PRIVACY_UNIT u BOUND ROWS 5 ORDER BY 2 LIMIT 3"
    )


def test_canonical_option_order() -> None:
    tree = read(
        "SELECT COUNT(*) FROM t PRIVACY_UNIT u DELTA 1e-6 EPSILON 0.5 MAX_GROUPS 2 BOUND ROWS 5"
    )
    assert to_sql(tree) == (
        "SELECT COUNT(*) FROM t PRIVACY_UNIT u BOUND ROWS 5 MAX_GROUPS 2 EPSILON 0.5 DELTA 1e-6"
    )


CLAUSE = "PRIVACY_UNIT u BOUND ROWS 5 EPSILON 0.5"
SAME_QUERY_EVERYWHERE = [
    f"SELECT a, COUNT(*) FROM t {CLAUSE} WHERE x > 1 GROUP BY a HAVING COUNT(*) > 2 "
    "ORDER BY 2 LIMIT 3",
    f"SELECT a, COUNT(*) FROM t WHERE x > 1 {CLAUSE} GROUP BY a HAVING COUNT(*) > 2 "
    "ORDER BY 2 LIMIT 3",
    f"SELECT a, COUNT(*) FROM t WHERE x > 1 GROUP BY a {CLAUSE} HAVING COUNT(*) > 2 "
    "ORDER BY 2 LIMIT 3",
    f"SELECT a, COUNT(*) FROM t WHERE x > 1 GROUP BY a HAVING COUNT(*) > 2 {CLAUSE} "
    "ORDER BY 2 LIMIT 3",
    f"SELECT a, COUNT(*) FROM t WHERE x > 1 GROUP BY a HAVING COUNT(*) > 2 ORDER BY 2 "
    f"{CLAUSE} LIMIT 3",
    f"SELECT a, COUNT(*) FROM t WHERE x > 1 GROUP BY a HAVING COUNT(*) > 2 ORDER BY 2 "
    f"LIMIT 3 {CLAUSE}",
    "SELECT a, COUNT(*) FROM t WHERE x > 1 GROUP BY a HAVING COUNT(*) > 2 ORDER BY 2 LIMIT 3 "
    "PRIVACY_UNIT u EPSILON 0.5 BOUND ROWS 5",
]


def test_clause_position_does_not_change_the_tree() -> None:
    trees = [read(sql) for sql in SAME_QUERY_EVERYWHERE]
    assert all(tree == trees[0] for tree in trees)
    assert len({to_sql(tree) for tree in trees}) == 1


# -- the parsed clause -------------------------------------------------------------------


def test_clause_fields() -> None:
    tree = read(
        "SELECT COUNT(*) FROM read_parquet('f.parquet') AS f PRIVACY_UNIT f.tailnum "
        "BOUND ROWS 50 MAX_GROUPS 2 EPSILON 0.5 DELTA 1e-6"
    )
    clause = tree.args["privacy"]
    assert isinstance(clause, PrivacyUnit)
    assert isinstance(clause.this, exp.Column)
    assert clause.this.name == "tailnum"
    assert clause.this.table == "f"
    bound = clause.args["bound"]
    assert isinstance(bound, Bound)
    assert bound.strategy == "ROWS"
    assert bound.args["threshold"] == exp.Literal.number(50)
    assert clause.args["max_groups"] == exp.Literal.number(2)
    assert clause.args["epsilon"] == exp.Literal.number("0.5")
    assert clause.args["delta"] == exp.Literal.number("1e-6")


@pytest.mark.parametrize(
    ("bound", "strategy", "threshold"),
    [
        ("BOUND ROWS 5", "ROWS", "5"),
        ("BOUND WEIGHTS 3", "WEIGHTS", "3"),
        ("BOUND WEIGHTS AUTO", "WEIGHTS", "AUTO"),
        ("BOUND ROWS AUTO", "ROWS", "AUTO"),
        ("BOUND CLIP", "CLIP", None),
        ("BOUND AUTO", "AUTO", None),
        ("bound weights auto", "WEIGHTS", "AUTO"),
    ],
)
def test_bound_strategies(bound: str, strategy: str, threshold: str | None) -> None:
    clause = read(f"SELECT COUNT(*) FROM t PRIVACY_UNIT u {bound}").args["privacy"]
    node = clause.args["bound"]
    assert node.strategy == strategy
    value = node.args.get("threshold")
    assert (value.name.upper() if value is not None else None) == threshold


def test_options_are_optional() -> None:
    clause = read("SELECT COUNT(*) FROM t PRIVACY_UNIT u").args["privacy"]
    assert clause.this == exp.column("u")
    for option in ("bound", "max_groups", "epsilon", "delta"):
        assert clause.args.get(option) is None


def test_negative_option_value_is_kept_for_validation() -> None:
    clause = read("SELECT COUNT(*) FROM t PRIVACY_UNIT u EPSILON -1").args["privacy"]
    assert clause.args["epsilon"] == exp.Neg(this=exp.Literal.number(1))


@pytest.mark.parametrize(
    ("sql", "low", "high"),
    [
        ("SELECT SUM(x CLAMPED BETWEEN 0 AND 10) FROM t PRIVACY_UNIT u", "0", "10"),
        ("SELECT SUM(x CLAMPED BETWEEN -1.5 AND 2e3) FROM t PRIVACY_UNIT u", "-1.5", "2e3"),
        ("SELECT AVG(x CLAMPED BETWEEN 1 + 2 AND 3 * 4) FROM t PRIVACY_UNIT u", "1 + 2", "3 * 4"),
    ],
)
def test_clamped_fields(sql: str, low: str, high: str) -> None:
    tree = read(sql)
    clamped = tree.find(Clamped)
    assert isinstance(clamped.parent, exp.AggFunc)
    assert clamped.this == exp.column("x")
    assert to_sql(clamped.args["low"]) == low
    assert to_sql(clamped.args["high"]) == high


def test_quantile_clamp_stays_where_written() -> None:
    tree = read("SELECT QUANTILE(x, 0.9 CLAMPED BETWEEN 0 AND 700) FROM t PRIVACY_UNIT u")
    clamped = tree.find(Clamped)
    assert clamped is not None
    assert clamped.this == exp.Literal.number("0.9")
    assert to_sql(clamped.args["high"]) == "700"
    assert tree.find(exp.Column) == exp.column("x")


def test_between_is_not_clamped() -> None:
    tree = read("SELECT SUM(CASE WHEN x BETWEEN 1 AND 2 THEN 1 ELSE 0 END) FROM t PRIVACY_UNIT u")
    assert tree.find(Clamped) is None
    assert tree.find(exp.Between) is not None


# -- PRIVACY_UNIT is never a table alias ---------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t PRIVACY_UNIT u",
        "SELECT COUNT(*) FROM t privacy_unit u",
        "SELECT COUNT(*) FROM main.t PRIVACY_UNIT u",
        "SELECT COUNT(*) FROM read_parquet('f.parquet') PRIVACY_UNIT u",
        "SELECT COUNT(*) FROM 'f.parquet' PRIVACY_UNIT u",
        "SELECT COUNT(*) FROM (SELECT * FROM t) PRIVACY_UNIT u",
        "SELECT COUNT(*) FROM p JOIN t ON p.k = t.k PRIVACY_UNIT u",
        "SELECT COUNT(*) FROM p, t PRIVACY_UNIT u",
        "SELECT COUNT(*) FROM p JOIN t USING (k) PRIVACY_UNIT u",
        "FROM t PRIVACY_UNIT u",
    ],
)
def test_clause_is_not_a_table_alias(sql: str) -> None:
    tree = read(sql)
    assert isinstance(tree.args.get("privacy"), PrivacyUnit)
    assert tree.args["privacy"].this == exp.column("u")
    for table in tree.find_all(exp.Table):
        assert table.alias == ""
    for subquery in tree.find_all(exp.Subquery):
        assert subquery.alias == ""


def test_explicit_alias_named_privacy_unit_is_still_an_alias() -> None:
    tree = read("SELECT COUNT(*) FROM t AS privacy_unit")
    assert tree.find(exp.Table).alias == "privacy_unit"
    assert tree.args.get("privacy") is None


def test_clause_is_not_a_column_alias() -> None:
    """In FROM-first form the clause follows the select list directly."""
    tree = read("FROM t SELECT COUNT(*) PRIVACY_UNIT u BOUND ROWS 5")
    assert tree.selects[0].alias == ""
    assert isinstance(tree.args.get("privacy"), PrivacyUnit)


# -- SQL without the clause is DuckDB SQL ----------------------------------------------------

PLAIN_DUCKDB = [
    "SELECT 1",
    "SELECT a, b FROM t WHERE a > 1 AND b BETWEEN 2 AND 3",
    "SELECT a, COUNT(*) FROM t GROUP BY a HAVING COUNT(*) > 1 ORDER BY 2 DESC LIMIT 10 OFFSET 5",
    "SELECT a, SUM(b) FROM t GROUP BY ALL ORDER BY ALL",
    "SELECT a, SUM(b) FROM t GROUP BY ALL",
    "SELECT a AS privacy_unit FROM t",
    "SELECT privacy_unit, epsilon, bound, clamped, max_groups, delta FROM t",
    "SELECT epsilon.x FROM t AS epsilon",
    "SELECT x FROM t bound",
    "SELECT x FROM t AS delta JOIN s max_groups ON delta.a = max_groups.a",
    "SELECT clamped FROM t WHERE clamped BETWEEN 0 AND 1",
    "SELECT * EXCLUDE (a) FROM t",
    "SELECT * REPLACE (a + 1 AS a) FROM t",
    "SELECT COLUMNS('a.*') FROM t",
    "SELECT list_transform([1, 2, 3], x -> x + 1)",
    "SELECT list_filter(l, x -> x BETWEEN 1 AND 2) FROM t",
    "SELECT {'a': 1, 'b': [1, 2]} AS s",
    "SELECT a, ROW_NUMBER() OVER (PARTITION BY b ORDER BY c) AS r FROM t QUALIFY r = 1",
    "SELECT SUM(a) OVER w FROM t WINDOW w AS (PARTITION BY b)",
    "SELECT * FROM t USING SAMPLE 10%",
    "SELECT * FROM t TABLESAMPLE 10%",
    "SELECT * FROM t ASOF JOIN s ON t.a = s.a AND t.ts >= s.ts",
    "SELECT * FROM t POSITIONAL JOIN s",
    "SELECT * FROM read_parquet('x/*.parquet', hive_partitioning = true) AS f",
    "SELECT * FROM read_csv('x.csv', header = true, delim = ';')",
    "SELECT * FROM 'data.parquet'",
    "FROM t",
    "FROM t SELECT a WHERE b > 1",
    "WITH c AS (SELECT a FROM t) SELECT * FROM c",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
    "SELECT * FROM (SELECT a FROM t) AS s WHERE a IN (SELECT b FROM u)",
    "SELECT EXISTS(SELECT 1 FROM t)",
    "SELECT a FROM t UNION ALL SELECT a FROM s",
    "SELECT a FROM t UNION BY NAME SELECT a FROM s",
    "SELECT a FROM t INTERSECT SELECT a FROM s",
    "SELECT a FROM t EXCEPT SELECT a FROM s",
    "SELECT QUANTILE_CONT(x, 0.9), MEDIAN(x), APPROX_COUNT_DISTINCT(x), histogram(x) FROM t",
    "SELECT STRING_AGG(a, ',' ORDER BY b) FROM t",
    "SELECT COUNT(*) FILTER (WHERE a > 1) FROM t",
    "SELECT CAST(a AS DECIMAL(10, 2)), a::INTEGER, TRY_CAST(a AS DOUBLE) FROM t",
    "SELECT CASE WHEN a > 0 THEN 'p' WHEN a < 0 THEN 'n' ELSE 'z' END FROM t",
    "SELECT a FROM t GROUP BY ROLLUP (a)",
    "SELECT a FROM t GROUP BY CUBE (a, b)",
    "SELECT a FROM t GROUP BY GROUPING SETS ((a), ())",
    "SELECT DISTINCT ON (a) a, b FROM t",
    "SELECT -1.5e3, 1e-6, 0.5, .5",
    "SELECT DATE '2024-01-01' + INTERVAL 1 DAY",
    "SELECT a FROM t ORDER BY a NULLS FIRST",
    "CREATE TABLE x AS SELECT 1",
    "INSERT INTO t VALUES (1, 'a')",
    "UPDATE t SET a = 1 WHERE b = 2",
    "DELETE FROM t WHERE a = 1",
    "DROP TABLE t",
    "DESCRIBE t",
    "PIVOT t ON a USING SUM(b)",
]


@pytest.mark.parametrize("sql", PLAIN_DUCKDB)
def test_plain_duckdb_reads_and_prints_like_duckdb(sql: str) -> None:
    ours = read(sql)
    theirs = sqlglot.parse_one(sql, read="duckdb")
    assert ours == theirs
    assert to_sql(ours) == theirs.sql(dialect="duckdb")
    assert ours.find(PrivacyUnit) is None
    assert ours.find(Clamped) is None


# -- syntax errors ----------------------------------------------------------------------------

BASE = "SELECT COUNT(*) FROM t"

SYNTAX_ERRORS = {
    # the clause twice
    "clause-twice": f"{BASE} PRIVACY_UNIT u PRIVACY_UNIT u",
    "clause-twice-other-unit": f"{BASE} PRIVACY_UNIT u PRIVACY_UNIT v",
    "clause-twice-around-where": f"{BASE} PRIVACY_UNIT u WHERE x > 1 PRIVACY_UNIT u",
    "clause-twice-around-group": "SELECT a, COUNT(*) FROM t PRIVACY_UNIT u GROUP BY a "
    "PRIVACY_UNIT u",
    "clause-twice-around-limit": f"{BASE} PRIVACY_UNIT u EPSILON 1 LIMIT 1 PRIVACY_UNIT u",
    # an option twice
    "bound-twice": f"{BASE} PRIVACY_UNIT u BOUND ROWS 5 BOUND ROWS 5",
    "bound-twice-different": f"{BASE} PRIVACY_UNIT u BOUND ROWS 5 BOUND CLIP",
    "max-groups-twice": f"{BASE} PRIVACY_UNIT u MAX_GROUPS 1 MAX_GROUPS 2",
    "epsilon-twice": f"{BASE} PRIVACY_UNIT u EPSILON 1 EPSILON 1",
    "epsilon-twice-apart": f"{BASE} PRIVACY_UNIT u EPSILON 1 BOUND ROWS 5 EPSILON 2",
    "epsilon-twice-across-where": f"{BASE} PRIVACY_UNIT u EPSILON 1 WHERE x > 1 EPSILON 2",
    "delta-twice": f"{BASE} PRIVACY_UNIT u DELTA 1e-6 DELTA 1e-7",
    # unknown or malformed BOUND
    "bound-unknown-strategy": f"{BASE} PRIVACY_UNIT u BOUND SAMPLE 5",
    "bound-unknown-word": f"{BASE} PRIVACY_UNIT u BOUND FOO",
    "bound-number-only": f"{BASE} PRIVACY_UNIT u BOUND 5",
    "bound-nothing": f"{BASE} PRIVACY_UNIT u BOUND",
    "bound-rows-no-number": f"{BASE} PRIVACY_UNIT u BOUND ROWS",
    "bound-rows-string": f"{BASE} PRIVACY_UNIT u BOUND ROWS 'five'",
    "bound-clip-with-number": f"{BASE} PRIVACY_UNIT u BOUND CLIP 5",
    "bound-auto-with-number": f"{BASE} PRIVACY_UNIT u BOUND AUTO 5",
    # option values that are not numbers
    "epsilon-missing": f"{BASE} PRIVACY_UNIT u EPSILON",
    "epsilon-word": f"{BASE} PRIVACY_UNIT u EPSILON AUTO",
    "epsilon-nan": f"{BASE} PRIVACY_UNIT u EPSILON NaN",
    "epsilon-string": f"{BASE} PRIVACY_UNIT u EPSILON '0.5'",
    "epsilon-expression": f"{BASE} PRIVACY_UNIT u EPSILON 1 + 1",
    "delta-column": f"{BASE} PRIVACY_UNIT u DELTA x",
    # the unit
    "unit-missing": f"{BASE} PRIVACY_UNIT",
    "unit-missing-before-where": f"{BASE} PRIVACY_UNIT WHERE x > 1",
    "unit-number": f"{BASE} PRIVACY_UNIT 5",
    "unit-string": f"{BASE} PRIVACY_UNIT 'u'",
    "unit-star": f"{BASE} PRIVACY_UNIT *",
    "unit-function": f"{BASE} PRIVACY_UNIT f(u)",
    "unit-expression": f"{BASE} PRIVACY_UNIT u + 1",
    # CLAMPED
    "clamped-one-bound": "SELECT SUM(x CLAMPED BETWEEN 0) FROM t PRIVACY_UNIT u",
    "clamped-no-high": "SELECT SUM(x CLAMPED BETWEEN 0 AND) FROM t PRIVACY_UNIT u",
    "clamped-no-between": "SELECT SUM(x CLAMPED 0 AND 1) FROM t PRIVACY_UNIT u",
    "clamped-twice": "SELECT SUM(x CLAMPED BETWEEN 0 AND 1 CLAMPED BETWEEN 0 AND 2) FROM t "
    "PRIVACY_UNIT u",
    "clamped-outside-aggregate": "SELECT SUM(x) CLAMPED BETWEEN 0 AND 1 FROM t PRIVACY_UNIT u",
}


@pytest.mark.parametrize("sql", SYNTAX_ERRORS.values(), ids=SYNTAX_ERRORS.keys())
def test_parse_error(sql: str) -> None:
    with pytest.raises(ParseError):
        read(sql)


@pytest.mark.parametrize("sql", SYNTAX_ERRORS.values(), ids=SYNTAX_ERRORS.keys())
def test_syntax_error_is_a_privacy_error(sql: str) -> None:
    with pytest.raises(QuerySyntaxError) as info:
        parse(sql)
    assert isinstance(info.value, PrivacyError)
    assert str(info.value).startswith("[syntax]")


def test_duplicate_option_message_names_the_option() -> None:
    with pytest.raises(QuerySyntaxError, match="EPSILON"):
        parse(f"{BASE} PRIVACY_UNIT u EPSILON 1 EPSILON 2")


def test_duplicate_clause_message_names_the_clause() -> None:
    with pytest.raises(QuerySyntaxError, match="PRIVACY_UNIT"):
        parse(f"{BASE} PRIVACY_UNIT u WHERE x > 1 PRIVACY_UNIT u")


def test_unknown_strategy_message_lists_the_strategies() -> None:
    with pytest.raises(QuerySyntaxError) as info:
        parse(f"{BASE} PRIVACY_UNIT u BOUND SAMPLE 5")
    for strategy in ("ROWS", "WEIGHTS", "CLIP", "AUTO"):
        assert strategy in str(info.value)


@pytest.mark.parametrize(
    "clause", ["MAX_GROUPS AUTO", "BOUND ROWS AUTO MAX_GROUPS AUTO", "MAX_GROUPS auto EPSILON 1"]
)
def test_max_groups_auto_reads_as_not_given(clause: str) -> None:
    from rewriter.options import read_options

    tree = parse(f"SELECT g, COUNT(*) FROM t GROUP BY g PRIVACY_UNIT u {clause}")
    assert read_options(tree.args["privacy"]).max_groups is None
    assert "MAX_GROUPS AUTO" in to_sql(tree)
