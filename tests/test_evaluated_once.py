"""Each expression the analyst wrote runs once per row in every private statement.

The generated statements clamp, grid, square, test and hash what the analyst's expressions
return; were they to spell an expression again for each use, one row would cost many times
the work ``rewriter.growth`` counts (red team 9 timed a VARIANCE of a regular expression at
7–9× one pass). ``generate._rows`` projects each distinct aggregate argument and key once,
and everything after reads the columns it names (docs/privacy.md section 8). Checked two
ways over many query shapes, in every statement a query runs (bounds, MAX_GROUPS and cap
searches, release):

- in the SQL text: each aggregate argument, key and WHERE or join condition the analyst
  wrote occurs at most once per statement (exactly once in the release where it is used);
- in DuckDB's execution: a function that counts its calls, put where the analyst's
  function is, runs once per row read, so DuckDB does not spell the layers out again.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from exact_release import IDENTITY, install
from sqlglot import exp, parse_one
from test_accepted_shapes import SHAPES, TABLES

import privsql
from privsql.session import FUNCTIONS
from rewriter.analyze import Analysis, analyze
from rewriter.compiler import Decided, Search, compile_all
from rewriter.dialect import to_sql

SETTINGS = {"epsilon": 1.0, "delta": 1e-6, "functions": FUNCTIONS}

NOTES = """
CREATE TABLE notes AS SELECT i % 97 AS uid, i % 13 AS item, (i % 11) * 0.5 AS rating,
    'n' || (i % 31) || repeat('ab', i % 7) AS note, DATE '2024-01-01' + (i % 300)::INT AS day
FROM range(3000) AS r(i);
CREATE TABLE shops AS SELECT i AS item, 'shop' || (i % 4) AS shop FROM range(13) AS r(i);
"""

COMPUTED = "abs(rating - 2) * 2"
"""An aggregate argument that is an expression (it is its own SQL in the statement)."""

WIDE = (
    f"SELECT AVG({COMPUTED} CLAMPED BETWEEN 0 AND 10), "
    f"STDDEV({COMPUTED} CLAMPED BETWEEN 0 AND 10), "
    f"MEDIAN({COMPUTED} CLAMPED BETWEEN 0 AND 10), "
    "VARIANCE(length(note) CLAMPED BETWEEN 0 AND 20), "
    "COUNT_IF(note LIKE 'n1%'), COUNT(nullif(item % 5, 0)) "
    "FROM notes WHERE length(note) > 2"
)
"""The brief's shape: one argument under four aggregates, with a square, a count and a
histogram of it, and a condition."""

QUERIES = [
    pytest.param(f"{WIDE} PRIVACY_UNIT uid BOUND ROWS 3", None, id="rows"),
    pytest.param(f"{WIDE} PRIVACY_UNIT uid BOUND WEIGHTS 3", None, id="weights"),
    pytest.param(f"{WIDE} PRIVACY_UNIT uid", None, id="rows-auto"),
    pytest.param(f"{WIDE} PRIVACY_UNIT uid BOUND WEIGHTS AUTO", None, id="weights-auto"),
    pytest.param(
        f"SELECT AVG({COMPUTED} CLAMPED BETWEEN 0 AND 10), COUNT(nullif(item % 5, 0)) "
        "FROM notes WHERE length(note) > 2 PRIVACY_UNIT uid BOUND CLIP",
        None,
        id="clip",
    ),
    pytest.param(
        f"SELECT SUM({COMPUTED}), AVG(length(note)), QUANTILE(rating * 3, 0.9) "
        "FROM notes WHERE note LIKE '%ab%' PRIVACY_UNIT uid BOUND AUTO",
        None,
        id="bounds-auto",
    ),
    pytest.param(
        "SELECT item % 3 AS k, upper(left(note, 2)) AS p, "
        f"SUM({COMPUTED} CLAMPED BETWEEN 0 AND 9), AVG(item % 3 CLAMPED BETWEEN 0 AND 2), "
        "MEDIAN(length(note) CLAMPED BETWEEN 0 AND 20) "
        "FROM notes GROUP BY item % 3, upper(left(note, 2)) "
        "PRIVACY_UNIT uid BOUND ROWS 4 MAX_GROUPS 2",
        {"k": [0, 1, 2], "p": ["N1", "N2"]},
        id="computed-keys-listed",
    ),
    pytest.param(
        f"SELECT item % 3 AS k, SUM({COMPUTED} CLAMPED BETWEEN 0 AND 9) FROM notes "
        "GROUP BY item % 3 PRIVACY_UNIT uid BOUND WEIGHTS AUTO MAX_GROUPS AUTO",
        {"k": [0, 1, 2]},
        id="computed-key-max-groups-auto",
    ),
    pytest.param(
        f"SELECT date_trunc('month', day) AS m, AVG({COMPUTED} CLAMPED BETWEEN 0 AND 9) "
        "FROM notes GROUP BY date_trunc('month', day) PRIVACY_UNIT uid BOUND ROWS 2 EPSILON 5",
        None,
        id="computed-key-partition-selection",
    ),
    pytest.param(
        f"SELECT s.shop, AVG({COMPUTED} CLAMPED BETWEEN 0 AND 9), COUNT_IF(n.note LIKE '%b') "
        "FROM notes AS n JOIN shops AS s ON n.item % 13 = s.item AND length(s.shop) > 1 "
        "WHERE n.rating > 1 AND n.note <> 'x' GROUP BY s.shop PRIVACY_UNIT n.uid BOUND ROWS 3",
        {"shop": ["shop0", "shop1", "shop2", "shop3"]},
        id="join-public",
    ),
    pytest.param(
        "SELECT VAR_POP(y CLAMPED BETWEEN 0 AND 9), SUM(y * 2 CLAMPED BETWEEN 0 AND 9) FROM "
        f"(SELECT uid, {COMPUTED} AS y FROM notes WHERE length(note) > 3) AS q "
        "WHERE y > 1 PRIVACY_UNIT uid BOUND WEIGHTS AUTO",
        None,
        id="derived-table",
    ),
]


def placeholder(search: Search, decided: Decided) -> Decided:
    """A decision for each search, as ``explain`` assumes one (no data read)."""
    if search.step == "bounds":
        assert search.estimating is not None
        bounds = {to_sql(a.node): (0.0, 10.0) for a in search.estimating.aggregates}
        return Decided(bounds=bounds, spent=search.estimating.epsilon, groups=decided.groups)
    if search.step == "groups":
        return Decided(decided.bounds, decided.spent, groups=2)
    assert search.plan is not None and search.plan.search is not None
    caps = dict.fromkeys(search.plan.search.rules, 5)
    return Decided(decided.bounds, decided.spent, decided.groups, caps=caps)


def statements(analysis: Analysis, **settings) -> list[tuple[str, str]]:
    """Every statement the query runs, as (step, SQL): the searches, then the release."""
    final, searches = compile_all(analysis, **(SETTINGS | settings), decide=placeholder)
    assert final.stages is not None
    return [(s.step, s.statement) for s in searches] + [("release", final.stages.statement())]


def written(analysis: Analysis) -> set[str]:
    """The SQL of each expression the analyst wrote at the query's own level (columns aside:
    reading one costs nothing): aggregate arguments, keys, WHERE and join conditions."""
    nodes = [a.argument for a in analysis.aggregates if a.argument is not None]
    nodes += [k.expression for k in analysis.keys]
    where = analysis.select.args.get("where")
    conditions = [where.this] if where is not None else []
    conditions += [
        j.args["on"] for j in analysis.select.args.get("joins") or [] if j.args.get("on")
    ]
    for condition in conditions:
        nodes += condition.flatten() if isinstance(condition, exp.And) else [condition]
    return {_sql(n) for n in nodes if not isinstance(n, (exp.Column, exp.Literal))}


def occurrences(statement: str, expressions: set[str]) -> dict[str, int]:
    """How often each expression occurs in the statement, outermost first: an occurrence
    inside another listed expression's occurrence is that one's, not counted again."""
    counts = dict.fromkeys(expressions, 0)
    pending = [parse_one(statement, read="duckdb")]
    while pending:
        node = pending.pop()
        text = _sql(node) if not isinstance(node, exp.Query) else None
        if text in counts:
            counts[text] += 1
            continue
        pending.extend(node.iter_expressions())
    return counts


def _sql(node: exp.Expr) -> str:
    return node.sql(dialect="duckdb")


@pytest.fixture(scope="module")
def notes() -> privsql.Session:
    con = duckdb.connect()
    con.execute(NOTES)
    db = privsql.connect(con, budget=100)
    db.public("shops")
    return db


@pytest.fixture(scope="module")
def visits() -> privsql.Session:
    con = duckdb.connect()
    con.execute(TABLES)
    db = privsql.connect(con, budget=100)
    db.protect("visits", privacy_unit="user_id", bounds={"amount": (0, 50)})
    db.protect("orders", privacy_unit="uid", bounds={"total": (0, 10)})
    db.public("sites")
    db.public("dup")
    return db


def assert_each_once(analysis: Analysis) -> None:
    expressions = written(analysis)
    for step, statement in statements(analysis):
        counts = occurrences(statement, expressions)
        assert all(n <= 1 for n in counts.values()), (step, counts)
        if step == "release":
            arguments = {_sql(a.argument) for a in analysis.aggregates if a.argument is not None}
            assert all(counts[a] == 1 for a in arguments & expressions), (step, counts)


@pytest.mark.parametrize(("sql", "keys"), QUERIES)
def test_each_expression_occurs_once_in_every_statement(notes, sql, keys) -> None:
    assert_each_once(analyze(sql, notes._catalog(), keys))


def test_the_count_finds_each_expression_and_every_repetition(notes) -> None:
    """The count is not vacuous: in the release of the brief's shape it finds all five
    expressions (one argument under four aggregates among them), and it counts an
    expression spelled twice, even inside another, twice."""
    analysis = analyze(f"{WIDE} PRIVACY_UNIT uid BOUND ROWS 3", notes._catalog())
    [(_, release)] = statements(analysis)
    assert occurrences(release, written(analysis)) == dict.fromkeys(written(analysis), 1)
    assert len(written(analysis)) == 5
    twice = occurrences("SELECT TRY(a + 1), CASE WHEN a + 1 > 2 THEN 0 END FROM t", {"a + 1"})
    assert twice == {"a + 1": 2}


@pytest.mark.parametrize(("sql", "keys", "expected"), SHAPES)
def test_each_expression_occurs_once_in_every_accepted_shape(visits, sql, keys, expected) -> None:
    if "{other}" in sql:
        pytest.skip("reads a Parquet file written by test_accepted_shapes")
    assert_each_once(analyze(sql, visits._catalog(), keys))


COUNTED = [
    "SELECT AVG(length(note) CLAMPED BETWEEN 0 AND 10), VARIANCE(length(note) CLAMPED BETWEEN "
    "0 AND 10), MEDIAN(length(note) CLAMPED BETWEEN 0 AND 10), COUNT(length(note)) "
    f"FROM notes WHERE rating > 1 PRIVACY_UNIT uid {bound}"
    for bound in ("BOUND ROWS 3", "BOUND WEIGHTS 3", "", "BOUND WEIGHTS AUTO MAX_GROUPS AUTO")
] + [
    "SELECT item % 3 AS k, SUM(length(note)), QUANTILE(length(note), 0.2) FROM notes "
    "WHERE rating > 1 GROUP BY item % 3 PRIVACY_UNIT uid BOUND AUTO MAX_GROUPS AUTO",
    "SELECT AVG(length(note) CLAMPED BETWEEN 0 AND 10), COUNT(length(note)) FROM notes "
    "WHERE rating > 1 PRIVACY_UNIT uid BOUND CLIP",
]
"""Queries whose only call of ``length`` is one argument, however many aggregates use it."""


@pytest.fixture(scope="module", params=["common_subexpressions", ""], ids=["no-cse", "default"])
def counting(request) -> tuple[privsql.Session, duckdb.DuckDBPyConnection, list[int]]:
    """``notes`` with the identity release functions and ``counted``, a ``length`` that
    counts the rows it is called on; with DuckDB's elimination of common subexpressions
    off, what is counted is what the SQL spells, whatever the engine's optimiser does (and
    with every optimiser on, what runs by default)."""
    con = duckdb.connect()
    con.execute(NOTES)
    con.execute(f"SET disabled_optimizers = '{request.param}'")
    install(con)
    calls = [0]

    def counted(values: pa.Array) -> pa.Array:
        calls[0] += len(values)
        return pc.utf8_length(values)

    con.create_function(
        "counted", counted, [duckdb.sqltype("VARCHAR")], duckdb.sqltype("BIGINT"), type="arrow"
    )
    return privsql.connect(con, budget=100), con, calls


@pytest.mark.parametrize("sql", COUNTED)
def test_duckdb_runs_each_argument_once_per_row_read(counting, sql) -> None:
    """Every statement calls the argument's function once per row it reads (or never, when
    it needs no value: DuckDB drops unused columns) — the clamp, the square, the count,
    the histogram, the bounds search and a re-read of the rows add no call."""
    db, con, calls = counting
    rows = con.execute("SELECT count(*) FROM notes WHERE rating > 1").fetchone()[0]
    keys = {"k": [0, 1, 2]} if "GROUP BY" in sql else None
    done = statements(analyze(sql, db._catalog(), keys), functions=IDENTITY)
    for step, statement in done:
        assert statement.count("LENGTH(") == 1, step
        calls[0] = 0
        counted = statement.replace("LENGTH(", "counted(")
        con.execute(counted, {"privsql_secret": 7} if "$privsql_secret" in counted else None)
        assert calls[0] in ((0, rows) if step != "release" else (rows,)), (step, calls[0])
