"""The group cap's stages against its definition (docs/privacy.md 2, 3.3b, 3.3c).

The generator ranks the cells of the units over MAX_GROUPS once (``__ranked``) and reads
the kept cells (``__chosen``), the sampled dropped cells the check counts (``__cuts``) and
the dropped cells' rows (``__excess``, the histograms' cut) from that one ranking. This
test computes each of them from the definitions instead — every cell of every unit ranked
by ``(hash(secret, unit, key), key)``, with its unit's number of cells — and compares, on
data where units touch more groups than the cap and on data where none does, for every
bounding strategy, quantiles, COUNT(DISTINCT unit), MAX_GROUPS fixed and decided by AUTO,
listed keys and partition selection, one key and two.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator

import duckdb
import pytest

import privsql
from rewriter.analyze import analyze
from rewriter.generate import EXCESS_SCALE, Functions, Stages, stages
from rewriter.plan import Plan, plan

SECRET = {"privsql_secret": 12345}

AGGREGATES = {
    "sum": "COUNT(*) AS n, SUM(v CLAMPED BETWEEN 0 AND 100) AS s",
    "mean": "AVG(v CLAMPED BETWEEN 0 AND 100) AS a",
    "quantile": "COUNT(*) AS n, QUANTILE(v, 0.9 CLAMPED BETWEEN 0 AND 100) AS m",
    "median only": "MEDIAN(v CLAMPED BETWEEN 0 AND 100) AS m",
    "units": "COUNT(DISTINCT uid) AS u",
}
BOUNDS = ["BOUND ROWS 12", "BOUND WEIGHTS 12", "BOUND CLIP", "BOUND AUTO"]


@pytest.fixture(scope="module")
def db() -> Iterator[privsql.Session]:
    """``wide``: units touch up to 27 (g, h) cells; ``narrow``: at most 2 of g, 6 of (g, h).
    Most units have a few rows and the heaviest hundreds, so the rows cut over all groups
    are below one cap for some units and above it for others."""
    con = duckdb.connect()
    con.execute("SELECT setseed(0.3)")
    con.execute(
        "CREATE TABLE wide AS SELECT floor(400 * pow(random(), 2))::INT AS uid, "
        "floor(random() * 9)::INT AS g, (range % 3)::INT AS h, random() * 100 AS v "
        "FROM range(4000)"
    )
    con.execute(
        "CREATE TABLE narrow AS SELECT uid, (uid + range % 2) % 9 AS g, (range % 3)::INT AS h, "
        "v FROM (SELECT range, floor(300 * pow(random(), 2))::INT AS uid, random() * 100 AS v "
        "FROM range(4000))"
    )
    session = privsql.connect(con, budget=1e9)
    for name in ("wide", "narrow"):
        session.protect(name, privacy_unit="uid")
    yield session
    session.close()
    con.close()


def _rows(db: privsql.Session, parts: Stages, sql: str) -> list[tuple]:
    """``sql`` run over the aggregation's stages."""
    statement = parts.output("__cells").removesuffix("SELECT * FROM __cells") + sql
    return db._con.execute(statement, SECRET).fetchall()


def _by_definition(db: privsql.Session, parts: Stages, query_plan: Plan, keys: list[str]):
    """Kept cells, the check's cut cells per group and the rows-cut total, as docs/privacy.md
    defines them: every cell of every unit ranked, no stage of the generator's but ``__cells``."""
    m, cap = query_plan.bounding.groups, query_plan.row_cap
    key_list = ", ".join(keys)
    cells = _rows(
        db,
        parts,
        f"SELECT __unit, {key_list}, __rows, row_number() OVER (PARTITION BY __unit ORDER BY "
        f"hash($privsql_secret, __unit, {key_list}), {key_list}) AS rank, "
        "count(*) OVER (PARTITION BY __unit) AS touched FROM __cells",
    )
    kept, cut, lost = set(), Counter(), defaultdict(int)
    for unit, *rest in cells:
        key, rows, rank, touched = tuple(rest[: len(keys)]), *rest[len(keys) :]
        if touched <= m or rank <= m:
            kept.add((unit, *key, rows))
            if cap is not None and rows > cap:
                cut[key] += 1
                lost[unit] += rows - cap
        else:
            cut[key] += rank <= m + query_plan.dropped_sample
            lost[unit] += rows
    excess = sum(min(EXCESS_SCALE, n * EXCESS_SCALE // cap) for n in lost.values()) if cap else 0
    return kept, {k: n for k, n in cut.items() if n}, excess


CASES = [
    (table, keyset, listed, aggregate, bound, groups)
    for table in ("wide", "narrow")
    for keyset in (["g"], ["g", "h"])
    for listed in (True, False)
    for aggregate in AGGREGATES
    for bound in BOUNDS
    for groups in ("2", "AUTO")
    if "CLIP" not in bound or aggregate in ("mean", "units")
]


@pytest.mark.parametrize("table, keyset, listed, aggregate, bound, groups", CASES)
def test_group_cap_stages_match_their_definition(
    db, table, keyset, listed, aggregate, bound, groups
):
    key_list = ", ".join(keyset)
    sql = (
        f"SELECT {key_list}, {AGGREGATES[aggregate]} FROM {table} GROUP BY {key_list} "
        f"PRIVACY_UNIT uid {bound} MAX_GROUPS {groups} EPSILON 1"
    )
    domains = {"g": list(range(9)), "h": [0, 1, 2]}
    public = {k: domains[k] for k in keyset} if listed else None
    decided = {"decided_groups": 2} if groups == "AUTO" else {}
    query_plan = plan(analyze(sql, db._catalog(), public), epsilon=1.0, delta=1e-6, **decided)
    if query_plan.search is not None:  # AUTO caps: the stages must hold for any cap
        query_plan = query_plan.with_cap(12)
    assert query_plan.groups_may_exceed_cap
    parts = stages(query_plan, Functions("noise", "keep", "quantile"))
    keys = [f"__k{i}" for i in range(len(keyset))]
    kept, cut, excess = _by_definition(db, parts, query_plan, keys)
    chosen = _rows(db, parts, f"SELECT __unit, {', '.join(keys)}, __rows FROM __chosen")
    assert len(chosen) == len(kept) and set(chosen) == kept
    if "__cuts" in parts.outputs:
        cuts = _rows(db, parts, "SELECT * FROM __cuts WHERE __cut > 0")
        assert {tuple(row[:-1]): row[-1] for row in cuts} == cut
    if query_plan.excess_epsilon:
        assert _rows(db, parts, "SELECT * FROM __excess") == [(excess,)]
        assert 0 < excess < EXCESS_SCALE * len({cell[0] for cell in kept})  # not saturated
    wide_and_capped = table == "wide" or keyset == ["g", "h"]
    assert (len(kept) < len(_rows(db, parts, "SELECT 1 FROM __cells"))) == wide_and_capped
