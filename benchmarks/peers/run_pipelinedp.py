"""PipelineDP on the workload, on its local (single-machine) backend; own environment.

The Parquet file is read with pyarrow into a list of ``(uid, g, v)`` tuples (the load; the
local backend takes any Python iterable). Each release is one ``DPEngine.aggregate`` with
``metrics=[COUNT, SUM]``, ``max_contributions_per_partition=10``,
``max_partitions_contributed=50``, ``min_value=0``, ``max_value=100``, Laplace noise and the
50 keys as ``public_partitions``, under a ``NaiveBudgetAccountant(total_epsilon=1,
total_delta=0)``, which gives each of the two metrics ε = 0.5.

    /tmp/peers/pipelinedp/bin/python benchmarks/peers/run_pipelinedp.py data.parquet --runs 20
"""

from __future__ import annotations

import pipeline_dp
import pyarrow.parquet as pq
from common import (
    EPSILON,
    HIGH,
    KEYS,
    LOW,
    MAX_GROUPS,
    ROWS_PER_GROUP,
    Answer,
    Contender,
    arguments,
    run,
    versions,
)

PARAMS = pipeline_dp.AggregateParams(
    noise_kind=pipeline_dp.NoiseKind.LAPLACE,
    metrics=[pipeline_dp.Metrics.COUNT, pipeline_dp.Metrics.SUM],
    max_partitions_contributed=MAX_GROUPS,
    max_contributions_per_partition=ROWS_PER_GROUP,
    min_value=LOW,
    max_value=HIGH,
)
EXTRACTORS = pipeline_dp.DataExtractors(
    privacy_id_extractor=lambda row: row[0],
    partition_extractor=lambda row: row[1],
    value_extractor=lambda row: row[2],
)


def load(path: str) -> list[tuple[int, int, float]]:
    table = pq.read_table(path, columns=["uid", "g", "v"])
    return list(zip(*(table.column(c).to_pylist() for c in ("uid", "g", "v")), strict=True))


def release(rows: list[tuple[int, int, float]]) -> Answer:
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=0)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    result = engine.aggregate(rows, PARAMS, EXTRACTORS, public_partitions=KEYS)
    accountant.compute_budgets()
    return {int(g): (float(m.count), float(m.sum)) for g, m in result}


def main() -> None:
    args = arguments()
    run(
        lambda: load(args.parquet),
        [
            Contender(
                "PipelineDP (local)",
                versions("pipeline-dp", "python-dp"),
                release,
                "NaiveBudgetAccountant(total_epsilon=1): ε/2 COUNT, ε/2 SUM, Laplace",
            )
        ],
        loads=args.loads,
        runs=args.runs,
    )


if __name__ == "__main__":
    main()
