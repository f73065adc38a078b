"""Tests for udfs.register: the DuckDB scalar functions privsql_laplace and privsql_keep."""

from __future__ import annotations

import math
import pathlib

import duckdb
import pytest

from udfs import (
    HUGEINT_MAX,
    HUGEINT_MIN,
    RandomSource,
    SeededRandom,
    SystemRandom,
    UdfNameConflict,
    UdfNames,
    register,
    unregister,
)


class CountingRandom(RandomSource):
    """Wraps a source and counts the draws, to prove the registered rng is the one used."""

    def __init__(self, inner: RandomSource) -> None:
        self.inner = inner
        self.calls = 0

    def randbits(self, k: int) -> int:
        self.calls += 1
        return self.inner.randbits(k)


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    register(connection, SeededRandom(2024, insecure=True))
    yield connection
    connection.close()


def test_laplace_tiny_noise_returns_the_value(con: duckdb.DuckDBPyConnection) -> None:
    rows = con.sql("SELECT privsql_laplace(x::HUGEINT, 1, 1000.0) FROM range(5) t(x)").fetchall()
    assert rows == [(0,), (1,), (2,), (3,), (4,)]


def test_laplace_adds_fresh_integer_noise(con: duckdb.DuckDBPyConnection) -> None:
    rows = con.sql("SELECT privsql_laplace(0::HUGEINT, 1, 1.0) FROM range(2000)").fetchall()
    values = [r[0] for r in rows]
    assert all(type(v) is int for v in values)
    assert len(set(values)) > 5  # not constant-folded: one draw per row
    # Moments of DLap(1): mean 0, variance 2q/(1-q)^2 with q = e^-1.
    q = math.exp(-1)
    var = 2 * q / (1 - q) ** 2
    mean = sum(values) / len(values)
    assert abs(mean) < 6 * math.sqrt(var / len(values))
    sample_var = sum(v * v for v in values) / len(values)
    assert abs(sample_var / var - 1) < 0.25


def test_laplace_huge_values_null_and_saturation(con: duckdb.DuckDBPyConnection) -> None:
    big = 10**30
    row = con.sql(
        f"SELECT privsql_laplace({big}::HUGEINT, 1, 1000.0),"
        " privsql_laplace(NULL::HUGEINT, 1, 1.0),"
        f" privsql_laplace('{HUGEINT_MAX}'::HUGEINT, 1000000, 1.0),"
        f" privsql_laplace('{HUGEINT_MIN}'::HUGEINT, 1000000, 1.0),"
        f" privsql_laplace({big}::HUGEINT, {10**20}::HUGEINT, 1.0)"
    ).fetchall()[0]
    assert row is not None
    assert row[0] == big
    assert row[1] is None
    # Values beyond 38 digits round-trip; the noisy result saturates instead of erroring.
    assert HUGEINT_MAX - 60 * 10**6 < row[2] <= HUGEINT_MAX
    assert HUGEINT_MIN <= row[3] < HUGEINT_MIN + 60 * 10**6
    assert abs(row[4] - big) < 60 * 10**20 and row[4] != big


def test_laplace_mixed_nulls_and_negative_values(con: duckdb.DuckDBPyConnection) -> None:
    rows = con.sql(
        "SELECT privsql_laplace(CASE WHEN x % 3 = 0 THEN NULL ELSE -x * 1000000000000000000000 END,"
        " 1, 1000.0) FROM range(10) t(x) ORDER BY x"
    ).fetchall()
    assert rows == [(None if x % 3 == 0 else -x * 10**21,) for x in range(10)]


def test_laplace_null_parameters_are_refused(con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(duckdb.Error, match="must not be NULL"):
        con.sql("SELECT privsql_laplace(1::HUGEINT, 1, NULL::DOUBLE)").fetchall()
    with pytest.raises(duckdb.Error):
        con.sql("SELECT privsql_laplace(1::HUGEINT, 0, 1.0)").fetchall()


def test_keep(con: duckdb.DuckDBPyConnection) -> None:
    rows = con.sql(
        "SELECT privsql_keep(units, 1, 1.0, 1e-6) FROM (VALUES (10000), (0), (NULL), (1)) v(units)"
    ).fetchall()
    assert rows[0] == (True,)  # far above the threshold (15)
    assert rows[1] == (False,)  # no unit: never released
    assert rows[2] == (False,)  # NULL count: never released
    assert rows[3] in [(True,), (False,)]
    kept = con.sql(
        "SELECT count(*) FILTER (WHERE privsql_keep(1, 1, 1.0, 0.05)) FROM range(20000)"
    ).fetchall()[0]
    # P(keep | one unit) = e^-3 / (1 + e^-1) ~ 0.0364 <= delta = 0.05.
    p = math.exp(-3) / (1 + math.exp(-1))
    assert kept is not None and abs(kept[0] - 20000 * p) < 6 * math.sqrt(20000 * p)


def test_register_uses_given_rng_and_is_reproducible() -> None:
    def run(rng: RandomSource) -> list[tuple[int]]:
        c = duckdb.connect()
        register(c, rng)
        out = c.sql(
            "SELECT privsql_laplace(x::HUGEINT, 5, 0.5) FROM range(50) t(x) ORDER BY x"
        ).fetchall()
        c.close()
        return out

    assert run(SeededRandom(9, insecure=True)) == run(SeededRandom(9, insecure=True))
    counting = CountingRandom(SeededRandom(9, insecure=True))
    run(counting)
    assert counting.calls > 50


def test_register_twice_replaces() -> None:
    c = duckdb.connect()
    first = CountingRandom(SeededRandom(1, insecure=True))
    second = CountingRandom(SeededRandom(2, insecure=True))
    register(c, first)
    register(c, second)
    c.sql("SELECT privsql_laplace(1::HUGEINT, 1, 1.0), privsql_keep(5, 1, 1.0, 1e-6)").fetchall()
    assert first.calls == 0 and second.calls > 0
    c.close()


def test_system_random_through_duckdb() -> None:
    c = duckdb.connect()
    register(c, SystemRandom())
    rows = c.sql("SELECT privsql_laplace(x::HUGEINT, 1, 1.0) - x FROM range(3000) t(x)").fetchall()
    noise = [r[0] for r in rows]
    assert all(isinstance(v, int) for v in noise) and max(abs(v) for v in noise) < 40
    c.close()


def test_shared_database_needs_distinct_names(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "shared.duckdb")
    first = duckdb.connect(path)
    second = duckdb.connect(path)  # same database instance: one shared function catalog
    first_rng = CountingRandom(SeededRandom(1, insecure=True))
    second_rng = CountingRandom(SeededRandom(2, insecure=True))
    assert register(first, first_rng) == UdfNames(
        "privsql_laplace", "privsql_keep", "privsql_quantile"
    )
    # Refused rather than silently sharing the first connection's random source.
    with pytest.raises(UdfNameConflict, match="suffix"):
        register(second, second_rng)
    names = register(second, second_rng, suffix="_s2")
    assert names == UdfNames(
        "privsql_laplace_s2", "privsql_keep_s2", "privsql_quantile_s2", "privsql_laplace_check_s2"
    )
    second.sql(
        f"SELECT {names.laplace}(1::HUGEINT, 1, 1.0), {names.keep}(5, 1, 1.0, 1e-6)"
    ).fetchall()
    assert first_rng.calls == 0 and second_rng.calls > 0
    # Unregister before closing; afterwards the default names are free again.
    unregister(first)
    unregister(first)  # idempotent
    register(second, second_rng)
    unregister(second)
    unregister(second, names)
    with pytest.raises(duckdb.Error):
        second.sql("SELECT privsql_laplace_s2(1::HUGEINT, 1, 1.0)").fetchall()
    first.close()
    second.close()


def test_suffix_is_validated() -> None:
    c = duckdb.connect()
    with pytest.raises(ValueError):
        register(c, SeededRandom(1, insecure=True), suffix="; DROP TABLE x")
    c.close()
