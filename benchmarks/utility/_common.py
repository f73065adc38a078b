"""Shared helpers of the utility benchmarks (benchmarks/utility/*.py).

Everything here is test scaffolding: sessions are opened with ``seed=..., insecure=True``
so that runs are reproducible, which must never be done when releasing data.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # appended: a privsql on PYTHONPATH (e.g. a snapshot) wins

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import privsql  # noqa: E402

RESULTS = ROOT / "benchmarks" / "utility" / "results"
DOCS = ROOT / "docs"
EPSILONS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
QUICK = False
"""Set by :func:`header`: ``--quick`` runs write to results/quick/, never over the full
run's CSVs and figures."""


def auto_share() -> float | None:
    """privsql's share of ε spent on an AUTO threshold search (read, never changed)."""
    try:
        from rewriter.plan import AUTO_SHARE

        return float(AUTO_SHARE)
    except Exception:  # pragma: no cover - the constant may be renamed
        return None


def session(con: duckdb.DuckDBPyConnection, seed: int) -> privsql.Session:
    """A reproducible privsql session with a budget that never runs out (benchmarks only)."""
    return privsql.connect(con, budget=1e12, seed=seed, insecure=True)


def connection(threads: int = 2) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"SET threads = {int(threads)}")
    return con


class Runner:
    """Runs privsql queries that must be fresh releases, never stored answers.

    privsql returns the stored answer when an identical statement is re-run on unchanged
    data, so every call perturbs ε in the 10th significant digit (``ε·(1 + i·1e-10)``,
    ``i`` a counter unique to this runner); the change in the noise scale is < 1e-8
    relative. A query that still comes back ``cached`` raises.
    """

    def __init__(self, db: privsql.Session, keys: dict | None = None) -> None:
        self.db = db
        self.keys = keys
        self.count = 0
        self.seconds = 0.0

    def epsilon(self, eps: float) -> str:
        self.count += 1
        return repr(eps * (1 + self.count * 1e-10))

    def run(self, template: str, eps: float):
        """``template`` has one ``{eps}`` placeholder where the EPSILON value goes."""
        sql = template.format(eps=self.epsilon(eps))
        start = time.perf_counter()
        result = self.db.sql(sql, keys=self.keys)
        self.seconds += time.perf_counter() - start
        if result.cached:
            raise RuntimeError(f"stored answer returned; the benchmark would repeat a draw: {sql}")
        return result


def chosen_caps(result) -> dict[str, int]:
    """The caps an AUTO threshold search chose, by rule (``rank``: AKMV19's rank rule;
    ``variance``: EMMMR20's v(h) for AVG under WEIGHTS AUTO). privsql keeps them in the
    answer's Arrow metadata; older versions kept one cap under ``privsql.cap``."""
    metadata = result.arrow().schema.metadata or {}
    if b"privsql.decided" in metadata:
        caps = json.loads(metadata[b"privsql.decided"]).get("caps") or {}
        return {rule: int(cap) for rule, cap in caps.items() if cap is not None}
    if b"privsql.caps" in metadata:
        caps = json.loads(metadata[b"privsql.caps"])
        return {rule: int(cap) for rule, cap in caps.items() if cap is not None}
    value = metadata.get(b"privsql.cap")
    return {} if value in (None, b"None") else {"rank": int(value)}


def chosen_cap(result, rule: str | None = None) -> int | None:
    """The one cap that bounded the answer (or the cap of ``rule`` if there are several)."""
    caps = chosen_caps(result)
    if rule is not None:
        return caps.get(rule)
    if len(caps) > 1:
        raise ValueError(f"several caps were chosen ({caps}); name the rule")
    return next(iter(caps.values()), None)


def candidates() -> list[int]:
    """privsql's AUTO candidate grid (read from the planner)."""
    from rewriter.plan import CANDIDATES

    return list(CANDIDATES)


def laplace_abs_error(bias: np.ndarray | float, scale: np.ndarray | float) -> np.ndarray:
    """E|b + Z| for Z ~ Laplace(scale): |b| + scale·exp(−|b|/scale)."""
    b = np.abs(np.asarray(bias, dtype=float))
    s = np.asarray(scale, dtype=float)
    return b + s * np.exp(-b / s)


def heavy_tailed_table(
    con: duckdb.DuckDBPyConnection,
    *,
    name: str,
    units: int,
    rows: int,
    seed: int,
    value: str = "uniform01",
) -> pd.DataFrame:
    """Rows with ``uid = floor(units·u³)`` (heavy-tailed contributions), created in DuckDB.

    ``value``: ``uniform01`` (v ~ U[0,1]), ``uniform100`` (v ~ U[0,100)), or ``unit100``
    (v = the unit's own mean μ_u ~ U[10, 90] plus U[−10, 10] noise: heavy units differ).
    Returns the frame too (numpy side computations).
    """
    rng = np.random.default_rng(seed)
    uid = np.floor(units * rng.random(rows) ** 3).astype(np.int64)
    if value == "uniform01":
        v = rng.random(rows)
    elif value == "uniform100":
        v = 100 * rng.random(rows)
    elif value == "unit100":
        mu = rng.uniform(10, 90, size=units)
        v = mu[uid] + rng.uniform(-10, 10, size=rows)
    else:
        raise ValueError(value)
    frame = pd.DataFrame({"uid": uid, "v": v})
    con.register("__frame", frame)
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM __frame")
    con.unregister("__frame")
    return frame


def write_csv(frame: pd.DataFrame, name: str) -> Path:
    folder = RESULTS / "quick" if QUICK else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    frame.to_csv(path, index=False, float_format="%.6g")
    return path


def markdown(frame: pd.DataFrame, floatfmt: str = ".3g") -> str:
    """A GitHub table without the optional ``tabulate`` dependency."""

    def cell(x) -> str:
        if isinstance(x, float):
            if math.isnan(x):
                return "–"
            return format(x, floatfmt)
        return str(x)

    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(x) for x in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def figure(name: str) -> Path:
    """Where a figure goes: docs/ for a full run, results/quick/ for ``--quick``."""
    if QUICK:
        (RESULTS / "quick").mkdir(parents=True, exist_ok=True)
        return RESULTS / "quick" / name
    return DOCS / name


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def revision() -> str:
    """The git commit of the imported privsql, with ``+changes`` if its tree is dirty
    (or the contents of a ``REVISION`` file next to it, for a ``git archive`` snapshot)."""
    where = Path(privsql.__file__).resolve().parents[1]
    if (where / "REVISION").exists():
        return (where / "REVISION").read_text().strip() + " (snapshot)"
    try:
        head = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--", "privsql", "rewriter", "udfs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(title: str, quick: bool) -> None:
    global QUICK
    QUICK = quick
    share = auto_share()
    print(f"# {title}{' (--quick)' if quick else ''}")
    print(
        f"privsql from {Path(privsql.__file__).resolve().parent} at {revision()}, duckdb "
        f"{duckdb.__version__}, AUTO search share of ε = {share}, load average "
        f"{os.getloadavg()[0]:.2f}"
    )
