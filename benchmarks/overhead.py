"""Per-query overhead: the time of one private query on a table so small that reading it
costs nothing, i.e. what privsql adds to every query (parse, resolve, analyse, plan,
generate, the fingerprint and stored-answer lookup, the AUTO threshold search, the
release, the charge and the post-processing). Target (issue 11): at most 15 ms.

    python benchmarks/overhead.py                  # best and median of 7 batches of 20
    python benchmarks/overhead.py --query "SELECT SUM(x CLAMPED BETWEEN 0 AND 6) AS s FROM t \
        PRIVACY_UNIT u"
    python benchmarks/overhead.py --profile 30     # and where the time goes (cProfile)

Each query differs in its ε so that none is answered from the stored answers. The best
batch is the figure to compare (other processes on the machine only add time); the CPU
time per query (this process, all its threads) is printed too, with the load average:
on a busy machine wall time drifts more than CPU time. ``PYTHONPATH=<checkout>`` measures
another version of privsql with this same script.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # appended: a privsql on PYTHONPATH (e.g. a snapshot) wins

import privsql  # noqa: E402

QUERY = "SELECT COUNT(*) FROM t PRIVACY_UNIT u"


def session(rows: int, *, progress: bool = True) -> privsql.Session:
    """A session over a table ``t`` of ``rows`` rows, each its own unit ``u``."""
    db = privsql.connect(budget=1e9, progress=progress)
    db._con.execute(f"CREATE TABLE t AS SELECT i AS u, i % 7 AS x FROM range({rows}) r(i)")
    return db


def ask(db: privsql.Session, query: str, size: int, runs: Iterator[int]) -> None:
    """``size`` queries, each with an ε of its own (so none is a stored answer)."""
    for _ in range(size):
        db.sql(f"{query} EPSILON {0.1 + next(runs) * 1e-9!r}")


def per_query_ms(
    query: str, rows: int, batches: int, size: int
) -> tuple[list[float], list[float]]:
    """Milliseconds per query of each batch, wall and CPU, after a warm-up batch."""
    db = session(rows)
    runs = iter(range(10**9))
    walls, cpus = [], []
    for batch in range(batches + 1):
        start, cpu = time.perf_counter(), time.process_time()
        ask(db, query, size, runs)
        if batch:
            walls.append((time.perf_counter() - start) / size * 1000)
            cpus.append((time.process_time() - cpu) / size * 1000)
    db.close()
    return walls, cpus


def profile(query: str, rows: int, size: int, top: int) -> None:
    """The ``top`` functions of privsql (privsql/, rewriter/, udfs/) by cumulative time
    over one batch, in ms per query. The session shows no progress bar, so each query
    runs in this thread, where cProfile sees it; cProfile slows Python code more than
    DuckDB's, so the shares are a guide, not a measurement."""
    db = session(rows, progress=False)
    runs = iter(range(10**9))
    ask(db, query, size, runs)  # warm-up
    profiler = cProfile.Profile()
    profiler.runcall(ask, db, query, size, runs)
    db.close()
    found = [
        (cumulative / size * 1000, f"{file.split(str(ROOT) + os.sep)[-1]}:{line} {name}")
        for (file, line, name), (_, _, _, cumulative, _) in pstats.Stats(profiler).stats.items()
        if file.startswith(str(ROOT)) and os.sep + "benchmarks" + os.sep not in file
    ]
    for ms, where in sorted(found, reverse=True)[:top]:
        print(f"{ms:7.2f} ms  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--query", default=QUERY, help="a private query without EPSILON")
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--size", type=int, default=20, help="queries per batch")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="also show the N costliest functions"
    )
    args = parser.parse_args()
    load = os.getloadavg()[0]
    walls, cpus = per_query_ms(args.query, args.rows, args.batches, args.size)
    print(f"privsql {privsql.__file__}")
    print(f"{args.query}  ({args.rows} rows)")
    print(
        f"per query: best {min(walls):.1f} ms, median {statistics.median(walls):.1f} ms; "
        f"CPU best {min(cpus):.1f} ms (load average {load:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after, {os.cpu_count()} CPUs)"
    )
    if args.profile:
        profile(args.query, args.rows, args.size, args.profile)


if __name__ == "__main__":
    main()
