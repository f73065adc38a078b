"""Speed benchmark of privsql against raw and hand-written bounded DuckDB SQL.

The workload and "the floor" are those of PERFORMANCE.md: an in-memory table of N rows,
100k heavy-tailed units, 50 public groups, v in [0, 100), BOUND ROWS 10, MAX_GROUPS 50.
Everything runs in one process on one connection (``SET threads``), best of ``--repeat``
runs, the queries of one size interleaved round-robin so a burst of load elsewhere on the
machine hits them alike.

    python benchmarks/core.py                        # N = 1M and 5M, about 1-2 minutes
    python benchmarks/core.py --rows 200000 --repeat 5
    python benchmarks/core.py --json results.json    # also write every number

See benchmarks/README.md for what each line means.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # appended: a privsql on PYTHONPATH (e.g. a snapshot) wins

import duckdb  # noqa: E402

import privsql  # noqa: E402
from benchmarks.data import GROUPS, describe, make_table  # noqa: E402

CAP = 10
MAX_GROUPS = 50
SECRET = 123
"""Hashing secret of the hand-written queries, and ``$privsql_secret`` when privsql's
generated SQL is run by hand (privsql itself uses its ledger's secret; the value does
not change the cost)."""

KEYS = {"g": list(range(GROUPS))}
CLAMP = "least(greatest(v, 0), 100)"

# -- the queries -------------------------------------------------------------------------

RAW = {
    "sum": "SELECT g, count(*) AS n, sum(v) AS s FROM {t} GROUP BY g",
    "count": "SELECT g, count(*) AS n FROM {t} GROUP BY g",
    "weights": "SELECT g, count(*) AS n, sum(v) AS s FROM {t} GROUP BY g",
}

ROW_RANK = f"ORDER BY hash({SECRET}, uid, g, v), v"

A_SUM = f"""SELECT g, count(*) AS n, sum({CLAMP}) AS s
FROM (SELECT g, v FROM {{t}}
      QUALIFY row_number() OVER (PARTITION BY uid, g {ROW_RANK}) <= {CAP})
GROUP BY g"""
"""Hand-written A: rank every row of every (unit, group) by a keyed content hash, keep k.
No group cap: with 50 groups and MAX_GROUPS 50 it cannot bind."""

B_SUM = f"""WITH cells AS (
  SELECT uid, g, count(*) AS n, sum({CLAMP}) AS s FROM {{t}} GROUP BY uid, g
)
SELECT g, sum(n) AS n, sum(s) AS s FROM (
  SELECT g, n, s FROM cells WHERE n <= {CAP}
  UNION ALL
  SELECT g, count(*), sum({CLAMP}) FROM (
    SELECT r.g, r.v FROM {{t}} AS r
    SEMI JOIN (SELECT uid, g FROM cells WHERE n > {CAP}) AS c ON r.uid = c.uid AND r.g = c.g
    QUALIFY row_number() OVER (
      PARTITION BY r.uid, r.g ORDER BY hash({SECRET}, r.uid, r.g, r.v), r.v) <= {CAP}
  ) GROUP BY g
) GROUP BY g"""
"""Hand-written B, the floor for SUM: pre-aggregate per (unit, group); only cells with more
than k rows re-read their rows and rank them by a keyed content hash."""

FLOOR_COUNT = f"""SELECT g, sum(least(n, {CAP})) AS n
FROM (SELECT uid, g, count(*) AS n FROM {{t}} GROUP BY uid, g) GROUP BY g"""
"""The floor for COUNT: one pre-aggregate, least(count, k) per (unit, group)."""

FLOOR_WEIGHTS = f"""SELECT g, sum(least(n, {CAP})) AS n, sum(s * least(1, {CAP} / n)) AS s
FROM (SELECT uid, g, count(*) AS n, sum({CLAMP}) AS s FROM {{t}} GROUP BY uid, g) GROUP BY g"""
"""The floor for BOUND WEIGHTS (EMMMR20): one pre-aggregate of count and sum per (unit,
group), each cell's sum scaled by min(1, k/n)."""

FINGERPRINT = "SELECT count(*) || ':' || coalesce(sum(hash(uid, g, v)::HUGEINT), 0) FROM {t}"
"""The data-fingerprint scan privsql runs before each private query (as in
rewriter/fingerprint.py: row count and a sum of row hashes over the columns read), to
recognise a re-run on unchanged data."""

PRIVSQL = {
    "sum": "SELECT g, COUNT(*) AS n, SUM(v CLAMPED BETWEEN 0 AND 100) AS s FROM {t} "
    f"GROUP BY g PRIVACY_UNIT uid BOUND ROWS {CAP} MAX_GROUPS {MAX_GROUPS} EPSILON 1"
    " LIMIT {tag}",
    "count": "SELECT g, COUNT(*) AS n FROM {t} "
    f"GROUP BY g PRIVACY_UNIT uid BOUND ROWS {CAP} MAX_GROUPS {MAX_GROUPS} EPSILON 1"
    " LIMIT {tag}",
    "weights": "SELECT g, COUNT(*) AS n, SUM(v CLAMPED BETWEEN 0 AND 100) AS s FROM {t} "
    f"GROUP BY g PRIVACY_UNIT uid BOUND WEIGHTS {CAP} MAX_GROUPS {MAX_GROUPS} EPSILON 1"
    " LIMIT {tag}",
}
"""privsql's query; ``{tag}``, a LIMIT above the number of groups (it keeps every row),
changes on every run so that no run is answered from the ledger's stored answers (the
same question on the same data is free, however its aliases are spelt)."""


# -- candidate rewrites of privsql's generated SQL ------------------------------------------

_CTE = r"(?s)(\n|WITH ){name} AS (?:NOT )?(?:MATERIALIZED )?\(\n(.*?)\n\)"


def cte_body(sql: str, name: str) -> str | None:
    m = re.search(_CTE.format(name=re.escape(name)), sql)
    return m.group(2) if m else None


def replace_cte(sql: str, name: str, body: str) -> str | None:
    old = cte_body(sql, name)
    return None if old is None else sql.replace(old, body, 1)


CHOSEN_OVER_ONLY = f"""SELECT c.* FROM __cells AS c
  JOIN (SELECT __unit, count(*) AS __groups FROM __cells GROUP BY __unit) AS u
  ON c.__unit = u.__unit WHERE u.__groups <= {MAX_GROUPS}
UNION ALL
SELECT c.* FROM __cells AS c
  SEMI JOIN (SELECT __unit FROM __cells GROUP BY __unit HAVING count(*) > {MAX_GROUPS}) AS u
  ON c.__unit = u.__unit
  QUALIFY row_number() OVER (PARTITION BY c.__unit
    ORDER BY hash($privsql_secret, c.__unit, c.__k0), c.__k0) <= {MAX_GROUPS}"""
"""Group cap only where it can bind: units touching <= MAX_GROUPS groups keep all their
cells; only the cells of units over the cap are ranked (same keyed hash as privsql)."""


def candidates(generated: str, shape: str) -> dict[str, str]:
    """privsql's generated SQL with one change each (see README, "Candidates").

    Changes the generator already makes are left out; when privsql already skips the
    group cap, the other candidates are applied to its SQL as it is.
    """
    out: dict[str, str] = {}
    skip = over = None
    if cte_body(generated, "__cells") is not None:  # else __chosen is the cells stage itself
        skip = replace_cte(generated, "__chosen", "SELECT * FROM __cells")
        over = replace_cte(generated, "__chosen", CHOSEN_OVER_ONLY)
    base, prefix = generated, "cand: "
    if skip and skip != generated:
        out["cand: no group-cap step (|keys| <= MAX_GROUPS)"] = skip
        base, prefix = skip, "cand: no group cap + "
    if over and over != generated:
        out["cand: group cap only for units over it"] = over
    if shape == "sum" and "__source AS (" in base:
        out[prefix + "__source NOT MATERIALIZED"] = base.replace(
            "__source AS (", "__source AS NOT MATERIALIZED (", 1
        )
    return out


def exact_groups(con: duckdb.DuckDBPyConnection, sql: str) -> list | None:
    """The exact (pre-noise) per-group measurements of a privsql-shaped statement."""
    head = sql.split(",\n__released AS", 1)
    if len(head) != 2:
        return None
    query = head[0] + "\nSELECT * FROM __groups ORDER BY ALL"
    return con.sql(query, params=_params(query)).fetchall()


# -- timing -----------------------------------------------------------------------------


CONTENDED_BELOW = 0.8
"""A run of at least MIN_JUDGED seconds whose CPU time is below this share of
``threads × wall`` did not get all its cores (something else was running): it counts
towards the best time but not towards the ``repeat`` clean runs wanted."""
MIN_JUDGED = 0.2


@dataclass
class Timing:
    wall: float = float("inf")
    cpu: float = float("inf")
    runs: list[tuple[float, float]] = field(default_factory=list)
    clean: int = 0

    def add(self, wall: float, cpu: float, threads: int) -> None:
        self.runs.append((wall, cpu))
        self.wall = min(self.wall, wall)
        self.cpu = min(self.cpu, cpu)
        if wall < MIN_JUDGED or cpu >= CONTENDED_BELOW * threads * wall:
            self.clean += 1


def _params(sql: str) -> dict | None:
    return {"privsql_secret": SECRET} if "$privsql_secret" in sql else None


def run_sql(con: duckdb.DuckDBPyConnection, sql: str) -> Callable[[], object]:
    params = _params(sql)
    return lambda: con.sql(sql, params=params).to_arrow_table()


class PrivsqlRun:
    """Calls ``db.sql`` with a fresh alias each time; refuses stored (free) answers."""

    counter = 0

    def __init__(self, db: privsql.Session, template: str, table: str) -> None:
        self.db, self.template, self.table = db, template, table

    def __call__(self) -> object:
        PrivsqlRun.counter += 1
        query = self.template.format(t=self.table, tag=10**9 + PrivsqlRun.counter)
        result = self.db.sql(query, keys=KEYS)
        if result.cached or result.epsilon <= 0:
            raise RuntimeError("privsql answered from its stored answers; the timing is void")
        if len(result) != GROUPS:
            raise RuntimeError(f"expected {GROUPS} released groups, got {len(result)}")
        return result.arrow()


def measure(
    items: dict[str, Callable[[], object]],
    repeat: int,
    threads: int,
    extra_rounds: int,
    deadline: float = float("inf"),
) -> dict[str, Timing]:
    """Best wall-clock and best process CPU time of each item, rounds interleaved.

    After ``repeat`` rounds, up to ``extra_rounds`` more rounds (none once
    ``time.perf_counter()`` passes ``deadline``) re-run only the items with fewer than
    ``repeat`` clean (uncontended) runs.
    """
    timings = {name: Timing() for name in items}
    for round_ in range(repeat + extra_rounds):
        todo = [n for n in items if round_ < repeat or timings[n].clean < repeat]
        if not todo or (round_ >= repeat and time.perf_counter() > deadline):
            break
        for name in todo:
            gc.collect()
            w0, c0 = time.perf_counter(), time.process_time()
            items[name]()
            timings[name].add(time.perf_counter() - w0, time.process_time() - c0, threads)
    return timings


# -- profile ------------------------------------------------------------------------------


def profile(con: duckdb.DuckDBPyConnection, sql: str, top: int) -> tuple[float, list[dict]]:
    """Run ``sql`` once with DuckDB's JSON profiler; the most expensive operators."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "profile.json")
        con.execute("SET enable_profiling = 'json'")
        con.execute(f"SET profiling_output = '{path}'")
        try:
            con.sql(sql, params=_params(sql)).to_arrow_table()
        finally:
            con.execute("RESET enable_profiling")
            con.execute("RESET profiling_output")
        with open(path) as f:
            report = json.load(f)
    operators: list[dict] = []

    def walk(node: dict) -> None:
        info = node.get("extra_info") or {}
        what = (
            (info.get("Projections") if node.get("type") == "WINDOW" else None)
            or info.get("Groups")
            or info.get("Conditions")
            or info.get("CTE Name")
            or info.get("Table")
            or info.get("Expression")
            or ""
        )
        if isinstance(what, list):
            what = ", ".join(map(str, what))
        operators.append(
            {
                "operator": node.get("type", "?"),
                "seconds": float(node.get("timing") or 0.0),
                "rows": int(node.get("intermediate_rows") or 0),
                "detail": re.sub(r"\s+", " ", str(what))[:90],
            }
        )
        for child in node.get("children") or []:
            walk(child)

    for node in report.get("operator") or []:
        walk(node)
    total = sum(o["seconds"] for o in operators)
    operators.sort(key=lambda o: -o["seconds"])
    return total, operators[:top]


# -- printing -----------------------------------------------------------------------------


def _n(rows: int) -> str:
    return f"{rows / 1e6:g}M" if rows >= 1_000_000 else f"{rows:,}"


def _ratio(a: float, b: float | None) -> str:
    return "–" if b is None or b <= 0 else f"{a / b:.2f}"


def print_table(lines: list[dict]) -> None:
    head = (
        f"{'shape':6} {'N':>9}  {'query':50} {'s':>8}  {'cpu-s':>7} "
        f"{'×raw':>7} {'×floor':>7} {'×A':>6}"
    )
    print(head)
    print("-" * len(head))
    last = None
    for line in lines:
        if last is not None and (line["shape"], line["rows"]) != last:
            print()
        last = (line["shape"], line["rows"])
        print(
            f"{line['shape']:6} {_n(line['rows']):>9}  {line['query']:50} {line['wall']:8.3f}"
            f"{'*' if line['contended'] else ' '}"
            f"{line['cpu']:7.3f} {_ratio(line['wall'], line['raw']):>7} "
            f"{_ratio(line['wall'], line['floor']):>7} {_ratio(line['wall'], line['a']):>6}"
        )


def _git() -> str:
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "privsql", "rewriter", "udfs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + (" + uncommitted changes in privsql/rewriter/udfs" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- the benchmark --------------------------------------------------------------------------


def bench_size(con, db, rows: int, args, results: dict, lines: list[dict], last: bool) -> None:
    t = "t"
    started = time.perf_counter()
    make_table(con, rows, name=t)
    db.protect(t, privacy_unit="uid")
    facts = describe(con, t, CAP)
    print(
        f"\nN = {rows:,}: table built in {time.perf_counter() - started:.1f} s; "
        f"{facts['units']:,} units, {facts['cells']:,} (unit, group) cells, "
        f"{facts['cells_over_cap']:,} cells over k={CAP} holding "
        f"{facts['rows_in_cells_over_cap'] / rows:.0%} of rows; checksum {facts['checksum']}",
        flush=True,
    )
    generated = {s: db.explain(PRIVSQL[s].format(t=t, tag=10**9), keys=KEYS).sql for s in PRIVSQL}

    items: dict[str, Callable[[], object]] = {
        "sum/raw": run_sql(con, RAW["sum"].format(t=t)),
        "sum/A": run_sql(con, A_SUM.format(t=t)),
        "sum/B": run_sql(con, B_SUM.format(t=t)),
        "sum/privsql": PrivsqlRun(db, PRIVSQL["sum"], t),
        "sum/privsql-sql": run_sql(con, generated["sum"]),
        "sum/fingerprint": run_sql(con, FINGERPRINT.format(t=t)),
        "count/raw": run_sql(con, RAW["count"].format(t=t)),
        "count/floor": run_sql(con, FLOOR_COUNT.format(t=t)),
        "count/privsql": PrivsqlRun(db, PRIVSQL["count"], t),
        "count/privsql-sql": run_sql(con, generated["count"]),
        "weights/raw": run_sql(con, RAW["weights"].format(t=t)),
        "weights/floor": run_sql(con, FLOOR_WEIGHTS.format(t=t)),
        "weights/privsql": PrivsqlRun(db, PRIVSQL["weights"], t),
        "weights/privsql-sql": run_sql(con, generated["weights"]),
    }
    cands: dict[str, dict[str, str]] = {}
    if not args.no_candidates:
        for shape in ("sum", "count"):
            cands[shape] = candidates(generated[shape], shape)
            for name, sql in cands[shape].items():
                items[f"{shape}/{name}"] = run_sql(con, sql)
    for fn in items.values():  # warm-up: first-touch allocation, catalog caches
        if not isinstance(fn, PrivsqlRun):
            fn()
    timings = measure(items, args.repeat, args.threads, args.extra_rounds, args.extra_deadline)
    results["sizes"][str(rows)] = {
        "facts": facts,
        "timings": {k: asdict(v) for k, v in timings.items()},
    }

    labels = {
        "raw": "raw GROUP BY g (no privacy)",
        "A": "A: row_number on every row (hand-written)",
        "B": "B: two-phase, the floor (hand-written)",
        "floor": "floor: pre-aggregate least(count, k)",
        "privsql": "privsql db.sql() end to end",
        "privsql-sql": "  privsql's generated SQL alone",
        "fingerprint": "  privsql's fingerprint scan alone",
    }
    for shape in PRIVSQL:
        raw = timings[f"{shape}/raw"].wall
        floor = timings[f"{shape}/B" if shape == "sum" else f"{shape}/floor"].wall
        a = timings["sum/A"].wall if shape == "sum" else None
        for key, timing in timings.items():
            s, _, name = key.partition("/")
            if s != shape:
                continue
            label = labels.get(name, "  " + name)
            if (shape, name) == ("weights", "floor"):
                label = "floor: pre-aggregate scaled by min(1, k/n)"
            lines.append(
                {
                    "shape": shape.upper(),
                    "rows": rows,
                    "query": label,
                    "wall": timing.wall,
                    "cpu": timing.cpu,
                    "raw": raw,
                    "floor": floor,
                    "a": a,
                    "contended": timing.clean < args.repeat,
                }
            )
    results["sizes"][str(rows)]["generated_sql"] = generated

    if cands and last:
        checks = {}
        for shape, group in cands.items():
            base = exact_groups(con, generated[shape])
            for name, sql in group.items():
                checks[f"{shape}/{name}"] = base is not None and exact_groups(con, sql) == base
        results["candidate_checks"] = checks

    if last and not args.no_profile:
        results["profile"] = {}
        for shape in ("sum", "count"):
            total, top = profile(con, generated[shape], args.profile_top)
            results["profile"][shape] = {"operator_seconds": total, "top": top}

    if last:
        # Python-side allocations of one end-to-end run: rows never reach Python if tiny.
        gc.collect()
        tracemalloc.start()
        PrivsqlRun(db, PRIVSQL["sum"], t)()
        results["python_heap_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    results["sizes"][str(rows)]["peak_rss_mb"] = _rss_mb()
    print(
        f"  measured in {time.perf_counter() - started:.1f} s; peak RSS so far {_rss_mb():.0f} MB",
        flush=True,
    )


def bench_small(con, db, rows: int, repeat: int, results: dict) -> dict[str, dict]:
    t = "t_small"
    make_table(con, rows, name=t, seed=0.17)
    db.protect(t, privacy_unit="uid")
    out = {}
    for shape in ("sum", "count"):
        query = PRIVSQL[shape].format(t=t, tag=10**9)
        generated = db.explain(query, keys=KEYS).sql
        items = {
            "e2e": PrivsqlRun(db, PRIVSQL[shape], t),
            "sql": run_sql(con, generated),
            "explain": lambda q=query: db.explain(q, keys=KEYS),
            "fingerprint": run_sql(con, FINGERPRINT.format(t=t)),
        }
        for name, fn in items.items():
            if name != "e2e":
                fn()
        timings = measure(items, repeat, 1, 0)
        e2e, sql = timings["e2e"].wall, timings["sql"].wall
        out[shape] = {
            "e2e": e2e,
            "sql": sql,
            "overhead": e2e - sql,
            "explain": timings["explain"].wall,
            "fingerprint": timings["fingerprint"].wall,
            "rest": e2e - sql - timings["explain"].wall - timings["fingerprint"].wall,
        }
    results["small"] = {"rows": rows, **out}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows",
        default="1000000,5000000",
        help="comma-separated table sizes (default 1000000,5000000)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per query, best kept (3)")
    parser.add_argument("--threads", type=int, default=2, help="DuckDB threads (2)")
    parser.add_argument(
        "--extra-rounds",
        type=int,
        default=3,
        help="extra rounds for queries whose runs were slowed by other processes (3)",
    )
    parser.add_argument(
        "--extra-seconds",
        type=float,
        default=150,
        help="no extra rounds start after this many seconds of the run (150)",
    )
    parser.add_argument(
        "--small-rows",
        type=int,
        default=1000,
        help="rows of the small table for the overhead line (1000)",
    )
    parser.add_argument(
        "--small-repeat",
        type=int,
        default=30,
        help="runs per query on the small table, best kept (30)",
    )
    parser.add_argument(
        "--no-candidates",
        action="store_true",
        help="skip timing the candidate rewrites of privsql's SQL",
    )
    parser.add_argument(
        "--no-profile", action="store_true", help="skip the operator profile of privsql's SQL"
    )
    parser.add_argument("--profile-top", type=int, default=8, help="operators shown (8)")
    parser.add_argument("--show-sql", action="store_true", help="print privsql's generated SQL")
    parser.add_argument("--json", help="also write all numbers to this file")
    args = parser.parse_args(argv)
    sizes = [int(float(x)) for x in args.rows.split(",") if x.strip()]

    started = time.perf_counter()
    args.extra_deadline = started + args.extra_seconds
    load_before = os.getloadavg()
    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    db = privsql.connect(con, budget=1e9)
    results: dict = {
        "duckdb": duckdb.__version__,
        "privsql_commit": _git(),
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "repeat": args.repeat,
        "sizes": {},
    }
    print(
        f"privsql speed benchmark — duckdb {duckdb.__version__}, threads={args.threads}, "
        f"{os.cpu_count()} CPUs, best of {args.repeat}"
    )
    print(f"privsql from {Path(privsql.__file__).parent} (repo at {results['privsql_commit']})")
    print(f"load average at start: {load_before[0]:.2f} (1 min)")

    lines: list[dict] = []
    for i, rows in enumerate(sizes):
        bench_size(con, db, rows, args, results, lines, last=i == len(sizes) - 1)
    small = bench_small(con, db, args.small_rows, args.small_repeat, results)
    load_after = os.getloadavg()

    print()
    print_table(lines)
    print(
        "\ns = best wall-clock seconds; cpu-s = least process CPU seconds (all threads); "
        "ratios use s.\n×floor = vs B for SUM, vs the least(count, k) pre-aggregate for COUNT, "
        "vs the scaled pre-aggregate for WEIGHTS."
    )
    if any(line["contended"] for line in lines):
        print(
            f"* fewer than {args.repeat} of its runs had all {args.threads} cores (another "
            "process was busy): treat that line with suspicion."
        )

    print(
        f"\nprivsql overhead on a {args.small_rows:,}-row table (best of {args.small_repeat}, ms):"
    )
    print(
        f"  {'shape':6} {'end-to-end':>10} {'its SQL':>8} {'overhead':>9}   of which: "
        f"{'explain()':>13} {'fingerprint':>11} {'ledger+rest':>11}"
    )
    for shape, s in small.items():
        print(
            f"  {shape.upper():6} {s['e2e'] * 1e3:10.1f} {s['sql'] * 1e3:8.1f} "
            f"{s['overhead'] * 1e3:9.1f}   {'':9} {s['explain'] * 1e3:13.1f} "
            f"{s['fingerprint'] * 1e3:11.1f} {s['rest'] * 1e3:11.1f}"
        )

    if "candidate_checks" in results:
        print(
            f"\ncandidate rewrites of privsql's SQL (N = {sizes[-1]:,}; same exact per-group "
            "counts and sums as privsql's SQL before noise):"
        )
        for key, same in results["candidate_checks"].items():
            print(f"  {key:60} {'same' if same else 'DIFFERENT'}")

    if "profile" in results:
        for shape, prof in results["profile"].items():
            print(
                f"\noperator profile of privsql's {shape.upper()} SQL at N = {sizes[-1]:,} "
                f"(DuckDB JSON profiler; operator seconds summed over threads, "
                f"total {prof['operator_seconds']:.2f}):"
            )
            for o in prof["top"]:
                share = o["seconds"] / prof["operator_seconds"] if prof["operator_seconds"] else 0
                print(
                    f"  {o['seconds']:6.2f} s {share:4.0%}  {o['operator']:22} "
                    f"{o['rows']:>10,} rows  {o['detail']}"
                )

    if args.show_sql:
        for shape, sql in results["sizes"][str(sizes[-1])]["generated_sql"].items():
            print(f"\nprivsql's generated SQL ({shape.upper()}):\n{sql}")

    # -- targets
    print("\ntargets:")
    for rows in sizes:
        tm = results["sizes"][str(rows)]["timings"]
        e2e, b, a = tm["sum/privsql"]["wall"], tm["sum/B"]["wall"], tm["sum/A"]["wall"]
        ce2e, cfloor = tm["count/privsql"]["wall"], tm["count/floor"]["wall"]
        we2e, wfloor = tm["weights/privsql"]["wall"], tm["weights/floor"]["wall"]
        for label, x, y, most in (
            (f"SUM   N={_n(rows):>5}: privsql ≤ 1.3× floor B", e2e, b, 1.3),
            (f"SUM   N={_n(rows):>5}: privsql ≤ 1.3× A", e2e, a, 1.3),
            (f"COUNT N={_n(rows):>5}: privsql ≤ 1.3× floor", ce2e, cfloor, 1.3),
            (f"WEIGHTS N={_n(rows):>5}: privsql ≤ 1.0× floor", we2e, wfloor, 1.0),
        ):
            print(f"  {label:48} {x / y:5.2f}×  {'PASS' if x <= most * y else 'FAIL'}")
        for shape, floor in (("sum", "B"), ("count", "floor"), ("weights", "floor")):
            x, y = tm[f"{shape}/privsql-sql"]["wall"], tm[f"{shape}/{floor}"]["wall"]
            label = f"{shape.upper():7} N={_n(rows):>5}: generated SQL alone vs floor"
            print(f"  {label:48} {x / y:5.2f}×")
    for shape, s in small.items():
        print(
            f"  {shape.upper():5} overhead on {args.small_rows:,} rows < 20 ms"
            f"{'':{max(0, 17 - len(f'{args.small_rows:,}'))}} {s['overhead'] * 1e3:5.1f} ms "
            f"{'PASS' if s['overhead'] < 0.020 else 'FAIL'}"
        )
    if "python_heap_peak_mb" in results:
        heap = results["python_heap_peak_mb"]
        print(
            f"  no Python-side row materialisation (Python heap peak of one run at "
            f"N={_n(sizes[-1])})  {heap:5.2f} MB {'PASS' if heap < 16 else 'FAIL'}"
        )

    rss = _rss_mb()
    results.update(
        peak_rss_mb=rss,
        load_before=load_before,
        load_after=load_after,
        seconds=time.perf_counter() - started,
    )
    print(
        f"\npeak RSS of the process: {rss:.0f} MB (resource.getrusage ru_maxrss; includes the "
        "tables and every query above)"
    )
    print(
        f"load average (1 min) at start {load_before[0]:.2f}, at end {load_after[0]:.2f} on "
        f"{os.cpu_count()} CPUs; above ~{args.threads} other work was competing: read cpu-s."
    )
    print(f"total benchmark time {results['seconds']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
