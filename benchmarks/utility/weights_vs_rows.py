"""Target check: ``BOUND WEIGHTS AUTO`` vs ``BOUND ROWS AUTO`` for AVG on heavy-tailed data.

The issue's target: weighted averaging with a private threshold (EMMMR20; privsql's
default, ``BOUND AUTO``) is no worse than sample limiting with a private threshold
(AKMV19) for AVG on heavy-tailed data. Data: ``uid = floor(20000·u³)`` (heavy-tailed
contributions), three variants:

* ``iid``: v ~ U[0, 100), no GROUP BY — EMMMR20's model (rows y = β + ξ);
* ``per-unit``: v = μ_u + U[−10, 10], μ_u ~ U[10, 90] per unit, no GROUP BY — heavy units
  have their own mean, so any cap also biases the answer;
* ``grouped``: v ~ U[0, 100), ``GROUP BY g`` over 10 public groups (g uniform per row),
  ``MAX_GROUPS 10`` — the same question when the noise is per group.

Error: |released AVG − exact AVG over all rows| (per group, averaged over groups), mean
over repetitions; each repetition is its own private threshold search and release.

Reference (not a privsql release): the expected error of every *fixed* cap k (ROWS) and
h (WEIGHTS) on a 2^i grid, from privsql's exact bounded sum and count (one query at
ε = 1e9 each) with the release's Laplace noise simulated in numpy (AVG = mid + S/max(N,1),
ε/2 each, clamped), and the best of these per ε (hindsight).

    python benchmarks/utility/weights_vs_rows.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import _common as c
import numpy as np
import pandas as pd

EPSILONS = (0.1, 0.5, 1.0, 5.0)
HIGH = 100.0
GROUPS = 10
METHODS = {"BOUND WEIGHTS AUTO": "BOUND WEIGHTS AUTO", "BOUND ROWS AUTO": "BOUND ROWS AUTO"}


def variants(con, quick: bool) -> list[dict]:
    rows = 40_000 if quick else 100_000
    out = []
    for short, value, grouped in (
        ("iid", "uniform100", False),
        ("per-unit", "unit100", False),
        ("grouped", "uniform100", True),
    ):
        frame = c.heavy_tailed_table(
            con,
            name=f"t_{short.replace('-', '_')}",
            units=20_000,
            rows=rows,
            seed={"iid": 11, "per-unit": 12, "grouped": 13}[short],
            value=value,
        )
        table = f"t_{short.replace('-', '_')}"
        if grouped:
            rng = np.random.default_rng(14)
            frame["g"] = rng.integers(0, GROUPS, len(frame))
            con.register("__frame", frame)
            con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM __frame")
            con.unregister("__frame")
            truth = frame.groupby("g").v.mean().reindex(range(GROUPS)).to_numpy()
        else:
            truth = np.array([frame.v.mean()])
        counts = frame.groupby(["uid", "g"] if grouped else "uid").size()
        out.append(
            {
                "short": short,
                "table": table,
                "grouped": grouped,
                "truth": truth,
                "rows": rows,
                "largest": int(counts.max()),
            }
        )
    return out


def select(v: dict, aggregates: str, bound: str) -> str:
    if v["grouped"]:
        return (
            f"SELECT g, {aggregates} FROM {v['table']} GROUP BY g PRIVACY_UNIT uid {bound} "
            f"MAX_GROUPS {GROUPS} EPSILON {{eps}}"
        )
    return f"SELECT {aggregates} FROM {v['table']} PRIVACY_UNIT uid {bound} EPSILON {{eps}}"


def values(result, v: dict, column: str) -> np.ndarray:
    frame = result.df()
    if v["grouped"]:
        frame = frame.sort_values("g")
    return frame[column].to_numpy(dtype=float)


def expected_fixed(runner, v: dict, rng, draws: int) -> pd.DataFrame:
    """Expected error of fixed caps from exact bounded sums and counts (see the docstring)."""
    grid = [2**i for i in range(0, 40) if 2**i < 2 * v["largest"]]
    m = GROUPS if v["grouped"] else 1
    mid = HIGH / 2
    rows = []
    for strategy in ("ROWS", "WEIGHTS"):
        for k in grid:
            result = runner.run(
                select(
                    v,
                    f"SUM(v CLAMPED BETWEEN 0 AND {HIGH:g}) AS s, COUNT(v) AS n",
                    f"BOUND {strategy} {k}",
                ),
                1e9,
            )
            s, n = values(result, v, "s"), values(result, v, "n")
            centred = s - mid * n
            for eps in EPSILONS:
                z1 = rng.laplace(0, k * m * HIGH / eps, (draws, len(s)))
                z2 = rng.laplace(0, 2 * k * m / eps, (draws, len(s)))
                estimate = np.clip(mid + (centred + z1) / np.maximum(n + z2, 1), 0, HIGH)
                error = np.abs(estimate - v["truth"]).mean()
                rows.append(
                    {
                        "variant": v["short"],
                        "strategy": strategy,
                        "cap": k,
                        "epsilon": eps,
                        "expected_error": error,
                        "bias_only": float(np.abs(mid + centred / n - v["truth"]).mean()),
                    }
                )
    return pd.DataFrame(rows)


def run_variant(con, v: dict, reps: int, seed: int, draws: int):
    db = c.session(con, seed)
    db.protect(v["table"], privacy_unit="uid")
    keys = {"g": list(range(GROUPS))} if v["grouped"] else None
    runner = c.Runner(db, keys=keys)
    reference = expected_fixed(runner, v, np.random.default_rng(seed), draws)
    rows = []
    for eps in EPSILONS:
        for method, bound in METHODS.items():
            errors, chosen = [], []
            for _ in range(reps):
                result = runner.run(
                    select(v, f"AVG(v CLAMPED BETWEEN 0 AND {HIGH:g}) AS a", bound), eps
                )
                errors.append(np.abs(values(result, v, "a") - v["truth"]).mean())
                chosen.append(c.chosen_cap(result))
            errors = np.array(errors)
            strategy = method.split()[1]
            ref = reference[(reference.strategy == strategy) & (reference.epsilon == eps)]
            at_chosen = ref.set_index("cap").expected_error
            rows.append(
                {
                    "variant": v["short"],
                    "epsilon": eps,
                    "method": method,
                    "reps": reps,
                    "mean_error": errors.mean(),
                    "stderr": errors.std(ddof=1) / math.sqrt(reps),
                    "cap_median": float(np.median(chosen)),
                    "cap_p10": float(np.quantile(chosen, 0.1)),
                    "cap_p90": float(np.quantile(chosen, 0.9)),
                    "best_fixed_cap": int(ref.loc[ref.expected_error.idxmin(), "cap"]),
                    "best_fixed_expected_error": float(ref.expected_error.min()),
                    "expected_error_at_nearest_grid_cap": float(
                        at_chosen.iloc[
                            int(
                                np.argmin(
                                    np.abs(np.log(at_chosen.index) - np.log(np.median(chosen)))
                                )
                            )
                        ]
                    ),
                }
            )
    print(
        f"  {v['short']}: {runner.count} queries, {runner.seconds:.1f} s in db.sql; largest "
        f"cell {v['largest']} rows"
    )
    return pd.DataFrame(rows), reference


def summary(results: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (variant, eps), part in results.groupby(["variant", "epsilon"], sort=False):
        p = part.set_index("method")
        w, r = p.loc["BOUND WEIGHTS AUTO"], p.loc["BOUND ROWS AUTO"]
        out.append(
            {
                "variant": variant,
                "ε": eps,
                "WEIGHTS AUTO": w.mean_error,
                "± s.e.": w.stderr,
                "h chosen": w.cap_median,
                "ROWS AUTO": r.mean_error,
                "± s.e. ": r.stderr,
                "k chosen": r.cap_median,
                "WEIGHTS/ROWS": w.mean_error / r.mean_error,
                "best fixed h": w.best_fixed_cap,
                "its error": w.best_fixed_expected_error,
                "best fixed k": r.best_fixed_cap,
                "its error ": r.best_fixed_expected_error,
                "target": "met"
                if w.mean_error <= r.mean_error + 2 * math.hypot(w.stderr, r.stderr)
                else "NOT met",
            }
        )
    return pd.DataFrame(out)


def plot(results: pd.DataFrame, reference: pd.DataFrame, path) -> None:
    plt = c.pyplot()
    names = {
        "iid": "iid values, one group",
        "per-unit": "per-unit means, one group",
        "grouped": f"iid values, {GROUPS} groups, MAX_GROUPS {GROUPS}",
    }
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    for ax, (variant, part) in zip(axes, results.groupby("variant", sort=False), strict=True):
        for method, color, marker in (
            ("BOUND WEIGHTS AUTO", "C0", "o"),
            ("BOUND ROWS AUTO", "C1", "s"),
        ):
            m = part[part.method == method]
            ax.errorbar(
                m.epsilon,
                m.mean_error,
                yerr=m.stderr,
                color=color,
                marker=marker,
                lw=2,
                capsize=2,
                label=method,
            )
        ref = reference[reference.variant == variant]
        for strategy, color in (("WEIGHTS", "C0"), ("ROWS", "C1")):
            best = ref[ref.strategy == strategy].groupby("epsilon").expected_error.min()
            ax.plot(
                best.index,
                best.values,
                ls=":",
                color=color,
                marker="D",
                ms=3,
                label=f"best fixed {strategy} cap (expected, hindsight)",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(list(EPSILONS))
        ax.set_xticklabels([f"{e:g}" for e in EPSILONS])
        ax.set_xlabel("ε (whole query)")
        ax.set_ylabel("mean absolute error of AVG (v in [0, 100])")
        ax.set_title(names[variant], fontsize=10)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        "BOUND WEIGHTS AUTO vs BOUND ROWS AUTO for AVG on heavy-tailed data "
        "(uid = floor(20000·u³))",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller data, fewer repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 20; 8 quick)")
    parser.add_argument("--seed", type=int, default=2030)
    args = parser.parse_args()
    reps = args.reps or (8 if args.quick else 20)
    c.header("BOUND WEIGHTS AUTO vs BOUND ROWS AUTO for AVG", args.quick)
    start = time.perf_counter()
    con = c.connection()
    data = variants(con, args.quick)
    frames = [
        run_variant(con, v, reps, args.seed + i, 400 if args.quick else 2000)
        for i, v in enumerate(data)
    ]
    results = pd.concat([f[0] for f in frames], ignore_index=True)
    reference = pd.concat([f[1] for f in frames], ignore_index=True)
    c.write_csv(results, "weights_vs_rows.csv")
    c.write_csv(reference, "weights_vs_rows_fixed_caps.csv")
    table = summary(results)
    c.write_csv(table, "weights_vs_rows_summary.csv")
    plot(results, reference, c.figure("utility-weights-vs-rows.png"))
    print(
        f"\nmean absolute error of AVG over {reps} repetitions ({data[0]['rows']} rows, "
        "20k units); chosen caps are medians over repetitions"
    )
    print(c.markdown(table))
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
