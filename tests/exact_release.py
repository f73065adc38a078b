"""Identity release functions: the generated SQL with no noise, for exact-value tests.

Registering these under the names of ``IDENTITY`` and generating with it runs the private
statement as privsql would, except that each measurement is released as it is and every
group is kept: what remains is exactly what the rewritten SQL enforces. A quantile is
released as 0: its exact input is the histogram (the ``__hist*`` stages).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from rewriter.generate import Functions
from udfs import QUANTILE_FIELDS

IDENTITY = Functions(noise="exact_value", keep="keep_all", quantile="no_quantile")


def install(con: duckdb.DuckDBPyConnection) -> None:
    """Register the identity release functions of ``IDENTITY`` on ``con``."""
    hugeint, double, bigint = (duckdb.sqltype(t) for t in ("HUGEINT", "DOUBLE", "BIGINT"))
    con.create_function(
        "exact_value", lambda v, s, e: v, [hugeint, hugeint, double], hugeint, type="arrow"
    )
    con.create_function(
        "keep_all",
        lambda u, g, e, d: pa.array([True] * len(u)),
        [bigint, bigint, double, double],
        duckdb.sqltype("BOOLEAN"),
        type="arrow",
    )
    zeros = pa.struct([(name, pa.float64()) for name in QUANTILE_FIELDS])
    con.create_function(
        "no_quantile",
        lambda b, w, p, lo, hi, n, e, ie, u: pa.array(
            [dict.fromkeys(QUANTILE_FIELDS, 0.0)] * len(b), zeros
        ),
        [duckdb.sqltype(t) for t in ("INTEGER[]", "HUGEINT[]", "DOUBLE", "DOUBLE", "DOUBLE")]
        + [duckdb.sqltype("INTEGER"), double, double, hugeint],
        duckdb.sqltype(f"STRUCT({', '.join(f'{name} DOUBLE' for name in QUANTILE_FIELDS)})"),
        type="arrow",
    )
