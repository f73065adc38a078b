"""SmartNoise SQL on the workload; runs in SmartNoise's own environment.

The Parquet file is read with pandas and opened with ``snsql.from_df`` (the load: SmartNoise's
pandas reader copies the frame into an in-memory SQLite database). Each release is one
``reader.execute`` of ``SELECT g, COUNT(*), SUM(v) ... GROUP BY g``.

SmartNoise bounds a unit's rows over the whole table (``max_ids``), not per group: the
closest configuration is ``max_ids = 500`` (= 10 rows × 50 groups), which gives the same L1
sensitivities as the workload's bounds (500 for the counts, 500 × 100 for the sums) but
keeps up to 500 randomly sampled rows of a unit however they fall into groups.
``censor_dims`` is off because the 50 keys are public (all of them occur in the data).
``Privacy(epsilon=...)`` is the ε of each statistic, so it is 0.5 here;
``get_privacy_cost`` confirms the query's total of ε = 1.

    /tmp/peers/smartnoise/bin/python benchmarks/peers/run_smartnoise.py data.parquet --runs 20
"""

from __future__ import annotations

import pandas as pd
import snsql
from common import (
    EPSILON,
    HIGH,
    LOW,
    MAX_GROUPS,
    ROWS_PER_GROUP,
    Answer,
    Contender,
    arguments,
    run,
    versions,
)

QUERY = "SELECT g, COUNT(*) AS n, SUM(v) AS s FROM bench.t GROUP BY g"
METADATA = {
    "": {
        "bench": {
            "t": {
                "max_ids": ROWS_PER_GROUP * MAX_GROUPS,
                "sample_max_ids": True,
                "row_privacy": False,
                "censor_dims": False,
                "uid": {"type": "int", "private_id": True},
                "g": {"type": "int"},
                "v": {"type": "float", "lower": LOW, "upper": HIGH},
            }
        }
    }
}


def load(path: str) -> snsql.sql.private_reader.PrivateReader:
    reader = snsql.from_df(
        pd.read_parquet(path),
        privacy=snsql.Privacy(epsilon=EPSILON / 2, delta=0.0),
        metadata=METADATA,
    )
    cost = reader.get_privacy_cost(QUERY)
    if abs(cost[0] - EPSILON) > 1e-9 or cost[1] > 1e-12:  # its odometer reports δ ≈ 1e-15
        raise RuntimeError(f"SmartNoise would spend {cost}, not ε = {EPSILON}, δ = 0")
    return reader


def release(reader: snsql.sql.private_reader.PrivateReader) -> Answer:
    rows = reader.execute(QUERY)
    header, body = rows[0], rows[1:]
    if [h.lower() for h in header] != ["g", "n", "s"]:
        raise RuntimeError(f"unexpected SmartNoise columns {header}")
    return {int(g): (float(n), float(s)) for g, n, s in body}


def main() -> None:
    args = arguments()
    run(
        lambda: load(args.parquet),
        [
            Contender(
                "SmartNoise SQL",
                versions("smartnoise-sql", "opendp", "pandas"),
                release,
                "ε/2 COUNT, ε/2 SUM (Privacy(epsilon=0.5) is per statistic; "
                "get_privacy_cost = 1); discrete Laplace on counts, Laplace on float sums",
                notes="max_ids = 500 rows per unit over the table (no per-group cap); "
                "same L1 sensitivities; SQLite engine via from_df",
            )
        ],
        loads=args.loads,
        runs=args.runs,
    )


if __name__ == "__main__":
    main()
