"""Property tests over a grammar of accepted and refused privsql queries (hypothesis).

Accepted shapes combine DP aggregates (COUNT, COUNT(col), COUNT(DISTINCT unit), SUM, AVG,
quantiles, STDDEV/VARIANCE, with CLAMPED bounds) over a table, a derived table or CTE
keeping the unit, or a join of private tables on the unit, GROUP BY keys with public or
private domains, WHERE filters, post-processing (arithmetic, ROUND, CASE, HAVING, ORDER BY,
LIMIT) and every BOUND option. For each:

* the generated statement releases only noise-function calls, and the analyst's SELECT
  reads nothing but them (every output is a noisy aggregate, a key or post-processing);
* two sessions with different seeds give different SUMs and quantiles;
* the ledger is charged the answer's ε, and ``explain``'s parts (measurements, bounds
  estimate, cap search, partition selection) add up to it.

Refused shapes insert one forbidden feature (a raw column, MIN/MAX, an unbounded SUM, a
window, sampling, a derived table or CTE that drops the unit or limits rows, a join of
private tables not on the unit, DDL/DML, SUMMARIZE, PIVOT, set operations, ...)
into an otherwise valid query. For each: a ``PrivacyError``, nothing charged, and no
planted private value (amounts 987654.321…, unit names, notes) in the message.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

import privsql
from privsql.session import FUNCTIONS
from rewriter.analyze import analyze
from rewriter.dialect import to_sql
from rewriter.errors import PrivacyError
from rewriter.generate import EXCESS, EXCESS_RELEASED, generate
from rewriter.plan import plan

UNITS = 60
ROWS = 600
DATA = f"""
CREATE TABLE visits AS
SELECT 'unit_zyx_' || (i % {UNITS}) AS user_id,
       ['a', 'b', 'c'][(i % 3) + 1] AS site,
       987654.321 + (i % 7) * 0.001 AS amount,
       (i % 50)::DOUBLE AS minutes,
       'PLANTED_NOTE_' || i AS note
FROM range({ROWS}) AS r(i);
CREATE TABLE orders AS
SELECT 'unit_zyx_' || (i % {UNITS // 2}) AS uid, 987654.5 + i AS total
FROM range({UNITS}) AS r(i)
"""
SITES = (
    "CREATE TABLE sites AS SELECT * FROM (VALUES ('a', 'north'), ('b', 'south')) AS s(site, region)"
)
PLANTED = ("987654", "98765", "unit_zyx", "PLANTED")

SETTINGS = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def session(seed: int) -> privsql.Session:
    con = duckdb.connect()
    con.execute(DATA)
    con.execute(SITES)
    # Budgets that never run out (δ too: many generated queries select private keys).
    db = privsql.connect(con, budget=1e9, delta_budget=0.5, epsilon=1.0, seed=seed, insecure=True)
    db.protect("visits", privacy_unit="user_id", keys={"site": ["a", "b", "c"]})
    db.protect("orders", privacy_unit="uid")
    db.public("sites")
    return db


@pytest.fixture(scope="module")
def sessions() -> Iterator[list[privsql.Session]]:
    """Two sessions on identical data with different seeds (separate ledgers)."""
    opened = [session(seed) for seed in (1, 2)]
    yield opened
    for db in opened:
        db.close()


# --- the grammar ---------------------------------------------------------------------------

bounds = st.sampled_from(["0 AND 50", "-10 AND 10", "0.5 AND 49.5", "0 AND 1e6"])
column = st.sampled_from(["minutes", "amount"])


@st.composite
def aggregates(draw: st.DrawFn, clip: bool) -> str:
    """One DP aggregate; under BOUND CLIP only the means and counts RT24 bounds."""
    kinds = ["COUNT(*)", "COUNT(col)", "COUNT(DISTINCT user_id)", "AVG"]
    if not clip:
        kinds += ["SUM", "MEDIAN", "QUANTILE", "STDDEV", "VARIANCE"]
    kind = draw(st.sampled_from(kinds))
    col, clamp = draw(column), f"CLAMPED BETWEEN {draw(bounds)}"
    if kind == "COUNT(col)":
        return f"COUNT({col})"
    if kind == "QUANTILE":
        p = draw(st.sampled_from(["0.1", "0.5", "0.9"]))
        return f"QUANTILE({col}, {p} {clamp})"
    if kind in ("SUM", "AVG", "MEDIAN", "STDDEV", "VARIANCE"):
        return f"{kind}({col} {clamp})"
    return kind


@st.composite
def post_processed(draw: st.DrawFn, aggregate: str) -> str:
    """The aggregate itself or post-processing of it."""
    shape = draw(st.sampled_from(["bare", "times", "plus", "round", "case"]))
    return {
        "bare": aggregate,
        "times": f"{aggregate} * 2",
        "plus": f"{aggregate} + 1",
        "round": f"ROUND({aggregate}, 1)",
        "case": f"CASE WHEN {aggregate} > 10 THEN 'many' ELSE 'few' END",
    }[shape]


bounding = st.sampled_from(
    [
        "",
        "BOUND ROWS 3",
        "BOUND WEIGHTS 4",
        "BOUND AUTO",
        "BOUND ROWS AUTO",
        "BOUND WEIGHTS AUTO",
        "BOUND CLIP",
    ]
)
filters = st.sampled_from(
    [
        "",
        "WHERE visits.minutes > 5",
        "WHERE visits.site <> 'c'",
        "WHERE visits.note LIKE '%1%' AND visits.minutes < 40",
    ]
)


relations = st.sampled_from(
    [
        ("", "visits"),
        ("", "(SELECT user_id, site, minutes, amount, note FROM visits WHERE minutes > 0) visits"),
        ("WITH recent AS (SELECT * FROM visits WHERE minutes < 45)", "recent AS visits"),
        ("", "visits JOIN orders ON visits.user_id = orders.uid"),  # private join on the unit
    ]
)
"""The private relation: a table, a derived table or CTE keeping the unit, or a join of
two private tables on the unit."""

CONTINUOUS = ("SUM(", "MEDIAN(", "QUANTILE(")
"""Aggregates whose released value repeats across seeds with probability below 2⁻⁴⁰
(a SUM's noise is on a grid of ~2⁴⁰ steps per bound; a quantile is a uniform point)."""


@st.composite
def accepted(draw: st.DrawFn) -> tuple[str, list[int]]:
    """An accepted query, and the output positions holding a bare SUM or quantile."""
    bound = draw(bounding)
    clip = bound == "BOUND CLIP"
    chosen = draw(st.lists(aggregates(clip), min_size=1, max_size=3, unique=True))
    outputs = [draw(post_processed(a)) for a in chosen]
    grouped = draw(st.sampled_from(["none", "site", "region", "minutes"]))
    prefix, source = draw(relations)
    keys, group = [], ""
    if grouped in ("site", "minutes"):  # public (declared) and private keys
        keys, group = [grouped], f"GROUP BY {grouped}"
    elif grouped == "region":  # a key whose domain is a public table's column
        source += " JOIN sites ON visits.site = sites.site"
        keys, group = ["region"], "GROUP BY region"
    select = ", ".join([*keys, *(f"{o} AS out{i}" for i, o in enumerate(outputs))])
    tail = ""
    if keys and draw(st.booleans()):
        tail += " HAVING out0 IS NOT NULL"
    if keys and draw(st.booleans()):
        tail += f" ORDER BY {keys[0]}"
    if draw(st.booleans()):
        tail += " LIMIT 10"
    options = f"PRIVACY_UNIT user_id {bound}"
    if keys:
        options += f" MAX_GROUPS {draw(st.sampled_from([1, 2]))}"
    options += f" EPSILON {draw(st.sampled_from(['0.3', '1']))}"
    sql = f"{prefix} SELECT {select} FROM {source} {draw(filters)} {group}{tail} {options}"
    continuous = [
        len(keys) + i
        for i, (o, a) in enumerate(zip(outputs, chosen, strict=True))
        if o == a and a.startswith(CONTINUOUS)
    ]
    return " ".join(sql.split()), continuous


def released_columns(db: privsql.Session, sql: str) -> tuple[exp.Select, exp.Select]:
    """The generated statement's ``__released`` stage and its final SELECT (AUTO caps and
    missing bounds fixed at arbitrary values: the statement's shape does not depend on them)."""
    analysis = analyze(sql, db._catalog())
    analysis = analysis.with_bounds({to_sql(a.node): (0.0, 1.0) for a in analysis.unbounded})
    query_plan = plan(analysis, epsilon=db.epsilon, delta=db.delta)
    if query_plan.search is not None:
        query_plan = query_plan.with_caps({"rank": 3, "variance": 3, "quantile": 3})
    statement = sqlglot.parse_one(generate(query_plan, FUNCTIONS), read="duckdb")
    ctes = {cte.alias: cte.this for cte in statement.args["with_"].expressions}
    return ctes["__released"], statement


NOISE = {FUNCTIONS.noise, FUNCTIONS.quantile, FUNCTIONS.check}


def assert_released_values_are_noisy(db: privsql.Session, sql: str) -> None:
    released, statement = released_columns(db, sql)
    ctes = {cte.alias: cte for cte in statement.args["with_"].expressions}
    keys = 0
    for projection in released.expressions:
        value = projection.unalias()
        if isinstance(value, exp.Column) and value.name == EXCESS:  # drawn once, before
            drawn = ctes[EXCESS_RELEASED]
            assert drawn.args.get("materialized"), drawn.sql()
            (noisy,) = drawn.this.expressions
            assert noisy.unalias().name.lower() == FUNCTIONS.check, drawn.sql()
            continue
        if isinstance(value, exp.Column):  # a group key
            assert value.name.startswith("__k"), projection.sql()
            keys += 1
            continue
        calls = {f.name.lower() for f in value.find_all(exp.Anonymous)}
        assert isinstance(value, exp.Anonymous) and value.name.lower() in NOISE, projection.sql()
        assert calls <= NOISE, projection.sql()
    assert len(released.expressions) > keys
    tables = {t.name for t in statement.find_all(exp.Table) if not t.find_ancestor(exp.CTE)}
    assert tables == {"__released"}, tables


@SETTINGS
@given(case=accepted())
def test_accepted_queries_release_only_noisy_values(sessions, case):
    sql, continuous = case
    answers = []
    for db in sessions:
        spent = db.budget.spent
        result = db.sql(sql)
        assert db.budget.spent == pytest.approx(spent + result.epsilon)
        answers.append([[row[i] for i in continuous] for row in result.fetchall()])
    assert_released_values_are_noisy(sessions[0], sql)
    assert_parts_add_up_to_the_query_epsilon(sessions[0], sql)
    if continuous and any(answers):
        assert answers[0] != answers[1], sql


def assert_parts_add_up_to_the_query_epsilon(db: privsql.Session, sql: str) -> None:
    """Sequential composition as ``explain`` states it: every measurement has a mechanism
    and a positive ε, and with the quantiles' intervals, the bounds estimate, the cap search,
    MAX_GROUPS AUTO, the bounding check and partition selection they add up to the query's ε."""
    explanation = db.explain(sql)
    parts = [a["epsilon"] for a in explanation.aggregates]
    assert all(a["mechanism"] in ("Laplace", "permute-and-flip") for a in explanation.aggregates)
    assert all(e > 0 for e in parts)
    parts += [a["interval_epsilon"] for a in explanation.aggregates]  # quantiles' intervals
    parts += [explanation.bounding["search_epsilon"], explanation.bounding["bounds_epsilon"]]
    parts += [explanation.bounding["group_epsilon"], explanation.bounding["cut_epsilon"]]
    parts.append(explanation.bounding["excess_epsilon"])
    if explanation.partition_selection:
        parts.append(explanation.partition_selection["epsilon"])
    assert sum(parts) == pytest.approx(explanation.epsilon)


# --- refused shapes ------------------------------------------------------------------------

REFUSED_SELECTS = [
    "SELECT amount FROM visits {where} PRIVACY_UNIT user_id {bound}",
    "SELECT user_id, COUNT(*) FROM visits {where} GROUP BY site PRIVACY_UNIT user_id {bound}",
    "SELECT note, COUNT(*) FROM visits {where} GROUP BY site PRIVACY_UNIT user_id {bound}",
    "SELECT * FROM visits {where} PRIVACY_UNIT user_id {bound}",
    "SELECT MIN(amount) FROM visits {where} PRIVACY_UNIT user_id {bound}",
    "SELECT site, MAX(minutes CLAMPED BETWEEN 0 AND 50) FROM visits {where} GROUP BY site "
    "PRIVACY_UNIT user_id {bound}",
    "SELECT SUM(amount) FROM visits {where} PRIVACY_UNIT user_id BOUND ROWS 3",
    "SELECT COUNT(*) OVER () FROM visits {where} PRIVACY_UNIT user_id {bound}",
    "SELECT COUNT(*) FROM (SELECT amount FROM visits) AS t PRIVACY_UNIT user_id {bound}",
    "SELECT COUNT(*) FROM visits WHERE amount > (SELECT AVG(amount) FROM visits) "
    "PRIVACY_UNIT user_id {bound}",
    "SELECT DISTINCT site FROM visits {where} PRIVACY_UNIT user_id {bound}",
    "SELECT COUNT(*) FROM visits {where} PRIVACY_UNIT user_id {bound} UNION ALL SELECT 1",
    "SELECT site, COUNT(*) FROM visits {where} GROUP BY ROLLUP (site) PRIVACY_UNIT user_id {bound}",
    "SELECT COUNT(*) FROM visits {where}",
    "SELECT COUNT(*) FROM visits {where} PRIVACY_UNIT site {bound}",
    "SELECT string_agg(note, ',') FROM visits {where} PRIVACY_UNIT user_id {bound}",
    "SELECT COUNT(DISTINCT note) FROM visits {where} PRIVACY_UNIT user_id {bound}",
    "SELECT COUNT(*) FROM visits {where} PRIVACY_UNIT user_id {bound} EPSILON -1",
    "SELECT COUNT(*) FROM visits USING SAMPLE 10% {where} PRIVACY_UNIT user_id {bound}",
    "SELECT COUNT(*) FROM (SELECT user_id, row_number() OVER () AS r FROM visits) AS t "
    "PRIVACY_UNIT user_id {bound}",
    "SELECT COUNT(*) FROM (SELECT user_id FROM visits LIMIT 5) AS t PRIVACY_UNIT user_id {bound}",
    "WITH t AS (SELECT site FROM visits) SELECT COUNT(*) FROM t PRIVACY_UNIT user_id {bound}",
    "SELECT COUNT(*) FROM visits AS a JOIN visits AS b ON a.site = b.site "
    "PRIVACY_UNIT a.user_id {bound}",
    "SELECT COUNT(*) FROM visits JOIN orders ON visits.minutes = orders.total {where} "
    "PRIVACY_UNIT user_id {bound}",
    "SELECT COUNT(*) FROM visits CROSS JOIN orders {where} PRIVACY_UNIT user_id {bound}",
]
STATEMENTS = [
    "DROP TABLE visits",
    "DELETE FROM visits",
    "INSERT INTO visits SELECT * FROM visits",
    "UPDATE visits SET amount = 0",
    "CREATE TABLE copy AS SELECT * FROM visits",
    "COPY visits TO 'leak.csv'",
    "ATTACH 'other.duckdb' AS other",
    "PRAGMA table_info('visits')",
    "SET threads = 1",
    "EXPORT DATABASE 'dump'",
    "SUMMARIZE visits",
    "PIVOT visits ON site USING COUNT(*)",
    "DESCRIBE SELECT amount FROM visits",
]


@st.composite
def refused(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(STATEMENTS))
    template = draw(st.sampled_from(REFUSED_SELECTS))
    where = draw(filters)
    sql = template.format(where=where, bound=draw(bounding.filter(lambda b: b != "BOUND CLIP")))
    return " ".join(sql.split())


@settings(SETTINGS, max_examples=120)
@given(sql=refused())
def test_refused_queries_charge_nothing_and_leak_nothing(sessions, sql):
    db = sessions[0]
    spent, history = db.budget.spent, len(db.budget.history)
    with pytest.raises(PrivacyError) as info:
        db.sql(sql)
    message = str(info.value)
    assert not any(value in message for value in PLANTED), message
    assert db.budget.spent == spent
    assert len(db.budget.history) == history
    assert len(db.sql("SELECT * FROM sites")) == 2  # the session is still usable
