"""privsql on DuckDB, the hand-written bounded query (the floor) and raw DuckDB, one process.

The Parquet file is loaded into an in-memory DuckDB table (the load); each round then runs
privsql's ``db.sql`` on the table, privsql straight on ``read_parquet`` (no load), privsql
with ``BOUND WEIGHTS 10`` (same sensitivities, a cheaper bounding), the floor and the raw
``GROUP BY`` once each, interleaved, on one connection: their ratios
come from the same run. The floor and raw add no noise; they are there for the ratios and
as a check of the truth the driver computes (the floor's answer is the bounded truth).

    python benchmarks/peers/run_duckdb.py data.parquet --runs 20
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

import duckdb  # noqa: E402
from common import Answer, Contender, arguments, run  # noqa: E402

import privsql  # noqa: E402
from benchmarks.core import B_SUM, PRIVSQL, RAW, PrivsqlRun, run_sql  # noqa: E402

TABLE = "t"


def answer_of(table) -> Answer:
    """``{g: (count, sum)}`` of an Arrow table with columns g, count, sum (in that order)."""
    g, n, s = (table.column(i).to_pylist() for i in range(3))
    return {int(k): (float(c), float(v)) for k, c, v in zip(g, n, s, strict=True)}


def main() -> None:
    args = arguments(lambda p: p.add_argument("--threads", type=int, default=2))
    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    db = privsql.connect(con, budget=1e9)
    source = f"read_parquet('{args.parquet}')"

    def load() -> str:
        con.execute(f"CREATE OR REPLACE TABLE {TABLE} AS FROM {source}")
        return TABLE

    on_table = PrivsqlRun(db, PRIVSQL["sum"], TABLE)
    on_file = PrivsqlRun(db, PRIVSQL["sum"], source)
    weighted = PrivsqlRun(db, PRIVSQL["sum"].replace("BOUND ROWS", "BOUND WEIGHTS"), TABLE)
    floor = run_sql(con, B_SUM.format(t=TABLE))
    raw = run_sql(con, RAW["sum"].format(t=TABLE))
    version = f"duckdb {duckdb.__version__}"
    split = "ε/2 COUNT, ε/2 SUM (Laplace, L1 over 50 groups × 10 rows)"
    run(
        load,
        [
            Contender("privsql (DuckDB)", version, lambda _: answer_of(on_table()), split),
            Contender(
                "privsql (DuckDB, on Parquet)",
                version,
                lambda _: answer_of(on_file()),
                split,
                notes="reads the Parquet file in each query; no load",
                uses_load=False,
            ),
            Contender(
                "privsql (DuckDB, BOUND WEIGHTS 10)",
                version,
                lambda _: answer_of(weighted()),
                split,
                notes="EMMMR20 weights instead of a row cap: keeps every row, a unit's rows in "
                "a group weigh min(1, 10/n); same sensitivities; no peer offers it",
            ),
            Contender(
                "hand-written bounded query (floor)",
                version,
                lambda _: answer_of(floor()),
                "no noise",
                notes="PERFORMANCE.md's two-phase floor: the bounding privsql does, no noise",
            ),
            Contender(
                "raw DuckDB GROUP BY",
                version,
                lambda _: answer_of(raw()),
                "no noise, no bounds",
            ),
        ],
        loads=args.loads,
        runs=args.runs,
    )


if __name__ == "__main__":
    main()
