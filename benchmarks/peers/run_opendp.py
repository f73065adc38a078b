"""OpenDP's Polars API (``dp.Context``) on the workload; runs in OpenDP's own environment.

The Parquet file is read into a Polars DataFrame (the load). Each release is one
``dp.Context.compositor`` with ε = 1 over one query: the unit is the identifier ``uid``
(``dp.unit_of(contributions=1, identifier="uid")``), truncated to 10 rows per group
(``truncate_per_group``), grouped by ``g`` with the public key set joined in
(``with_keys``), and both statistics in one ``agg``.

The bound of 50 groups per unit is the margin's public ``max_groups=50`` (there are 50
keys), as in privsql, where a cap of 50 groups cannot bind with 50 public keys. OpenDP's
``truncate_num_groups`` is not used: in opendp 0.16.0 with its pinned polars 1.36.1,
``keep="sample"`` fails on a single key column ("multiple fields with name 'g'") and
``keep="first"`` keeps ranks ``< k``, i.e. at most k - 1 = 49 groups per unit (a bias
the bound does not need). Both give the same noise scales (``query.summarize()``).

    /tmp/peers/opendp/bin/python benchmarks/peers/run_opendp.py data.parquet --runs 20
"""

from __future__ import annotations

import opendp.prelude as dp
import polars as pl
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

dp.enable_features("contrib")


def release(data: pl.DataFrame) -> Answer:
    """One DP release of the per-group count and clamped sum, ε = 1 in all."""
    context = dp.Context.compositor(
        data=data.lazy(),
        privacy_unit=dp.unit_of(contributions=1, identifier="uid"),
        privacy_loss=dp.loss_of(epsilon=EPSILON),
        split_evenly_over=1,
        margins=[dp.polars.Margin(by=["g"], max_length=data.height, max_groups=MAX_GROUPS)],
    )
    query = (
        context.query()
        .truncate_per_group(ROWS_PER_GROUP, by=["g"])
        .group_by("g")
        .agg(dp.len(), pl.col("v").fill_null(0.0).dp.sum((LOW, HIGH)).alias("s"))
        .with_keys(pl.DataFrame({"g": KEYS}, schema={"g": data.schema["g"]}))
    )
    frame = query.release().collect()
    return {
        int(g): (float(n), float(s))
        for g, n, s in zip(frame["g"], frame["len"], frame["s"], strict=True)
    }


def main() -> None:
    args = arguments()
    run(
        lambda: pl.read_parquet(args.parquet),
        [
            Contender(
                "OpenDP (Polars)",
                versions("opendp", "polars"),
                release,
                "one query, ε = 1; OpenDP calibrates its two measurements together so their "
                "ε add to 1 (see query.summarize(); the shares depend on max_length)",
            )
        ],
        loads=args.loads,
        runs=args.runs,
    )


if __name__ == "__main__":
    main()
