"""Register the noise mechanisms as vectorized (Arrow) DuckDB scalar functions.

* ``privsql_laplace(value HUGEINT, sensitivity HUGEINT, epsilon DOUBLE) -> HUGEINT``:
  ``value + DLap(sensitivity/epsilon)`` computed exactly (:mod:`udfs.laplace`).
* ``privsql_keep(units BIGINT, max_groups BIGINT, epsilon DOUBLE, delta DOUBLE) -> BOOLEAN``:
  the partition-selection decision of :mod:`udfs.partition`.
* ``privsql_quantile(buckets INTEGER[], weights HUGEINT[], p, low, high DOUBLE, size INTEGER,
  epsilon, interval_epsilon DOUBLE, unit_weight HUGEINT) ->
  STRUCT(value DOUBLE, lower DOUBLE, upper DOUBLE)``: one group's private p-quantile from its
  sparse bucket histogram, with its interval (:func:`udfs.quantile.private_quantile_interval`);
  a NULL histogram is an empty group.

Both are registered with ``side_effects=True`` so DuckDB neither constant-folds nor
de-duplicates calls (every row gets fresh noise), and with special NULL handling so the
functions see NULLs: a NULL value stays NULL, a NULL unit count is never kept, and NULL
parameters (which are plan constants, never data) raise an error. All noise comes from the
``rng`` given to :func:`register`.

DuckDB hands HUGEINT to Arrow as ``decimal128(38, 0)`` holding the raw 128-bit integer, also
for values beyond 38 digits, and reads it back the same way; results are written as raw
128-bit words, so the whole HUGEINT range round-trips. A noisy result outside that range is
saturated to it (post-processing of the noisy value, so no data-dependent error is raised).

DuckDB keeps Python functions in the database instance's catalog, which every connection
to that database in this process shares; see :func:`register` for the ``suffix`` and
:func:`unregister` that this requires when one database has several sessions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

import duckdb
import numpy as np
import pyarrow as pa

from udfs.discrete_laplace import sample_discrete_laplace, scale_of
from udfs.partition import partition_threshold
from udfs.quantile import private_quantile_interval
from udfs.random import RandomSource

__all__ = [
    "HUGEINT_MAX",
    "HUGEINT_MIN",
    "QUANTILE_FIELDS",
    "UdfNameConflict",
    "UdfNames",
    "register",
    "unregister",
]

HUGEINT_MIN = -(2**127)
HUGEINT_MAX = 2**127 - 1

_ArrowInput = pa.Array | pa.ChunkedArray


def _to_hugeint_array(values: list[int | None]) -> pa.Array:
    """Build a ``decimal128(38, 0)`` array from exact ints via its raw 128-bit buffer.

    ``pa.array`` would refuse integers with more than 38 decimal digits although HUGEINT
    (and the 128-bit storage) holds them; writing the buffer directly avoids that limit.
    """
    n = len(values)
    data = b"".join((0 if v is None else v).to_bytes(16, "little", signed=True) for v in values)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    null_count = n - int(valid.sum())
    validity = None
    if null_count:
        validity = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.Array.from_buffers(
        pa.decimal128(38, 0), n, [validity, pa.py_buffer(data)], null_count=null_count
    )


def _hugeint_column(column: _ArrowInput) -> list[int | None]:
    """Read a ``decimal128(38, 0)`` column as exact Python ints (``None`` for NULL).

    Reads the raw little-endian 128-bit words (as unsigned low and signed high 64-bit
    halves) instead of going through ``Decimal`` objects, which is several times faster.
    """
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not (pa.types.is_decimal(arr.type) and arr.type.scale == 0 and arr.type.byte_width == 16):
        return [None if v is None else int(v) for v in arr.to_pylist()]
    n, offset = len(arr), arr.offset
    if n == 0:
        return []
    words = np.frombuffer(arr.buffers()[1], dtype="<u8", count=2 * (offset + n))[2 * offset :]
    low = words[0::2].tolist()
    high = words[1::2].view("<i8").tolist()
    ints: list[int | None] = [(h << 64) | lo for h, lo in zip(high, low, strict=True)]
    if arr.null_count:
        for i in np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False)).tolist():
            ints[i] = None
    return ints


def _combined(column: _ArrowInput) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _dense_histograms(
    buckets: _ArrowInput, weights: _ArrowInput, sizes: list[int | None]
) -> list[np.ndarray | list[int]]:
    """Each row's sparse (bucket, weight) lists as exact counts over its ``size`` buckets.

    A NULL list is an empty group. Weights are read from their raw 128-bit words: as
    int64 when every one fits with room to add, else as Python ints.
    """
    index, mass = _combined(buckets), _combined(weights)
    starts, ends = index.offsets.to_numpy(), mass.offsets.to_numpy()
    positions = index.values.to_numpy(zero_copy_only=False)
    exact = _hugeint_column(mass.values)
    narrow = [v for v in exact if v is not None]
    fits = not narrow or max(abs(min(narrow)), abs(max(narrow))) * len(narrow) < 2**62
    values = np.asarray(exact, dtype=np.int64) if fits else exact
    dense: list[np.ndarray | list[int]] = []
    for row, size in enumerate(sizes):
        if size is None:
            raise ValueError("privsql_quantile: its parameters must not be NULL")
        at = positions[starts[row] : starts[row + 1]]
        got = values[ends[row] : ends[row + 1]]
        if fits:
            counts = np.zeros(size, dtype=np.int64)
            np.add.at(counts, at, got)
        else:
            counts = [0] * size
            for b, m in zip(at.tolist(), got, strict=True):
                counts[b] += m
        dense.append(counts)
    return dense


def _saturate(value: int) -> int:
    return max(HUGEINT_MIN, min(value, HUGEINT_MAX))


def _laplace_udf(rng: RandomSource) -> Callable[..., pa.Array]:
    def privsql_laplace(
        value: _ArrowInput, sensitivity: _ArrowInput, epsilon: _ArrowInput
    ) -> pa.Array:
        scales: dict[tuple[object, object], tuple[int, int]] = {}
        out: list[int | None] = []
        columns = (_hugeint_column(value), _hugeint_column(sensitivity), epsilon.to_pylist())
        for v, s, e in zip(*columns, strict=True):
            if v is None:
                out.append(None)
                continue
            if s is None or e is None:
                raise ValueError("privsql_laplace: sensitivity and epsilon must not be NULL")
            scale = scales.get((s, e))
            if scale is None:
                scale = scales[(s, e)] = scale_of(s, e)
            out.append(_saturate(v + sample_discrete_laplace(scale[0], scale[1], rng)))
        return _to_hugeint_array(out)

    return privsql_laplace


def _keep_udf(rng: RandomSource) -> Callable[..., pa.Array]:
    def privsql_keep(
        units: _ArrowInput, max_groups: _ArrowInput, epsilon: _ArrowInput, delta: _ArrowInput
    ) -> pa.Array:
        params: dict[tuple[object, object, object], tuple[int, int, int]] = {}
        out: list[bool] = []
        columns = (units.to_pylist(), max_groups.to_pylist(), epsilon.to_pylist())
        for c, m, e, d in zip(*columns, delta.to_pylist(), strict=True):
            if m is None or e is None or d is None:
                raise ValueError("privsql_keep: max_groups, epsilon and delta must not be NULL")
            p = params.get((m, e, d))
            if p is None:
                threshold = partition_threshold(m, e, d)
                p = params[(m, e, d)] = (threshold, *scale_of(m, e))
            if c is None or c <= 0:
                out.append(False)
                continue
            out.append(c + sample_discrete_laplace(p[1], p[2], rng) >= p[0])
        return pa.array(out, type=pa.bool_())

    return privsql_keep


QUANTILE_FIELDS = ("value", "lower", "upper")
"""The fields of ``privsql_quantile``'s result: the point and its interval."""


def _quantile_udf(rng: RandomSource) -> Callable[..., pa.Array]:
    def privsql_quantile(
        buckets: _ArrowInput,
        weights: _ArrowInput,
        p: _ArrowInput,
        low: _ArrowInput,
        high: _ArrowInput,
        size: _ArrowInput,
        epsilon: _ArrowInput,
        interval_epsilon: _ArrowInput,
        unit_weight: _ArrowInput,
    ) -> pa.Array:
        out: list[tuple[float, float, float]] = []
        columns = (
            _dense_histograms(buckets, weights, size.to_pylist()),
            p.to_pylist(),
            low.to_pylist(),
            high.to_pylist(),
            epsilon.to_pylist(),
            interval_epsilon.to_pylist(),
            _hugeint_column(unit_weight),
        )
        for counts, q, lo, hi, e, ie, w in zip(*columns, strict=True):
            if None in (q, lo, hi, e, ie, w):
                raise ValueError("privsql_quantile: its parameters must not be NULL")
            out.append(private_quantile_interval(counts, q, lo, hi, e, ie, w, rng))
        values, lowers, uppers = zip(*out, strict=True) if out else ((), (), ())
        return pa.StructArray.from_arrays(
            [pa.array(v, pa.float64()) for v in (values, lowers, uppers)],
            names=list(QUANTILE_FIELDS),
        )

    return privsql_quantile


class UdfNames(NamedTuple):
    """The SQL names under which :func:`register` put the two functions."""

    laplace: str = "privsql_laplace"
    keep: str = "privsql_keep"
    quantile: str = "privsql_quantile"
    check: str = "privsql_laplace_check"
    """``privsql_laplace`` drawing from the ``check`` source (the bounding check's counts)."""


class UdfNameConflict(RuntimeError):
    """The function name is already taken in this database by another connection."""


_SUFFIX = re.compile(r"[A-Za-z0-9_]*")


def _remove_own(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Remove ``name`` if *this* connection registered it; otherwise do nothing."""
    try:
        con.remove_function(name)
    except duckdb.InvalidInputException:
        pass  # not registered by this connection


def _replace_function(
    con: duckdb.DuckDBPyConnection,
    name: str,
    fn: Callable[..., pa.Array],
    params: list[str],
    return_type: str,
) -> None:
    _remove_own(con, name)
    try:
        con.create_function(
            name,
            fn,
            params,
            return_type,
            type="arrow",
            null_handling="special",
            side_effects=True,
        )
    except duckdb.CatalogException as exc:
        raise UdfNameConflict(
            f"{name} is already registered in this database by another connection (Python "
            "functions live in the database's shared catalog). Register under a unique "
            "suffix, e.g. register(con, rng, suffix='_2'), use the returned names in the "
            "SQL, and call unregister() before closing that connection."
        ) from exc


def register(
    con: duckdb.DuckDBPyConnection,
    rng: RandomSource,
    *,
    suffix: str = "",
    check: RandomSource | None = None,
) -> UdfNames:
    """Register ``privsql_laplace`` and ``privsql_keep`` on ``con``, drawing noise from ``rng``,
    and ``privsql_laplace_check``, drawing from ``check`` (default ``rng``).

    Registering again on the same connection replaces the previous functions, so the most
    recent ``rng`` is the one used. Pass :class:`udfs.random.SystemRandom` for real
    releases; :class:`udfs.random.SeededRandom` is for tests only.

    DuckDB keeps Python functions in the *database instance's* catalog, shared by every
    connection to it in this process (``duckdb.connect`` on the same file returns the same
    instance), so a name registered by one connection is visible to the others and cannot
    be registered again by them; doing so raises :class:`UdfNameConflict` rather than
    silently using the other connection's random source. Give each connection its own
    ``suffix`` (letters, digits, ``_``) in that case; the names actually used are returned.
    Call :func:`unregister` before closing the connection: DuckDB leaves the catalog entry
    of a closed connection's function behind, pointing at a freed Python object.
    """
    if not _SUFFIX.fullmatch(suffix):
        raise ValueError(f"suffix must contain only letters, digits and _, got {suffix!r}")
    names = UdfNames(*(f"{name}{suffix}" for name in UdfNames()))
    signatures = {
        names.laplace: (_laplace_udf(rng), ["HUGEINT", "HUGEINT", "DOUBLE"], "HUGEINT"),
        names.keep: (_keep_udf(rng), ["BIGINT", "BIGINT", "DOUBLE", "DOUBLE"], "BOOLEAN"),
        names.check: (_laplace_udf(check or rng), ["HUGEINT", "HUGEINT", "DOUBLE"], "HUGEINT"),
        names.quantile: (
            _quantile_udf(rng),
            [
                "INTEGER[]",
                "HUGEINT[]",
                "DOUBLE",
                "DOUBLE",
                "DOUBLE",
                "INTEGER",
                "DOUBLE",
                "DOUBLE",
                "HUGEINT",
            ],
            f"STRUCT({', '.join(f'{name} DOUBLE' for name in QUANTILE_FIELDS)})",
        ),
    }
    registered: list[str] = []
    try:
        for name, (function, params, returns) in signatures.items():
            _replace_function(con, name, function, params, returns)
            registered.append(name)
    except UdfNameConflict:
        for name in registered:
            _remove_own(con, name)
        raise
    return names


def unregister(con: duckdb.DuckDBPyConnection, names: UdfNames | None = None) -> None:
    """Remove the functions this connection registered under ``names`` (default names).

    Names this connection did not register are ignored, so it is safe to call twice.
    """
    for name in names or UdfNames():
        _remove_own(con, name)
