"""EMMMR20 Theorems 2 and 3: sample limiting vs weighted averaging for a private mean.

EMMMR20 Sec. 3 estimate a mean β from rows y = β + ξ (Var ξ = σ², y ∈ [0, B]) held by
users of sizes s_1 ≤ … ≤ s_m, with n_h = Σ_l min(h, s_l) and λ = B/ε:

* weighted averaging (Lemma 3, Claim 1): a row of user q weighs min(h, s_q)/(s_q·n_h),
  v(h)  = (σ² Σ_l min(h, s_l)²/s_l + 2(λh)²) / n_h²,  minimised over real h ∈ [s_1, s_m];
* sample limiting (Claim 2): keep min(h, s_l) rows per user, v'(h) = σ²/n_h + 2(λh)²/n_h²,
  minimised over integer h.

(i) Theorem 2, Example 2: g users with 1 row and g users with g rows, σ = 1, λ = √(g/2);
best v' / best v → 3/2. Computed from the formulas as g grows, and simulated through
privsql (``AVG ... BOUND ROWS k`` vs ``AVG ... BOUND WEIGHTS h``, every k and h of a grid)
at a moderate g. The simulation draws fresh data and puts R independent copies of the
instance in one table, one public group per copy, ``MAX_GROUPS 1``: one query releases R
independent estimates with exactly the noise of a one-copy query. privsql's AVG spends
ε/2 on the centred sum (scale k·B/ε, the paper's Laplace term) and ε/2 on the count, so
the query's ε is the paper's B/λ; β sits at the middle of [0, B] so the noisy count adds
only a second-order term.

(ii) Theorem 3: on random instances (user sizes geometric, log-normal, Pareto, two-point;
random m and λ) the ratio best v' / best v is at most 4. Also a scan of two-point
instances (a fraction of users with 1 row, the rest with g rows, over g, the fraction and
λ), the family of Example 2, for the largest ratio found.

    python benchmarks/utility/emmmr_example2.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import _common as c
import numpy as np
import pandas as pd

SQRT3 = math.sqrt(3.0)


# -- the formulas ----------------------------------------------------------------------------


class Instance:
    """User sizes with prefix sums, so v(h) and v'(h) evaluate in O(log m) per h."""

    def __init__(self, sizes, sigma: float, lam: float) -> None:
        self.s = np.sort(np.asarray(sizes, dtype=float))
        self.sigma2, self.lam = sigma * sigma, lam
        self.prefix = np.concatenate([[0.0], np.cumsum(self.s)])
        inverse = 1.0 / self.s
        self.tail_inverse = np.concatenate([np.cumsum(inverse[::-1])[::-1], [0.0]])

    def _parts(self, h):
        h = np.asarray(h, dtype=float)
        below = np.searchsorted(self.s, h, side="right")  # users with s <= h
        above = len(self.s) - below
        n = self.prefix[below] + h * above
        squares = self.prefix[below] + h * h * self.tail_inverse[below]
        return h, n, squares

    def v(self, h):
        h, n, squares = self._parts(h)
        return (self.sigma2 * squares + 2 * (self.lam * h) ** 2) / n**2

    def v_limit(self, h):
        h, n, _ = self._parts(h)
        return self.sigma2 / n + 2 * (self.lam * h / n) ** 2

    def best_weighted(self) -> tuple[float, float]:
        """min over real h in [s_1, s_m] of v(h): dense log grid, then golden refinement."""
        lo, hi = self.s[0], self.s[-1]
        if hi <= lo:
            return float(self.v(lo)), float(lo)
        grid = np.unique(np.concatenate([np.geomspace(lo, hi, 4000), self.s]))
        values = self.v(grid)
        i = int(np.argmin(values))
        a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
        phi = (math.sqrt(5) - 1) / 2
        for _ in range(80):
            x1, x2 = b - phi * (b - a), a + phi * (b - a)
            if self.v(x1) <= self.v(x2):
                b = x2
            else:
                a = x1
        h = (a + b) / 2
        best = min(float(values[i]), float(self.v(h)))
        return best, (h if best < values[i] else float(grid[i]))

    def best_limiting(self) -> tuple[float, int]:
        """min over integer h in [s_1, s_m] of v'(h)."""
        hs = np.arange(math.ceil(self.s[0]), math.floor(self.s[-1]) + 1)
        values = self.v_limit(hs)
        i = int(np.argmin(values))
        return float(values[i]), int(hs[i])


def example2(g: int) -> Instance:
    return Instance([1] * g + [g] * g, 1.0, math.sqrt(g / 2))


def example2_table(gs) -> pd.DataFrame:
    rows = []
    for g in gs:
        inst = example2(g)
        wa, h = inst.best_weighted()
        sl, k = inst.best_limiting()
        rows.append(
            {
                "g": g,
                "best_weighted_v": wa,
                "best_h": h,
                "paper_upper_weighted": (2 * g + 1) / (4 * g * g),
                "best_limiting_v": sl,
                "best_k": k,
                "paper_lower_limiting": 3 / (4 * g),
                "ratio": sl / wa,
                "paper_ratio_bound": 3 * g / (2 * g + 1),
            }
        )
    return pd.DataFrame(rows)


def random_instances(count: int, rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    families = ("geometric", "lognormal", "pareto", "two-point")
    for i in range(count):
        family = families[i % len(families)]
        m = int(rng.integers(10, 2001))
        if family == "geometric":
            p = 10 ** rng.uniform(-2.5, -0.1)
            sizes = rng.geometric(p, m)
        elif family == "lognormal":
            sizes = np.ceil(rng.lognormal(rng.uniform(0, 3), rng.uniform(0.2, 2.0), m))
        elif family == "pareto":
            sizes = np.ceil(rng.pareto(rng.uniform(0.6, 3.0), m) + 1)
        else:
            big = int(rng.integers(2, 500))
            sizes = np.where(rng.random(m) < rng.uniform(0.05, 0.95), 1, big)
        sizes = np.minimum(sizes, 20_000)
        lam = 10 ** rng.uniform(-1.5, 3.0)
        inst = Instance(sizes, 1.0, lam)
        wa, h = inst.best_weighted()
        sl, k = inst.best_limiting()
        rows.append(
            {
                "family": family,
                "users": m,
                "max_size": int(inst.s[-1]),
                "lambda": lam,
                "best_h": h,
                "best_k": k,
                "best_weighted_v": wa,
                "best_limiting_v": sl,
                "ratio": sl / wa,
            }
        )
    return pd.DataFrame(rows)


def two_point_scan(quick: bool) -> pd.DataFrame:
    rows = []
    gs = [2, 5, 10, 30, 100, 300, 1000] if not quick else [2, 10, 100]
    fractions = np.linspace(0.05, 0.95, 19 if not quick else 7)
    for g in gs:
        for fraction in fractions:
            small = max(1, round(fraction * 200))
            sizes = [1] * small + [g] * (200 - small)
            for lam in np.geomspace(0.05, 2000, 40 if not quick else 12):
                inst = Instance(sizes, 1.0, lam)
                wa, _ = inst.best_weighted()
                sl, _ = inst.best_limiting()
                rows.append(
                    {"g": g, "small_fraction": small / 200, "lambda": lam, "ratio": sl / wa}
                )
    return pd.DataFrame(rows)


# -- the simulation through privsql -------------------------------------------------------------


def simulate(g: int, replicates: int, batches: int, grid: list[int], seed: int) -> pd.DataFrame:
    high = 10.0
    lam = math.sqrt(g / 2)
    eps = high / lam
    beta = high / 2
    inst = Instance([1] * g + [g] * g, 1.0, lam)
    sizes = np.array([1] * g + [g] * g)
    con = c.connection()
    rng = np.random.default_rng(seed)
    db = None
    runner = None
    errors: dict[tuple[str, int], list[np.ndarray]] = {}
    for _batch in range(batches):
        per_copy = np.repeat(np.arange(2 * g), sizes)
        copy = np.repeat(np.arange(replicates), len(per_copy))
        uid = copy * (2 * g) + np.tile(per_copy, replicates)
        y = beta + rng.uniform(-SQRT3, SQRT3, len(uid))
        frame = pd.DataFrame({"r": copy, "uid": uid, "y": y})
        con.register("__frame", frame)
        con.execute("CREATE OR REPLACE TABLE ex2 AS SELECT * FROM __frame")
        con.unregister("__frame")
        if db is None:
            db = c.session(con, seed)
            db.protect("ex2", privacy_unit="uid")
            runner = c.Runner(db, keys={"r": list(range(replicates))})
        for strategy in ("ROWS", "WEIGHTS"):
            for h in grid:
                result = runner.run(
                    f"SELECT r, AVG(y CLAMPED BETWEEN 0 AND {high:g}) AS a FROM ex2 GROUP BY r "
                    f"PRIVACY_UNIT uid BOUND {strategy} {h} MAX_GROUPS 1 EPSILON {{eps}}",
                    eps,
                )
                estimates = result.df().sort_values("r")["a"].to_numpy()
                assert len(estimates) == replicates
                errors.setdefault((strategy, h), []).append(estimates - beta)
    rows = []
    for (strategy, h), parts in errors.items():
        e = np.concatenate(parts)
        squared = e**2
        analytic = inst.v_limit(h) if strategy == "ROWS" else inst.v(h)
        rows.append(
            {
                "g": g,
                "strategy": strategy,
                "threshold": h,
                "draws": len(e),
                "epsilon": eps,
                "mse": squared.mean(),
                "mse_stderr": squared.std(ddof=1) / math.sqrt(len(e)),
                "analytic_variance": float(analytic),
            }
        )
    print(
        f"  simulation: g = {g}, {replicates} copies × {batches} batches, ε = {eps:.4g}, "
        f"{runner.count} queries, {runner.seconds:.1f} s in db.sql"
    )
    return pd.DataFrame(rows)


def simulated_ratio(sim: pd.DataFrame) -> tuple[float, float, float]:
    """MSE ratio ROWS/WEIGHTS at threshold 1 (the formulas' optimum) with its standard
    error (delta method), and the ratio of the best MSEs over the grid."""
    at = sim[sim.threshold == 1].set_index("strategy")
    a, b = at.loc["ROWS"], at.loc["WEIGHTS"]
    ratio = a.mse / b.mse
    error = ratio * math.hypot(a.mse_stderr / a.mse, b.mse_stderr / b.mse)
    grid = sim[sim.strategy == "ROWS"].mse.min() / sim[sim.strategy == "WEIGHTS"].mse.min()
    return float(ratio), float(error), float(grid)


def plot(
    example: pd.DataFrame, sim: pd.DataFrame, random: pd.DataFrame, scan: pd.DataFrame, path
) -> None:
    plt = c.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    ax = axes[0]
    ax.plot(example.g, example.ratio, "o-", ms=3, label="best v′ / best v (formulas)")
    ax.plot(
        example.g,
        example.paper_ratio_bound,
        "--",
        color="C1",
        label="paper's bound ratio 3g/(2g+1)",
    )
    ax.axhline(1.5, color="k", lw=0.8, ls=":", label="3/2")
    g = int(sim.g.iloc[0])
    ratio, error, grid_ratio = simulated_ratio(sim)
    ax.errorbar(
        [g],
        [ratio],
        yerr=[error],
        fmt="r*",
        ms=11,
        capsize=3,
        label=f"privsql, g = {g}, at k = h = 1 (±1 s.e.)",
    )
    ax.plot([g], [grid_ratio], "kx", ms=8, label=f"privsql, g = {g}, best of grid each")
    ax.set_xscale("log")
    ax.set_xlabel("g (Example 2: g users × 1 row, g users × g rows)")
    ax.set_ylabel("variance ratio, sample limiting / weighted")
    ax.set_title("(i) Theorem 2, Example 2", fontsize=10)
    ax.set_ylim(0.9, 1.7)
    ax.legend(fontsize=8, loc="lower right")

    ax = axes[1]
    for strategy, color, label in (
        ("ROWS", "C1", "sample limiting (BOUND ROWS k)"),
        ("WEIGHTS", "C0", "weighted averaging (BOUND WEIGHTS h)"),
    ):
        part = sim[sim.strategy == strategy].sort_values("threshold")
        ax.errorbar(
            part.threshold,
            part.mse,
            yerr=part.mse_stderr,
            fmt="o",
            color=color,
            capsize=2,
            label=f"{label}: privsql MSE",
        )
        hs = np.arange(1, g + 1) if strategy == "ROWS" else np.geomspace(1, g, 200)
        inst = example2(g)
        curve = inst.v_limit(hs) if strategy == "ROWS" else inst.v(hs)
        ax.plot(
            hs,
            curve,
            "-",
            color=color,
            lw=1,
            label="formula " + ("v′(k)" if strategy == "ROWS" else "v(h)"),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = sorted(sim.threshold.unique())
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(int(t)) for t in ticks])
    ax.set_xlabel("threshold k (ROWS) or h (WEIGHTS), rows per user")
    ax.set_ylabel("mean squared error of AVG")
    ax.set_title(f"(i) Example 2 with g = {g} through privsql", fontsize=10)
    ax.legend(fontsize=7.5)

    ax = axes[2]
    bins = np.linspace(1, max(4.2, random.ratio.max() + 0.1), 64)
    families = list(random.groupby("family"))
    ax.hist(
        [part.ratio for _, part in families],
        bins=bins,
        histtype="barstacked",
        label=[f"{family} ({len(part)})" for family, part in families],
    )
    ax.axvline(4, color="r", lw=1.2, label="Theorem 3 bound: 4")
    ax.axvline(
        scan.ratio.max(),
        color="k",
        lw=1,
        ls="--",
        label=f"two-point scan max: {scan.ratio.max():.3f}",
    )
    ax.set_yscale("log")
    ax.set_xlabel("best v′ / best v on one instance")
    ax.set_ylabel("instances")
    ax.set_title(
        f"(ii) Theorem 3 on {len(random)} random instances (max {random.ratio.max():.3f})",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    fig.suptitle("EMMMR20: sample limiting vs weighted averaging for a private mean", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer instances and draws")
    parser.add_argument("--seed", type=int, default=2020)
    args = parser.parse_args()
    c.header("EMMMR20 Theorem 2 (Example 2) and Theorem 3", args.quick)
    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)

    gs = sorted({*np.unique(np.geomspace(1, 10_000, 25).astype(int)), 20})
    example = example2_table(gs)
    c.write_csv(example, "emmmr_example2_analytic.csv")
    print("\n(i) Example 2 from the formulas (σ = 1, λ = √(g/2))")
    show = example[example.g.isin([1, 2, 5, 10, 20, 100, 1000, 10_000])]
    print(c.markdown(show, ".4g"))

    g = 10 if args.quick else 20
    grid = [1, 2, 3, 5, 10] if args.quick else [1, 2, 3, 5, 10, 20]
    sim = simulate(g, 300 if args.quick else 500, 2 if args.quick else 4, grid, args.seed)
    c.write_csv(sim, "emmmr_example2_simulation.csv")
    print(f"\n(i) Example 2 through privsql, g = {g}: MSE of AVG vs the formula")
    print(c.markdown(sim.drop(columns=["g"]), ".4g"))
    best_rows = sim[sim.strategy == "ROWS"].nsmallest(1, "mse").iloc[0]
    best_weights = sim[sim.strategy == "WEIGHTS"].nsmallest(1, "mse").iloc[0]
    formula = example[example.g == g].iloc[0]
    ratio, error, grid_ratio = simulated_ratio(sim)
    print(
        f"best of grid: ROWS k = {int(best_rows.threshold)} (MSE {best_rows.mse:.4g}), WEIGHTS "
        f"h = {int(best_weights.threshold)} (MSE {best_weights.mse:.4g}), ratio "
        f"{grid_ratio:.3f}; at k = h = 1 (the formulas' best): ratio {ratio:.3f} ± {error:.3f}; "
        f"formulas: {formula.ratio:.3f}"
    )

    random = random_instances(300 if args.quick else 2000, rng)
    scan = two_point_scan(args.quick)
    c.write_csv(random, "emmmr_theorem3_random.csv")
    worst = scan.loc[scan.groupby(["g", "small_fraction"]).ratio.idxmax()]
    c.write_csv(worst, "emmmr_theorem3_two_point.csv")  # the worst λ per (g, fraction)
    print(f"\n(ii) Theorem 3: best v′ / best v on {len(random)} random instances")
    stats = random.groupby("family").ratio.describe(percentiles=[0.5, 0.9, 0.99])
    stats.loc["all"] = random.ratio.describe(percentiles=[0.5, 0.9, 0.99])
    stats = stats.reset_index().rename(columns={"index": "family"})
    print(c.markdown(stats, ".4g"))
    top = scan.nlargest(1, "ratio").iloc[0]
    print(
        f"two-point scan ({len(scan)} instances): max ratio {top.ratio:.4f} at g = "
        f"{int(top.g)}, fraction with 1 row {top.small_fraction:.2f}, λ = {top['lambda']:.3g}"
    )
    verdict = "holds" if max(random.ratio.max(), scan.ratio.max()) <= 4 else "VIOLATED"
    print(
        f"Theorem 3 (ratio ≤ 4): {verdict}; largest ratio seen "
        f"{max(random.ratio.max(), scan.ratio.max()):.4f}"
    )
    plot(example, sim, random, scan, c.figure("utility-emmmr.png"))
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
