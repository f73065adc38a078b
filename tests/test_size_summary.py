"""The AUTO searches' summaries (``threshold_sql``, ``groups_sql``) are histograms of
per-unit (and per-cell) sizes folded in Python (``size_summary``): the fold must give exactly
what one filtered aggregate per candidate gives in SQL."""

from __future__ import annotations

import duckdb
import pytest

import privsql
from rewriter.analyze import analyze
from rewriter.compiler import threshold_search
from rewriter.generate import LARGEST, groups_sql, size_summary
from rewriter.plan import CANDIDATES, MEAN_BINS, ROW_CANDIDATES, mean_bin_width, plan

CLAMP = "v CLAMPED BETWEEN 0 AND 100"


@pytest.fixture
def db():
    con = duckdb.connect()
    con.execute("SELECT setseed(0.5)")
    con.execute(
        "CREATE TABLE visits AS SELECT floor(200 * pow(random(), 3))::INT AS uid, "
        "(range % 7)::INT AS g, random() * 100 AS v FROM range(30000)"
    )
    return privsql.connect(con, budget=1e9, seed=3, insecure=True)


def filtered(con, sizes_sql: str) -> tuple[int, ...]:
    """What one ``FILTER`` aggregate per candidate returns over per-unit sizes."""
    columns = ["count(*)"] + [f"count(*) FILTER (WHERE s > {c})" for c in CANDIDATES]
    row = con.execute(f"SELECT {', '.join(columns)} FROM ({sizes_sql})").fetchall()[0]
    return tuple(int(v) for v in row)


def mean_bins(con, sizes_sql: str, bounds: list[int]) -> tuple[int, ...]:
    """Per AVG, what one ``FILTER`` aggregate per (size bucket, bin) returns over per-unit
    sizes and means: the units, then their means' totals, bucket-major."""
    edges = [0, *CANDIDATES]
    found: list[int] = []
    for i, bound in enumerate(bounds):
        position = f"least(floor((t{i} + {bound}) / {mean_bin_width(bound)}), {MEAN_BINS - 1})"
        cells = [
            f"s > {low}{f' AND s <= {high}' if high else ''} AND {position} = {k}"
            for low, high in zip(edges, [*CANDIDATES, None], strict=True)
            for k in range(MEAN_BINS)
        ]
        columns = [f"count(*) FILTER (WHERE {c})" for c in cells]
        columns += [f"coalesce(sum(t{i}) FILTER (WHERE {c}), 0)" for c in cells]
        row = con.execute(f"SELECT {', '.join(columns)} FROM ({sizes_sql})").fetchall()[0]
        found += [int(v) for v in row]
    return tuple(found)


def prefix(statement: str) -> str:
    """``statement``'s common part: its WITH clause (the final query is its last line)."""
    return statement.rsplit("\n", 1)[0] + "\n"


def per_unit(statement: str) -> str:
    """The per-unit sizes (and mean values) ``statement`` groups."""
    if f"{LARGEST} AS (" not in statement:
        return f"{prefix(statement)}SELECT __rows AS s FROM __chosen"
    columns = "__size AS s" + "".join(
        f", __mean{i} AS t{i}" for i in range(statement.count("AS __mean"))
    )
    return f"{prefix(statement)}SELECT {columns} FROM {LARGEST}"


def cells(con, statement: str) -> tuple[int, ...]:
    """What one ``FILTER`` aggregate per row cap returns over the kept cells' sizes."""
    columns = ", ".join(f"count(*) FILTER (WHERE __rows > {c})" for c in ROW_CANDIDATES)
    return tuple(
        int(v)
        for v in con.execute(f"{prefix(statement)}SELECT {columns} FROM __chosen").fetchall()[0]
    )


def units(con, sizes_sql: str) -> tuple[int, ...]:
    """What one ``FILTER`` aggregate per row cap returns over per-unit sizes."""
    columns = ", ".join(f"count(*) FILTER (WHERE s > {c})" for c in ROW_CANDIDATES)
    return tuple(int(v) for v in con.execute(f"SELECT {columns} FROM ({sizes_sql})").fetchall()[0])


@pytest.mark.parametrize(
    "query",
    [
        "SELECT g, COUNT(*) FROM visits GROUP BY g PRIVACY_UNIT uid BOUND ROWS AUTO MAX_GROUPS 3",
        f"SELECT g, AVG({CLAMP}) FROM visits GROUP BY g PRIVACY_UNIT uid BOUND AUTO MAX_GROUPS 2",
        f"SELECT AVG({CLAMP}), SUM({CLAMP}) FROM visits PRIVACY_UNIT uid BOUND AUTO",
    ],
)
def test_the_fold_equals_one_filtered_aggregate_per_candidate(db, query):
    """Units above each candidate, then the rank rule's counts above each row cap: of kept
    cells with MAX_GROUPS above 1, else of units; then each AVG's units and mean totals per
    size bucket and bin."""
    keys = {"g": list(range(7))} if "GROUP BY" in query else None
    query_plan = plan(analyze(query, db._catalog(), keys), epsilon=1, delta=1e-6)
    search = threshold_search(query_plan)
    secret = {"privsql_secret": 7} if "$privsql_secret" in search.statement else None
    folded = search.summary(db._con.execute(search.statement, secret).fetchall())
    statement = search.statement.replace("$privsql_secret", "7")
    expected = filtered(db._con, per_unit(statement))
    if query_plan.bounding.groups > 1:
        expected += cells(db._con, statement)
    else:
        expected += units(db._con, per_unit(statement))
    expected += mean_bins(db._con, per_unit(statement), [t.bound for t, _ in query_plan.mean_sums])
    assert folded == expected
    assert folded[0] > 0


def test_the_groups_fold_counts_units_touching_more_than_each_candidate(db):
    query = "SELECT g, COUNT(*) FROM visits GROUP BY g PRIVACY_UNIT uid BOUND ROWS 2"
    query_plan = plan(analyze(query, db._catalog()), epsilon=1, delta=1e-6)
    rows = db._con.execute(groups_sql(query_plan)).fetchall()
    touched = db._con.execute(
        "SELECT count(DISTINCT g) FROM visits WHERE uid IS NOT NULL GROUP BY uid"
    ).fetchall()
    candidates = [0, 1, 3, 6, 7]
    expected = (len(touched), *(sum(1 for (n,) in touched if n > c) for c in candidates))
    assert size_summary(rows, candidates) == expected


def test_without_group_keys_each_units_size_is_its_rows(db):
    """Without group keys a unit's one kept cell is its largest: the search reads sizes from
    ``__chosen`` without grouping by unit, and folds to what the filtered aggregates give
    over each unit's rows."""
    query = "SELECT COUNT(*) FROM visits PRIVACY_UNIT uid BOUND ROWS AUTO"
    query_plan = plan(analyze(query, db._catalog()), epsilon=1, delta=1e-6)
    search = threshold_search(query_plan)
    assert "GROUP BY __unit" not in search.statement.rsplit("\n", 1)[1]
    secret = {"privsql_secret": 7} if "$privsql_secret" in search.statement else None
    folded = search.summary(db._con.execute(search.statement, secret).fetchall())
    sizes = "SELECT count(*) AS s FROM visits WHERE uid IS NOT NULL GROUP BY uid"
    assert folded == filtered(db._con, sizes) + units(db._con, sizes)
    assert folded[0] > 0
