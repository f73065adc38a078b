"""Per-query overhead: the time of one private query on a table so small that reading it
costs nothing, i.e. what privsql adds to every query (parse, resolve, analyse, plan,
generate, the fingerprint and stored-answer lookup, the AUTO threshold search, the
release, the charge and the post-processing). Target (issue 11): at most 15 ms.

    python benchmarks/overhead.py                  # best and median of 7 batches of 20
    python benchmarks/overhead.py --query "SELECT SUM(x CLAMPED BETWEEN 0 AND 6) AS s FROM t \
        PRIVACY_UNIT u"

Each query differs in its ε so that none is answered from the stored answers. The best
batch is the figure to compare (other processes on the machine only add time).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # appended: a privsql on PYTHONPATH (e.g. a snapshot) wins

import privsql  # noqa: E402

QUERY = "SELECT COUNT(*) FROM t PRIVACY_UNIT u"


def per_query_ms(query: str, rows: int, batches: int, size: int) -> list[float]:
    """Milliseconds per query of each batch, after a warm-up batch."""
    db = privsql.connect(budget=1e9)
    db._con.execute(f"CREATE TABLE t AS SELECT i AS u, i % 7 AS x FROM range({rows}) r(i)")
    runs = iter(range(10**9))
    timings = []
    for batch in range(batches + 1):
        start = time.perf_counter()
        for _ in range(size):
            db.sql(f"{query} EPSILON {0.1 + next(runs) * 1e-9!r}")
        if batch:
            timings.append((time.perf_counter() - start) / size * 1000)
    db.close()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--query", default=QUERY, help="a private query without EPSILON")
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--size", type=int, default=20, help="queries per batch")
    args = parser.parse_args()
    timings = per_query_ms(args.query, args.rows, args.batches, args.size)
    print(f"privsql {privsql.__file__}")
    print(f"{args.query}  ({args.rows} rows)")
    print(f"per query: best {min(timings):.1f} ms, median {statistics.median(timings):.1f} ms")


if __name__ == "__main__":
    main()
