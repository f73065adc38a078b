"""Neighbour-differential fuzzing: nothing observable but noisy values depends on one unit.

SPEC §1 (threat model): whether a query succeeds or fails, what its messages say, its
output schema and — when every group key is public — how many rows it returns never
depend on any one privacy unit's rows. This test checks that black-box, on two databases
that are neighbours: D, and D' = D plus one extra unit (``u = 41``) whose 300 rows hold
planted extreme and malformed values (strings that fail casts, '', '%', '\\', 'ÿ', a
marker string, impossible dates, 400-digit numbers, ±1e308, NaN, ±inf, INTEGER, BIGINT
and HUGEINT extremes, zero divisors, infinite and extreme dates, NULLs, broken JSON,
empty and NULL-holding lists) in the private table ``t``, its twin ``t2`` and the Parquet
copy of ``t``.

A hypothesis grammar builds ordinary and hostile privsql queries (DP aggregates over
row-level expressions that can fail, failing WHERE conditions, public and private GROUP
BY keys, CTEs — also named like the tables, nested in derived tables, with column lists
— stars with EXCLUDE/REPLACE/RENAME, joins of every kind, set operations of every kind
(also with another column in the unit's place, mixed types, ORDER BY/LIMIT, BY NAME),
file readers, variables, post-processing that fails, every BOUND option, MAX_GROUPS, wrong
units). Each query runs on both sessions and the test asserts:

* the same outcome class (success, or the exception's type);
* byte-identical error text (nothing is masked);
* the same output column names and Arrow types;
* the same row count when there is no GROUP BY or every key is public (a ``keys=``
  list, or ``p.name`` from the public table ``p``), and the same row order of every
  column that holds the same values on both, unless the query orders by (noisy) values
  (the keys: a listed key no unit of D holds came last on D and in its place on D');
* no planted marker in any message or anywhere in an exception chain.

Exemptions, narrow by construction rather than by filtering: post-processing thresholds
(``CASE WHEN COUNT(*) > …``, ``HAVING``) are either always or never met on both
databases (-1 or 10⁹), and queries run at EPSILON 1e6, so a post-processing failure or a
HAVING never depends on how the planted unit moves a released value. Row counts are not
compared for non-public keys (partition selection is randomised). The violations this
test found (``FORMER_VIOLATIONS``: errors that escape TRY, memory that depends on one
unit's sizes) are now refused from their SQL by the row-level allow-list
(``rewriter/functions.py``), and are checked here explicitly. Generated queries with a
size-from-data shape (``MEMORY_HUNGRY``) are left to those explicit checks, which run in
a child process with a capped address space: before the allow-list, one took the whole
test process to 24 GB.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import privsql

MARKERS = ("PLANTED_fz31", "9" * 40)
"""Planted private values that no message may ever quote."""
PLANTED_UNIT = 41
PLANTED_ROWS = 300

BASE = """
CREATE TABLE t AS
SELECT (i % 40 + 1)::INTEGER AS u,
       ['a', 'b', 'c'][i % 3 + 1] AS g,
       (i % 5 + 1)::INTEGER AS k,
       (i % 50)::DOUBLE AS x,
       (i % 20)::VARCHAR AS s,
       DATE '2020-01-01' + (i % 100)::INTEGER AS d,
       [i % 7, i % 3]::INTEGER[] AS l,
       i::HUGEINT AS big,
       i::BIGINT AS bi,
       '{"a": ' || (i % 4) || '}' AS j
FROM range(800) AS r(i);
CREATE TABLE t2 AS
SELECT (i % 40 + 1)::INTEGER AS u, (i % 10)::DOUBLE AS y FROM range(80) AS r(i);
CREATE TABLE p AS
SELECT * FROM (VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (3, 'three'), (4, 'four'),
                      (5, 'five')) AS v(k, name);
"""


def _pick(values: list[str], i: str = "i") -> str:
    """A SQL expression cycling through ``values`` as ``i`` grows."""
    return f"[{', '.join(values)}][{i} % {len(values)} + 1]"


_S = [
    "'abc'",
    "''",
    "'%'",
    "'\\'",
    "'ÿ'",
    "'PLANTED_fz31'",
    "'2013-13-45'",
    f"'{'9' * 400}'",
    "'{'",
    "'[1,'",
    "'a\\%'",
    "NULL",
]
_X = [
    "1e308",
    "-1e308",
    "'nan'::DOUBLE",
    "'inf'::DOUBLE",
    "'-inf'::DOUBLE",
    "0.0",
    "NULL",
    "5e-324",
]
_K = ["0", "2147483647", "-2147483648", "NULL", "1"]
_D = [
    "'infinity'::DATE",
    "'-infinity'::DATE",
    "DATE '5881580-07-10'",
    "DATE '-5877641-06-25'",
    "NULL",
]
_L = [
    "[]::INTEGER[]",
    "NULL::INTEGER[]",
    "[NULL]::INTEGER[]",
    "[2147483647, 2147483647]",
    "[-2147483648]",
]
_G = ["'PLANTED_fz31'", "'a'", "NULL", "''"]
_BIG = [str(2**127 - 1), str(-(2**127)), "0", "NULL"]
_BI = [str(2**63 - 1), str(-(2**63)), "0", "NULL"]
_J = ["'{'", "'[1,'", "'null'", "'{\"a\": 1e999}'", "''", "NULL"]
_Y = ["1e308", "'nan'::DOUBLE", "'inf'::DOUBLE", "'-inf'::DOUBLE", "NULL", "0.0"]

PLANTED = f"""
INSERT INTO t SELECT {PLANTED_UNIT}, {_pick(_G)}, {_pick(_K)}, {_pick(_X)}, {_pick(_S)},
    {_pick(_D)}, {_pick(_L)}, {_pick(_BIG)}::HUGEINT, {_pick(_BI)}::BIGINT, {_pick(_J)}
FROM range({PLANTED_ROWS}) AS r(i);
INSERT INTO t2 SELECT {PLANTED_UNIT}, {_pick(_Y)} FROM range({PLANTED_ROWS}) AS r(i);
"""


def make_session(directory: Path, planted: bool) -> privsql.Session:
    """D (``planted=False``) or its neighbour D' (one more unit of planted values).

    Each database keeps its own ``t.parquet`` and ``t.csv`` in ``directory``, found through
    DuckDB's ``file_search_path`` so that both run byte-identical SQL.
    """
    directory.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(BASE)
    if planted:
        con.execute(PLANTED)
    con.execute(f"COPY t TO '{directory / 't.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY t TO '{directory / 't.csv'}' (FORMAT csv, HEADER)")
    con.execute(f"SET file_search_path = '{directory}'")
    con.execute("SET VARIABLE x = 3")
    con.execute("SET memory_limit = '1GB'")  # does not bound every allocation: MEMORY_HUNGRY
    db = privsql.connect(con, budget=1e9, seed=31, insecure=True)
    db.protect("t", privacy_unit="u")
    db.protect("t2", privacy_unit="u")
    db.protect("read_parquet('t.parquet')", privacy_unit="u")
    db.public("p")
    return db


@dataclass(frozen=True)
class Outcome:
    """What an analyst observes of one query, apart from the noisy values."""

    kind: str
    message: str = ""
    columns: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    rows: int = 0
    chain: str = ""
    values: tuple[tuple[str, ...], ...] = ()
    """Each column's values in row order (their reprs)."""


def run(db: privsql.Session, sql: str, keys: dict[str, list] | None) -> Outcome:
    """Run ``sql`` and record its outcome; every exception is caught."""
    try:
        result = db.sql(sql, keys=keys)
        table = result.arrow()
    except Exception as error:  # the type is the outcome class
        chain = "".join(traceback.format_exception(error))
        return Outcome(type(error).__name__, str(error), chain=chain)
    return Outcome(
        "success",
        columns=tuple(table.column_names),
        types=tuple(str(t) for t in table.schema.types),
        rows=table.num_rows,
        values=tuple(tuple(map(repr, c.to_pylist())) for c in table.columns),
    )


# -- the grammar ------------------------------------------------------------------------------

NUMERIC = [
    "x",
    "k",
    "CAST(s AS INT)",
    "x / k",
    "k // k",
    "len(s)",
    "TRY(CAST(s AS INT))",
    "big",
    "bi",
    "big * 1000",
    "bi + bi",
    "l[1]",
    "list_reduce(l, (a, b) -> a + b)",
    "k * 2147483647",
    "abs(x)",
    "ln(x)",
    "sqrt(x - 10)",
    "CAST(s AS DECIMAL(4, 2))",
    "CAST(s AS TINYINT) + 127",
    "CAST(j ->> 'a' AS INT)",
    "json_extract(j, '$.a')::INT",
    "len(l)",
    "year(d)",
    "d - DATE '2020-01-01'",
    "CAST(x AS INT)",
    "y",
    "CAST(strftime(d, '%Y') AS INT)",
    "array_reduce(l, (a, b) -> a)",
    "len(range(k))",
    "len(repeat(s, k))",
    "len(lpad(s, k, 'x'))",
    "list_sum(l)",
    "l[k]",
    "len(s[1:k])",
    "len(regexp_replace('abc', s, 'x'))",
    "date_part(s, d)",
]
CONDITIONS = [
    "CAST(s AS INT) > 3",
    "x / k > 1",
    "len(s) > 2",
    "s LIKE 'a%'",
    "regexp_matches(s, 'a.*')",
    "d + k > DATE '2020-01-01'",
    "l[1] > 0",
    "list_reduce(l, (a, b) -> a + b) > 0",
    "like_escape(s, 'a', '\\\\')",
    "strftime(d, '%Y') = '2020'",
    "TRY(CAST(s AS INT)) > 3",
    "x > 10",
    "g = 'a'",
    "k IN (1, 2)",
    "CAST(s AS DATE) > DATE '2020-01-01'",
    "json_valid(j)",
    "CAST(j AS JSON) ->> 'a' = '1'",
    "big > 0",
    "CAST(big AS BIGINT) > 1",
    "x::INT > 0",
    "s ILIKE '%9%'",
    "starts_with(s, '1')",
    "k % 0 = 1",
    "s = $x",
    "k > getvariable('x')",
    "current_setting('threads') > 0",
    "l[1:1] = [1]",
    "array_length(l) > 1",
    "CAST(d AS TIMESTAMP) > TIMESTAMP '2020-01-01'",
    "y > 1",
    "u > 0",
    "regexp_extract(s, '(\\d+)', 1) = '1'",
    "error(s) IS NULL",
    "'a' LIKE s ESCAPE '\\'",
    "like_escape('a', s, '\\')",
    "regexp_matches('abc', s)",
    "'abc' SIMILAR TO s",
    "strptime(s, '%Y') > TIMESTAMP '2000-01-01'",
    "from_base64(s) IS NULL",
    "CAST(j AS STRUCT(a INT)) IS NULL",
    "json_extract(j, s) IS NULL",
    "make_date(k, k, k) > DATE '2000-01-01'",
    "d + INTERVAL (k) YEAR > DATE '2000-01-01'",
    "chr(k) = 'a'",
    "factorial(k) > 0",
    "strftime(d, s) = 'x'",
    "s = (SELECT name FROM p)",
    "k IN (SELECT k FROM p)",
    "u IN (SELECT u FROM t2)",
    "x > (SELECT MAX(y) FROM t2)",
    "setseed(x / 1e400) IS NULL",
    "map([s, s], [1, 2]) IS NULL",
    "l::INTEGER[2] IS NULL",
    "split_part(s, '', k) = 'a'",
    "to_base(k, k) = 'a'",
    "d + to_centuries(k) > DATE '2000-01-01'",
]
SOURCES = [
    "t",
    "t AS a",
    "(SELECT * FROM t) AS sub",
    "(SELECT * EXCLUDE (j) FROM t) AS sub",
    "(SELECT * REPLACE (x * 2 AS x) FROM t) AS sub",
    "(SELECT * RENAME (x AS xx) FROM t) AS sub",
    "(SELECT u, g, k, x, s, d, l, big, bi, j FROM t) AS sub(u, g, k, x, s, d, l, big, bi, j)",
    "(WITH q AS (SELECT * FROM t) SELECT * FROM q) AS sub",
    "(SELECT * FROM t WHERE CAST(s AS INT) > 1) AS sub",
    "(SELECT g, k, x FROM t) AS sub",
    "t JOIN t2 ON t.u = t2.u",
    "t JOIN t2 USING (u)",
    "t NATURAL JOIN t2",
    "t LEFT JOIN t2 USING (u)",
    "t RIGHT JOIN t2 USING (u)",
    "t FULL JOIN t2 USING (u)",
    "t CROSS JOIN t2",
    "t JOIN t2 ON t.k = t2.u",
    "t JOIN p ON t.k = p.k",
    "t LEFT JOIN p USING (k)",
    "t RIGHT JOIN p USING (k)",
    "t FULL JOIN p USING (k)",
    "t NATURAL JOIN p",
    "t CROSS JOIN p",
    "read_parquet('t.parquet')",
    "read_parquet('t.parquet') AS f JOIN t2 USING (u)",
    "read_csv('t.csv')",
    "read_csv_auto('t.csv')",
    "t2",
    "p",
    "t, t2 WHERE t.u = t2.u",
    "t JOIN p USING (k)",
    "p LEFT JOIN t USING (k)",
    "t SEMI JOIN t2 USING (u)",
    "t ANTI JOIN t2 USING (u)",
    "t ASOF JOIN t2 ON t.u = t2.u AND t.x >= t2.y",
    "t POSITIONAL JOIN t2",
    "t, unnest(l) AS z(e)",
    "(SELECT u, unnest(l) AS k FROM t) AS sub",
    "(FROM t SELECT u, k, x) AS sub",
    "(SELECT COLUMNS('[ukx]') FROM t) AS sub",
    "'t.parquet'",
    "read_parquet(['t.parquet', 't.parquet'])",
    "parquet_scan('t.parquet')",
    "read_parquet('t.parquet', filename = true)",
    "(SELECT u, k, x FROM t UNION ALL SELECT u, k, x FROM t WHERE CAST(s AS INT) > 1) AS sub",
    "(SELECT u, x FROM t UNION ALL SELECT u, y FROM t2) AS sub",
    "(SELECT u, x FROM t UNION SELECT u, y FROM t2) AS sub",
    "(SELECT u, x FROM t EXCEPT SELECT u, y FROM t2) AS sub",
    "(SELECT u, x FROM t INTERSECT ALL (SELECT u, y FROM t2 UNION ALL SELECT u, x FROM t)) AS sub",
    "(SELECT u, k, s FROM t EXCEPT ALL SELECT u, k, s FROM t WHERE len(s) > 2) AS sub",
    "(SELECT u, COUNT(*) AS k FROM t GROUP BY u UNION ALL SELECT u, COUNT(*) FROM t2 GROUP BY u) "
    "AS sub",
    "(SELECT k, u FROM t UNION ALL SELECT u, k FROM t) AS sub",
    "(SELECT u, x FROM t UNION ALL SELECT k, x FROM t) AS sub",
    "(SELECT u, x FROM t UNION ALL SELECT u, s FROM t) AS sub",
    "(SELECT u, x FROM t UNION ALL SELECT u, x FROM t ORDER BY x LIMIT 5) AS sub",
    "(SELECT u, x FROM t UNION ALL BY NAME SELECT u, y AS x FROM t2) AS sub",
    "(SELECT u, k FROM t UNION ALL SELECT k, k FROM p) AS sub",
    "(SELECT * FROM t UNION ALL SELECT * FROM read_parquet('t.parquet')) AS sub",
    "(SELECT u, x FROM t UNION ALL SELECT u, x FROM t) AS a JOIN t2 ON a.u = t2.u",
]
CTES = [
    "WITH t AS (SELECT * FROM t) ",
    "WITH t AS (SELECT * FROM t WHERE CAST(s AS INT) > 0) ",
    "WITH t AS (SELECT u, g, k, x FROM t) ",
    "WITH c(u, g, k, x, s, d, l, big, bi, j) AS (SELECT * FROM t) ",
    "WITH t2 AS (SELECT u, x AS y FROM t) ",
    "WITH a AS (SELECT * FROM t), t AS (SELECT * FROM a) ",
    "WITH t AS (WITH t AS (SELECT * FROM t) SELECT * FROM t) ",
    "WITH t AS (SELECT * REPLACE (CAST(s AS INT) AS k) FROM t) ",
    "WITH t AS (SELECT * FROM t UNION ALL SELECT * FROM t WHERE x > 10) ",
    "WITH t AS (SELECT * FROM t EXCEPT SELECT * FROM t WHERE CAST(s AS INT) > 3) ",
]
KEYS = ["g", "k", "name", "CAST(s AS INT)", "len(s)", "d", "l[1]", "u"]
PUBLIC_KEYS: dict[str, list] = {"g": ["a", "b", "c", "zz"], "k": [0, 1, 2, 3, 4, 5]}
BOUNDS = [
    "",
    "BOUND ROWS 5",
    "BOUND WEIGHTS 3",
    "BOUND CLIP",
    "BOUND AUTO",
    "BOUND ROWS AUTO",
    "BOUND WEIGHTS AUTO",
]
UNITS = ["PRIVACY_UNIT u"] * 6 + ["PRIVACY_UNIT k", "PRIVACY_UNIT y", ""]


@dataclass(frozen=True)
class Query:
    """One generated query, the key list passed with it, and whether its keys are public."""

    sql: str
    keys: dict[str, list] | None
    public_keys: bool

    def __str__(self) -> str:
        return f"{self.sql!r} keys={self.keys!r}"


@st.composite
def aggregates(draw: st.DrawFn) -> str:
    """A DP aggregate over a row-level expression, or (rarely) a forbidden one."""
    e = draw(st.sampled_from(NUMERIC))
    lo, hi = draw(st.sampled_from([(0, 10), (-5, 100), (0, 1)]))
    c = f"CLAMPED BETWEEN {lo} AND {hi}"
    return draw(
        st.sampled_from(
            [
                "COUNT(*)",
                "COUNT(x)",
                "COUNT(s)",
                "COUNT(DISTINCT u)",
                f"COUNT({e})",
                f"SUM({e} {c})",
                f"AVG({e} {c})",
                f"MEDIAN({e} {c})",
                f"QUANTILE({e}, 0.9 {c})",
                f"VARIANCE({e} {c})",
                f"SUM({e})",
                f"MAX({e})",
            ]
        )
    )


@st.composite
def queries(draw: st.DrawFn) -> Query:
    """A privsql query of ordinary or hostile shape."""
    cte = draw(st.sampled_from(["", "", *CTES]))
    source = draw(st.sampled_from(SOURCES))
    if cte.startswith("WITH c("):
        source = draw(st.sampled_from(["c", "c JOIN t2 USING (u)"]))
    conditions = draw(st.lists(st.sampled_from(CONDITIONS), max_size=2))
    if " WHERE " in source and conditions:
        source, conditions = source, [source.split(" WHERE ")[1], *conditions]
        source = source.split(" WHERE ")[0]
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""

    key = draw(st.one_of(st.none(), st.sampled_from(KEYS)))
    keys = None
    public = key is None
    if key in PUBLIC_KEYS and draw(st.booleans()):
        keys = {key: PUBLIC_KEYS[key]}
        public = True
    if key == "name" and " p " in f"{source} " and "RIGHT" not in source and "FULL" not in source:
        public = True  # p's column, inner- or left-joined (outer joins may add NULL keys)
    outputs = draw(st.lists(aggregates(), min_size=1, max_size=3))
    columns = [f"{a} AS c{i}" for i, a in enumerate(outputs)]
    post = draw(
        st.sampled_from(
            [
                "",
                "",
                "",
                "CASE WHEN COUNT(*) > -1 THEN CAST('boom' AS INT) ELSE 0 END AS pp",
                "CASE WHEN COUNT(*) > 1000000000 THEN CAST('boom' AS INT) ELSE 0 END AS pp",
                "ROUND(COUNT(*) / 0) AS pp",
                "COUNT(*) // 0 AS pp",
                "c0 + 1 AS pp",
                "CAST('boom' AS INT) AS pp",
                "x AS pp",
                "s AS pp",
            ]
        )
    )
    if post:
        columns.append(post)
    if key is not None:
        columns.insert(0, key if key != "name" else "name")
    group = f" GROUP BY {key}" if key is not None else ""
    having = draw(
        st.sampled_from(
            ["", "", " HAVING COUNT(*) > -1", " HAVING COUNT(*) > 1000000000", " HAVING x > 1"]
        )
    )
    order = draw(st.sampled_from(["", " ORDER BY 1", " ORDER BY c0 DESC", " ORDER BY s"]))
    limit = draw(st.sampled_from(["", "", " LIMIT 2", " LIMIT 0"]))
    unit = draw(st.sampled_from(UNITS))
    bound = draw(st.sampled_from(BOUNDS)) if unit else ""
    max_groups = draw(st.sampled_from(["", "", " MAX_GROUPS 2"])) if unit else ""
    epsilon = draw(st.sampled_from([" EPSILON 1e6", " EPSILON 1e6", " EPSILON 1000"]))
    clause = f" {unit} {bound}{max_groups}{epsilon}".replace("  ", " ")
    sql = (
        f"{cte}SELECT {', '.join(columns)} FROM {source}{where}{group}{having}"
        f"{order}{limit}{clause}"
    )
    return Query(sql, keys, public)


# -- violations this test found, now refused by the allow-list -------------------------------

FORMER_VIOLATIONS: list[tuple[str, dict[str, list] | None]] = [
    # list_reduce / array_reduce over the planted unit's empty list ([]) raised, also under
    # TRY: the query succeeded on D and was refused ("failed while reading private data") on D'.
    ("SELECT COUNT(*) FROM t WHERE list_reduce(l, (a, b) -> a) > 0 PRIVACY_UNIT u", None),
    ("SELECT COUNT(*) FROM t WHERE TRY(array_reduce(l, (a, b) -> a)) > 0 PRIVACY_UNIT u", None),
    # A LIKE pattern read from private data that ends in the escape character ('\\')
    # raised a SyntaxException on D' only.
    ("SELECT COUNT(*) FROM t WHERE 'a' LIKE s ESCAPE '\\' PRIVACY_UNIT u", None),
    ("SELECT COUNT(*) FROM t WHERE like_escape('a', s, '\\') PRIVACY_UNIT u", None),
    # Sizes read from private data (k = 2147483647 on D'): the engine ran out of memory on
    # D' only.
    ("SELECT COUNT(*) FROM t WHERE len(range(k)) > 0 PRIVACY_UNIT u", None),
    ("SELECT COUNT(*) FROM t WHERE repeat(s, k) = 'x' PRIVACY_UNIT u", None),
]
"""Minimal queries whose outcome differed between D and D' before the allow-list."""

MEMORY_HUNGRY = ("range(k)", "repeat(s, k)", "lpad(s, k,")
"""Shapes that tried to allocate gigabytes on D' (DuckDB's memory_limit does not stop
``range``: the kernel killed a 24 GB process): checked only in a child with RLIMIT_AS set."""
ADDRESS_SPACE = 6 * 2**30


# -- the tests ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[privsql.Session, ...]]:
    """The sessions on D and on D' (one more unit, of planted values)."""
    root = tmp_path_factory.mktemp("neighbours")
    d, d_prime = make_session(root / "D", False), make_session(root / "D_prime", True)
    yield d, d_prime
    d.close()
    d_prime.close()


def compare(neighbours: tuple[privsql.Session, ...], query: Query) -> None:
    """Assert that D and D' give the same observable outcome for ``query``."""
    d, d_prime = neighbours
    a, b = run(d, query.sql, query.keys), run(d_prime, query.sql, query.keys)
    for outcome in (a, b):
        for marker in MARKERS:
            assert marker not in outcome.message, f"planted value quoted: {query}\n{outcome}"
            assert marker not in outcome.chain, f"planted value in a chain: {query}\n{outcome}"
    assert a.kind == b.kind, f"outcome differs: {query}\nD:  {a.message}\nD': {b.message}"
    assert a.message == b.message, f"message differs: {query}\nD:  {a.message}\nD': {b.message}"
    assert (a.columns, a.types) == (b.columns, b.types), f"schema differs: {query}\n{a}\n{b}"
    if query.public_keys:
        assert a.rows == b.rows, f"row count differs with public keys: {query}\n{a}\n{b}"
        ordered = "ORDER BY" in query.sql.upper()  # by noisy values: an order of its own
        for x, y in zip(a.values, b.values, strict=True):  # a key's column: the same values
            if not ordered and sorted(x) == sorted(y):
                assert x == y, f"row order differs with public keys: {query}\n{x}\n{y}"


@settings(
    max_examples=700,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(query=queries())
def test_neighbours_look_alike(neighbours: tuple[privsql.Session, ...], query: Query) -> None:
    """Random ordinary and hostile queries: D and D' are indistinguishable but for noise."""
    if any(shape in query.sql for shape in MEMORY_HUNGRY):
        return  # checked in a child process by test_former_violations
    compare(neighbours, query)


def compare_in_child(sql: str, keys: dict[str, list] | None, directory: Path) -> None:
    """``compare`` in a fresh Python process whose address space is capped (``ADDRESS_SPACE``).

    Raises ``AssertionError`` when the child's comparison fails, ``RuntimeError`` when the
    child dies of anything else.
    """
    code = textwrap.dedent(f"""
        import resource, sys
        from pathlib import Path
        resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE}, {ADDRESS_SPACE}))
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_neighbour_fuzz as T
        root = Path({str(directory)!r})
        sessions = (T.make_session(root / "D", False), T.make_session(root / "D_prime", True))
        T.compare(sessions, T.Query({sql!r}, {keys!r}, public_keys=True))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        if "AssertionError" in done.stderr:
            raise AssertionError(done.stderr[-3000:])
        raise RuntimeError(f"the child failed otherwise: {done.stderr[-3000:]}")


@pytest.mark.parametrize(("sql", "keys"), FORMER_VIOLATIONS)
def test_former_violations(
    neighbours: tuple[privsql.Session, ...],
    tmp_path: Path,
    sql: str,
    keys: dict[str, list] | None,
) -> None:
    """Each violation this test found now gives D and D' the same outcome (a refusal)."""
    if any(shape in sql for shape in MEMORY_HUNGRY):
        compare_in_child(sql, keys, tmp_path)
    else:
        compare(neighbours, Query(sql, keys, public_keys=True))
