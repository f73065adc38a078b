"""Run privsql and its peers on one workload; write docs/benchmarks.md's table and plot.

The workload is PERFORMANCE.md's (benchmarks/data.py), written to Parquet under
``--data`` (never committed): N rows, 100k heavy-tailed units, 50 public groups, per group
a DP COUNT and a DP SUM of v clamped to [0, 100], at most 10 rows per unit and group and 50
groups per unit, ε = 1. Each library runs in its own process (and, where it has one, its
own virtual environment under ``--envs``, created from ``requirements-<name>.txt``); each
runner prints one JSON record per line of the table. This driver measures the peak memory
of the runner's whole process tree, computes every line's mean absolute error against the
exact answers, and writes the results between the markers of docs/benchmarks.md, the plot
docs/benchmarks.png and the raw numbers benchmarks/peers/results.json.

    python benchmarks/peers/run_all.py                       # everything, ~1 h on 2 idle cores
    python benchmarks/peers/run_all.py --rows 100000 --only duckdb,opendp --runs 100000:3

See docs/benchmarks.md for what is measured and how each library is configured.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

import duckdb  # noqa: E402

from benchmarks.core import B_SUM, RAW, _git  # noqa: E402
from benchmarks.data import describe, make_table  # noqa: E402

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
DOC = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "benchmarks.png"
RESULTS = HERE / "results.json"
OTHER_BOUNDS = {"smartnoise"}
"""Runners whose library cannot bound rows per unit and group (see docs/benchmarks.md)."""


@dataclass(frozen=True)
class Peer:
    """A runner script and the virtual environment it runs in (None: this Python)."""

    title: str
    runner: str
    environment: str | None
    slow: bool
    """Slow peers get ``--slow-runs`` releases instead of ``--runs``."""


PEERS = {
    "duckdb": Peer("privsql on DuckDB, floor, raw", "run_duckdb.py", None, slow=False),
    "privsql-spark": Peer("privsql (Spark local)", "run_privsql_spark.py", None, slow=True),
    "opendp": Peer("OpenDP (Polars)", "run_opendp.py", "opendp", slow=False),
    "tumult": Peer("Tumult Analytics (Spark local)", "run_tumult.py", "tumult", slow=True),
    "smartnoise": Peer("SmartNoise SQL", "run_smartnoise.py", "smartnoise", slow=True),
    "pipelinedp": Peer("PipelineDP (local)", "run_pipelinedp.py", "pipelinedp", slow=True),
}


# -- environments and data -----------------------------------------------------------------


def environment(name: str | None, envs: Path) -> str:
    """The Python to run a peer with; creates its virtual environment from its pins once."""
    if name is None:
        return sys.executable
    pins = HERE / f"requirements-{name}.txt"
    target = envs / name
    python = target / "bin" / "python"
    stamp = target / "requirements.sha256"
    digest = hashlib.sha256(pins.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return str(python)
    print(f"  creating {target} from {pins.name}", flush=True)
    subprocess.run(["python3.11", "-m", "venv", str(target)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(pins)], check=True)
    stamp.write_text(digest)
    return str(python)


def workload(rows: int, directory: Path) -> tuple[Path, dict]:
    """The Parquet file of ``rows`` rows and its facts and truths (cached next to it).

    The exact truth is the raw per-group count and sum; the bounded truth is the floor's
    answer (10 rows per unit and group, chosen by a keyed content hash), before noise.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"workload-{rows}.parquet"
    facts_path = directory / f"workload-{rows}.json"
    if path.exists() and facts_path.exists():
        return path, json.loads(facts_path.read_text())
    con = duckdb.connect()
    make_table(con, rows)
    con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
    facts = describe(con)

    def per_group(sql: str) -> dict[str, list[float]]:
        return {str(g): [float(n), float(s)] for g, n, s in con.sql(sql).fetchall()}

    facts["exact"] = per_group(RAW["sum"].format(t="t"))
    facts["bounded"] = per_group(B_SUM.format(t="t"))
    facts_path.write_text(json.dumps(facts))
    return path, facts


# -- running one peer -----------------------------------------------------------------------


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            pass
    return total


def measure(command: list[str], log: Path, timeout: float) -> tuple[list[dict], float]:
    """Run a runner; its records and the peak resident memory of its process tree (MB)."""
    peak = 0
    with open(log, "w") as err:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.wait(0.25):
                peak = max(peak, _tree_rss(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            out, _ = process.communicate(timeout=timeout)
        finally:
            done.set()
            sampler.join()
            if process.poll() is None:
                process.kill()
                process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"{command[1]} failed ({process.returncode}); see {log}")
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return records, peak / 2**20


def errors(record: dict, facts: dict) -> dict[str, float]:
    """Mean absolute error per statistic over all releases and groups, against both truths,
    with its standard error (``<stat>_<truth>_se``)."""
    out = {}
    for truth in ("exact", "bounded"):
        for i, stat in enumerate(("count", "sum")):
            deviations = [
                abs(release["answer"][g][i] - facts[truth][g][i])
                for release in record["releases"]
                for g in facts[truth]
            ]
            out[f"{stat}_{truth}"] = statistics.fmean(deviations)
            out[f"{stat}_{truth}_se"] = statistics.stdev(deviations) / len(deviations) ** 0.5
    return out


# -- the report -----------------------------------------------------------------------------


def _s(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _e(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 or x < 1e-6 else f"{x:.2g}"


def _pm(line: dict, stat: str) -> str:
    return f"{_e(line['errors'][stat])} ± {_e(line['errors'][stat + '_se'])}"


def table(size: dict) -> list[str]:
    lines = [
        "| line | load s | query s | load + query s | peak MB | releases | "
        "MAE COUNT (exact / bounded) | MAE SUM (exact / bounded) | load avg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for line in sorted(size["lines"], key=lambda line: line["query_s"]):
        e = line["errors"]
        total = line["query_s"] + (line["load_s"] or 0.0)
        loadavg = statistics.fmean(r["loadavg"] for r in line["runs"])
        lines.append(
            f"| {line['library']} | {_s(line['load_s'])} | {_s(line['query_s'])} | "
            f"{_s(total)} | {line['peak_mb']:,.0f} | {len(line['runs'])} | "
            f"{_e(e['count_exact'])} / {_e(e['count_bounded'])} | "
            f"{_e(e['sum_exact'])} / {_e(e['sum_bounded'])} | {loadavg:.1f} |"
        )
    return lines


def targets(size: dict) -> list[str]:
    """The issue's targets at one size, as measured."""
    by = {line["library"]: line for line in size["lines"]}
    mine = by.get("privsql (DuckDB)")
    floor = by.get("hand-written bounded query (floor)")
    peers = [line for line in size["lines"] if line.get("peer")]
    if mine is None:
        return []
    out = []
    if floor:
        ratio = mine["query_s"] / floor["query_s"]
        out.append(
            f"- privsql (DuckDB) vs the hand-written bounded query, same process: "
            f"{ratio:.2f}× (target ≤ 1.3×: {'met' if ratio <= 1.3 else 'missed'})"
        )
    if peers:
        fastest = min(peers, key=lambda line: line["query_s"])
        speedup = fastest["query_s"] / mine["query_s"]
        whole = min(peers, key=lambda p: p["query_s"] + (p["load_s"] or 0))
        whole_speedup = (whole["query_s"] + (whole["load_s"] or 0)) / (
            mine["query_s"] + mine["load_s"]
        )
        out.append(
            f"- privsql (DuckDB) vs the fastest peer per query ({fastest['library']}): "
            f"{speedup:.1f}× faster (target ≥ 10×: {'met' if speedup >= 10 else 'missed'}); "
            f"on load + query {whole_speedup:.1f}× faster than the fastest there "
            f"({whole['library']})"
        )
        same = [line for line in peers if line["runner"] not in OTHER_BOUNDS]
        for key, label in (("count", "COUNT"), ("sum", "SUM")):
            for truth in ("exact", "bounded"):
                stat = f"{key}_{truth}"
                best = min(same, key=lambda line: line["errors"][stat])
                gap = mine["errors"][stat] - best["errors"][stat]
                gap_se = math.hypot(mine["errors"][stat + "_se"], best["errors"][stat + "_se"])
                out.append(
                    f"- {label} MAE against the {truth} answer: privsql {_pm(mine, stat)}; "
                    f"best peer with the same bounds {best['library']} {_pm(best, stat)} "
                    f"(privsql − best = {gap:+,.0f} ± {gap_se:,.0f}); "
                    + "; ".join(f"{o['library']} {_pm(o, stat)}" for o in peers if o not in same)
                )
    return out


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(report["sizes"])
    names = sorted(
        {line["library"] for s in report["sizes"].values() for line in s["lines"]},
        key=lambda n: min(
            line["query_s"]
            for s in report["sizes"].values()
            for line in s["lines"]
            if line["library"] == n
        ),
    )
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=80)
    width = 0.8 / len(sizes)
    for k, rows in enumerate(sizes):
        by = {line["library"]: line for line in report["sizes"][rows]["lines"]}
        xs = [i + k * width for i in range(len(names))]
        label = f"{int(rows) / 1e6:g}M rows"
        axes[0].barh(
            xs,
            [by[n]["query_s"] + (by[n]["load_s"] or 0) if n in by else 0 for n in names],
            height=width,
            label=label,
        )
        axes[1].barh(
            xs,
            [by[n]["errors"]["sum_exact"] if n in by else 0 for n in names],
            height=width,
            label=label,
        )
    for ax in axes:
        ax.set_yticks([i + width * (len(sizes) - 1) / 2 for i in range(len(names))])
        ax.invert_yaxis()
        ax.legend(fontsize=8)
    axes[0].set_yticklabels(names, fontsize=8)
    axes[1].set_yticklabels([])
    axes[0].set_xscale("log")
    axes[0].set_xlabel("load + one release, seconds (median, log scale)")
    axes[1].set_xlabel("mean absolute error of the per-group SUM vs exact")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_doc(report: dict) -> None:
    dates = sorted(
        {
            line.get("measured", report["date"])
            for s in report["sizes"].values()
            for line in s["lines"]
        }
    )
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    block = [
        BEGIN,
        f"Measured {when} on {report['cpus']} CPUs shared with other work (the load average "
        f"during each line is its last column), privsql at {report['privsql_commit']}, "
        f"duckdb {report['duckdb']}. Times are medians; MAE is over all releases × 50 groups, "
        "± its standard error.",
        "",
    ]
    for rows, size in report["sizes"].items():
        f = size["facts"]
        block += [
            f"### {int(rows) / 1e6:g}M rows",
            "",
            f"{f['units']:,} units, {f['cells']:,} (unit, group) cells, "
            f"{f['cells_over_cap']:,} over 10 rows holding "
            f"{f['rows_in_cells_over_cap'] / f['rows']:.0%} of the rows.",
            "",
            *table(size),
            "",
            *targets(size),
            "",
        ]
        for line in size["pending"]:
            block.append(f"- {line['library']}: not measured — {line['pending']}")
        block.append("")
    block += ["![load + query time and SUM error per library](benchmarks.png)", "", END]
    text = DOC.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + "\n".join(block) + tail)


def line_of(record: dict, runner: str, peak: float, facts: dict) -> dict:
    """One line of the results: a runner's record, scored, without its answers."""
    return {
        "library": record["library"],
        "runner": runner,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "version": record["version"],
        "split": record["split"],
        "notes": record["notes"],
        "peer": PEERS[runner].environment is not None,
        "startup_s": record["startup_s"],
        "load_s": record["load_s"],
        "loads": record["loads"],
        "query_s": record["query_s"],
        "runs": [{"s": r["s"], "loadavg": r["loadavg"]} for r in record["releases"]],
        "peak_mb": peak,
        "errors": errors(record, facts),
    }


def size_of(facts: dict, lines: list[dict]) -> dict:
    return {
        "facts": {k: v for k, v in facts.items() if k not in ("exact", "bounded")},
        "lines": [line for line in lines if "pending" not in line],
        "pending": [line for line in lines if "pending" in line],
    }


# -- main -----------------------------------------------------------------------------------


def _per_size(spec: str) -> dict[int, int]:
    return {int(float(k)): int(v) for k, v in (p.split(":") for p in spec.split(",") if p)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000,5000000", help="table sizes")
    parser.add_argument("--only", default=",".join(PEERS), help="peers to run")
    parser.add_argument("--runs", default="1000000:20,5000000:10", help="releases per size")
    parser.add_argument(
        "--slow-runs", default="1000000:5,5000000:3", help="releases per size, slow peers"
    )
    parser.add_argument("--loads", type=int, default=3, help="timed loads (3)")
    parser.add_argument("--slow-loads", type=int, default=1, help="timed loads, slow peers (1)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per runner")
    parser.add_argument("--data", type=Path, default=Path("/tmp/peers/data"))
    parser.add_argument("--envs", type=Path, default=Path("/tmp/peers"))
    parser.add_argument("--no-doc", action="store_true", help="only write the results file")
    parser.add_argument(
        "--doc-only",
        action="store_true",
        help="measure nothing: rewrite the doc and plot from results.json",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the lines of results.json that this run does not re-measure",
    )
    args = parser.parse_args(argv)
    if args.doc_only:
        report = json.loads(RESULTS.read_text())
        plot(report, PLOT)
        write_doc(report)
        return 0
    sizes = [int(float(x)) for x in args.rows.split(",") if x]
    runs, slow_runs = _per_size(args.runs), _per_size(args.slow_runs)

    report: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg()[0],
        "privsql_commit": _git(),
        "duckdb": duckdb.__version__,
        "sizes": {},
    }
    if args.merge and RESULTS.exists():
        report["sizes"] = json.loads(RESULTS.read_text())["sizes"]
    rerun = set(args.only.split(","))
    raw: dict = {}
    for rows in sizes:
        path, facts = workload(rows, args.data)
        kept = report["sizes"].get(str(rows), {})
        lines = [
            line
            for line in kept.get("lines", []) + kept.get("pending", [])
            if line["runner"] not in rerun
        ]
        for name in args.only.split(","):
            peer = PEERS[name]
            if not (HERE / peer.runner).exists():
                lines.append(
                    {"library": peer.title, "runner": name, "pending": f"no {peer.runner}"}
                )
                continue
            n = (slow_runs if peer.slow else runs).get(rows, 3)
            command = [
                environment(peer.environment, args.envs),
                str(HERE / peer.runner),
                str(path),
                f"--runs={n}",
                f"--loads={args.slow_loads if peer.slow else args.loads}",
            ]
            print(f"{rows:,} rows: {name}, {n} releases ...", flush=True)
            started = time.perf_counter()
            log = args.data / f"{name}-{rows}.log"
            try:
                records, peak = measure(command, log, args.timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                reason = (
                    f"did not finish {n} releases within {args.timeout:.0f} s"
                    if isinstance(error, subprocess.TimeoutExpired)
                    else f"failed (its log: {log})"
                )
                print(f"  {reason}", flush=True)
                lines.append({"library": peer.title, "runner": name, "pending": reason})
                continue
            for record in records:
                raw[f"{rows}/{record['library']}"] = record
                lines.append(line_of(record, name, peak, facts))
                print(
                    f"  {record['library']}: load {_s(record['load_s'])} s, query "
                    f"{_s(record['query_s'])} s, peak {peak:,.0f} MB",
                    flush=True,
                )
            report["sizes"][str(rows)] = size_of(facts, lines)
            RESULTS.write_text(json.dumps(report, indent=1))
            print(f"  done in {time.perf_counter() - started:.0f} s", flush=True)
        report["sizes"][str(rows)] = size_of(facts, lines)
    report["load_after"] = os.getloadavg()[0]
    (args.data / "results-raw.json").write_text(json.dumps(raw))
    RESULTS.write_text(json.dumps(report, indent=1))
    if not args.no_doc:
        plot(report, PLOT)
        write_doc(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
