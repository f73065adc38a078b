"""RT24 Figs. 2-3 set-ups: private mean under RT24 clipping, AKMV-style row caps, plain Laplace.

RT24 Sec. IV-A, with U = 65:

* "geometric" collection: M = 6, L = 2^(M+1) − 1 = 127 users; for i = 0..M, 2^i users
  contribute 2^(M−i) samples each (448 samples, largest user 64); samples ~ Unif((0, U]);
* "extreme-valued" collection: L = 101 users, 100 with one sample and one with m* = 10;
  samples ~ N(U/2, U/4) (variance U/4) by rejection into (0, U].

The error is RT24's average case: E|M(D) − f(D)|, f(D) the sample mean of the dataset,
over fresh datasets and the mechanism's noise. Mechanisms, all privsql queries of
``AVG(x CLAMPED BETWEEN 0 AND 65)``:

* ``BOUND CLIP`` — RT24 Theorem III.1 clipping, T chosen privately by privsql;
* ``BOUND ROWS AUTO`` — AKMV-style row cap chosen privately (the rank rule);
* ``BOUND AUTO`` — privsql's default (weighted averaging, EMMMR20 v(h) rule), for reference;
* best fixed ``BOUND ROWS k`` — the k of a grid with the smallest measured error per ε
  (hindsight);
* "plain Laplace" — ``BOUND ROWS m*``: the naive cap at the largest user count, which
  keeps every row (RT24's vanilla Laplace mechanism, with privsql's noisy count).

Data: one table with D independent copies of the collection (column ``d``; units are
distinct across copies). AUTO/CLIP queries read one copy each (``WHERE d = i``), so each
repetition is its own dataset and its own threshold search. Fixed caps read all copies
at once, ``GROUP BY d`` with public keys and ``MAX_GROUPS 1``: each copy's released mean
has exactly the noise of a one-copy query, so one query gives D repetitions.

Differences from RT24: privsql's count is noisy (RT24 assume the m_l are known), AVG
spends ε/2 on the sum and ε/2 on the count, and AUTO/CLIP spend a share of ε on the
threshold; RT24's own plots use their ``AKMV`` adaptation (per-user sums clipped to a
private quantile), not privsql's row cap.

    python benchmarks/utility/rt24_figs.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import _common as c
import numpy as np
import pandas as pd

U = 65.0
EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
AUTO_METHODS = {
    "BOUND CLIP": "BOUND CLIP",
    "BOUND ROWS AUTO": "BOUND ROWS AUTO",
    "BOUND AUTO": "BOUND AUTO",
}


def geometric_sizes(m: int = 6) -> np.ndarray:
    return np.concatenate([[2 ** (m - i)] * 2**i for i in range(m + 1)])


def extreme_sizes(users: int = 101, largest: int = 10) -> np.ndarray:
    return np.array([1] * (users - 1) + [largest])


def samples(kind: str, count: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform":
        return U * (1 - rng.random(count))  # (0, U]
    out = rng.normal(U / 2, math.sqrt(U / 4), count)
    bad = (out <= 0) | (out > U)
    while bad.any():
        out[bad] = rng.normal(U / 2, math.sqrt(U / 4), bad.sum())
        bad = (out <= 0) | (out > U)
    return out


def make_table(con, name: str, sizes: np.ndarray, kind: str, copies: int, rng) -> pd.DataFrame:
    users = len(sizes)
    per_copy = np.repeat(np.arange(users), sizes)
    d = np.repeat(np.arange(copies), len(per_copy))
    uid = d * users + np.tile(per_copy, copies)
    x = samples(kind, len(uid), rng)
    frame = pd.DataFrame({"d": d, "uid": uid, "x": x})
    con.register("__frame", frame)
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM __frame")
    con.unregister("__frame")
    return frame.groupby("d").x.mean().to_numpy()


def run_collection(con, spec: dict, copies: int, reps: int, seed: int) -> tuple[pd.DataFrame, ...]:
    rng = np.random.default_rng(seed)
    name, sizes = spec["table"], spec["sizes"]
    truth = make_table(con, name, sizes, spec["samples"], copies, rng)
    db = c.session(con, seed)
    db.protect(name, privacy_unit="uid")
    auto = c.Runner(db)
    fixed = c.Runner(db, keys={"d": list(range(copies))})
    largest = int(sizes.max())
    grid = sorted(
        {k for k in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) if k <= largest} | {largest}
    )
    avg = f"AVG(x CLAMPED BETWEEN 0 AND {U:g})"
    rows, caps = [], []
    for eps in EPSILONS:
        for method, bound in AUTO_METHODS.items():
            errors, chosen = [], []
            for i in range(reps):
                result = auto.run(
                    f"SELECT {avg} AS a FROM {name} WHERE d = {i} PRIVACY_UNIT uid {bound} "
                    f"EPSILON {{eps}}",
                    eps,
                )
                errors.append(abs(result.fetchall()[0][0] - truth[i]))
                chosen.append(c.chosen_cap(result))
            rows.append(_row(spec, eps, method, None, errors))
            caps.append(
                {
                    "collection": spec["short"],
                    "epsilon": eps,
                    "method": method,
                    "cap_median": float(np.median(chosen)),
                    "cap_p10": float(np.quantile(chosen, 0.1)),
                    "cap_p90": float(np.quantile(chosen, 0.9)),
                }
            )
        measured = {}
        for k in grid:
            result = fixed.run(
                f"SELECT d, {avg} AS a FROM {name} GROUP BY d PRIVACY_UNIT uid BOUND ROWS {k} "
                f"MAX_GROUPS 1 EPSILON {{eps}}",
                eps,
            )
            estimates = result.df().sort_values("d")["a"].to_numpy()
            measured[k] = np.abs(estimates - truth)
            rows.append(_row(spec, eps, f"ROWS {k}", k, measured[k]))
        best = min(grid, key=lambda k: measured[k].mean())
        rows.append(_row(spec, eps, "best fixed ROWS k", best, measured[best]))
        rows.append(_row(spec, eps, "plain Laplace (ROWS m*)", largest, measured[largest]))
    print(
        f"  {spec['name']}: {auto.count} one-copy queries ({auto.seconds:.1f} s), "
        f"{fixed.count} all-copies queries ({fixed.seconds:.1f} s)"
    )
    return pd.DataFrame(rows), pd.DataFrame(caps)


def _row(spec, eps, method, cap, errors) -> dict:
    errors = np.asarray(errors, dtype=float)
    return {
        "collection": spec["short"],
        "epsilon": eps,
        "method": method,
        "cap": cap,
        "reps": len(errors),
        "mae": errors.mean(),
        "stderr": errors.std(ddof=1) / math.sqrt(len(errors)),
    }


SHOWN = (
    "BOUND CLIP",
    "BOUND ROWS AUTO",
    "BOUND AUTO",
    "best fixed ROWS k",
    "plain Laplace (ROWS m*)",
)


def summary(results: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (collection, eps), part in results.groupby(["collection", "epsilon"], sort=False):
        err = dict(zip(part["method"], part["mae"], strict=True))
        cap = dict(zip(part["method"], part["cap"], strict=True))
        row = {"collection": collection, "ε": eps}
        row.update({m: err[m] for m in SHOWN})
        row["best k"] = int(cap["best fixed ROWS k"])
        row["CLIP/plain"] = err["BOUND CLIP"] / err["plain Laplace (ROWS m*)"]
        row["CLIP/ROWS AUTO"] = err["BOUND CLIP"] / err["BOUND ROWS AUTO"]
        out.append(row)
    return pd.DataFrame(out)


def plot(results: pd.DataFrame, specs: list[dict], path) -> None:
    plt = c.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    styles = {
        "BOUND CLIP": dict(color="C0", marker="o", lw=2),
        "BOUND ROWS AUTO": dict(color="C1", marker="s", lw=2),
        "BOUND AUTO": dict(color="C4", marker="P", lw=1.2),
        "best fixed ROWS k": dict(color="k", marker="D", ls=":"),
        "plain Laplace (ROWS m*)": dict(color="C3", marker="^", ls="--"),
    }
    for ax, spec in zip(axes, specs, strict=True):
        part = results[results.collection == spec["short"]]
        for method in SHOWN:
            m = part[part.method == method]
            label = method
            if method == "plain Laplace (ROWS m*)":
                label = f"plain Laplace (ROWS {int(m.cap.iloc[0])} = m*)"
            if method == "best fixed ROWS k":
                label = "hindsight-best fixed ROWS k (per ε)"
            if method == "BOUND AUTO":
                label = "BOUND AUTO (weights, v(h) rule)"
            ax.errorbar(
                m.epsilon, m.mae, yerr=m.stderr, label=label, capsize=2, ms=5, **styles[method]
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(list(EPSILONS))
        ax.set_xticklabels([f"{e:g}" for e in EPSILONS])
        ax.set_xlabel("ε (whole query)")
        ax.set_ylabel(f"mean absolute error of AVG (U = {U:g})")
        ax.set_title(spec["name"], fontsize=10)
    axes[0].legend(fontsize=8)
    fig.suptitle("RT24 Figs. 2-3 set-ups through privsql: mean estimation", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument(
        "--reps",
        type=int,
        default=None,
        help="repetitions of AUTO/CLIP queries (default 40; 12 quick)",
    )
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args()
    reps = args.reps or (12 if args.quick else 40)
    copies = 100 if args.quick else 400
    copies = max(copies, reps)
    c.header("RT24 Figs. 2-3 set-ups: private mean", args.quick)
    start = time.perf_counter()
    con = c.connection()
    specs = [
        {
            "short": "geometric",
            "table": "geometric",
            "sizes": geometric_sizes(),
            "samples": "uniform",
            "name": "geometric collection (127 users, 448 samples), Unif((0, 65])",
        },
        {
            "short": "extreme",
            "table": "extreme",
            "sizes": extreme_sizes(),
            "samples": "gaussian",
            "name": "extreme-valued collection (100 × 1 + 1 × 10), projected N(32.5, 16.25)",
        },
    ]
    frames = [run_collection(con, s, copies, reps, args.seed + i) for i, s in enumerate(specs)]
    results = pd.concat([f[0] for f in frames], ignore_index=True)
    caps = pd.concat([f[1] for f in frames], ignore_index=True)
    c.write_csv(results, "rt24_figs.csv")
    c.write_csv(caps, "rt24_figs_caps.csv")
    table = summary(results)
    c.write_csv(table, "rt24_figs_summary.csv")
    plot(results, specs, c.figure("utility-rt24.png"))
    print(
        f"\nmean absolute error of AVG ({reps} datasets per AUTO/CLIP point, {copies} per "
        "fixed cap)"
    )
    print(c.markdown(table))
    print("\ncaps chosen privately (rows; for CLIP, n with T = U·n): median [10%, 90%]")
    view = caps.assign(
        chosen=[
            f"{a:g} [{b:g}, {d:g}]"
            for a, b, d in zip(caps.cap_median, caps.cap_p10, caps.cap_p90, strict=True)
        ]
    )
    print(
        c.markdown(
            view.pivot(
                index=["collection", "epsilon"], columns="method", values="chosen"
            ).reset_index()
        )
    )
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
