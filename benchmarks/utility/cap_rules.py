"""AUTO's row cap against the hindsight-best fixed cap by *expected* error, offline.

``auto_defaults.py`` measures AUTO through privsql with 10 runs per cell, and its
hindsight best is the minimum of noisy means, so its ratios move by ±30% between runs.
This script removes both sources of noise for COUNT and SUM under one group: it calls
privsql's own selection function (``udfs.rank_threshold``) on the
exact summary their search statement computes (the units, and per candidate cap how many
units have more rows), many times, and scores every chosen cap by its expected error
E|b + Lap(λ)| = |b| + λ·e^(−|b|/λ): b the exact bias of weighting at that cap, λ the
release's noise scale at the ε the release gets (0.95ε for a fixed cap, which pays only
the bounding check; 0.8ε for AUTO, which also pays its search). No privsql query runs and
nothing is spent.

The hindsight best is the best fixed cap over *every* number of rows (1 to one above the
largest unit), not only over a grid: a user fixing a cap may pick any number, and the
former best over the ×1.5 grid flattered AUTO by up to 1.3× (``grid_best_vs_best``).

Variants of the rank rule, each a knob the rule's docstring argues for:

* ``privsql``: the shipped rule (the ×2^¼ grid ``ROW_CANDIDATES``, a one-sided score at
  the monotone sensitivity, a prior rising at a third of the evidence to
  ``udfs.threshold.PRIOR_KNEE`` = 3/2 and on to ``PRIOR_CEILING`` per ×1.5 of cap where
  the data give ample evidence, and one grid step above the selection);
* ``former rise``: the prior's rise before docs/utility.md §16 (a quarter of the
  evidence, up to 1): the rule of §13;
* ``knee 5/4``, ``knee 1``: the faster rise stopping lower;
* ``no step``: without the step up (``margin=0``);
* ``share 25%``: the search gets 25% of ε and the release 70%.

(§13's ``×1.5 grid`` and ``ceiling 3/2`` are ``shipped(grid=(CANDIDATES, 1.5))`` and
``shipped(ceiling=Fraction(3, 2))``.)

Run against a snapshot of an earlier privsql (``PYTHONPATH=snapshot``, ``--label before``)
to score the rule it ships; ``--before`` adds that run's ``privsql`` column to the table.

    python benchmarks/utility/cap_rules.py [--quick] [--label NAME] [--before CSV]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from fractions import Fraction

import _common as c
import numpy as np
import pandas as pd

import udfs
from rewriter.plan import CANDIDATES
from udfs import threshold
from udfs.threshold import MARGIN, PRIOR_CEILING, rank_threshold

try:
    from rewriter.plan import ROW_CANDIDATES, ROW_RATIO
except ImportError:  # a snapshot from before the row caps had their own grid
    ROW_CANDIDATES, ROW_RATIO = CANDIDATES, 1.5

sys.path.append(str(c.ROOT / "tests"))
import shapes

EPSILONS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
FIXED_SHARE = 0.95  # a fixed cap's release: all but the bounding check's 5%
SEARCH_SHARE = 0.15  # rewriter.plan.AUTO_SHARE
DATA = {
    "flights": ("flights", "tailnum", "distance", 5000.0),
    "movielens": ("ratings", "user_id", "rating", 5.0),
    "visits": ("visits", "uid", "amount", 25.0),
}

Rule = Callable[[np.ndarray, int, float, udfs.SeededRandom], int]


def unit_sizes(con) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    """Per data shape: each unit's rows and sum of values, and the values' bound."""
    out = {}
    for name, (table, unit, value, bound) in DATA.items():
        rows = con.sql(
            f"SELECT count(*) AS n, sum({value}) AS s FROM {table} "
            f"WHERE {unit} IS NOT NULL GROUP BY {unit}"
        ).fetchnumpy()
        out[name] = (rows["n"].astype(float), rows["s"].astype(float), bound)
    return out


def relative_bias(statistic: str, sizes: np.ndarray, sums: np.ndarray, cap: int) -> float:
    """What weighting at ``cap`` leaves out of COUNT or SUM, relative to the truth."""
    values = sizes if statistic == "COUNT" else sums
    return float((values * np.maximum(0.0, 1 - cap / sizes)).sum() / values.sum())


def expected_error(
    statistic: str, sizes: np.ndarray, sums: np.ndarray, bound: float, cap: int, eps: float
) -> float:
    """E|released − truth| / truth for COUNT or SUM under weighting at ``cap``."""
    truth = sizes.sum() if statistic == "COUNT" else sums.sum()
    scale = cap * (1.0 if statistic == "COUNT" else bound) / eps / truth
    return float(c.laplace_abs_error(relative_bias(statistic, sizes, sums, cap), scale))


def shipped(
    margin: int = MARGIN,
    ceiling: Fraction = PRIOR_CEILING,
    grid: tuple[tuple[int, ...], float] = (ROW_CANDIDATES, ROW_RATIO),
    share: float = SEARCH_SHARE,
    **prior: Fraction | int,
) -> Rule:
    """The rank rule with the given step up, prior constants (module constants of
    ``udfs.threshold``: the ceiling, and in ``prior`` the knee and rise of §16, set for
    the call and restored: what-if only), grid of caps with its ratio, and share of ε
    for the search (the release then gets 0.95 − share)."""
    candidates, ratio = grid
    spelled = {} if ratio == 1.5 else {"ratio": ratio}  # a snapshot's rule has no ratio
    knobs = {"PRIOR_CEILING": ceiling, **{k.upper(): v for k, v in prior.items()}}
    knobs = {k: v for k, v in knobs.items() if hasattr(threshold, k)}

    def rule(sizes, rank, eps, rng) -> int:
        exceedances = [int((sizes > cap).sum()) for cap in candidates]
        saved = {k: getattr(threshold, k) for k in knobs}
        for k, v in knobs.items():
            setattr(threshold, k, v)
        try:
            return rank_threshold(
                candidates,
                len(sizes),
                exceedances,
                rank,
                share * eps,
                rng,
                1,
                margin,
                **spelled,
            ).cap
        finally:
            for k, v in saved.items():
                setattr(threshold, k, v)

    rule.share = share
    return rule


VARIANTS: dict[str, Rule] = {
    "privsql": shipped(),
    "former rise": shipped(prior_knee=Fraction(1), rise_part=4),
    "knee 5/4": shipped(prior_knee=Fraction(5, 4)),
    "knee 1": shipped(prior_knee=Fraction(1)),
    "no step": shipped(margin=0),
    "share 25%": shipped(share=0.25),
}


def run(con, draws: int, epsilons, seed: int, variants: dict[str, Rule]) -> pd.DataFrame:
    rows = []
    for name, data in unit_sizes(con).items():
        sizes, sums, _ = data
        every_cap = range(1, int(sizes.max()) + 2)  # above the largest unit only noise grows
        median_cap = max(1, round(float(np.median(sizes))))
        for eps in epsilons:
            drawn, releases = {}, {}
            for label, rule in variants.items():
                # the release gets what the search and the bounding check leave
                release = (FIXED_SHARE - getattr(rule, "share", SEARCH_SHARE)) * eps
                rank = math.ceil(1 / release)
                rng = udfs.SeededRandom(seed, insecure=True)
                drawn[label] = [rule(sizes, rank, eps, rng) for _ in range(draws)]
                releases[label] = release
            for statistic in ("COUNT", "SUM"):

                def error(cap: int, at: float, statistic=statistic, data=data) -> float:
                    return expected_error(statistic, *data, cap, at)

                fixed = {cap: error(cap, FIXED_SHARE * eps) for cap in every_cap}
                best = min(fixed, key=fixed.get)
                grid_best = min(error(cap, FIXED_SHARE * eps) for cap in CANDIDATES)
                for label, caps in drawn.items():
                    auto = float(np.mean([error(cap, releases[label]) for cap in caps]))
                    cut = [relative_bias(statistic, sizes, sums, k) > 0.01 for k in caps]
                    rows.append(
                        dict(
                            data=name,
                            statistic=statistic,
                            epsilon=eps,
                            rule=label,
                            best_cap=best,
                            median_cap_of_auto=float(np.median(caps)),
                            auto_vs_best=auto / fixed[best],
                            grid_best_vs_best=grid_best / fixed[best],
                            median_vs_best=error(median_cap, FIXED_SHARE * eps) / fixed[best],
                            biased_1pct=float(np.mean(cut)),
                        )
                    )
    return pd.DataFrame(rows)


def plot(results: pd.DataFrame) -> None:
    """AUTO/best per ε for each variant, one panel per data shape and statistic."""
    plt = c.pyplot()
    panels = results[["data", "statistic"]].drop_duplicates().itertuples(index=False)
    fig, axes = plt.subplots(1, 6, figsize=(20, 3.6), sharey=True)
    for ax, (data, statistic) in zip(axes, panels, strict=True):
        cell = results[(results.data == data) & (results.statistic == statistic)]
        for rule, part in cell.groupby("rule", sort=False):
            ax.plot(part.epsilon, part.auto_vs_best, marker="o", ms=3, label=rule)
        median = cell.drop_duplicates("epsilon")
        ax.plot(median.epsilon, median.median_vs_best, "k:", label="median cap")
        ax.axhline(2, color="k", lw=0.8, ls="--")
        ax.set(xscale="log", yscale="log", title=f"{data} {statistic}", xlabel="ε")
    axes[0].set_ylabel("expected error / best fixed cap's")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = c.figure("utility-cap-rules.png")
    fig.savefig(path)
    plt.close(fig)
    print(path)


def within(results: pd.DataFrame) -> pd.DataFrame:
    """Per rule: cells within 2× of the best, how many, and the worst ratio."""
    return (
        results.groupby("rule", sort=False)
        .auto_vs_best.agg(within_2=lambda r: int((r <= 2).sum()), cells="size", worst="max")
        .reset_index()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 draws per cell, not 1 000")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--label", help="written as cap_rules_LABEL.csv; only the shipped rule")
    parser.add_argument("--before", help="a --label run's CSV, shown as the column 'before'")
    args = parser.parse_args()
    c.header("AUTO's row cap vs the hindsight-best fixed cap, by expected error", args.quick)
    start = time.perf_counter()
    con = shapes.every_shape(c.connection())
    variants = {"privsql": VARIANTS["privsql"]} if args.label else VARIANTS
    results = run(con, 100 if args.quick else 1000, EPSILONS, args.seed, variants)
    if args.before:
        before = pd.read_csv(args.before)
        results = pd.concat([before[before.rule == "privsql"].assign(rule="before"), results])
    c.write_csv(results, f"cap_rules_{args.label}.csv" if args.label else "cap_rules.csv")
    table = results.pivot_table(
        index=["data", "statistic", "epsilon"], columns="rule", values="auto_vs_best", sort=False
    )
    table = table[list(results.rule.unique())].reset_index()
    print(c.markdown(table))
    print(c.markdown(within(results)))
    print("flights and ratings at ε ≥ 0.5:")
    print(c.markdown(within(results[(results.epsilon >= 0.5) & (results.data != "visits")])))
    if not args.label:
        plot(results)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
