"""What turning DuckDB's filter pushdown off costs a selective query on a Parquet file.

privsql runs private statements with ``rewriter.functions.DISABLED_OPTIMIZERS`` off (a
filter pushed into a private scan runs outside its ``TRY``, and min/max statistics fold
comparisons whose errors escape it: docs/privacy.md). The price is the row groups a
pushed-down filter would have skipped. The workload's table (benchmarks/data.py) is
written to Parquet sorted by ``g``, so ``WHERE g = 7`` needs one group in 50; per query,
best of ``--repeat`` interleaved rounds, process CPU and wall clock:

* raw: ``count(*) … WHERE g = 7``, DuckDB's defaults, then with the optimisers off;
* the floor (PERFORMANCE.md's COUNT: per-cell ``least(count, 10)``), both ways;
* privsql: ``SELECT COUNT(*) … WHERE g = 7 PRIVACY_UNIT uid BOUND ROWS 10`` end to end.

    python benchmarks/filter_pushdown.py [--rows 5000000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

import duckdb  # noqa: E402

import privsql  # noqa: E402
from benchmarks.data import make_table  # noqa: E402
from rewriter.functions import DISABLED_OPTIMIZERS  # noqa: E402

RAW = "SELECT count(*) FROM read_parquet('{path}') WHERE g = 7"
FLOOR = (
    "SELECT sum(least(n, 10)) FROM (SELECT count(*) AS n FROM read_parquet('{path}') "
    "WHERE g = 7 GROUP BY uid)"
)
PRIVSQL = (
    "SELECT COUNT(*) AS n FROM read_parquet('{path}') WHERE g = 7 PRIVACY_UNIT uid "
    "BOUND ROWS 10 EPSILON {eps}"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.parquet")
        con = duckdb.connect()
        make_table(con, args.rows)
        con.execute(f"COPY (SELECT * FROM t ORDER BY g) TO '{path}' (ROW_GROUP_SIZE 100000)")
        con.execute("DROP TABLE t")
        off = duckdb.connect()
        off.execute(f"SET disabled_optimizers = '{','.join(DISABLED_OPTIMIZERS)}'")
        db = privsql.connect(budget=1e9)
        runs = iter(range(1, 10**9))
        items = {
            "raw, optimisers on": lambda: con.sql(RAW.format(path=path)).fetchall(),
            "raw, optimisers off": lambda: off.sql(RAW.format(path=path)).fetchall(),
            "floor, optimisers on": lambda: con.sql(FLOOR.format(path=path)).fetchall(),
            "floor, optimisers off": lambda: off.sql(FLOOR.format(path=path)).fetchall(),
            "privsql db.sql()": lambda: db.sql(
                PRIVSQL.format(path=path, eps=1 + next(runs) * 1e-9)
            ).fetchall(),
        }
        best = {name: (float("inf"), float("inf")) for name in items}
        for _ in range(args.repeat):
            for name, run in items.items():
                w0, c0 = time.perf_counter(), time.process_time()
                run()
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
        print(f"{args.rows:,} rows, one g of 50 selected; load {os.getloadavg()[0]:.1f}")
        floor = best["floor, optimisers on"]
        for name, (wall, cpu) in best.items():
            print(
                f"{name:24} {wall * 1000:8.1f} ms {cpu * 1000:8.1f} ms CPU"
                f"   ×floor(on) {wall / floor[0]:5.2f} wall {cpu / floor[1]:5.2f} CPU"
            )


if __name__ == "__main__":
    main()
