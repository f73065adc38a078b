"""Tests for udfs.partition: the threshold formula and the keep decisions."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import pytest

from udfs.discrete_laplace import scale_of
from udfs.partition import keep_partitions, partition_threshold
from udfs.random import SeededRandom

Z_CUTOFF = 5.5


def _log_tail(z: int, max_groups: int, epsilon: float) -> Decimal:
    """log P(Z >= z) = -z/t - log(1 + q) for Z ~ DLap(t), t = max_groups/epsilon, z >= 1."""
    num, den = scale_of(max_groups, epsilon)
    with localcontext() as ctx:
        ctx.prec = 50
        inv_t = Decimal(den) / Decimal(num)
        return -z * inv_t - (1 + (-inv_t).exp()).ln()


def _single_unit_keep_probability(max_groups: int, epsilon: float, delta: float) -> float:
    """P(1 + Z >= T) = P(Z >= T - 1) with the library's threshold T."""
    threshold = partition_threshold(max_groups, epsilon, delta)
    return float(_log_tail(threshold - 1, max_groups, epsilon).exp())


@pytest.mark.parametrize(
    ("max_groups", "epsilon", "delta"),
    [
        (1, 1.0, 1e-6),
        (1, 0.1, 1e-9),
        (4, 1.0, 1e-6),
        (10, 0.5, 1e-5),
        (1, 5.0, 0.05),
        (3, 2.0, 1e-12),
        (1, 1e-3, 1e-6),
        (1, 50.0, 0.3),
    ],
)
def test_threshold_is_smallest_safe_integer(max_groups: int, epsilon: float, delta: float) -> None:
    threshold = partition_threshold(max_groups, epsilon, delta)
    assert isinstance(threshold, int) and threshold >= 2
    with localcontext() as ctx:
        ctx.prec = 50
        target = (Decimal(delta) / max_groups).ln()
    # Safe: a single-unit key is kept with probability <= delta / max_groups.
    assert _log_tail(threshold - 1, max_groups, epsilon) <= target
    # Smallest: one lower would not be safe (unless already at the minimum z = 1).
    if threshold - 2 >= 1:
        assert _log_tail(threshold - 2, max_groups, epsilon) > target


def test_threshold_known_value() -> None:
    # t = 1, q = e^-1: e^-z / (1 + e^-1) <= 1e-6 first at z = 14, so T = 15.
    assert partition_threshold(1, 1.0, 1e-6) == 15
    # Close to the continuous Laplace rule 1 + t ln(1/(2 delta)) for large t.
    t = 1000
    continuous = 1 + t * math.log(1 / (2 * 1e-6))
    assert abs(partition_threshold(1, 1 / t, 1e-6) - continuous) < 2


@pytest.mark.parametrize(
    ("max_groups", "epsilon", "delta", "bad"),
    [
        (0, 1.0, 1e-6, ValueError),
        (1, 0.0, 1e-6, ValueError),
        (1, 1.0, 0.0, ValueError),
        (1, 1.0, 1.0, ValueError),
        (1, 1.0, math.nan, ValueError),
        (1.5, 1.0, 1e-6, TypeError),
    ],
)
def test_threshold_rejects(max_groups: object, epsilon: float, delta: float, bad: type) -> None:
    with pytest.raises(bad):
        partition_threshold(max_groups, epsilon, delta)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("max_groups", "epsilon", "delta", "seed"), [(1, 1.0, 0.05, 1), (3, 1.0, 0.05, 2)]
)
def test_single_unit_key_rarely_kept(
    max_groups: int, epsilon: float, delta: float, seed: int
) -> None:
    n = 100_000
    rng = SeededRandom(seed, insecure=True)
    kept = sum(keep_partitions([1] * n, max_groups, epsilon, delta, rng))
    p = _single_unit_keep_probability(max_groups, epsilon, delta)
    assert p <= delta / max_groups
    sd = math.sqrt(n * p * (1 - p))
    assert abs(kept - n * p) < Z_CUTOFF * sd  # the sampler realises the exact probability
    assert kept < n * delta / max_groups + Z_CUTOFF * sd


def test_large_counts_kept_and_empty_never() -> None:
    rng = SeededRandom(7, insecure=True)
    max_groups, epsilon, delta = 2, 1.0, 1e-6
    threshold = partition_threshold(max_groups, epsilon, delta)
    t = max_groups / epsilon
    big = threshold + int(50 * t)  # P(dropped) = P(Z <= -50 t) ~ e^-50
    assert all(keep_partitions([big] * 10_000, max_groups, epsilon, delta, rng))
    assert not any(keep_partitions([0, None, -3] * 1000, max_groups, epsilon, delta, rng))
    decisions = keep_partitions([threshold] * 20_000, max_groups, epsilon, delta, rng)
    # At the threshold itself the key is kept iff Z >= 0: probability 1/(1+q) in (1/2, 1).
    q = math.exp(-1 / t)
    p = 1 / (1 + q)
    assert abs(sum(decisions) - 20_000 * p) < Z_CUTOFF * math.sqrt(20_000 * p * (1 - p))


def test_keep_rejects_float_counts() -> None:
    rng = SeededRandom(8, insecure=True)
    with pytest.raises(TypeError):
        keep_partitions([1.0], 1, 1.0, 1e-6, rng)  # type: ignore[list-item]
