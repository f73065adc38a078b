"""Per-query overhead: the time of one private query on a table so small that reading it
costs nothing, i.e. what privsql adds to every query (parse, resolve, analyse, plan,
generate, the fingerprint and stored-answer lookup, the AUTO threshold search, the
release, the charge and the post-processing). Target (issue 11): at most 15 ms.

    python benchmarks/overhead.py                  # best and median of 7 batches of 20
    python benchmarks/overhead.py --query "SELECT SUM(x CLAMPED BETWEEN 0 AND 6) AS s FROM t \
        PRIVACY_UNIT u"

Each query differs in its ε so that none is answered from the stored answers. The best
batch is the figure to compare (other processes on the machine only add time); the CPU
time per query (this process, all its threads) is printed too, with the load average:
on a busy machine wall time drifts more than CPU time. ``PYTHONPATH=<checkout>`` measures
another version of privsql with this same script.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # appended: a privsql on PYTHONPATH (e.g. a snapshot) wins

import privsql  # noqa: E402

QUERY = "SELECT COUNT(*) FROM t PRIVACY_UNIT u"


def per_query_ms(
    query: str, rows: int, batches: int, size: int
) -> tuple[list[float], list[float]]:
    """Milliseconds per query of each batch, wall and CPU, after a warm-up batch."""
    db = privsql.connect(budget=1e9)
    db._con.execute(f"CREATE TABLE t AS SELECT i AS u, i % 7 AS x FROM range({rows}) r(i)")
    runs = iter(range(10**9))
    walls, cpus = [], []
    for batch in range(batches + 1):
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(size):
            db.sql(f"{query} EPSILON {0.1 + next(runs) * 1e-9!r}")
        if batch:
            walls.append((time.perf_counter() - start) / size * 1000)
            cpus.append((time.process_time() - cpu) / size * 1000)
    db.close()
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--query", default=QUERY, help="a private query without EPSILON")
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--size", type=int, default=20, help="queries per batch")
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


if __name__ == "__main__":
    main()
